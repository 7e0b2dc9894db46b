//! One rank of an MPI world, under `mpirun` (built with `--features mpi`; run by
//! `tests/tests/engine_mpi.rs` with `SYMMEM_RANKS_PER_NODE` splitting the machine into
//! emulated nodes). It forms the world over MPI (the CPU backend, or CUDA with `--cuda`)
//! and runs every off-node check (`symmem_tests::off_node`) over the MPI transport.
//!
//! Prints `off-node checks: rank R of N on node K of M: ok` and exits 0, or panics.

use clap::Parser;
use std::process::ExitCode;
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::backend::cuda::Cuda;
use symmem::bootstrap::Bootstrap;
use symmem::bootstrap::mpi::MpiBootstrap;
use symmem::{Config, World};
use symmem_tests::off_node;

/// One rank of an MPI world under `mpirun`: every off-node check over the MPI transport.
#[derive(Parser, Debug)]
#[command(name = "engine-ranks")]
struct Options {
    /// Every rank on GPU `rank % count` (the CUDA backend); the CPU backend otherwise.
    #[arg(long)]
    cuda: bool,
}

fn run(options: &Options) -> symmem::Result<String> {
    let config = Config {
        heap_bytes: 64 << 20,
        // A device wait that cannot finish ends the run with its error, not a hang.
        wait_deadline: std::time::Duration::from_secs(20),
        ..Config::default()
    };
    let bootstrap = Box::new(MpiBootstrap::new()?);
    if options.cuda {
        let backend = Cuda::for_rank(bootstrap.rank())?;
        checks(World::new(bootstrap, backend, &config)?)
    } else {
        checks(World::new(bootstrap, Cpu::new(), &config)?)
    }
}

/// Every check on world `w`; then the world leaves.
fn checks<B: Backend>(w: World<B>) -> symmem::Result<String> {
    off_node::checks(&w)?;
    let line = off_node::ok_line(&w);
    w.finalize()?;
    Ok(line)
}

fn main() -> ExitCode {
    match run(&Options::parse()) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("engine-ranks: {e} ({e:?})");
            ExitCode::FAILURE
        }
    }
}
