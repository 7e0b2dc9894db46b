//! Runs the fused one-shot all-reduce + residual add + RMSNorm kernel
//! (`fused_allreduce_rmsnorm_kernels`) on every rank, in f32 and in bf16, and checks
//! every output element against a host reference computed in f64.
//!
//! `fused-allreduce-rmsnorm [--ranks N] [--backend auto|cpu|cuda]`: N ranks as threads
//! (default 2, at least 2); `auto` takes CUDA when a GPU answers, else the CPU backend.
//! `--mpi` instead (built with `--features mpi`): one rank per process under `mpirun`,
//! over MPI, across nodes too (`SYMMEM_RANKS_PER_NODE=1 mpirun -np 2 ... --mpi` emulates
//! two nodes on one machine): the same kernel reads the other nodes' data through the
//! off-node engine. `--help` lists the options.

use clap::{Parser, ValueEnum};
use fused_allreduce_rmsnorm::{KERNELS, kernels};
use std::process::ExitCode;
use symmem::backend::{Backend, cpu::Cpu, cuda::Cuda};
use symmem::collectives::{bf16, signal_words};
use symmem::{Config, Grid, PeerTable, UnsafeKernel, World};

/// Why a rank failed: symmem's error, or an element that differs from the host reference.
type Failed = Box<dyn std::error::Error + Send + Sync>;

/// Hidden size of the activations (tokens, the rows, are `--rows`).
const HIDDEN: usize = 512;
const EPS: f32 = 1e-6;
/// Two blocks of 32 threads: one row per thread; every rank launches the same grid.
const GRID: Grid = Grid::new(2, 32);

/// The kernel's parameters for element type `T`.
type Params<T> = (
    *mut T,
    *mut T,
    *const T,
    *const T,
    PeerTable,
    PeerTable,
    u32,
    u32,
    u32,
    u32,
    f32,
    *mut u64,
);

/// An element type the example runs in: its kernel, conversions, and how close to the
/// f64 reference a result must be.
trait Element: symmem::Pod {
    const NAME: &'static str;
    /// Relative tolerance (plus the same absolute one near zero).
    const TOLERANCE: f64;
    fn kernel() -> UnsafeKernel<Params<Self>>;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl Element for f32 {
    const NAME: &'static str = "f32";
    const TOLERANCE: f64 = 1e-5;
    fn kernel() -> UnsafeKernel<Params<Self>> {
        kernels::fused_ar_rmsnorm_f32
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Element for bf16 {
    const NAME: &'static str = "bf16";
    // Two bf16 ulps: the kernel rounds the residual once and the output once.
    const TOLERANCE: f64 = 2.0 / 128.0;
    fn kernel() -> UnsafeKernel<Params<Self>> {
        kernels::fused_ar_rmsnorm_bf16
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f32(v as f32)
    }
    fn to_f64(self) -> f64 {
        f64::from(self.to_f32())
    }
}

/// Rank `rank`'s partial activation, element `i` (what a row-parallel layer leaves).
fn x(rank: usize, i: usize) -> f64 {
    ((i * 7 + rank * 13) % 23) as f64 / 8.0 - 1.375
}

/// The residual stream, the same on every rank.
fn residual(i: usize) -> f64 {
    ((i * 5) % 17) as f64 / 4.0 - 2.0
}

/// The RMSNorm weight.
fn weight(j: usize) -> f64 {
    0.5 + (j % 9) as f64 / 8.0
}

/// The reference: (new residual, output) for every element, in f64 with the kernel's
/// rounding of the stored residual to `T`.
fn reference<T: Element>(world: usize, rows: usize) -> (Vec<f64>, Vec<f64>) {
    let mut res = vec![0.0; rows * HIDDEN];
    let mut out = vec![0.0; rows * HIDDEN];
    for row in 0..rows {
        let line = row * HIDDEN;
        let mut squares = 0.0;
        for j in 0..HIDDEN {
            let i = line + j;
            let sum: f64 = (0..world).map(|r| T::from_f64(x(r, i)).to_f64()).sum();
            let v = T::from_f64(sum + T::from_f64(residual(i)).to_f64()).to_f64();
            res[i] = v;
            squares += v * v;
        }
        let scale = 1.0 / (squares / HIDDEN as f64 + f64::from(EPS)).sqrt();
        for j in 0..HIDDEN {
            out[line + j] = res[line + j] * scale * T::from_f64(weight(j)).to_f64();
        }
    }
    (res, out)
}

fn check<T: Element>(rank: usize, what: &str, got: &[T], want: &[f64]) -> Result<usize, Failed> {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        if (g - w).abs() > T::TOLERANCE * w.abs().max(1.0) {
            return Err(format!(
                "rank {rank}, {}: {what}[{i}] is {g}, the reference {w}",
                T::NAME
            )
            .into());
        }
    }
    Ok(got.len())
}

fn run_type<T: Element, B: Backend>(world: &World<B>, rows: usize) -> Result<usize, Failed> {
    let (rank, size) = (world.rank(), world.world_size());
    let module = world.load(&KERNELS)?;
    let n = rows * HIDDEN;
    let host = |f: &dyn Fn(usize) -> f64, len: usize| -> Vec<T> {
        (0..len).map(|i| T::from_f64(f(i))).collect()
    };
    let (xs, _) = world.allocate_symmetric::<T>(n)?;
    world.write(&xs, 0, &host(&|i| x(rank, i), n))?;
    let res = world.device_from_slice(&host(&residual, n))?;
    let w = world.device_from_slice(&host(&weight, HIDDEN))?;
    let out = world.alloc::<T>(n)?;
    let signals = world.zeros::<u64>(signal_words(size, GRID.blocks as usize))?;
    // The kernel's first barrier orders the ranks; this one agrees on the new buffers.
    world.barrier()?;
    // A collective step: the kernel waits for its peers' kernels (its barriers), so the
    // ranks launch it together where they share a device context.
    world.collectively(|| {
        // SAFETY: the kernel's contract (its crate's documentation): `xs` is this rank's
        // copy of a symmetric buffer of `rows * HIDDEN` elements with its table, `out` and
        // `res` hold as many, `w` `HIDDEN`, `signals` is a zeroed symmetric array of
        // `signal_words(size, GRID.blocks)` words used by this launch alone, and every
        // rank launches the same grid with the same `rows` and `HIDDEN`.
        unsafe {
            module.launch_unchecked(
                T::kernel(),
                GRID,
                (
                    &out,
                    &res,
                    &xs,
                    &w,
                    world.heap_bases(),
                    xs.peer_bases(),
                    size as u32,
                    rank as u32,
                    rows as u32,
                    HIDDEN as u32,
                    EPS,
                    &signals,
                ),
            )
        }
    })?;
    let (want_res, want_out) = reference::<T>(size, rows);
    let checked = check(rank, "residual", &world.read(&res)?, &want_res)?
        + check(rank, "out", &world.read(&out)?, &want_out)?;
    world.barrier()?;
    Ok(checked)
}

fn run<B: Backend>(world: World<B>, rows: usize) -> Result<usize, Failed> {
    Ok(run_type::<f32, B>(&world, rows)? + run_type::<bf16, B>(&world, rows)?)
}

/// One rank of a world over MPI (`--mpi`, under `mpirun`): this process's rank on `backend`.
#[cfg(feature = "mpi")]
fn mpi_rank(backend: &str, rows: usize) -> Result<String, Failed> {
    use symmem::bootstrap::{Bootstrap, mpi::MpiBootstrap};
    let mut bootstrap = Box::new(MpiBootstrap::new()?);
    let config = Config::default();
    let (rank, size) = (bootstrap.rank(), bootstrap.world_size());
    // The GPU by the rank's place on its machine: across machines the world rank would
    // pick another rank's GPU, or none.
    let local = symmem::topology::local_rank(&mut *bootstrap)?;
    let (checked, node, nodes) = match backend {
        "cuda" => {
            let device = Cuda::new(local.rank % Cuda::device_count()?)?;
            on_world(World::new(bootstrap, device, &config)?, rows)?
        }
        _ => on_world(World::new(bootstrap, Cpu::new(), &config)?, rows)?,
    };
    Ok(format!(
        "fused-allreduce-rmsnorm: rank {rank} of {size} on node {node} of {nodes} on {backend}: \
         {checked} elements match the host reference"
    ))
}

/// [`run`] on `world`, then its node and the number of nodes.
#[cfg(feature = "mpi")]
fn on_world<B: Backend>(world: World<B>, rows: usize) -> Result<(usize, usize, usize), Failed> {
    let t = world.topology();
    let (node, nodes) = (t.node_of(world.rank()).unwrap_or(0), t.nodes());
    Ok((run(world, rows)?, node, nodes))
}

/// The fused one-shot all-reduce + residual add + RMSNorm kernel on every rank, checked
/// against a host reference.
#[derive(Parser, Debug)]
#[command(name = "fused-allreduce-rmsnorm")]
struct Options {
    /// Ranks, as threads of this process (at least 2).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..),
          conflicts_with = "mpi")]
    ranks: u32,
    /// One rank per process under `mpirun`, over MPI (built with `--features mpi`).
    #[arg(long)]
    mpi: bool,
    /// Tokens: rows of the activations, each of 512 elements.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    rows: u32,
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
    let (ranks, mpi, rows) = (options.ranks as usize, options.mpi, options.rows as usize);
    let backend = match options.backend {
        BackendChoice::Cuda => "cuda",
        BackendChoice::Cpu => "cpu",
        // The CPU only where no GPU or driver answers: another failure is the run's.
        BackendChoice::Auto => match Cuda::device_count() {
            Err(why) if why.is_device_missing() => {
                eprintln!("fused-allreduce-rmsnorm: no GPU ({why}); using the CPU backend");
                "cpu"
            }
            _ => "cuda",
        },
    };
    if mpi {
        #[cfg(feature = "mpi")]
        return match mpi_rank(backend, rows) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("fused-allreduce-rmsnorm: {e}");
                ExitCode::FAILURE
            }
        };
        #[cfg(not(feature = "mpi"))]
        {
            eprintln!("fused-allreduce-rmsnorm: --mpi needs the example built with --features mpi");
            return ExitCode::FAILURE;
        }
    }
    let config = Config::default();
    // A rank's own failure (a wrong element) is its result's `Err`, beside symmem's.
    let results = if backend == "cuda" {
        symmem::spawn_ranks(ranks, &config, Cuda::for_rank, |w| Ok(run(w, rows)))
    } else {
        symmem::spawn_ranks(ranks, &config, |_| Ok(Cpu::new()), |w| Ok(run(w, rows)))
    };
    let results = results.map_err(Failed::from).and_then(|r| {
        r.into_iter()
            .map(|rank| rank.map_err(Failed::from).and_then(|checked| checked))
            .collect::<Result<Vec<_>, _>>()
    });
    match results {
        Ok(counts) => {
            println!(
                "fused-allreduce-rmsnorm: {ranks} ranks on {backend}: {rows}x{HIDDEN} in f32 and \
                 bf16, {} elements match the host reference",
                counts.iter().sum::<usize>()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fused-allreduce-rmsnorm: {e}");
            ExitCode::FAILURE
        }
    }
}
