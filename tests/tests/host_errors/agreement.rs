//! Ranks that disagree: on a collective's sizes, alignment or order, on the lengths of a
//! rendezvous or an external table, on the heap's size; each names the rank that differs
//! (the majority is right, even against rank 0).

use super::*;

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
