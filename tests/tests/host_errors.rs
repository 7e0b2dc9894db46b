//! Bad input gets the exact error variant, leaves nothing corrupted, and never hangs:
//! heap exhaustion, impossible sizes, zero sizes, bad alignments, foreign pointers,
//! ranks out of range, double frees, ranks that disagree on collective calls or heap
//! sizes, ranks that leave early or stop answering, and the launch path's checks on the
//! handles it is given (another world's, a dropped object's table, a table not yet
//! agreed on, views of different lengths, a kernel of another crate).

use std::sync::Mutex;
use std::time::{Duration, Instant};
use symmem::backend::cpu::Cpu;
use symmem::bootstrap::local::LocalBootstrap;
use symmem::{
    AsSymSlice, Config, DeviceBuffer, Error, ExternalTable, Grid, PeerBaseProvider, PeerBases,
    Rendezvous, SymSlice, World,
};

const HEAP: usize = 1 << 20;

type W = World<Cpu>;

fn config() -> Config {
    Config {
        heap_bytes: HEAP,
        ..Config::default()
    }
}

/// Runs `body` on `n` thread-ranks and returns each rank's result as is.
fn run_raw<R: Send>(
    n: usize,
    config: &Config,
    body: impl Fn(W) -> symmem::Result<R> + Sync,
) -> Vec<symmem::Result<R>> {
    symmem::spawn_ranks(n, config, |_| Ok(Cpu::new()), body).expect("launch")
}

/// Runs `body` on `n` thread-ranks, failing the test on any error.
fn run<R: Send>(n: usize, body: impl Fn(W) -> symmem::Result<R> + Sync) -> Vec<R> {
    run_raw(n, &config(), body)
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.unwrap_or_else(|e| panic!("world of {n}, rank {rank}: {e} ({e:?})")))
        .collect()
}

/// Asserts that `e`'s message names each of `fixes` (a `Config` field, a call, an
/// environment variable): what the user can do about it.
#[track_caller]
fn names(e: &Error, fixes: &[&str]) {
    let message = e.to_string();
    for fix in fixes {
        assert!(
            message.contains(fix),
            "{e:?}: {message:?} does not name {fix:?}"
        );
    }
}

fn for_sizes(sizes: &[usize], body: impl Fn(W) -> symmem::Result<()> + Sync) {
    for &n in sizes {
        run(n, &body);
    }
}

#[test]
fn out_of_heap_names_requested_and_available() {
    for_sizes(&[1, 2, 3], |world| {
        let heap = world.heap_len();
        assert_eq!(heap, HEAP);
        let big = world.empty::<u8>(768 << 10)?;
        let err = world
            .allocate_symmetric::<u8>(512 << 10)
            .map(drop)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::OutOfHeap {
                    rank,
                    requested: 524_288,
                    available: 262_144,
                    pending: 0,
                } if rank == world.rank()
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("524288") && msg.contains("262144"),
            "message: {msg}"
        );
        names(
            &err,
            &[
                &format!("rank {}:", world.rank()),
                "Config::heap_bytes",
                "World::barrier",
            ],
        );
        // Nothing changed: the rest still fits, and the ranks still agree.
        assert_eq!(world.heap_free(), 256 << 10);
        let rest = world.empty::<u8>(256 << 10)?;
        world.barrier()?;
        // A full heap: even one byte is OutOfHeap, with nothing available.
        let err = world.empty::<u8>(1).map(drop).unwrap_err();
        assert!(
            matches!(
                err,
                Error::OutOfHeap {
                    requested: 1,
                    available: 0,
                    pending: 0,
                    ..
                }
            ),
            "{err:?}"
        );
        // Dropped buffers come back only at a barrier; until then they are pending.
        drop((big, rest));
        let err = world.empty::<u8>(1).map(drop).unwrap_err();
        assert!(
            matches!(
                err,
                Error::OutOfHeap {
                    requested: 1,
                    available: 0,
                    pending: HEAP,
                    ..
                }
            ),
            "{err:?}"
        );
        world.barrier()?;
        // Fragmented: enough bytes free in total, but no range large enough.
        let pieces: Vec<_> = (0..4)
            .map(|_| world.empty::<u8>(256 << 10))
            .collect::<Result<_, _>>()?;
        let mut pieces: Vec<_> = pieces.into_iter().map(Some).collect();
        pieces[0] = None;
        pieces[2] = None;
        world.barrier()?;
        let err = world.empty::<u8>(512 << 10).map(drop).unwrap_err();
        assert!(
            matches!(
                err,
                Error::OutOfHeap {
                    requested: 524_288,
                    available: 524_288,
                    pending: 0,
                    ..
                }
            ),
            "{err:?}"
        );
        drop(pieces);
        world.barrier()?;
        assert_eq!(world.heap_free(), heap);
        world.barrier()
    });
}

#[test]
fn too_large_can_never_fit() {
    for_sizes(&[1, 2], |world| {
        let heap = world.heap_len();
        let err = world
            .allocate_symmetric::<u8>(heap + 1)
            .map(drop)
            .unwrap_err();
        assert!(
            matches!(err, Error::TooLarge { requested, capacity } if requested == heap + 1 && capacity == heap),
            "{err:?}"
        );
        assert!(err.to_string().contains(&heap.to_string()), "{err}");
        names(&err, &["Config::heap_bytes"]);
        // Element count times element size overflows.
        let err = world
            .allocate_symmetric::<u64>(usize::MAX / 4)
            .map(drop)
            .unwrap_err();
        assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
        let err = world
            .allocate_symmetric::<u8>(usize::MAX)
            .map(drop)
            .unwrap_err();
        assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
        // Exactly the heap fits.
        let all = world.empty::<u8>(heap)?;
        assert_eq!(world.heap_free(), 0);
        drop(all);
        world.barrier()
    });
}

#[test]
fn zero_size_everywhere() {
    for_sizes(&[1, 2], |world| {
        let zero = |r: symmem::Result<()>| match r {
            Err(e @ Error::ZeroSize) => {
                names(&e, &["at least one element"]);
                true
            }
            _ => false,
        };
        assert!(zero(world.allocate_symmetric::<u8>(0).map(drop)));
        assert!(zero(world.allocate_aligned::<u64>(0, 4096).map(drop)));
        assert!(zero(world.empty::<u32>(0).map(drop)));
        assert!(zero(world.zeros::<u32>(0).map(drop)));
        assert!(zero(world.full::<u16>(0, 3).map(drop)));
        assert!(zero(world.from_slice::<u8>(&[]).map(drop)));
        assert!(
            zero(world.allocate_symmetric::<()>(16).map(drop)),
            "16 zero-sized elements"
        );
        // Plain allocations (and so rendezvous, which share one) cannot be empty either.
        assert!(zero(world.alloc::<u8>(0).map(drop)));
        assert!(zero(world.device_zeros::<u64>(0).map(drop)));
        assert!(zero(world.device_from_slice::<u8>(&[]).map(drop)));
        assert!(
            zero(world.alloc::<()>(16).map(drop)),
            "16 zero-sized elements"
        );
        assert_eq!(world.heap_free(), world.heap_len());
        world.barrier()
    });
    // A zero-byte heap.
    let cfg = Config {
        heap_bytes: 0,
        ..Config::default()
    };
    for r in run_raw(2, &cfg, |_| Ok(())) {
        assert!(matches!(r, Err(Error::ZeroSize)), "{r:?}");
    }
}

#[test]
fn bad_alignment() {
    for_sizes(&[1, 2], |world| {
        let err = world.allocate_aligned::<u8>(64, 3).map(drop).unwrap_err();
        assert!(matches!(err, Error::BadAlignment { align: 3 }), "{err:?}");
        names(&err, &["pass a power of two"]);
        for align in [5, 6, 12, 255, 257, 3 << 20] {
            let err = world
                .allocate_aligned::<u8>(64, align)
                .map(drop)
                .unwrap_err();
            assert!(
                matches!(err, Error::BadAlignment { align: a } if a == align),
                "{err:?}"
            );
        }
        // Powers of two all work, and are honoured in the heap offset.
        for shift in 0..20 {
            let (b, _) = world.allocate_aligned::<u8>(100, 1 << shift)?;
            assert_eq!(b.offset() % (1usize << shift).max(256), 0);
            drop(b);
            world.barrier()?;
        }
        assert_eq!(
            world.heap_free(),
            world.heap_len(),
            "failed calls allocated nothing"
        );
        world.barrier()
    });
}

#[test]
fn allocate_aligned_aligns_every_address() {
    // The alignment asked for holds for the pointer and for every peer's entry, not just
    // for the heap offset (kernels see addresses).
    for_sizes(&[1, 2], |world| {
        let _pad = world.empty::<u8>(256)?;
        for shift in 8..20 {
            let align = 1u64 << shift;
            match world.allocate_aligned::<u8>(100, align as usize) {
                Ok((b, bases)) => {
                    assert_eq!(b.ptr() % align, 0, "ptr {:#x}, align {align:#x}", b.ptr());
                    for (r, e) in bases.entries().iter().enumerate() {
                        assert_eq!(e % align, 0, "entry {r} = {e:#x}, align {align:#x}");
                    }
                }
                // Refusing an alignment the mappings cannot give is fine too.
                Err(Error::BadAlignment { .. } | Error::AlignmentTooLarge { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        world.barrier()
    });
}

#[test]
fn bad_alignment_not_masked_by_the_element_alignment() {
    // align 3 is not a power of two whatever T is; neither is 0.
    for_sizes(&[1, 2], |world| {
        let err = world.allocate_aligned::<u64>(64, 3).map(drop).unwrap_err();
        assert!(
            matches!(err, Error::BadAlignment { align: 3 }),
            "u64, align 3: {err:?}"
        );
        let err = world.allocate_aligned::<u32>(64, 0).map(drop).unwrap_err();
        assert!(
            matches!(err, Error::BadAlignment { align: 0 }),
            "u32, align 0: {err:?}"
        );
        let err = world.allocate_aligned::<u8>(64, 0).map(drop).unwrap_err();
        assert!(
            matches!(err, Error::BadAlignment { align: 0 }),
            "u8, align 0: {err:?}"
        );
        world.barrier()
    });
}

#[test]
fn not_symmetric_for_foreign_pointers() {
    for_sizes(&[1, 2, 3], |world| {
        let (rank, n) = (world.rank(), world.world_size());
        let heap = world.heap_bases().entries()[rank];
        let not_symmetric = |p: u64| {
            let err = world.translate(p, 0).unwrap_err();
            assert!(
                matches!(err, Error::NotSymmetric { addr } if addr == p),
                "{p:#x}: {err:?}"
            );
            assert!(err.to_string().contains(&format!("{p:#x}")), "{err}");
            names(&err, &["a buffer of its heap"]);
        };
        // Nothing allocated: the heap itself is not symmetric memory yet.
        not_symmetric(heap);
        let (buffer, bases) = world.allocate_symmetric::<u8>(4096)?;
        let stack = 0u64;
        let boxed = Box::new([0u8; 64]);
        not_symmetric(std::ptr::from_ref(&stack).addr() as u64);
        not_symmetric(boxed.as_ptr().addr() as u64);
        not_symmetric(0);
        not_symmetric(u64::MAX);
        not_symmetric(heap - 1);
        not_symmetric(heap + world.heap_len() as u64);
        not_symmetric(buffer.ptr() + 4096);
        for r in (0..n).filter(|&r| r != rank) {
            not_symmetric(bases.entries()[r]);
        }
        let user = world.alloc::<u8>(4096)?;
        not_symmetric(user.ptr());
        let freed = buffer.ptr();
        drop(buffer);
        not_symmetric(freed);
        world.barrier()
    });
}

#[test]
fn rank_out_of_range() {
    for_sizes(&[1, 2, 3, 4], |world| {
        let n = world.world_size();
        let buffer = world.zeros::<u32>(16)?;
        let source = world.device_from_slice(&[u32::MAX; 16])?;
        let out = |r: symmem::Result<()>, rank: usize| {
            assert!(
                matches!(r, Err(Error::RankOutOfRange { rank: a, world: b }) if a == rank && b == n),
                "{r:?}"
            );
        };
        for bad in [n, n + 1, usize::MAX] {
            out(world.put(&buffer, &source, bad), bad);
            out(world.get(&source, &buffer, bad), bad);
            out(world.read_peer(&buffer, bad).map(drop), bad);
            out(buffer.as_slice().peer_ptr(bad).map(drop), bad);
            out(world.translate(buffer.ptr(), bad).map(drop), bad);
        }
        world.barrier()?;
        assert_eq!(
            world.read(&buffer)?,
            vec![0; 16],
            "a refused put wrote nothing"
        );
        // Element ranges outside the buffer are refused too (the view a put or get
        // would take).
        let r = buffer
            .slice(10..17)
            .and_then(|dst| world.put(&dst, &source.slice(..7)?, 0));
        assert!(
            matches!(
                r,
                Err(Error::OutOfBounds {
                    start: 10,
                    len: 7,
                    capacity: 16
                })
            ),
            "{r:?}"
        );
        let r = buffer
            .slice(usize::MAX..=usize::MAX)
            .and_then(|src| world.get(&source.slice(..1)?, &src, 0));
        assert!(
            matches!(
                r,
                Err(Error::OutOfBounds {
                    start: usize::MAX,
                    ..
                })
            ),
            "{r:?}"
        );
        let r = source.slice(..17).map(drop);
        assert!(
            matches!(
                r,
                Err(Error::OutOfBounds {
                    start: 0,
                    len: 17,
                    capacity: 16
                })
            ),
            "{r:?}"
        );
        let r = world.write(&buffer, 15, &[1, 2]);
        assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
        world.barrier()?;
        assert_eq!(
            world.read(&buffer)?,
            vec![0; 16],
            "refused calls wrote nothing"
        );
        world.barrier()
    });
    let r = symmem::spawn_ranks(0, &config(), |_| Ok(Cpu::new()), |_| Ok(()));
    assert!(
        matches!(r, Err(Error::RankOutOfRange { rank: 0, world: 0 })),
        "{r:?}"
    );
}

#[test]
fn double_free_is_not_allocated() {
    for_sizes(&[1, 2], |world| {
        let (buffer, _) = world.allocate_symmetric::<u8>(1000)?;
        let (keep, _) = world.allocate_symmetric::<u8>(1000)?;
        let offset = buffer.offset();
        let raw = buffer.into_raw();
        world.free_raw(raw)?;
        let err = world.free_raw(raw).unwrap_err();
        assert!(
            matches!(err, Error::NotAllocated { offset: o } if o == offset),
            "{err:?}"
        );
        world.barrier()?;
        let free = world.heap_free();
        assert_eq!(world.heap_len() - free, 1024, "only `keep` is live");
        drop(keep);
        world.barrier()
    });
}

#[test]
fn stale_raw_handle_does_not_free_a_new_allocation() {
    // A handle freed once, whose range was then handed out again, must not free the new
    // allocation (nor give its table slot out twice).
    for_sizes(&[1, 2], |world| {
        let (buffer, _) = world.allocate_symmetric::<u8>(1000)?;
        let raw = buffer.into_raw();
        world.free_raw(raw)?;
        let (fresh, fresh_bases) = world.allocate_symmetric::<u8>(1000)?;
        let second = world.free_raw(raw);
        assert!(
            matches!(second, Err(Error::NotAllocated { .. })),
            "stale free: {second:?}"
        );
        assert!(
            world.is_symmetric(fresh.ptr()),
            "the new allocation is still live"
        );
        let (other, other_bases) = world.allocate_symmetric::<u8>(1000)?;
        assert_ne!(
            other.offset(),
            fresh.offset(),
            "two live buffers share a range"
        );
        assert_ne!(
            other_bases.device_ptr(),
            fresh_bases.device_ptr(),
            "shared table slot"
        );
        drop((fresh, other));
        world.barrier()
    });
}

#[test]
fn raw_handle_of_another_world_is_not_allocated() {
    // Two worlds in one process; a raw handle of one freed in the other.
    let (tx, rx) = std::sync::mpsc::channel();
    let rx = Mutex::new(rx);
    std::thread::scope(|s| {
        s.spawn(|| {
            run(1, |world| {
                let (b, _) = world.allocate_symmetric::<u8>(256)?;
                tx.send(b.into_raw()).expect("send");
                Ok(())
            })
        });
        s.spawn(|| {
            run(1, |world| {
                let (mine, _) = world.allocate_symmetric::<u8>(256)?;
                let foreign = rx.lock().expect("lock").recv().expect("recv");
                let r = world.free_raw(foreign);
                assert!(
                    matches!(r, Err(Error::NotAllocated { .. })),
                    "foreign free: {r:?}"
                );
                assert!(
                    world.is_symmetric(mine.ptr()),
                    "the foreign handle freed our buffer"
                );
                Ok(())
            })
        });
    });
}

fn assert_mismatch_everywhere(results: Vec<symmem::Result<()>>, diverging: usize) {
    for (rank, r) in results.into_iter().enumerate() {
        assert!(
            matches!(&r, Err(e @ Error::CollectiveMismatch { ranks, .. }) if ranks == &[diverging]
                && e.to_string().contains("the same collective calls in the same order")),
            "rank {rank}: {r:?}"
        );
    }
}

#[test]
fn collective_mismatch_on_different_sizes() {
    for n in [2, 3, 4] {
        let results = run_raw(n, &config(), |world| {
            let len = if world.rank() == n - 1 { 512 } else { 256 };
            let (b, _) = world.allocate_symmetric::<u8>(len)?;
            let r = world.barrier();
            drop(b);
            r
        });
        assert_mismatch_everywhere(results, n - 1);
        // Same length in bytes, different element types: still the same call.
        let ok = run_raw(n, &config(), |world| {
            let b = if world.rank() == 0 {
                world.empty::<u8>(1024)?.into_raw()
            } else {
                world.empty::<u32>(256)?.into_raw()
            };
            world.free_raw(b)?;
            world.barrier()
        });
        assert!(ok.iter().all(Result::is_ok), "{ok:?}");
    }
}

#[test]
fn collective_mismatch_on_different_alignment_or_order() {
    let results = run_raw(3, &config(), |world| {
        let align = if world.rank() == 1 { 4096 } else { 256 };
        let _pad = world.empty::<u8>(256)?;
        let (b, _) = world.allocate_aligned::<u8>(256, align)?;
        let r = world.barrier();
        drop(b);
        r
    });
    assert_mismatch_everywhere(results, 1);
    let results = run_raw(3, &config(), |world| {
        let (first, second) = if world.rank() == 2 {
            (512, 256)
        } else {
            (256, 512)
        };
        let a = world.empty::<u8>(first)?;
        let b = world.empty::<u8>(second)?;
        let r = world.barrier();
        drop((a, b));
        r
    });
    assert_mismatch_everywhere(results, 2);
    // One rank allocates once more than the others.
    let results = run_raw(2, &config(), |world| {
        let a = world.empty::<u8>(256)?;
        let extra = if world.rank() == 0 {
            Some(world.empty::<u8>(256)?)
        } else {
            None
        };
        let r = world.barrier();
        drop((a, extra));
        r
    });
    assert_mismatch_everywhere(results, 1);
}

#[test]
fn the_majority_is_right_even_against_rank_0() {
    // Rank 0 is the odd one out: every rank names rank 0, not rank 1.
    for n in [3, 4, 8] {
        let results = run_raw(n, &config(), |world| {
            let len = if world.rank() == 0 { 512 } else { 256 };
            let _b = world.empty::<u8>(len)?;
            world.barrier()
        });
        assert_mismatch_everywhere(results, 0);
    }
}

#[test]
fn drop_order_is_each_rank_own_business() {
    // Sixteen buffers dropped from a HashMap (each rank's map iterates in its own order),
    // then the same again in rank-dependent orders: the barrier agrees on the set of
    // dropped buffers, releases all of them, and the heaps stay identical.
    for n in [2, 4] {
        let results = run_raw(n, &config(), |world| {
            for round in 0..2 {
                let mut buffers = std::collections::HashMap::new();
                for k in 0..16usize {
                    buffers.insert(k, world.empty::<u8>(256 * (k + 1))?);
                }
                world.barrier()?;
                if round == 0 {
                    drop(buffers);
                } else {
                    let mut keys: Vec<usize> = buffers.keys().copied().collect();
                    keys.sort_unstable();
                    keys.rotate_left(world.rank() * 5 % 16);
                    if world.rank() % 2 == 1 {
                        keys.reverse();
                    }
                    for k in keys {
                        drop(buffers.remove(&k));
                    }
                }
                world.barrier()?;
                assert_eq!(world.heap_free(), world.heap_len(), "all released");
            }
            // And allocation still agrees afterwards.
            let (b, bases) = world.allocate_symmetric::<u64>(100)?;
            world.barrier()?;
            assert_eq!(bases.entries()[world.rank()], b.ptr());
            Ok(())
        });
        assert!(results.iter().all(Result::is_ok), "world {n}: {results:?}");
    }
}

#[test]
fn collective_mismatch_on_rendezvous_lengths() {
    let results = run_raw(3, &config(), |world| {
        let len = if world.rank() == 2 { 8192 } else { 4096 };
        Rendezvous::new(world.alloc::<u8>(len)?).map(drop)
    });
    assert_mismatch_everywhere(results, 2);
}

#[test]
fn collective_mismatch_on_external_table_lengths() {
    let results = run_raw(3, &config(), |world| {
        let (buffer, bases) = world.allocate_symmetric::<u8>(8192)?;
        let len = if world.rank() == 1 { 8192 } else { 4096 };
        // SAFETY: `buffer`'s own table, 8192 bytes on every rank (at least `len`), alive
        // until after the table is dropped.
        unsafe { ExternalTable::<u8, _>::new(&world, buffer.ptr(), len, bases.entries()) }.map(drop)
    });
    assert_mismatch_everywhere(results, 1);
}

/// Every way a table handed to symmem can break the contract is refused with its variant,
/// on every rank, before anything is uploaded; a good table then goes through.
#[test]
fn external_table_contract() {
    for_sizes(&[1, 2, 3], |world| {
        let (me, n) = (world.rank(), world.world_size());
        let (buffer, bases) = world.allocate_symmetric::<u8>(4096)?;
        let (local, good) = (buffer.ptr(), bases.entries().to_vec());
        let refused = |entries: &[u64], len: usize| {
            // SAFETY: each table here breaks the contract, which `new` checks before it
            // uploads or reads through anything: what this test checks.
            unsafe { ExternalTable::<u8, _>::new(&world, local, len, entries) }
                .map(drop)
                .unwrap_err()
        };
        let err = refused(&good[..n - 1], 4096);
        assert!(
            matches!(err, Error::BadPeerTable { rank, addr: 0, .. } if rank == n - 1),
            "{err:?}"
        );
        names(&err, &["one entry per rank"]);
        let mut longer = good.clone();
        longer.push(local);
        let err = refused(&longer, 4096);
        assert!(
            matches!(err, Error::BadPeerTable { rank, .. } if rank == n + 1),
            "{err:?}"
        );
        let mut null = good.clone();
        null[n - 1] = 0;
        let err = refused(&null, 4096);
        assert!(
            matches!(err, Error::BadPeerTable { rank, addr: 0, .. } if rank == n - 1),
            "{err:?}"
        );
        let mut not_mine = good.clone();
        not_mine[me] += 4096;
        let err = refused(&not_mine, 4096);
        assert!(
            matches!(err, Error::BadPeerTable { rank, addr, .. } if rank == me && addr == local + 4096),
            "{err:?}"
        );
        assert!(matches!(refused(&good, 0), Error::ZeroSize));
        if n > 1 {
            let mut skewed = good.clone();
            let other = (me + 1) % n;
            skewed[other] += 8;
            let err = refused(&skewed, 4096);
            assert!(
                matches!(err, Error::PeerMisaligned { rank, addr } if rank == other && addr == good[other] + 8),
                "{err:?}"
            );
            names(&err, &["alike on every rank"]);
        }
        // SAFETY: `buffer`'s own table, 4096 bytes on every rank, alive until after the
        // barrier below.
        let table = unsafe { ExternalTable::<u8, _>::new(&world, local, 4096, &good)? };
        assert_eq!(table.table().entries(), &good[..]);
        assert_eq!((table.local_ptr(), table.byte_len()), (local, 4096));
        drop(table);
        world.barrier()
    });
}

/// A table refused on one rank only: that rank gets its own error, every other rank
/// `PeerFailed` naming it, and the ranks stay in step (the next collective pairs up).
#[test]
fn a_collective_that_fails_on_one_rank_fails_on_every_rank() {
    for (n, bad) in [(2, 0), (3, 2), (4, 1)] {
        let results = run_raw(n, &config(), |world| {
            let (buffer, bases) = world.allocate_symmetric::<u8>(4096)?;
            let mut entries = bases.entries().to_vec();
            if world.rank() == bad {
                entries[0] = 0;
            }
            // SAFETY: `buffer`'s table, 4096 bytes on every rank, with entry 0 nulled on
            // rank `bad`, which the contract check refuses before any use.
            let r = unsafe { ExternalTable::<u8, _>::new(&world, buffer.ptr(), 4096, &entries) }
                .map(drop);
            if world.rank() == bad {
                assert!(matches!(r, Err(Error::BadPeerTable { .. })), "{r:?}");
            } else {
                assert!(
                    matches!(&r, Err(Error::PeerFailed { rank, ranks }) if ranks == &[bad] && *rank == world.rank()),
                    "rank {}: {r:?}",
                    world.rank()
                );
                names(
                    r.as_ref().unwrap_err(),
                    &["read the error each of them returned"],
                );
            }
            // The next collective call is the same call on every rank.
            // SAFETY: `buffer`'s own table, alive until after the barrier below.
            let table = unsafe {
                ExternalTable::<u8, _>::new(&world, buffer.ptr(), 4096, bases.entries())?
            };
            drop(table);
            world.barrier()
        });
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }
}

#[test]
fn heap_size_mismatch() {
    for n in [2, 3] {
        let group = LocalBootstrap::group(n, Duration::from_secs(10));
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = group
                .into_iter()
                .enumerate()
                .map(|(rank, bootstrap)| {
                    s.spawn(move || {
                        let cfg = Config {
                            heap_bytes: HEAP + rank * 4096,
                            ..Config::default()
                        };
                        World::new(Box::new(bootstrap), Cpu::new(), &cfg).map(drop)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect()
        });
        for (rank, r) in results.into_iter().enumerate() {
            assert!(
                matches!(
                    r,
                    Err(Error::HeapSizeMismatch { rank: 1, expected, found })
                        if expected == HEAP && found == HEAP + 4096
                ),
                "world {n}, rank {rank}: {r:?}"
            );
            names(
                &r.unwrap_err(),
                &["the same Config::heap_bytes on every rank"],
            );
        }
    }
}

#[test]
fn peer_lost_when_a_rank_returns_early() {
    let timeout = Duration::from_secs(10);
    let cfg = Config {
        heap_bytes: HEAP,
        timeout,
        ..Config::default()
    };
    for (n, leaver) in [(2, 1), (4, 2), (4, 0)] {
        let start = Instant::now();
        let results = run_raw(n, &cfg, |world| {
            if world.rank() == leaver {
                return Ok(Duration::ZERO);
            }
            let t = Instant::now();
            world.barrier()?;
            Ok(t.elapsed())
        });
        let elapsed = start.elapsed();
        for (rank, r) in results.into_iter().enumerate() {
            if rank == leaver {
                assert!(r.is_ok());
            } else {
                assert!(
                    matches!(r, Err(Error::PeerLost { rank: Some(l), waited }) if l == leaver && waited < timeout / 10),
                    "rank {rank}: {r:?}"
                );
                names(&r.unwrap_err(), &["raise Config::timeout"]);
            }
        }
        assert!(
            elapsed < timeout / 5,
            "took {elapsed:?}, timeout {timeout:?}"
        );
    }
}

#[test]
fn peer_lost_at_once_even_while_another_rank_is_slow() {
    // Rank 2 has left for good; rank 1 is merely slow. Rank 0 can tell at once that the
    // barrier will never complete, and should not wait for rank 1 to find out.
    let cfg = Config {
        heap_bytes: HEAP,
        timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let slow = Duration::from_millis(1500);
    let results = run_raw(3, &cfg, |world| {
        match world.rank() {
            2 => return Ok(Duration::ZERO),
            1 => std::thread::sleep(slow),
            _ => {}
        }
        let t = Instant::now();
        let r = world.barrier();
        assert!(
            matches!(r, Err(Error::PeerLost { rank: Some(2), .. })),
            "{r:?}"
        );
        Ok(t.elapsed())
    });
    let waited = results[0].as_ref().expect("rank 0");
    assert!(
        *waited < slow / 3,
        "rank 0 waited {waited:?} for a departed rank"
    );
}

#[test]
fn peer_lost_when_a_rank_hangs() {
    let timeout = Duration::from_millis(300);
    let cfg = Config {
        heap_bytes: HEAP,
        timeout,
        ..Config::default()
    };
    let hang = Duration::from_millis(2000);
    let results = run_raw(3, &cfg, |world| {
        if world.rank() == 1 {
            std::thread::sleep(hang);
            return Ok(Duration::ZERO);
        }
        let t = Instant::now();
        let r = world.barrier();
        let elapsed = t.elapsed();
        match r {
            Err(Error::PeerLost {
                rank: Some(1),
                waited,
            }) => {
                assert!(
                    waited >= timeout,
                    "gave up after {waited:?}, before the timeout"
                );
                assert!(
                    elapsed < timeout * 3,
                    "PeerLost after {elapsed:?}, timeout {timeout:?}"
                );
                Ok(elapsed)
            }
            other => panic!(
                "rank {}: expected PeerLost from rank 1, got {other:?}",
                world.rank()
            ),
        }
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

#[test]
fn peer_lost_when_a_rank_panics() {
    let seen = Mutex::new(Vec::new());
    let start = Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_raw(3, &config(), |world| {
            if world.rank() == 2 {
                panic!("rank 2 panics on purpose");
            }
            let r = world.barrier();
            seen.lock().expect("lock").push(r);
            Ok(())
        })
    }));
    assert!(outcome.is_err(), "launch re-raises the rank's panic");
    let seen = seen.into_inner().expect("lock");
    assert_eq!(seen.len(), 2);
    for r in seen {
        assert!(
            matches!(r, Err(Error::PeerLost { rank: Some(2), .. })),
            "{r:?}"
        );
    }
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn peer_lost_when_a_rank_cannot_create_its_backend() {
    let start = Instant::now();
    let results = symmem::spawn_ranks(
        3,
        &config(),
        |rank| {
            if rank == 1 {
                Err(Error::NoDevice { backend: "test" })
            } else {
                Ok(Cpu::new())
            }
        },
        |_world| Ok(()),
    )
    .expect("launch");
    assert!(
        matches!(results[1], Err(Error::NoDevice { backend: "test" })),
        "{:?}",
        results[1]
    );
    names(results[1].as_ref().unwrap_err(), &["use the CPU backend"]);
    for r in [&results[0], &results[2]] {
        assert!(
            matches!(r, Err(Error::PeerLost { rank: Some(1), .. })),
            "{r:?}"
        );
    }
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn errors_leave_the_world_usable() {
    // A burst of refused calls, then a full exchange that must still be exact.
    for_sizes(&[2, 3], |world| {
        let (rank, n) = (world.rank(), world.world_size());
        let _ = world.allocate_symmetric::<u8>(0);
        let _ = world.allocate_aligned::<u8>(16, 3);
        let _ = world.allocate_symmetric::<u8>(world.heap_len() * 2);
        let _ = world.translate(0, 0);
        let (buffer, _) = world.allocate_symmetric::<u64>(n)?;
        let _ = world.translate(buffer.ptr(), n);
        let source = world.device_from_slice(&[rank as u64 + 100])?;
        let _ = world.put(&buffer.slice(..2)?, &source, 0);
        let _ = world.put(&buffer.slice(rank..rank + 1)?, &source, n);
        world.barrier()?;
        for to in 0..n {
            world.put(&buffer.slice(rank..rank + 1)?, &source, to)?;
        }
        world.barrier()?;
        assert_eq!(
            world.read(&buffer)?,
            (0..n as u64).map(|r| r + 100).collect::<Vec<_>>()
        );
        world.barrier()
    });
}

// ---- the launch path's checks on its handles ---------------------------------------------

/// A buffer (or table, or view) of another world passed to a launch, a put, a read:
/// `ForeignHandle`, and nothing is written.
#[test]
fn a_handle_of_another_world_is_foreign() {
    let (ta, tb) = (
        LocalBootstrap::group(2, Duration::from_secs(10)),
        LocalBootstrap::group(2, Duration::from_secs(10)),
    );
    let results: Vec<symmem::Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = ta
            .into_iter()
            .zip(tb)
            .map(|(a, b)| {
                s.spawn(move || -> symmem::Result<()> {
                    let mine = World::new(Box::new(a), Cpu::new(), &config())?;
                    let theirs = World::new(Box::new(b), Cpu::new(), &config())?;
                    foreign_handles(&mine, &theirs)?;
                    theirs.finalize()?;
                    mine.finalize()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    for (rank, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("rank {rank}: {e} ({e:?})"));
    }
}

/// Rank `mine.rank()`'s part of [`a_handle_of_another_world_is_foreign`]: `theirs` is
/// another world of the same ranks (the same rank on the same thread).
fn foreign_handles(mine: &W, theirs: &W) -> symmem::Result<()> {
    let (rank, n) = (mine.rank(), mine.world_size());
    assert_eq!((theirs.rank(), theirs.world_size()), (rank, n));
    let own = mine.device_from_slice(&[7u8; 64])?;
    let dst = mine.zeros::<u8>(64)?;
    let foreign = theirs.device_from_slice(&[9u8; 64])?;
    let foreign_sym = theirs.zeros::<u8>(64)?;
    mine.barrier()?;
    theirs.barrier()?;
    let foreign_err = |what: &str, r: symmem::Result<()>| {
        assert!(
            matches!(r, Err(Error::ForeignHandle)),
            "rank {rank}, {what}: {r:?}"
        );
        names(r.as_ref().unwrap_err(), &["each rank's own handles"]);
    };
    let kernels = mine.kernels();
    // A buffer of rank 1's world in rank 0's launch (and the other way round).
    foreign_err(
        "a foreign source",
        kernels.launch(
            symmem_kernels::symmem_copy,
            Grid::new(1, 64),
            (&dst, &foreign),
        ),
    );
    foreign_err(
        "a foreign destination",
        kernels.launch(
            symmem_kernels::symmem_copy,
            Grid::new(1, 64),
            (&foreign_sym, &own),
        ),
    );
    foreign_err(
        "a foreign view by value",
        kernels.launch(
            symmem_kernels::symmem_copy,
            Grid::new(1, 64),
            (dst.as_slice().local(), foreign.as_slice()),
        ),
    );
    // A foreign peer table with this world's buffers.
    let probed = mine.device_zeros::<u64>(3)?;
    for (what, table) in [
        ("a foreign table", foreign_sym.peer_bases()),
        ("the other world's heap table", theirs.heap_bases()),
    ] {
        foreign_err(
            what,
            kernels.launch(
                symmem_kernels::symmem_table_probe,
                Grid::new(1, 1),
                (table, rank as u32, &probed),
            ),
        );
    }
    // A symmetric view of the other world (its table comes with it).
    foreign_err(
        "a foreign symmetric view",
        kernels.launch(
            symmem_kernels::symmem_put,
            Grid::new(1, 64),
            (&foreign_sym, &own, ((rank + 1) % n) as u32),
        ),
    );
    // The world's own operations refuse them too.
    foreign_err("put of a foreign source", mine.put(&dst, &foreign, 0));
    foreign_err("put into a foreign buffer", mine.put(&foreign_sym, &own, 0));
    foreign_err("get into a foreign buffer", mine.get(&foreign, &dst, 0));
    foreign_err("copy", mine.copy(&dst, &foreign));
    foreign_err("write", mine.write(&foreign, 0, &[1u8]));
    foreign_err("fill_zero", mine.fill_zero(&foreign));
    foreign_err("read", mine.read(&foreign).map(drop));
    foreign_err("read_peer", mine.read_peer(&foreign_sym, 0).map(drop));
    foreign_err("read_table", mine.read_table(theirs.heap_bases()).map(drop));
    // Nothing was written anywhere.
    mine.barrier()?;
    theirs.barrier()?;
    assert_eq!(mine.read(&dst)?, vec![0; 64]);
    assert_eq!(theirs.read(&foreign_sym)?, vec![0; 64]);
    assert_eq!(theirs.read(&foreign)?, vec![9; 64]);
    // Every rank has read before any rank writes into a peer's copy.
    mine.barrier()?;
    // The same launches with this world's own handles go through.
    kernels.launch(
        symmem_kernels::symmem_put,
        Grid::new(1, 64),
        (&dst, &own, ((rank + 1) % n) as u32),
    )?;
    mine.barrier()?;
    assert_eq!(mine.read(&dst)?, vec![7; 64]);
    mine.barrier()?;
    theirs.barrier()
}

/// Launches `symmem_table_probe` with `table`, after which `symmem_put` of `source` into
/// rank `to`'s copy of `dst` (whose own table the view carries): the probe is the launch
/// that passes `table` as such, and is refused when it is.
fn put_through(
    world: &W,
    dst: &SymSlice<'_, u8, Cpu>,
    source: &DeviceBuffer<u8, Cpu>,
    table: &PeerBases,
    to: usize,
) -> symmem::Result<()> {
    let probed = world.device_zeros::<u64>(3)?;
    world.kernels().launch(
        symmem_kernels::symmem_table_probe,
        Grid::new(1, 1),
        (table, to as u32, &probed),
    )?;
    let [len, rank, entry] = world.read(&probed)?[..] else {
        unreachable!("three words")
    };
    assert_eq!(
        (len, rank),
        (table.entries().len() as u64, world.rank() as u64)
    );
    assert_eq!(entry, table.entries()[to]);
    world.kernels().launch(
        symmem_kernels::symmem_put,
        Grid::new(1, 64),
        (dst, source, to as u32),
    )
}

/// A kernel launched with the peer table of a buffer (or an external table) this rank
/// has dropped: `TableDropped`, though the memory is still held (no barrier has released
/// it), for the table returned with the buffer and for a clone made before the drop.
#[test]
fn a_dropped_buffer_table_is_refused() {
    run(2, |world| {
        let (rank, n) = (world.rank(), world.world_size());
        let to = (rank + 1) % n;
        let from = (rank + n - 1) % n;
        let source = world.device_from_slice(&[rank as u8 + 1; 256])?;
        let (buffer, returned) = world.allocate_symmetric::<u8>(256)?;
        // Another heap buffer: the heap tables translate its addresses too, so a put
        // through the dropped buffer's table could only ever land here.
        let spare = world.zeros::<u8>(256)?;
        let rendezvous = Rendezvous::new(world.device_zeros::<u8>(256)?)?;
        let entries = rendezvous.table().entries().to_vec();
        // SAFETY: the rendezvous' own table (256 bytes on every rank), which outlives the
        // external table.
        let external =
            unsafe { ExternalTable::<u8, _>::new(&world, entries[rank], 256, &entries)? };
        world.barrier()?;
        // Live: every table is usable.
        put_through(&world, &buffer.as_slice(), &source, buffer.peer_bases(), to)?;
        put_through(
            &world,
            &external.as_sym_slice(),
            &source,
            external.table(),
            to,
        )?;
        world.barrier()?;
        assert_eq!(world.read(&buffer)?, vec![from as u8 + 1; 256]);
        assert_eq!(world.read(&rendezvous)?, vec![from as u8 + 1; 256]);
        world.barrier()?;
        let cloned = buffer.peer_bases().clone();
        drop(buffer);
        for (what, table) in [("a clone", &cloned), ("the table returned", &returned)] {
            let r = put_through(&world, &spare.as_slice(), &source, table, to);
            assert!(
                matches!(r, Err(Error::TableDropped)),
                "rank {rank}, {what}: {r:?}"
            );
            names(r.as_ref().unwrap_err(), &["keep it alive"]);
        }
        let external_table = external.table().clone();
        drop(external);
        let r = put_through(
            &world,
            &rendezvous.as_sym_slice(),
            &source,
            &external_table,
            to,
        );
        assert!(
            matches!(r, Err(Error::TableDropped)),
            "rank {rank}, a dropped external table: {r:?}"
        );
        // The rendezvous' own table is still live, and the heap's is never dropped.
        put_through(
            &world,
            &rendezvous.as_sym_slice(),
            &source,
            rendezvous.table(),
            to,
        )?;
        put_through(&world, &spare.as_slice(), &source, world.heap_bases(), to)?;
        world.barrier()?;
        assert_eq!(world.read(&spare)?, vec![from as u8 + 1; 256]);
        drop(rendezvous);
        world.barrier()
    });
}

/// A kernel launched with the table of a buffer allocated since the last barrier:
/// `NotAgreed` naming its offset, before anything is launched; after a barrier the same
/// launch goes through.
#[test]
fn a_fresh_table_is_not_agreed_before_a_barrier() {
    run(2, |world| {
        let (rank, n) = (world.rank(), world.world_size());
        let source = world.device_from_slice(&[rank as u8 + 1; 128])?;
        let fresh = world.zeros::<u8>(128)?;
        let to = ((rank + 1) % n) as u32;
        let put = || {
            world.kernels().launch(
                symmem_kernels::symmem_put,
                Grid::new(1, 64),
                (&fresh, &source, to),
            )
        };
        let r = put();
        assert!(
            matches!(&r, Err(Error::NotAgreed { offset, rank: at }) if *offset == fresh.offset() && *at == rank),
            "rank {rank}: {r:?}"
        );
        names(
            r.as_ref().unwrap_err(),
            &["call World::barrier after allocating"],
        );
        // A buffer without a table in the launch needs no agreement.
        let other = world.device_zeros::<u8>(128)?;
        world.kernels().launch(
            symmem_kernels::symmem_copy,
            Grid::new(1, 64),
            (&other, &fresh),
        )?;
        world.barrier()?;
        assert_eq!(
            world.read(&fresh)?,
            vec![0; 128],
            "the refused put wrote nothing"
        );
        // Every rank has read before any rank writes into a peer's copy.
        world.barrier()?;
        put()?;
        world.barrier()?;
        assert_eq!(
            world.read(&fresh)?,
            vec![((rank + n - 1) % n) as u8 + 1; 128]
        );
        world.barrier()
    });
}

/// `put`, `get` and `copy` of views of different lengths: `LengthMismatch` naming both,
/// and nothing moves.
#[test]
fn views_of_different_lengths_are_refused() {
    run(2, |world| {
        let rank = world.rank();
        let buffer = world.zeros::<u32>(16)?;
        let source = world.device_from_slice(&[rank as u32 + 1; 16])?;
        world.barrier()?;
        let mismatch = |r: symmem::Result<()>, dst: usize, src: usize| {
            assert!(
                matches!(r, Err(Error::LengthMismatch { dst: d, src: s }) if d == dst && s == src),
                "rank {rank}: {r:?}"
            );
            names(r.as_ref().unwrap_err(), &["slice both to the same length"]);
        };
        for to in 0..2 {
            mismatch(world.put(&buffer, &source.slice(..15)?, to), 16, 15);
            mismatch(world.put(&buffer.slice(1..)?, &source, to), 15, 16);
            mismatch(world.get(&source.slice(..8)?, &buffer, to), 8, 16);
        }
        mismatch(world.copy(&buffer, &source.slice(2..)?), 16, 14);
        world.barrier()?;
        assert_eq!(world.read(&buffer)?, vec![0; 16], "nothing moved");
        assert_eq!(world.read(&source)?, vec![rank as u32 + 1; 16]);
        // Every rank has read before any rank writes into a peer's copy.
        world.barrier()?;
        world.put(&buffer, &source, 1 - rank)?;
        world.barrier()?;
        assert_eq!(world.read(&buffer)?, vec![2 - rank as u32; 16]);
        world.barrier()
    });
}

/// symmem's own code objects load on the CPU backend (to the same module as
/// `World::kernels`), and its kernels launch from the loaded module.
#[test]
fn world_load_of_symmem_kernels_on_the_cpu() {
    run(2, |world| {
        let module = world.load(&symmem::backend::code_objects::KERNELS)?;
        assert_eq!(module.crate_name(), "symmem_kernels");
        assert_eq!(world.kernels().crate_name(), "symmem_kernels");
        let dst = world.zeros::<u8>(32)?;
        let src: DeviceBuffer<u8, Cpu> = world.device_from_slice(&[5u8; 32])?;
        module.launch(symmem_kernels::symmem_copy, Grid::new(1, 8), (&dst, &src))?;
        assert_eq!(world.read(&dst)?, vec![5; 32]);
        // Loading twice is the same module.
        let again = world.load(&symmem::backend::code_objects::KERNELS)?;
        again.launch(
            symmem_kernels::symmem_copy,
            Grid::new(1, 8),
            (&dst, &world.device_zeros::<u8>(32)?),
        )?;
        assert_eq!(world.read(&dst)?, vec![0; 32]);
        world.barrier()
    });
}

/// A kernel launched through the module of another kernel crate is `WrongModule`, naming
/// the kernel, its crate and the module's, and nothing runs; through its own crate's
/// module (loaded with `World::load`, as a program loads its kernels) it runs.
#[test]
fn a_kernel_of_another_crate_is_wrong_module() {
    run(2, |world| {
        let (rank, n) = (world.rank(), world.world_size());
        let count = 16usize;
        let data = world.zeros::<u32>(n * count)?;
        let src = world.device_from_slice(&vec![rank as u32 + 1; count])?;
        world.barrier()?;
        let to = (rank + 1) % n;
        let args = (&data, &src, to as u32);
        let r = world
            .kernels()
            .launch(peer_put_kernels::ring_put, Grid::new(1, 4), args);
        assert!(
            matches!(
                r,
                Err(Error::WrongModule {
                    kernel: "ring_put",
                    kernel_crate: "peer_put_kernels",
                    module: "symmem_kernels",
                })
            ),
            "rank {rank}: {r:?}"
        );
        names(
            r.as_ref().unwrap_err(),
            &["launch it through world.load() of peer_put_kernels's code objects"],
        );
        let theirs = world.load(symmem_tests::objects::of("peer_put_kernels"))?;
        assert_eq!(theirs.crate_name(), "peer_put_kernels");
        let (dst, from) = (
            data.as_slice().local().as_bytes(),
            src.as_slice().as_bytes(),
        );
        let r = theirs.launch(symmem_kernels::symmem_copy, Grid::new(1, 4), (dst, from));
        assert!(
            matches!(
                r,
                Err(Error::WrongModule {
                    kernel: "symmem_copy",
                    kernel_crate: "symmem_kernels",
                    module: "peer_put_kernels",
                })
            ),
            "rank {rank}: {r:?}"
        );
        world.barrier()?;
        assert_eq!(world.read(&data)?, vec![0; n * count], "nothing ran");
        world.barrier()?;
        // Through its own crate's module it runs (the CPU backend runs its body).
        theirs.launch(peer_put_kernels::ring_put, Grid::new(1, 4), args)?;
        world.barrier()?;
        let got = world.read(&data)?;
        let from = (rank + n - 1) % n;
        for (i, &x) in got.iter().enumerate() {
            let want = if i / count == from {
                from as u32 + 1
            } else {
                0
            };
            assert_eq!(x, want, "rank {rank}, element {i}");
        }
        world.barrier()
    });
}
