//! Bounded device waits on the backend under test (`super::TestBackend`), ranks as
//! threads: a rank that skips a collective never hangs the others' kernels.

use super::TestBackend;
use std::time::{Duration, Instant};
use symmem::collectives::Collectives;
use symmem::{Config, Error, World};

type W = World<TestBackend>;

/// A rank that skips a collective: every other rank's kernel gives up its wait after the
/// world's `wait_deadline` instead of hanging, names the absent rank, and poisons its
/// world (every later call returns the same error); the skipper learns it at the next
/// barrier (the others failed, and recorded a call it did not make); and the process then
/// makes a new world whose collectives complete. Where the ranks launch collectives
/// together (threads sharing a GPU: `World::launches_together`), the others give up at
/// the call itself: the first to reach the deadline with `NotReached` naming the skipper,
/// which poisons the world naming it, so that a rank still waiting then ends its wait with
/// `PeerLost` naming the same rank.
#[test]
fn a_rank_that_skips_a_collective_times_out_the_others_and_poisons_their_worlds() {
    if super::skip() {
        return;
    }
    let deadline = Duration::from_millis(300);
    for (n, skipper) in [(2, 1), (3, 0), (4, 2)] {
        let cfg = Config {
            heap_bytes: 16 << 20,
            wait_deadline: deadline,
            ..Config::default()
        };
        let start = Instant::now();
        let results = symmem::spawn_ranks(n, &cfg, super::make_backend, |world: W| {
            let coll = Collectives::new(&world)?;
            let together = world.launches_together();
            if world.rank() == skipper {
                return Ok((world.barrier(), Ok(()), together));
            }
            let waited = Instant::now();
            // Where the ranks launch collectives together (threads sharing a GPU), the
            // call itself waits for the skipper, up to the deadline. Elsewhere the launch
            // returns (on the CPU once the kernel's wait gave up; on a GPU at once) and
            // the barrier after it reports the failed wait, and tells the skipper (which
            // waits there).
            let first = coll.barrier().and_then(|()| world.barrier());
            // Ungated, each rank's own wait gives up; gated, the first rank's does.
            assert!(together || waited.elapsed() >= deadline, "gave up early");
            // Poisoned: every later call answers at once.
            let again = coll.barrier();
            Ok((first, again, together))
        })
        .expect("launch");
        let (mut gated, mut not_reached) = (false, 0);
        let elapsed = start.elapsed();
        assert!(
            elapsed < deadline + Duration::from_secs(5),
            "world of {n}: {elapsed:?}"
        );
        for (rank, r) in results.into_iter().enumerate() {
            let (first, again, together) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            if together {
                gated = true;
                // The others gave up at the call, naming the skipper, and left: the
                // skipper's barrier finds them gone. Their worlds are poisoned, naming it.
                if rank == skipper {
                    assert!(
                        matches!(&first, Err(Error::PeerLost { .. })),
                        "skipper: {first:?}"
                    );
                    continue;
                }
                match (&first, &again) {
                    (
                        Err(Error::NotReached { peer, waited, .. }),
                        Err(Error::PeerLost { rank: lost, .. }),
                    ) => {
                        assert_eq!(*peer, skipper, "rank {rank}");
                        assert!(*waited >= deadline, "rank {rank}: {waited:?}");
                        assert_eq!(*lost, Some(skipper), "rank {rank}");
                        not_reached += 1;
                    }
                    // Still waiting when another rank's `NotReached` poisoned the world.
                    (
                        Err(Error::PeerLost { rank: lost, .. }),
                        Err(Error::PeerLost { rank: again, .. }),
                    ) => {
                        assert_eq!(*lost, Some(skipper), "rank {rank}");
                        assert_eq!(*again, Some(skipper), "rank {rank}");
                    }
                    other => panic!("world of {n}, rank {rank}: {other:?}"),
                }
                continue;
            }
            if rank == skipper {
                // The others failed their part, and their ledgers record a device call
                // the skipper's does not: named by the majority (`CollectiveMismatch`),
                // or, in a tie, told that the others failed.
                assert!(
                    matches!(&first, Err(Error::PeerFailed { ranks, .. }) if !ranks.contains(&skipper))
                        || matches!(&first, Err(Error::CollectiveMismatch { ranks, .. }) if *ranks == [skipper]),
                    "skipper {rank}: {first:?}"
                );
                continue;
            }
            for r in [first, again] {
                match r {
                    Err(Error::WaitTimedOut { peer, waited, .. }) => {
                        assert_eq!(peer, Some(skipper), "rank {rank}");
                        assert!(waited >= deadline, "rank {rank}: {waited:?}");
                    }
                    other => panic!("world of {n}, rank {rank}: {other:?}"),
                }
            }
        }
        assert!(
            !gated || not_reached > 0,
            "world of {n}: no rank gave up with NotReached"
        );
        // A new world in the same process: its collectives complete.
        let ok = symmem::spawn_ranks(n, &cfg, super::make_backend, |world: W| {
            let coll = Collectives::new(&world)?;
            coll.barrier()?;
            world.barrier()
        })
        .expect("launch");
        assert!(ok.iter().all(Result::is_ok), "{ok:?}");
    }
}
