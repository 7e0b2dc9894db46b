//! Bad input gets the exact error variant, leaves nothing corrupted, and never hangs:
//! heap exhaustion, impossible sizes, zero sizes, bad alignments, foreign pointers,
//! ranks out of range, double frees, ranks that disagree on collective calls or heap
//! sizes, and ranks that leave early or stop answering.

use std::sync::Mutex;
use std::time::{Duration, Instant};
use symmem::backend::cpu::Cpu;
use symmem::backend::{Backend, DeviceRegion};
use symmem::bootstrap::local::LocalBootstrap;
use symmem::{Config, Error, ExternalTable, PeerBaseProvider, Rendezvous, World};

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
    symmem::launch(n, config, |_| Ok(Cpu::new()), body).expect("launch")
}

/// Runs `body` on `n` thread-ranks, failing the test on any error.
fn run<R: Send>(n: usize, body: impl Fn(W) -> symmem::Result<R> + Sync) -> Vec<R> {
    run_raw(n, &config(), body)
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.unwrap_or_else(|e| panic!("world of {n}, rank {rank}: {e} ({e:?})")))
        .collect()
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
                    requested: 524_288,
                    available: 262_144,
                    pending: 0,
                }
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("524288") && msg.contains("262144"),
            "message: {msg}"
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
        let zero = |r: symmem::Result<()>| matches!(r, Err(Error::ZeroSize));
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
        let user = world.backend().alloc_device(64)?;
        assert!(zero(Rendezvous::new(&world, user, 0).map(drop)));
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
                Err(Error::BadAlignment { .. } | Error::Unsupported(_)) => {}
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
        let user = world.backend().alloc_device(4096)?;
        not_symmetric(user.base());
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
        let source = world.backend().alloc_device(64)?;
        world.backend().upload(source.base(), &[0xFF; 64])?;
        let out = |r: symmem::Result<()>, rank: usize| {
            assert!(
                matches!(r, Err(Error::RankOutOfRange { rank: a, world: b }) if a == rank && b == n),
                "{r:?}"
            );
        };
        for bad in [n, n + 1, usize::MAX] {
            out(world.put(&buffer, 0, source.base(), 16, bad), bad);
            out(world.get(source.base(), &buffer, 0, 16, bad), bad);
            out(world.translate(buffer.ptr(), bad).map(drop), bad);
        }
        world.barrier()?;
        assert_eq!(
            world.read(&buffer)?,
            vec![0; 16],
            "a refused put wrote nothing"
        );
        // Element ranges outside the buffer are refused too.
        let r = world.put(&buffer, 10, source.base(), 7, 0);
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
        let r = world.get(source.base(), &buffer, usize::MAX, 2, 0);
        assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
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
    let r = symmem::launch(0, &config(), |_| Ok(Cpu::new()), |_| Ok(()));
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
            matches!(&r, Err(Error::CollectiveMismatch { ranks, .. }) if ranks == &[diverging]),
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
        let user = world.backend().alloc_device(8192)?;
        let len = if world.rank() == 2 { 8192 } else { 4096 };
        Rendezvous::new(&world, user, len).map(drop)
    });
    assert_mismatch_everywhere(results, 2);
}

#[test]
fn collective_mismatch_on_external_table_lengths() {
    let results = run_raw(3, &config(), |world| {
        let (buffer, bases) = world.allocate_symmetric::<u8>(8192)?;
        let len = if world.rank() == 1 { 8192 } else { 4096 };
        ExternalTable::new(&world, buffer.ptr(), len, bases.entries()).map(drop)
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
            ExternalTable::new(&world, local, len, entries)
                .map(drop)
                .unwrap_err()
        };
        let err = refused(&good[..n - 1], 4096);
        assert!(
            matches!(err, Error::BadPeerTable { rank, addr: 0, .. } if rank == n - 1),
            "{err:?}"
        );
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
        }
        let table = ExternalTable::new(&world, local, 4096, &good)?;
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
            let r = ExternalTable::new(&world, buffer.ptr(), 4096, &entries).map(drop);
            if world.rank() == bad {
                assert!(matches!(r, Err(Error::BadPeerTable { .. })), "{r:?}");
            } else {
                assert!(
                    matches!(&r, Err(Error::PeerFailed { ranks }) if ranks == &[bad]),
                    "rank {}: {r:?}",
                    world.rank()
                );
            }
            // The next collective call is the same call on every rank.
            let table = ExternalTable::new(&world, buffer.ptr(), 4096, bases.entries())?;
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
        }
    }
}

#[test]
fn peer_lost_when_a_rank_returns_early() {
    let timeout = Duration::from_secs(10);
    let cfg = Config {
        heap_bytes: HEAP,
        timeout,
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
    let results = symmem::launch(
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
        let source = world.backend().alloc_device(8)?;
        world
            .backend()
            .upload(source.base(), &(rank as u64 + 100).to_le_bytes())?;
        world.barrier()?;
        for to in 0..n {
            world.put(&buffer, rank, source.base(), 1, to)?;
        }
        world.barrier()?;
        assert_eq!(
            world.read(&buffer)?,
            (0..n as u64).map(|r| r + 100).collect::<Vec<_>>()
        );
        world.barrier()
    });
}
