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

/// What one rank saw: the second call's outcome, read back; how long forming the world
/// and the first call took; how long the second call took (from its start on this rank).
struct Seen {
    result: symmem::Result<Vec<i32>>,
    setup: Duration,
    call: Duration,
}

/// One rank: an all-reduce every rank enters together (so the buffers are agreed), then
/// one that rank 2 enters [`LATE`].
fn rank_body<B: Backend>(
    bootstrap: LocalBootstrap,
    make: impl Fn(usize) -> symmem::Result<B>,
    algorithm: Algorithm,
) -> Seen {
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
    let (mut setup, mut call) = (Duration::ZERO, Duration::ZERO);
    let run = || -> symmem::Result<symmem::Result<Vec<i32>>> {
        let world = World::new(Box::new(bootstrap), make(rank)?, &config)?;
        let coll = Collectives::new(&world)?;
        let src = world.from_slice(&vec![rank as i32 + 1; N])?;
        let dst = world.zeros::<i32>(N)?;
        coll.all_reduce(&dst, &src, N, ReduceOp::Sum, algorithm)?;
        world.read(&dst)?;
        setup = start.elapsed();
        if rank == 2 {
            std::thread::sleep(LATE);
        }
        let called = Instant::now();
        let result = coll
            .all_reduce(&dst, &src, N, ReduceOp::Sum, algorithm)
            .and_then(|()| world.read(&dst));
        call = called.elapsed();
        Ok(result)
    };
    let result = run().and_then(|r| r);
    Seen {
        result,
        setup,
        call,
    }
}

/// Runs `body` on a thread per rank of a local group of 3, each with its rank's
/// bootstrap; every rank's result, by rank.
fn on_three_ranks<T: Send>(body: impl Fn(LocalBootstrap) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = LocalBootstrap::default_group(3)
            .into_iter()
            .map(|b| {
                let body = &body;
                s.spawn(move || body(b))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank"))
            .collect()
    })
}

fn forced_timeout_fails_every_rank<B: Backend>(
    make: impl Fn(usize) -> symmem::Result<B> + Sync,
    algorithm: Algorithm,
) {
    let seen = on_three_ranks(|b| rank_body(b, &make, algorithm));
    for (rank, one) in seen.iter().enumerate() {
        let Seen {
            result,
            setup,
            call,
        } = one;
        eprintln!(
            "{algorithm:?}: rank {rank}: {result:?} after {call:?} (world and first call: {setup:?})",
            result = result.as_ref().map(|v| v[0])
        );
        // The call ends once rank 2 has arrived (rank 0's wait gave up long before), not at
        // the default deadline: ranks 0 and 1 wait for rank 2's late start, rank 2 not at
        // all. (Timed from the call's start: forming a world, a context's creation on a
        // GPU included, is not what this is about.)
        let bound = if rank == 2 { Duration::ZERO } else { LATE } + Duration::from_secs(5);
        assert!(*call < bound, "rank {rank}'s call took {call:?}");
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

/// What rank 2 read after the first call, and later.
type BeforeAfter = (Vec<i32>, Vec<i32>);

/// A collective that writes into its peers (`all_gather`, `all_to_all`, the two-shot
/// all-reduce).
#[derive(Clone, Copy, Debug)]
enum Writer {
    AllGather,
    AllToAll,
    TwoShot,
}

/// After a collective every rank of 3 made, rank 1 makes it again (the same, agreed
/// buffers, new values), alone: rank 0 leaves once rank 1's kernel waits in its entry
/// barrier, and rank 2, which never makes the call, then reads the first one's result.
/// Rank 1's entry barrier gives up on rank 0 (gone), so its kernel must write nothing
/// into its peers: rank 2 reads exactly the first result (or an error). Found by the fault soak with ranks as processes (seed
/// 898243822361212586: rank 2 read `Ok` with rank 1's chunk of a call rank 2 never
/// entered); the kernels now return when their entry barrier gave up
/// (`Team::barrier_block` answers whether it passed, on every thread of the block).
fn a_collective_whose_barrier_gave_up_writes_nothing_into_its_peers<B: Backend>(
    make: impl Fn(usize) -> symmem::Result<B> + Sync,
    writer: Writer,
) {
    let config = Config {
        heap_bytes: 8 << 20,
        wait_deadline: Duration::from_secs(5),
        ..Config::default()
    };
    let results: Vec<symmem::Result<Option<BeforeAfter>>> = on_three_ranks(|b| {
        let rank = symmem::bootstrap::Bootstrap::rank(&b);
        let world = World::new(Box::new(b), make(rank)?, &config)?;
        let coll = Collectives::new(&world)?;
        let n = 4;
        let dst = world.zeros::<i32>(3 * n)?;
        let src = world.from_slice(&[rank as i32 + 1; 3 * 4])?;
        let call = || match writer {
            Writer::AllGather => coll.all_gather(&dst, &src, n),
            Writer::AllToAll => coll.all_to_all(&dst, &src, n),
            Writer::TwoShot => {
                coll.all_reduce(&dst, &src, 3 * n, ReduceOp::Sum, Algorithm::TwoShot)
            }
        };
        call()?;
        let before = world.read(&dst)?;
        match rank {
            0 => {
                // Leaves (its world is dropped) while rank 1 waits for it.
                std::thread::sleep(Duration::from_millis(300));
                Ok(None)
            }
            1 => {
                world.write(&src, 0, &[10 * (rank as i32 + 1); 3 * 4])?;
                let _ = call();
                Ok(None)
            }
            _ => {
                std::thread::sleep(Duration::from_millis(1000));
                Ok(Some((before, world.read(&dst)?)))
            }
        }
    });
    match &results[2] {
        Ok(Some((before, after))) => assert_eq!(
            after, before,
            "{writer:?}: rank 2's buffer changed under it: a peer's call it never made \
             wrote into it"
        ),
        Ok(None) => unreachable!("rank 2 reads"),
        // Rank 0's leave may reach rank 2 first: an error is no wrong answer.
        Err(e) => eprintln!("{writer:?}: rank 2: {e:?}"),
    }
}

#[test]
fn an_all_gather_whose_barrier_gave_up_writes_nothing_into_its_peers() {
    a_collective_whose_barrier_gave_up_writes_nothing_into_its_peers(
        |_| Ok(Cpu::new()),
        Writer::AllGather,
    );
}

#[test]
fn an_all_to_all_whose_barrier_gave_up_writes_nothing_into_its_peers() {
    a_collective_whose_barrier_gave_up_writes_nothing_into_its_peers(
        |_| Ok(Cpu::new()),
        Writer::AllToAll,
    );
}

#[test]
fn a_two_shot_all_reduce_whose_barrier_gave_up_writes_nothing_into_its_peers() {
    a_collective_whose_barrier_gave_up_writes_nothing_into_its_peers(
        |_| Ok(Cpu::new()),
        Writer::TwoShot,
    );
}

#[test]
fn cuda_collectives_whose_barrier_gave_up_write_nothing_into_their_peers() {
    if let Some(why) = cuda_missing() {
        eprintln!("skipped: cuda backend unavailable: {why}");
        return;
    }
    for writer in [Writer::AllGather, Writer::AllToAll, Writer::TwoShot] {
        a_collective_whose_barrier_gave_up_writes_nothing_into_its_peers(Cuda::for_rank, writer);
    }
}
