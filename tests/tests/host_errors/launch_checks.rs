//! The launch path's checks on the handles it is given: another world's, a dropped
//! object's table, a table not yet agreed on, views of different lengths, a kernel of
//! another crate.

use super::*;

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
