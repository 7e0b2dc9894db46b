//! The symmem demo: every rank writes a rank-specific pattern into every peer's copy of
//! a symmetric buffer through translated puts, then each rank verifies every byte it
//! received and rank 0 prints a table.
//!
//! ```text
//! symmem-demo [--ranks N] [--bytes SIZE] [--backend auto|cpu|cuda] [--launcher threads|processes]
//! ```
//! `auto` (the default) takes the CUDA backend when a GPU answers, the CPU one otherwise.
//! Under `mpirun -np N` (built with `--features mpi`) the world comes from MPI instead.

use std::process::ExitCode;
use std::time::{Duration, Instant};
use symmem::backend::{Backend, cpu::Cpu, cuda::Cuda};
use symmem::bootstrap::{Bootstrap, unix};
use symmem::{Config, Error, Result, World};

struct Options {
    ranks: usize,
    bytes: usize,
    backend: String,
    launcher: String,
}

fn parse_size(s: &str) -> Option<usize> {
    let (num, mul) = match s.trim_end_matches(['B', 'b', 'i']).chars().last()? {
        'K' | 'k' => (&s[..s.find(['K', 'k'])?], 1 << 10),
        'M' | 'm' => (&s[..s.find(['M', 'm'])?], 1 << 20),
        'G' | 'g' => (&s[..s.find(['G', 'g'])?], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

fn parse_args() -> std::result::Result<Options, String> {
    let mut o = Options {
        ranks: 4,
        bytes: 8 << 20,
        backend: "auto".into(),
        launcher: "threads".into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--ranks" => o.ranks = value()?.parse().map_err(|_| "--ranks takes a number")?,
            "--bytes" => o.bytes = parse_size(&value()?).ok_or("--bytes takes a size like 64M")?,
            "--backend" => o.backend = value()?,
            "--launcher" => o.launcher = value()?,
            "--help" | "-h" => {
                return Err(
                    "usage: symmem-demo [--ranks N] [--bytes SIZE] [--backend auto|cpu|cuda] \
                            [--launcher threads|processes]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.backend == "auto" {
        o.backend = match Cuda::new(0) {
            Ok(_) => "cuda".into(),
            Err(why) => {
                eprintln!("symmem-demo: no GPU backend ({why}); using the CPU backend");
                "cpu".into()
            }
        };
    }
    if o.ranks == 0 || o.bytes == 0 {
        return Err("--ranks and --bytes must be positive".into());
    }
    Ok(o)
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

fn run_rank<B: Backend>(world: World<B>, bytes: usize) -> Result<Option<Vec<Report>>> {
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
            eprintln!(
                "rank {rank}: byte {i} from rank {from} is {:#04x}, expected {:#04x}",
                region[i],
                pattern(from, i)
            );
            return Err(Error::Bootstrap(format!(
                "rank {rank}: mismatch in data from rank {from}"
            )));
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

fn run_external(bootstrap: Box<dyn Bootstrap>, o: &Options) -> Result<()> {
    fn go<B: Backend>(bootstrap: Box<dyn Bootstrap>, backend: B, o: &Options) -> Result<()> {
        let config = config_for(o.bytes, bootstrap.world_size());
        let device = backend.device_name();
        if let Some(reports) = run_rank(World::new(bootstrap, backend, &config)?, o.bytes)? {
            print_table(&reports, o.bytes, &o.backend, &device);
        }
        Ok(())
    }
    match o.backend.as_str() {
        "cpu" => go(bootstrap, Cpu::new(), o),
        "cuda" => {
            let backend = Cuda::for_rank(bootstrap.rank())?;
            go(bootstrap, backend, o)
        }
        _ => Err(Error::Unsupported("backend (use cpu or cuda)")),
    }
}

fn run_threads(o: &Options) -> Result<()> {
    let config = config_for(o.bytes, o.ranks);
    fn go<B: Backend>(
        o: &Options,
        config: &Config,
        make: impl Fn(usize) -> Result<B> + Sync,
    ) -> Result<()> {
        let device = make(0)?.device_name();
        let results = symmem::spawn_ranks(o.ranks, config, make, |world| run_rank(world, o.bytes))?;
        let mut table = None;
        for result in results {
            if let Some(reports) = result? {
                table = Some(reports);
            }
        }
        print_table(
            &table.expect("rank 0 reports"),
            o.bytes,
            &o.backend,
            &device,
        );
        Ok(())
    }
    match o.backend.as_str() {
        "cpu" => go(o, &config, |_| Ok(Cpu::new())),
        "cuda" => go(o, &config, Cuda::for_rank),
        _ => Err(Error::Unsupported("backend (use cpu or cuda)")),
    }
}

fn run_processes(o: &Options) -> Result<()> {
    let exe = std::env::current_exe().map_err(|source| Error::Os {
        what: "current_exe",
        source,
    })?;
    let mut command = std::process::Command::new(exe);
    command.args(std::env::args().skip(1));
    let statuses = unix::spawn(&mut command, o.ranks, Config::default().timeout)?.wait()?;
    if statuses.iter().all(|s| s.success()) {
        Ok(())
    } else {
        Err(Error::Bootstrap("a rank process failed".into()))
    }
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let result = if unix::UnixBootstrap::in_env() {
        unix::UnixBootstrap::from_env().and_then(|b| run_external(Box::new(b), &options))
    } else if let Some(mpi) = mpi_bootstrap() {
        mpi.and_then(|b| run_external(b, &options))
    } else if options.launcher == "processes" {
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
