//! Bad input gets the exact error variant, leaves nothing corrupted, and never hangs:
//! heap exhaustion, impossible sizes, zero sizes, bad alignments, foreign pointers,
//! ranks out of range, double frees, ranks that disagree on collective calls or heap
//! sizes, ranks that leave early or stop answering, and the launch path's checks on the
//! handles it is given (another world's, a dropped object's table, a table not yet
//! agreed on, views of different lengths, a kernel of another crate).
//!
//! Here: allocation and addressing. Disagreeing ranks: [`agreement`]; ranks that leave:
//! [`departures`]; the launch path's checks: [`launch_checks`].

use std::sync::Mutex;
use std::time::{Duration, Instant};
use symmem::backend::cpu::Cpu;
use symmem::bootstrap::local::LocalBootstrap;
use symmem::{
    AsSymSlice, Config, DeviceBuffer, Error, ExternalTable, Grid, PeerBaseProvider, PeerBases,
    Rendezvous, SymSlice, World,
};

mod agreement;
mod departures;
mod launch_checks;

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
