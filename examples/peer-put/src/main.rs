//! Every rank puts a pattern into the next rank's copy of a buffer with its own kernel
//! (`peer_put_kernels::ring_put`), first over a symmetric-heap buffer, then over a
//! rendezvous of plain device allocations, and checks every byte it received.
//!
//! `peer-put [--ranks N] [--backend auto|cpu|cuda]`: N ranks as threads (default 2, at
//! least 2: with one rank the sender is the receiver, which proves nothing); `auto`
//! takes CUDA when a GPU answers, the CPU backend otherwise. `--help` lists the options.

use clap::{Parser, ValueEnum};
use std::process::ExitCode;
use symmem::backend::{Backend, cpu::Cpu, cuda::Cuda};
use symmem::{Config, Rendezvous, World};

/// Why a rank failed: symmem's error, or a received element that is not what its peer
/// sent.
type Failed = Box<dyn std::error::Error + Send + Sync>;

static KERNELS: symmem::CodeObjects = symmem::include_kernels!("peer_put_kernels");

/// Elements each rank sends (a multiple of 4: the kernel stores 16 bytes at a time, and
/// each rank's slot stays 16-aligned).
const N: usize = 1 << 16;

/// What rank `rank` sends, element `i`.
fn pattern(rank: usize, i: usize) -> u32 {
    (rank as u32 + 1).wrapping_mul(0x9e37_79b9) ^ (i as u32).wrapping_mul(2_654_435_761)
}

fn run<B: Backend>(world: World<B>) -> Result<usize, Failed> {
    let (rank, size) = (world.rank(), world.world_size());
    let module = world.load(&KERNELS)?;
    let (to, from) = ((rank + 1) % size, (rank + size - 1) % size);
    let mine: Vec<u32> = (0..N).map(|i| pattern(rank, i)).collect();
    let src = world.device_from_slice(&mine)?;
    // The backend's shape for moving this much: about one 16-byte store per thread on a
    // GPU, one thread per rank on the CPU (the kernel is a grid-stride loop).
    let grid = world.backend().grid_for_bytes(N * 4);
    let mut checked = 0;

    // 1. A buffer of the symmetric heap (the view carries the table that came with it).
    let data = world.zeros::<u32>(size * N)?;
    world.barrier()?;
    module.launch(peer_put_kernels::ring_put, grid, (&data, &src, to as u32))?;
    world.barrier()?;
    checked += verify(&world.read(&data)?, rank, from, "heap buffer")?;

    // 2. The program's own allocations, shared by a rendezvous: the same kernel.
    let shared = Rendezvous::new(world.device_zeros::<u32>(size * N)?)?;
    world.barrier()?;
    module.launch(peer_put_kernels::ring_put, grid, (&shared, &src, to as u32))?;
    world.barrier()?;
    checked += verify(&world.read(&shared)?, rank, from, "rendezvous")?;
    Ok(checked)
}

/// Checks that `got` holds rank `from`'s pattern in its slot and zeros everywhere else;
/// returns the bytes checked.
fn verify(got: &[u32], rank: usize, from: usize, what: &str) -> Result<usize, Failed> {
    for (slot, chunk) in got.as_chunks::<N>().0.iter().enumerate() {
        for (i, &v) in chunk.iter().enumerate() {
            let want = if slot == from { pattern(from, i) } else { 0 };
            if v != want {
                return Err(format!(
                    "rank {rank}, {what}: element {i} of slot {slot} is {v:#x}, expected {want:#x}"
                )
                .into());
            }
        }
    }
    Ok(std::mem::size_of_val(got))
}

/// Every rank's own kernel puts a pattern into the next rank's copy of a buffer (a
/// symmetric-heap buffer, then a rendezvous of plain allocations); every byte is checked.
#[derive(Parser, Debug)]
#[command(name = "peer-put")]
struct Options {
    /// Ranks, as threads of this process (at least 2: with one, the sender is the receiver).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..))]
    ranks: u32,
    /// The device backend; `auto` takes CUDA when a GPU answers, the CPU otherwise.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
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

fn main() -> ExitCode {
    let options = Options::parse();
    // What symmem chose and why, on stderr: `SYMMEM_LOG=info` (RUST_LOG syntax).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("SYMMEM_LOG"))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let ranks = options.ranks as usize;
    let cuda = match options.backend {
        BackendChoice::Cuda => true,
        BackendChoice::Cpu => false,
        // The CPU only where no GPU or driver answers: another failure is the run's.
        BackendChoice::Auto => match Cuda::device_count() {
            Err(why) if why.is_device_missing() => {
                eprintln!("peer-put: no GPU ({why}); using the CPU backend");
                false
            }
            _ => true,
        },
    };
    let config = Config::default();
    // A rank's own failure (a wrong element) is its result's `Err`, beside symmem's.
    let (results, backend) = if cuda {
        let results = symmem::spawn_ranks(ranks, &config, Cuda::for_rank, |w| Ok(run(w)));
        (results, "cuda")
    } else {
        let results = symmem::spawn_ranks(ranks, &config, |_| Ok(Cpu::new()), |w| Ok(run(w)));
        (results, "cpu")
    };
    let results = results.map_err(Failed::from).and_then(|r| {
        r.into_iter()
            .map(|rank| rank.map_err(Failed::from).and_then(|checked| checked))
            .collect::<Result<Vec<_>, _>>()
    });
    match results {
        Ok(bytes) => {
            println!(
                "peer-put: {ranks} ranks on {backend}: every rank's kernel wrote into the next \
                 rank's heap buffer and rendezvous; {} bytes verified",
                bytes.iter().sum::<usize>()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("peer-put: {e}");
            ExitCode::FAILURE
        }
    }
}
