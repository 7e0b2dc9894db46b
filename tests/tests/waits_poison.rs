//! A rank whose device wait gives up poisons what its peers wait on: every rank of that
//! call errs, none goes on with data the failed rank did not finish.
//!
//! Rank 0 has a short device-wait deadline, the others the default (10 minutes); rank 2
//! enters a collective late. Rank 0's barrier wait for rank 2 times out, and rank 0 then
//! sets the poison bit in its barrier arrival word on every peer
//! (`symmem_rma::watch::POISON`): rank 1, waiting for rank 2 too, and rank 2, arriving
//! late, give up on that word instead of being satisfied by the arrivals rank 0 makes
//! after it stopped waiting (and poison their own words in turn). Rank 0 gets
//! `WaitTimedOut`, the others `PeerFailed` naming rank 0 or a rank that gave up because of
//! it; all as soon as rank 2 arrives, none waits until the default deadline.
//!
//! On the CPU backend (CI); on CUDA (ranks sharing GPU 0) where a GPU answers.

use std::time::{Duration, Instant};
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::backend::cuda::Cuda;
use symmem::bootstrap::local::LocalBootstrap;
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, Error, World};
use symmem_tests::processes::cuda_missing;

/// Rank 0's device-wait deadline.
const SHORT: Duration = Duration::from_millis(100);
/// How late rank 2 enters the collective: longer than two looks of rank 0 at its control
/// block (each after 65,536 spins, which take far longer on a loaded CPU).
const LATE: Duration = Duration::from_secs(3);
const N: usize = 4096;

/// One rank: an all-reduce every rank enters together (so the buffers are agreed), then
/// one that rank 2 enters [`LATE`]; returns the second call's outcome, read back.
fn rank_body<B: Backend>(
    bootstrap: LocalBootstrap,
    make: impl Fn(usize) -> symmem::Result<B>,
    algorithm: Algorithm,
) -> (symmem::Result<Vec<i32>>, Duration) {
    let rank = symmem::bootstrap::Bootstrap::rank(&bootstrap);
    let config = Config {
        heap_bytes: 8 << 20,
        wait_deadline: if rank == 0 {
            SHORT
        } else {
            Config::default().wait_deadline
        },
        ..Config::default()
    };
    let start = Instant::now();
    let run = || -> symmem::Result<symmem::Result<Vec<i32>>> {
        let world = World::new(Box::new(bootstrap), make(rank)?, &config)?;
        let coll = Collectives::new(&world)?;
        let src = world.from_slice(&vec![rank as i32 + 1; N])?;
        let dst = world.zeros::<i32>(N)?;
        coll.all_reduce(&dst, &src, N, ReduceOp::Sum, algorithm)?;
        world.read(&dst)?;
        if rank == 2 {
            std::thread::sleep(LATE);
        }
        Ok(coll
            .all_reduce(&dst, &src, N, ReduceOp::Sum, algorithm)
            .and_then(|()| world.read(&dst)))
    };
    let result = run().and_then(|r| r);
    (result, start.elapsed())
}

fn forced_timeout_fails_every_rank<B: Backend>(
    make: impl Fn(usize) -> symmem::Result<B> + Sync,
    algorithm: Algorithm,
) {
    let group = LocalBootstrap::default_group(3);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = group
            .into_iter()
            .map(|b| {
                let make = &make;
                s.spawn(move || rank_body(b, make, algorithm))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank"))
            .collect()
    });
    for (rank, (result, took)) in results.iter().enumerate() {
        eprintln!(
            "{algorithm:?}: rank {rank}: {result:?} after {took:?}",
            result = result.as_ref().map(|v| v[0])
        );
        assert!(
            *took < LATE + Duration::from_secs(5),
            "rank {rank} took {took:?}"
        );
        match (rank, result) {
            (0, Err(Error::WaitTimedOut { .. })) => {}
            // Rank 0's failure, or that of a rank that saw it first: never this one.
            (1 | 2, Err(Error::PeerFailed { ranks, .. }))
                if !ranks.is_empty() && !ranks.contains(&rank) => {}
            _ => panic!(
                "rank {rank} should err ({algorithm:?}), got {:?}",
                result.as_ref().map(|v| v[..4].to_vec())
            ),
        }
    }
}

#[test]
fn a_forced_timeout_fails_every_rank_of_a_one_shot_all_reduce() {
    forced_timeout_fails_every_rank(|_| Ok(Cpu::new()), Algorithm::OneShot);
}

#[test]
fn a_forced_timeout_fails_every_rank_of_a_two_shot_all_reduce() {
    forced_timeout_fails_every_rank(|_| Ok(Cpu::new()), Algorithm::TwoShot);
}

#[test]
fn cuda_a_forced_timeout_fails_every_rank_of_a_two_shot_all_reduce() {
    if let Some(why) = cuda_missing() {
        eprintln!("skipped: cuda backend unavailable: {why}");
        return;
    }
    forced_timeout_fails_every_rank(Cuda::for_rank, Algorithm::TwoShot);
}
