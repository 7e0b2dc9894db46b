//! The device RMA layer with ranks as processes: the suite's barrier, put-with-signal
//! and atomics bodies (`suite/rma_ranks.rs`) run in 2 and 4 child processes over the
//! UNIX-socket bootstrap, each mapping every peer's heap through the exported file
//! descriptors, on the CPU backend and (where a GPU answers) on the CUDA backend with
//! every process on GPU 0. Then the all-reduce of the application's plain memory, which
//! processes stage through symmetric scratch (threads of one process on one device
//! exchange addresses instead, so the thread suite does not reach these paths): inside
//! the two-shot's kernel, and with the backend's copies above
//! `STAGED_KERNEL_MAX_BYTES`, in place, out of place and unaligned.
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
use symmem::collectives::{Algorithm, Collectives, ReduceOp, STAGED_KERNEL_MAX_BYTES};
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
    staged_all_reduces(&world)?;
    world.barrier()?;
    println!("CHILD-OK rank {}", world.rank());
    Ok(())
}

/// Rank `rank`'s element `i`: small integers, so every sum is exact in any order.
fn value(rank: usize, i: usize) -> f32 {
    ((rank * 5 + i * 3) % 13) as f32 - 6.0
}

/// The two-shot all-reduce on plain memory, which processes stage: below and above
/// [`STAGED_KERNEL_MAX_BYTES`] (in the kernel, then with the backend's copies), in place,
/// out of place, and in place on a view one element in (unaligned: element by element).
fn staged_all_reduces<B: Backend>(w: &World<B>) -> symmem::Result<()> {
    let (me, n) = (w.rank(), w.world_size());
    assert!(
        !w.shares_address_space(),
        "rank {me}: processes share no address space"
    );
    let c = Collectives::new(w)?;
    for count in [17, 4099, STAGED_KERNEL_MAX_BYTES / 4 + 3] {
        let mine: Vec<f32> = (0..count).map(|i| value(me, i)).collect();
        let want: Vec<f32> = (0..count)
            .map(|i| (0..n).map(|r| value(r, i)).sum())
            .collect();
        let what = format!("rank {me} of {n}, {count} elements");
        let src = w.device_from_slice(&mine)?;
        let dst = w.device_zeros::<f32>(count)?;
        c.all_reduce(&dst, &src, count, ReduceOp::Sum, Algorithm::TwoShot)?;
        assert_eq!(w.read(&dst)?, want, "{what}: out of place");
        assert_eq!(w.read(&src)?, mine, "{what}: source untouched");
        c.all_reduce_in_place(&src, count, ReduceOp::Sum, Algorithm::TwoShot)?;
        assert_eq!(w.read(&src)?, want, "{what}: in place");
        let wide = w.device_from_slice(&[&[0.5][..], &mine].concat())?;
        let view = wide.slice(1..)?;
        c.all_reduce_in_place(&view, count, ReduceOp::Sum, Algorithm::TwoShot)?;
        assert_eq!(w.read(&view)?, want, "{what}: in place, unaligned");
        assert_eq!(w.read(&wide.slice(..1)?)?, [0.5], "{what}: before the view");
        assert!(c.staging_bytes() > 0, "{what}: nothing was staged");
    }
    c.finalize()
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
