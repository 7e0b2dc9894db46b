//! The device RMA layer with ranks as processes: the suite's barrier, put-with-signal
//! and atomics bodies (`suite/rma_ranks.rs`) run in 2 and 4 child processes over the
//! UNIX-socket bootstrap, each mapping every peer's heap through the exported file
//! descriptors, on the CPU backend and (where a GPU answers) on the CUDA backend with
//! every process on GPU 0.
//!
//! Processes on one GPU are time-sliced, not co-resident: a kernel that waits for a
//! peer spins until the driver switches to the peer's context, so rounds are few and
//! deadlines generous. A child that hangs is killed at the deadline and fails the test.

use std::time::Duration;
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::backend::cuda::Cuda;
use symmem::bootstrap::Bootstrap;
use symmem::bootstrap::unix::UnixBootstrap;
use symmem::{Config, World};
use symmem_tests::processes::{
    CHILD, assert_no_shm_leftovers, child_mode, cuda_missing, exit_child, report, spawn_ranks,
};

#[path = "suite/rma_ranks.rs"]
mod rma_ranks;

/// Put-with-signal sizes: one byte, odd tails, and more than one 64 KiB pattern period.
const SIZES: [usize; 4] = [1, 17, 4095, 65539];
/// Device barriers before the ordering rounds.
const BARRIERS: usize = 20;

/// One child: joins the group, builds a world on `backend` and runs the rank bodies.
fn child<B: Backend>(bootstrap: UnixBootstrap, backend: B) -> symmem::Result<()> {
    let config = Config {
        heap_bytes: 8 << 20,
        timeout: bootstrap.timeout(),
        ..Config::default()
    };
    let world = World::new(Box::new(bootstrap), backend, &config)?;
    rma_ranks::barrier_rounds(&world, BARRIERS)?;
    rma_ranks::put_with_signal_rounds(&world, &SIZES)?;
    rma_ranks::atomic_rounds(&world)?;
    world.barrier()?;
    println!("CHILD-OK rank {}", world.rank());
    Ok(())
}

/// Runs the child named by [`CHILD`] (`cpu` or `cuda`) and exits with its outcome.
fn run_child(mode: &str) -> ! {
    let result = UnixBootstrap::from_env().and_then(|bootstrap| match mode {
        "cpu" => child(bootstrap, Cpu::new()),
        "cuda" => {
            let backend = Cuda::for_rank(bootstrap.rank())?;
            child(bootstrap, backend)
        }
        _ => panic!("bad {CHILD}={mode}"),
    });
    exit_child(&result)
}

/// Spawns `n` ranks of `test` in child mode `mode` and asserts every one verified all.
fn run_ranks(test: &str, mode: &str, n: usize, deadline: Duration) {
    let outcomes = spawn_ranks(test, mode, n, deadline / 2, deadline, None);
    let all = report(&outcomes);
    for (rank, o) in outcomes.iter().enumerate() {
        assert!(
            o.status.is_some_and(|s| s.success()),
            "rank {rank} of {n} ({mode}) failed:\n{all}"
        );
        assert!(
            o.text().contains(&format!("CHILD-OK rank {rank}")),
            "rank {rank}:\n{all}"
        );
    }
    assert_no_shm_leftovers();
}

macro_rules! process_tests {
    ($($name:ident: $mode:literal, $n:literal, $deadline_s:literal;)*) => {
        $(
            #[test]
            fn $name() {
                if let Some(mode) = child_mode() {
                    run_child(&mode);
                }
                if $mode == "cuda" && let Some(why) = cuda_missing() {
                    eprintln!("skipped: CUDA backend unavailable: {why}");
                    return;
                }
                run_ranks(stringify!($name), $mode, $n, Duration::from_secs($deadline_s));
            }
        )*
    };
}

process_tests! {
    cpu_world_2: "cpu", 2, 60;
    cpu_world_4: "cpu", 4, 60;
    cuda_world_2: "cuda", 2, 120;
    cuda_world_4: "cuda", 4, 120;
}
