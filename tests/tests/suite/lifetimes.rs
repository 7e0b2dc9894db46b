//! Collective lifetimes and agreement on the backend under test (`super::TestBackend`),
//! ranks as threads:
//!
//! * memory a peer can still write is never handed out again: a buffer dropped while a
//!   peer keeps putting into it, and then a new one of the same size, do not share bytes;
//! * `World::barrier` completes every rank's enqueued work before anyone reuses memory;
//! * dropped memory comes back at the barrier at which every rank has dropped it, and
//!   only then;
//! * ranks that disagree about the heap never run a collective: an all-reduce after a
//!   mismatched allocation fails on every rank, naming the odd rank, before any byte
//!   moves, at world sizes 2, 3, 4 and 8;
//! * a one-sided operation on an allocation no barrier has confirmed is refused.

use super::TestBackend;
use std::sync::atomic::{AtomicBool, Ordering};
use symmem::backend::Backend;
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, DeviceBuffer, Error, World};

type W = World<TestBackend>;

fn config() -> Config {
    Config {
        heap_bytes: 16 << 20,
        ..Config::default()
    }
}

fn run(n: usize, body: impl Fn(W) -> symmem::Result<()> + Sync) {
    let results = symmem::spawn_ranks(n, &config(), super::make_backend, body).expect("launch");
    for (rank, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("world of {n}, rank {rank}: {e} ({e:?})"));
    }
}

/// 1 MiB, the size at which reuse was measured to be overwritten entirely.
const BYTES: usize = 1 << 20;
const WRITER: u8 = 0xAA;
const OWNER: u8 = 0x55;

/// A device allocation of `BYTES` bytes of `value` on this rank.
fn filled_source(world: &W, value: u8) -> symmem::Result<DeviceBuffer<u8, TestBackend>> {
    world.device_from_slice(&vec![value; BYTES])
}

#[test]
fn dropped_memory_is_not_reused_while_a_peer_writes_it() {
    if super::skip() {
        return;
    }
    for n in [2, 4] {
        let filled = AtomicBool::new(false);
        run(n, |world| {
            let (me, target) = (world.rank(), 1);
            let old = world.zeros::<u8>(BYTES)?;
            let source = filled_source(&world, WRITER)?;
            world.barrier()?;
            if me == 0 {
                // Rank 0 still holds `old` and keeps putting into rank 1's copy until rank
                // 1 has dropped it, made a new buffer (as every rank does) and filled it;
                // then it puts some more.
                let new = world.empty::<u8>(BYTES)?;
                let mut puts = 0;
                while !filled.load(Ordering::Acquire) && puts < 100_000 {
                    world.put(&old, &source, target)?;
                    puts += 1;
                }
                for _ in 0..8 {
                    world.put(&old, &source, target)?;
                }
                world.barrier()?;
                drop((old, new));
            } else if me == target {
                let old_offset = old.offset();
                drop(old);
                let new = world.empty::<u8>(BYTES)?;
                assert_ne!(new.offset(), old_offset, "reused before any barrier");
                world.write(&new, 0, &vec![OWNER; BYTES])?;
                world.backend().synchronize()?;
                filled.store(true, Ordering::Release);
                world.barrier()?;
                let got = world.read(&new)?;
                let overwritten = got.iter().filter(|&&b| b != OWNER).count();
                assert_eq!(overwritten, 0, "bytes of the new buffer a peer overwrote");
            } else {
                drop(old);
                let new = world.empty::<u8>(BYTES)?;
                world.barrier()?;
                drop(new);
            }
            world.barrier()?;
            assert_eq!(world.heap_free(), world.heap_len(), "all released");
            Ok(())
        });
    }
}

#[test]
fn barrier_completes_enqueued_work_before_memory_is_reused() {
    if super::skip() {
        return;
    }
    run(2, |world| {
        let me = world.rank();
        let old = world.zeros::<u8>(BYTES)?;
        let source = filled_source(&world, WRITER)?;
        world.barrier()?;
        if me == 0 {
            // Enqueue a lot of work into rank 1's copy, then leave it to the barrier.
            for _ in 0..64 {
                world.put(&old, &source, 1)?;
            }
        }
        let syncs = world.backend().device_to_host_syncs();
        world.barrier()?;
        assert_eq!(
            world.backend().device_to_host_syncs(),
            syncs + 1,
            "a barrier waits for this rank's device once"
        );
        let old_offset = old.offset();
        drop(old);
        world.barrier()?;
        // Every rank has dropped it and every rank's work is done: the range is reused.
        let new = world.empty::<u8>(BYTES)?;
        assert_eq!(new.offset(), old_offset, "released at the barrier");
        world.write(&new, 0, &vec![OWNER; BYTES])?;
        world.barrier()?;
        let got = world.read(&new)?;
        assert!(got.iter().all(|&b| b == OWNER), "rank {me}: overwritten");
        Ok(())
    });
}

#[test]
fn memory_comes_back_only_when_every_rank_dropped_it() {
    if super::skip() {
        return;
    }
    for n in [2, 3] {
        run(n, |world| {
            let me = world.rank();
            let a = world.empty::<u8>(BYTES)?;
            let used = world.heap_len() - world.heap_free();
            world.barrier()?;
            // Only rank 0 lets go: nothing comes back anywhere.
            let a = if me == 0 {
                drop(a);
                None
            } else {
                Some(a)
            };
            world.barrier()?;
            assert_eq!(world.heap_len() - world.heap_free(), used, "rank {me}");
            drop(a);
            world.barrier()?;
            assert_eq!(world.heap_free(), world.heap_len(), "rank {me}");
            Ok(())
        });
    }
}

#[test]
fn ranks_that_disagree_never_run_a_collective() {
    if super::skip() {
        return;
    }
    const COUNT: usize = 4096;
    for n in [2, 3, 4, 8] {
        // The odd rank out is the last one (at world 2 the tie goes to rank 0's side).
        let odd = n - 1;
        run(n, |world| {
            let me = world.rank();
            let c = Collectives::new(&world)?;
            let _pad = if me == odd {
                Some(world.empty::<u8>(4096)?)
            } else {
                None
            };
            let src = world.full::<f32>(COUNT, me as f32 + 1.0)?;
            let dst = world.full::<f32>(COUNT, -1.0)?;
            let mismatch = |r: symmem::Result<()>| match r {
                Err(Error::CollectiveMismatch { ranks, .. }) => assert_eq!(ranks, [odd]),
                other => panic!("world {n}, rank {me}: {other:?}"),
            };
            for algorithm in [Algorithm::OneShot, Algorithm::TwoShot] {
                mismatch(c.all_reduce(&dst, &src, COUNT, ReduceOp::Sum, algorithm));
            }
            // Nothing moved, and the world refuses from now on.
            assert!(world.read(&dst)?.iter().all(|&x| x == -1.0), "rank {me}");
            mismatch(c.barrier());
            mismatch(world.barrier());
            mismatch(c.put(&dst, 0, &src.slice(..1)?, (me + 1) % n));
            Ok(())
        });
    }
}

#[test]
fn one_sided_operations_need_an_agreed_allocation() {
    if super::skip() {
        return;
    }
    for n in [1, 2, 3] {
        run(n, |world| {
            let me = world.rank();
            let c = Collectives::new(&world)?;
            let buffer = world.zeros::<u32>(64)?;
            let source = world.device_zeros::<u32>(64)?;
            let to = (me + 1) % n;
            let put = world.put(&buffer, &source, to);
            let rma = c.put(&buffer, 0, &source, to);
            if n == 1 {
                // Nobody to disagree with: agreed at once.
                put?;
                rma?;
            } else {
                for r in [put, rma] {
                    assert!(
                        matches!(r, Err(Error::NotAgreed { offset, .. }) if offset == buffer.offset()),
                        "{r:?}"
                    );
                }
            }
            world.barrier()?;
            world.put(&buffer, &source, to)?;
            c.put(&buffer, 0, &source, to)?;
            world.barrier()
        });
    }
}
