//! Ranks under `mpirun` that form a CPU world over `MPI_COMM_WORLD` and all-gather their
//! ranks: run by `tests/tests/strangers.rs` while a stranger connects to their sockets.
//! With `--after PATH`, each rank binds its socket (`MpiBootstrap::new`) and forms the
//! world only once `PATH` exists, so that the stranger reaches the sockets first. Each
//! rank prints `mpi-members: rank R of N: ok` and exits 0 when the all-gather held.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use symmem::bootstrap::Bootstrap;
use symmem::bootstrap::mpi::MpiBootstrap;
use symmem_tests::processes::{form_checked_cpu_world, wait_for_path};

/// Ranks that form a world, optionally once a file exists.
#[derive(Parser)]
struct Options {
    /// Form the world only once this file exists (at most 20 s later).
    #[arg(long)]
    after: Option<PathBuf>,
}

fn main() -> ExitCode {
    let options = Options::parse();
    let result = (|| -> symmem::Result<(usize, usize)> {
        let bootstrap = MpiBootstrap::new()?;
        if let Some(flag) = &options.after {
            wait_for_path(flag, Duration::from_secs(20));
        }
        let (rank, n) = (bootstrap.rank(), bootstrap.world_size());
        form_checked_cpu_world(Box::new(bootstrap))?.barrier()?;
        Ok((rank, n))
    })();
    match result {
        Ok((rank, n)) => {
            println!("mpi-members: rank {rank} of {n}: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mpi-members: {e}");
            ExitCode::FAILURE
        }
    }
}
