//! One rank of the kill test (`tests/tests/engine_mpi.rs`), under `mpirun` with recovery
//! enabled and the machine split into emulated nodes: the world forms over MPI on the CPU
//! backend, then its last rank kills itself (`SIGKILL`) while every other rank waits for
//! it on the device (a cross-rank barrier kernel, which reaches the other node through
//! the off-node engine).
//!
//! Each survivor must get a typed error, not a hang, within its wait deadline (seconds,
//! the first argument; 5 without one) (the abort
//! word when the liveness watchdog sees the rank go, else the deadline itself); it prints
//! `engine-kill: rank R: typed error after S s: <error>` and exits 0 at once, without
//! `MPI_Finalize` (which a world with a dead rank cannot complete) and without leaving
//! the world. Anything else exits non-zero.

use std::process::ExitCode;
use std::time::{Duration, Instant};
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::bootstrap::mpi::MpiBootstrap;
use symmem::collectives::Collectives;
use symmem::{Config, World};

fn main() -> ExitCode {
    // Each survivor's wait deadline, in seconds: the first argument.
    let deadline = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .map_or(Duration::from_secs(5), Duration::from_secs_f64);
    let config = Config {
        heap_bytes: 16 << 20,
        wait_deadline: deadline,
        ..Config::default()
    };
    let formed = MpiBootstrap::new().and_then(|b| World::new(Box::new(b), Cpu::new(), &config));
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
        // SAFETY: signals this process itself.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
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
