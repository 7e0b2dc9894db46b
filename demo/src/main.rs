//! The symmem demo (README command 1): every rank writes a rank-specific pattern into
//! every peer's copy of a symmetric buffer through translated puts, then each rank
//! verifies every byte it received and rank 0 prints a table. `symmem-demo --help` lists
//! the options.

use clap::{Parser, ValueEnum};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use symmem::backend::{Backend, cpu::Cpu, cuda::Cuda};
use symmem::bootstrap::{Bootstrap, unix};
use symmem::{Config, Result, World};

/// The symmem demo: every rank puts a rank-specific pattern into every peer's copy of a
/// symmetric buffer, then verifies every byte it received; rank 0 prints a table.
///
/// Under `mpirun -np N` (built with `--features mpi`) the world comes from MPI.
#[derive(Parser, Debug)]
#[command(name = "symmem-demo")]
struct Options {
    /// Ranks, as threads or processes of this machine (under mpirun: mpirun's -np).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    ranks: u32,
    /// Bytes each rank puts into each peer's copy: a number, optionally with K, M or G.
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    bytes: usize,
    /// The device backend; `auto` takes CUDA when a GPU answers, the CPU otherwise.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    /// How the ranks are started on this machine.
    #[arg(long, value_enum, default_value_t = Launcher::Threads)]
    launcher: Launcher,
}

/// `--backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendChoice {
    /// CUDA when a GPU answers, the CPU otherwise.
    Auto,
    /// Ranks' memory in POSIX shared memory, kernels on host threads.
    Cpu,
    /// NVIDIA GPUs through the CUDA driver.
    Cuda,
}

/// `--launcher`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Launcher {
    /// Every rank a thread of this process.
    Threads,
    /// Every rank a process (this program again), over the UNIX-socket bootstrap.
    Processes,
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
enum DemoError {
    /// symmem refused or failed.
    #[error(transparent)]
    Symmem(#[from] symmem::Error),
    /// A byte a peer put is not the one it wrote.
    #[error("rank {rank}: byte {byte} from rank {from} is {got:#04x}, expected {expected:#04x}")]
    Mismatch {
        rank: usize,
        from: usize,
        byte: usize,
        got: u8,
        expected: u8,
    },
    /// A rank process (`--launcher processes`) did not exit successfully.
    #[error("rank process {rank} failed: {status}")]
    RankFailed {
        rank: usize,
        status: std::process::ExitStatus,
    },
    /// This program's own path, needed to start the rank processes.
    #[error("cannot find this program to start the rank processes: {0}")]
    CurrentExe(std::io::Error),
}

/// `64M`, `4K`, `1G`, `4096` (binary multiples; a trailing `B`, `iB` is allowed).
fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let bad = || format!("`{s}` is not a size (a number, optionally with K, M or G: 64M)");
    let digits = s.trim_end_matches(['B', 'b', 'i']);
    let (num, mul) = match digits.chars().last().ok_or_else(bad)? {
        'K' | 'k' => (&digits[..digits.len() - 1], 1 << 10),
        'M' | 'm' => (&digits[..digits.len() - 1], 1 << 20),
        'G' | 'g' => (&digits[..digits.len() - 1], 1 << 30),
        _ => (digits, 1),
    };
    match num.parse::<usize>().ok().and_then(|n| n.checked_mul(mul)) {
        Some(0) => Err(format!("`{s}`: the size must be positive")),
        Some(n) => Ok(n),
        None => Err(bad()),
    }
}

impl Options {
    /// Resolves `--backend auto`: the CPU where no GPU or driver answers (and why, on
    /// stderr, unless `quiet`), CUDA otherwise (a GPU that fails otherwise fails the run
    /// with its error, rather than hiding behind the CPU).
    fn resolve_backend(&mut self, quiet: bool) {
        if self.backend == BackendChoice::Auto {
            self.backend = match Cuda::new(0) {
                Err(why) if why.is_device_missing() => {
                    if !quiet {
                        eprintln!("symmem-demo: no GPU backend ({why}); using the CPU backend");
                    }
                    BackendChoice::Cpu
                }
                _ => BackendChoice::Cuda,
            };
        }
    }
}

/// What one rank measured, as sent to rank 0.
struct Report {
    rank: usize,
    heap_base: u64,
    buffer: u64,
    peer_bases: Vec<u64>,
    verified: u64,
    seconds: f64,
}

impl Report {
    fn encode(&self) -> Vec<u8> {
        let mut words = vec![self.rank as u64, self.heap_base, self.buffer, self.verified];
        words.push(self.seconds.to_bits());
        words.extend(&self.peer_bases);
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }
    fn decode(bytes: &[u8]) -> Self {
        let w: Vec<u64> = bytes
            .as_chunks::<8>()
            .0
            .iter()
            .map(|c| u64::from_le_bytes(*c))
            .collect();
        Self {
            rank: w[0] as usize,
            heap_base: w[1],
            buffer: w[2],
            verified: w[3],
            seconds: f64::from_bits(w[4]),
            peer_bases: w[5..].to_vec(),
        }
    }
}

/// The byte rank `rank` writes at position `i` of its region: differs between ranks and
/// along the region.
fn pattern(rank: usize, i: usize) -> u8 {
    ((i.wrapping_mul(131) ^ (i >> 9)).wrapping_add(rank.wrapping_mul(29) + 1) % 251) as u8
}

fn run_rank<B: Backend>(
    world: World<B>,
    bytes: usize,
) -> std::result::Result<Option<Vec<Report>>, DemoError> {
    let (rank, n) = (world.rank(), world.world_size());
    let (buffer, bases) = world.allocate_symmetric::<u8>(n * bytes)?;
    let mine: Vec<u8> = (0..bytes).map(|i| pattern(rank, i)).collect();
    let source = world.device_from_slice(&mine)?;
    world.barrier()?;
    let start = Instant::now();
    for step in 0..n {
        let peer = (rank + step) % n;
        world.put(
            &buffer.slice(rank * bytes..(rank + 1) * bytes)?,
            &source,
            peer,
        )?;
        if start.elapsed() > Duration::from_secs(1) {
            world.backend().synchronize()?;
            eprintln!(
                "rank {rank}: put {bytes} bytes to rank {peer} ({}/{n})",
                step + 1
            );
        }
    }
    world.backend().synchronize()?;
    let seconds = start.elapsed().as_secs_f64();
    world.barrier()?;
    let received = world.read(&buffer)?;
    let mut verified = 0u64;
    for (from, region) in received.chunks_exact(bytes).enumerate() {
        if let Some(i) = region
            .iter()
            .enumerate()
            .position(|(i, &b)| b != pattern(from, i))
        {
            return Err(DemoError::Mismatch {
                rank,
                from,
                byte: i,
                got: region[i],
                expected: pattern(from, i),
            });
        }
        verified += region.len() as u64;
    }
    let report = Report {
        rank,
        heap_base: world.heap_bases().entries()[rank],
        buffer: buffer.ptr(),
        peer_bases: bases.entries().to_vec(),
        verified,
        seconds,
    };
    let all = world.all_gather_bytes(&report.encode())?;
    world.barrier()?;
    Ok((rank == 0).then(|| all.iter().map(|b| Report::decode(b)).collect()))
}

fn print_table(reports: &[Report], bytes: usize, backend: &str, device: &str) {
    let n = reports.len();
    println!("symmem demo: {n} ranks, {backend} backend ({device}), {bytes} bytes per rank pair");
    println!(
        "{:>4}  {:>14}  {:>14}  {:>9}  {:>8}  {:>9}  peer_bases",
        "rank", "heap base", "buffer", "verified", "time ms", "put GB/s"
    );
    for r in reports {
        let row: Vec<String> = r.peer_bases.iter().map(|b| format!("{b:#x}")).collect();
        let sent = (bytes * n) as f64;
        println!(
            "{:>4}  {:>#14x}  {:>#14x}  {:>9}  {:>8.3}  {:>9.2}  [{}]",
            r.rank,
            r.heap_base,
            r.buffer,
            r.verified,
            r.seconds * 1e3,
            sent / r.seconds / 1e9,
            row.join(", ")
        );
    }
    let total: u64 = reports.iter().map(|r| r.verified).sum();
    println!("verified {total} bytes on {n} ranks: every byte matched");
}

fn config_for(bytes: usize, ranks: usize) -> Config {
    Config {
        heap_bytes: (bytes * ranks).next_multiple_of(2 << 20) + (2 << 20),
        ..Config::default()
    }
}

type DemoResult = std::result::Result<(), DemoError>;

fn run_external(bootstrap: Box<dyn Bootstrap>, o: &Options) -> DemoResult {
    fn go<B: Backend>(bootstrap: Box<dyn Bootstrap>, backend: B, o: &Options) -> DemoResult {
        let config = config_for(o.bytes, bootstrap.world_size());
        let device = backend.device_name();
        let name = format!("{:?}", o.backend).to_lowercase();
        if let Some(reports) = run_rank(World::new(bootstrap, backend, &config)?, o.bytes)? {
            print_table(&reports, o.bytes, &name, &device);
        }
        Ok(())
    }
    match o.backend {
        BackendChoice::Cuda => {
            let backend = Cuda::for_rank(bootstrap.rank())?;
            go(bootstrap, backend, o)
        }
        _ => go(bootstrap, Cpu::new(), o),
    }
}

fn run_threads(o: &Options) -> DemoResult {
    let ranks = o.ranks as usize;
    let config = config_for(o.bytes, ranks);
    fn go<B: Backend>(
        o: &Options,
        name: &str,
        config: &Config,
        make: impl Fn(usize) -> Result<B> + Sync,
    ) -> DemoResult {
        let device = make(0)?.device_name();
        // A rank's own failure (a wrong byte) is its result's `Err`, beside symmem's.
        let results = symmem::spawn_ranks(o.ranks as usize, config, make, |world| {
            Ok(run_rank(world, o.bytes))
        })?;
        let mut table = None;
        for result in results {
            if let Some(reports) = result?? {
                table = Some(reports);
            }
        }
        print_table(&table.expect("rank 0 reports"), o.bytes, name, &device);
        Ok(())
    }
    match o.backend {
        BackendChoice::Cuda => go(o, "cuda", &config, Cuda::for_rank),
        _ => go(o, "cpu", &config, |_| Ok(Cpu::new())),
    }
}

fn run_processes(o: &Options) -> DemoResult {
    let exe = std::env::current_exe().map_err(DemoError::CurrentExe)?;
    let mut command = std::process::Command::new(exe);
    command.args(std::env::args().skip(1));
    let statuses =
        unix::spawn(&mut command, o.ranks as usize, Config::default().timeout)?.wait()?;
    match statuses.iter().position(|s| !s.success()) {
        Some(rank) => Err(DemoError::RankFailed {
            rank,
            status: statuses[rank],
        }),
        None => Ok(()),
    }
}

fn main() -> ExitCode {
    // `--help` prints to stdout and exits 0; a bad flag or value exits 2 naming it.
    let mut options = Options::parse();
    // What symmem chose and why, on stderr: `SYMMEM_LOG=info`, or per target
    // (`SYMMEM_LOG=symmem::bootstrap=debug,info`: RUST_LOG's form without span or field
    // filters, which would cost the first build a regex engine); errors only when unset.
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = match std::env::var("SYMMEM_LOG").map(|v| v.parse::<Targets>()) {
        Ok(Ok(filter)) => filter,
        Ok(Err(e)) => {
            eprintln!("SYMMEM_LOG: {e}: logging errors only");
            Targets::new().with_default(LevelFilter::ERROR)
        }
        Err(_) => Targets::new().with_default(LevelFilter::ERROR),
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .finish()
        .with(filter)
        .init();
    // A rank process says nothing its launcher already said.
    options.resolve_backend(unix::UnixBootstrap::in_env());
    let result = if unix::UnixBootstrap::in_env() {
        unix::UnixBootstrap::from_env()
            .map_err(DemoError::from)
            .and_then(|b| run_external(Box::new(b), &options))
    } else if let Some(mpi) = mpi_bootstrap() {
        mpi.map_err(DemoError::from)
            .and_then(|b| run_external(b, &options))
    } else if options.launcher == Launcher::Processes {
        run_processes(&options)
    } else {
        run_threads(&options)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("symmem-demo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The MPI bootstrap when this process was started by mpirun and MPI support is built.
fn mpi_bootstrap() -> Option<Result<Box<dyn Bootstrap>>> {
    #[cfg(feature = "mpi")]
    if symmem::bootstrap::mpi::MpiBootstrap::in_env() {
        return Some(
            symmem::bootstrap::mpi::MpiBootstrap::new().map(|b| Box::new(b) as Box<dyn Bootstrap>),
        );
    }
    None
}
