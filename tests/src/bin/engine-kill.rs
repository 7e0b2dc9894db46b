//! One rank of the kill test (`tests/tests/engine_mpi.rs`), under `mpirun` with recovery
//! enabled and the machine split into emulated nodes: the world forms over MPI on the CPU
//! backend (on GPU `rank % count` with `--cuda`), then its last rank kills itself
//! (`SIGKILL`) while every other rank waits for it on the device (a cross-rank barrier
//! kernel, which reaches the other node through the off-node transport: the MPI proxy,
//! or NVSHMEM with `SYMMEM_OFF_NODE=nvshmem`).
//!
//! Each survivor must get a typed error, not a hang, within its wait deadline (seconds,
//! the first argument; 5 without one) (the abort word when the liveness watchdog sees the
//! rank go, else the deadline itself); it prints
//! `engine-kill: rank R: typed error after S s: <error>` and exits 0 at once, without
//! `MPI_Finalize` (which a world with a dead rank cannot complete) and without leaving
//! the world. Anything else exits non-zero.

use clap::Parser;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::backend::cuda::Cuda;
use symmem::bootstrap::Bootstrap;
use symmem::bootstrap::mpi::MpiBootstrap;
use symmem::collectives::Collectives;
use symmem::{Config, World};

/// One rank of the kill test under `mpirun`: the last rank kills itself while the others
/// wait for it on the device; each survivor must get a typed error within its deadline.
#[derive(Parser, Debug)]
#[command(name = "engine-kill")]
struct Options {
    /// Each survivor's wait deadline, in seconds.
    #[arg(default_value = "5", value_parser = seconds)]
    deadline: Duration,
    /// Every rank on GPU `rank % count` (the CUDA backend); the CPU backend otherwise.
    #[arg(long)]
    cuda: bool,
}

/// A positive number of seconds (`5`, `0.5`).
fn seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|&s| s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("`{s}` is not a positive number of seconds (5, 0.5)"))
}

fn main() -> ExitCode {
    let options = Options::parse();
    let config = Config {
        heap_bytes: 16 << 20,
        wait_deadline: options.deadline,
        ..Config::default()
    };
    let bootstrap = match MpiBootstrap::new() {
        Ok(b) => Box::new(b),
        Err(e) => {
            eprintln!("engine-kill: joining MPI: {e}");
            return ExitCode::FAILURE;
        }
    };
    if options.cuda {
        let formed = Cuda::for_rank(bootstrap.rank())
            .and_then(|backend| World::new(bootstrap, backend, &config));
        kill_test(formed)
    } else {
        kill_test(World::new(bootstrap, Cpu::new(), &config))
    }
}

/// The test on the world `formed`: the last rank dies, the others report how they learned.
fn kill_test<B: Backend>(formed: symmem::Result<World<B>>) -> ExitCode {
    let w = match formed {
        Ok(w) => w,
        Err(e) => {
            eprintln!("engine-kill: forming the world: {e}");
            return ExitCode::FAILURE;
        }
    };
    let c = match Collectives::new(&w) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("engine-kill: rank {}: collectives: {e}", w.rank());
            return ExitCode::FAILURE;
        }
    };
    let (me, n) = (w.rank(), w.world_size());
    if let Err(e) = w.barrier() {
        eprintln!("engine-kill: rank {me}: the first barrier: {e}");
        return ExitCode::FAILURE;
    }
    if me == n - 1 {
        std::thread::sleep(Duration::from_millis(200));
        let me = rustix::process::getpid();
        let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
    }
    let start = Instant::now();
    let waited = c
        .barrier()
        .and_then(|()| w.backend().synchronize())
        .and_then(|()| w.check_waits());
    match waited {
        Err(e) => {
            println!(
                "engine-kill: rank {me}: typed error after {:.1} s: {e}",
                start.elapsed().as_secs_f64()
            );
            // Out at once: leaving the world or finalizing MPI needs the dead rank.
            std::process::exit(0)
        }
        Ok(()) => {
            eprintln!("engine-kill: rank {me}: the barrier with a dead rank succeeded");
            std::process::exit(1)
        }
    }
}
