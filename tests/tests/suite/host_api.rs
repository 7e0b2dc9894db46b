//! Every host API call at world sizes 1, 2, 3, 4 and 8, ranks as threads on the
//! backend under test (`super::TestBackend`; see `suite_cpu.rs`, `suite_cuda.rs`): peer tables, heap bases, translation, contents of `zeros`/`full`/
//! `from_slice`/`empty`, translated puts and gets checked byte by byte for every
//! allocation (including ones made after frees and after a rendezvous), and one kernel
//! run over the heap provider and the rendezvous provider with the same result.

use super::TestBackend;
use bytemuck::Pod;
use symmem::backend::Backend;
use symmem::{
    AsSymSlice, Config, DeviceBuffer, ExternalTable, PeerBaseProvider, PeerBases, Rendezvous,
    SymmetricBuffer, World,
};

/// The world sizes every test runs at.
const SIZES: [usize; 5] = [1, 2, 3, 4, 8];
/// A small heap per rank, so that eight ranks stay cheap.
const HEAP: usize = 4 << 20;

type W = World<TestBackend>;
type Buf<T> = SymmetricBuffer<T, TestBackend>;

fn config() -> Config {
    Config {
        heap_bytes: HEAP,
        ..Config::default()
    }
}

/// Runs `body` on `n` thread-ranks and returns each rank's result, failing the test on
/// any error.
fn run<R: Send>(n: usize, body: impl Fn(W) -> symmem::Result<R> + Sync) -> Vec<R> {
    let results = symmem::spawn_ranks(n, &config(), super::make_backend, body).expect("launch");
    assert_eq!(results.len(), n);
    results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.unwrap_or_else(|e| panic!("world of {n}, rank {rank}: {e} ({e:?})")))
        .collect()
}

fn every_size(body: impl Fn(W) -> symmem::Result<()> + Sync) {
    for n in SIZES {
        run(n, &body);
    }
}

/// The byte rank `from` writes at byte `i` of its region in rank `to`'s copy of the
/// allocation tagged `tag`: differs between senders, receivers, allocations and along
/// the region, and is never zero.
fn pattern(from: usize, to: usize, tag: usize, i: usize) -> u8 {
    let x = i.wrapping_mul(131) ^ (i >> 8) ^ from.wrapping_mul(37) ^ to.wrapping_mul(101);
    (x.wrapping_add(tag.wrapping_mul(53)) % 251) as u8 + 1
}

/// The device copy of `table` (counts a sync: never call it inside a measured section).
fn device_table(world: &W, table: &PeerBases) -> Vec<u64> {
    world.read_table(table).expect("read_table")
}

fn le_u64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
}

fn assert_pairwise_distinct(what: &str, entries: &[u64]) {
    for (i, a) in entries.iter().enumerate() {
        for (j, b) in entries.iter().enumerate().skip(i + 1) {
            assert_ne!(a, b, "{what}: entries {i} and {j} are both {a:#x}");
        }
    }
}

/// Every invariant of one allocation's table, checked on this rank; then checks with
/// the peers that the offset is the same everywhere.
fn check_table<T: Pod>(world: &W, buffer: &Buf<T>, bases: &PeerBases) -> symmem::Result<()> {
    let (rank, n) = (world.rank(), world.world_size());
    let heap = world.heap_bases().entries();
    let offset = buffer.offset() as u64;
    assert_eq!(bases.len(), n);
    assert!(!bases.is_empty());
    assert_eq!(bases.entries()[rank], buffer.ptr(), "peer_bases[me] == ptr");
    for (r, &entry) in bases.entries().iter().enumerate() {
        assert_eq!(
            entry,
            heap[r] + offset,
            "entry {r} == heap_bases[{r}] + offset"
        );
    }
    assert_pairwise_distinct("peer_bases", bases.entries());
    assert_eq!(buffer.ptr() - heap[rank], offset);
    assert_eq!(buffer.ptr() % 256, 0, "at least 256-byte aligned");
    assert_eq!(buffer.offset() % 256, 0);
    // Every way to reach the table gives the same table.
    assert_eq!(&world.peer_bases(buffer), bases);
    assert_eq!(buffer.peer_bases(), bases);
    assert_eq!(PeerBaseProvider::table(buffer), bases);
    assert_eq!(buffer.local_ptr(), buffer.ptr());
    assert_eq!(PeerBaseProvider::byte_len(buffer), buffer.byte_len());
    assert_eq!(buffer.byte_len(), buffer.len() * size_of::<T>());
    // The device-resident copy holds the same entries.
    assert_ne!(bases.device_ptr(), 0);
    assert_eq!(device_table(world, bases), bases.entries(), "device table");
    // Same offset on every rank.
    let offsets = world.all_gather_bytes(&offset.to_le_bytes())?;
    for (r, o) in offsets.iter().enumerate() {
        assert_eq!(
            le_u64(o),
            offset,
            "rank {r}'s offset differs from rank {rank}'s"
        );
    }
    Ok(())
}

/// Every rank puts a distinct pattern into its own region of every peer's copy of
/// `buffer` (`world` regions of `buffer.len() / world` elements), barrier, checks every
/// byte it received; then every rank gets every peer's whole copy and checks every byte
/// of it; barrier. `tag` distinguishes allocations.
fn exchange<T: Pod>(world: &W, buffer: &Buf<T>, tag: usize) -> symmem::Result<()> {
    let (me, n) = (world.rank(), world.world_size());
    let elems = buffer.len() / n;
    assert!(elems > 0, "buffer too small for {n} regions");
    let region = elems * size_of::<T>();
    // One staging region per destination rank.
    let mut staged = vec![0u8; n * region];
    for (to, chunk) in staged.chunks_exact_mut(region).enumerate() {
        chunk
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = pattern(me, to, tag, i));
    }
    let source = world.device_from_slice::<T>(&from_bytes(&staged))?;
    world.barrier()?;
    for step in 0..n {
        let to = (me + step) % n;
        let src = source.slice(to * elems..(to + 1) * elems)?;
        world.put(&buffer.slice(me * elems..(me + 1) * elems)?, &src, to)?;
    }
    world.barrier()?;
    let received = world.read(buffer)?;
    let bytes = as_bytes(&received);
    for from in 0..n {
        let got = &bytes[from * region..(from + 1) * region];
        if let Some(i) = (0..region).find(|&i| got[i] != pattern(from, me, tag, i)) {
            panic!(
                "world {n}, rank {me}, tag {tag}: byte {i} from rank {from} is {}, expected {}",
                got[i],
                pattern(from, me, tag, i)
            );
        }
    }
    // Gets: every peer's whole copy, as written by everyone.
    let scratch = world.alloc::<T>(buffer.len())?;
    for step in 0..n {
        let from = (me + step) % n;
        world.get(&scratch, buffer, from)?;
        let got = world.read(&scratch)?;
        let got = as_bytes(&got);
        for writer in 0..n {
            let chunk = &got[writer * region..(writer + 1) * region];
            if let Some(i) = (0..region).find(|&i| chunk[i] != pattern(writer, from, tag, i)) {
                panic!(
                    "world {n}, rank {me}, tag {tag}: got byte {i} of rank {writer}'s region \
                     in rank {from}'s copy: {}, expected {}",
                    chunk[i],
                    pattern(writer, from, tag, i)
                );
            }
        }
    }
    // Nobody frees or reuses the memory while a peer still reads it.
    world.barrier()
}

/// `bytes` as elements of `T` (`bytes.len()` a multiple of their size).
fn from_bytes<T: Pod>(bytes: &[u8]) -> Vec<T> {
    let mut out = vec![T::zeroed(); bytes.len() / size_of::<T>()];
    bytemuck::cast_slice_mut(&mut out).copy_from_slice(bytes);
    out
}

fn as_bytes<T: Pod>(data: &[T]) -> &[u8] {
    bytemuck::cast_slice(data)
}

#[test]
fn launch_gives_each_rank_its_world() {
    if super::skip() {
        return;
    }
    for n in SIZES {
        let ranks = run(n, |world| {
            assert_eq!(world.world_size(), n);
            assert_eq!(world.backend().kind(), super::KIND);
            assert!(!world.backend().device_name().is_empty());
            assert!(world.heap_len() >= HEAP);
            assert_eq!(world.heap_len() % world.backend().heap_granularity(), 0);
            assert_eq!(world.heap_free(), world.heap_len());
            world.barrier()?;
            Ok(world.rank())
        });
        assert_eq!(
            ranks,
            (0..n).collect::<Vec<_>>(),
            "results are indexed by rank"
        );
    }
}

#[test]
fn heap_bases_are_distinct_and_device_resident() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let (rank, n) = (world.rank(), world.world_size());
        let bases = world.heap_bases();
        assert_eq!(bases.len(), n);
        assert_pairwise_distinct("heap_bases", bases.entries());
        assert_eq!(device_table(&world, bases), bases.entries());
        // Mappings do not overlap: each heap is at least heap_len long.
        let mut sorted = bases.entries().to_vec();
        sorted.sort_unstable();
        for w in sorted.windows(2) {
            assert!(
                w[1] - w[0] >= world.heap_len() as u64,
                "overlapping heap mappings"
            );
        }
        // Each rank's mapping addresses are its own, not the peers'.
        // (All ranks share this address space, so every mapping has an address of its own.)
        let all = world.all_gather_bytes(&bases.entries()[rank].to_le_bytes())?;
        for (r, own) in all.iter().enumerate().filter(|&(r, _)| r != rank) {
            assert_ne!(
                bases.entries()[r],
                le_u64(own),
                "rank {r}'s heap at its own address"
            );
        }
        world.barrier()
    });
}

#[test]
fn allocate_symmetric_table_invariant() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let n = world.world_size();
        let (a, ta) = world.allocate_symmetric::<u8>(1)?;
        check_table(&world, &a, &ta)?;
        let (b, tb) = world.allocate_symmetric::<u64>(1000)?;
        check_table(&world, &b, &tb)?;
        let (c, tc) = world.allocate_aligned::<u32>(77, 4096)?;
        assert_eq!(c.offset() % 4096, 0);
        assert_eq!(c.ptr() % 4096, 0);
        check_table(&world, &c, &tc)?;
        let (d, td) = world.allocate_symmetric::<[u16; 3]>(n * 5)?;
        check_table(&world, &d, &td)?;
        // Four live allocations, pairwise disjoint.
        let mut ranges = [
            (a.offset(), a.byte_len()),
            (b.offset(), b.byte_len()),
            (c.offset(), c.byte_len()),
            (d.offset(), d.byte_len()),
        ];
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {ranges:?}");
        }
        // Tables of live allocations do not share device memory.
        let tables = [
            ta.device_ptr(),
            tb.device_ptr(),
            tc.device_ptr(),
            td.device_ptr(),
        ];
        assert_pairwise_distinct("table device pointers", &tables);
        world.barrier()
    });
}

#[test]
fn offsets_are_identical_across_ranks_through_frees() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let rank = world.rank();
        let mut live = Vec::new();
        // A deterministic mix of sizes, alignments and frees (each released by a barrier).
        for step in 0..40usize {
            if step % 3 == 2 && !live.is_empty() {
                let victim = (step * 7) % live.len();
                drop(live.swap_remove(victim));
                world.barrier()?;
                continue;
            }
            let len = 1 + (step * 977) % 20_000;
            let align = 1usize << (step % 14);
            let (buffer, bases) = world.allocate_aligned::<u8>(len, align)?;
            assert_eq!(buffer.offset() % align.max(256), 0);
            assert_eq!(bases.entries()[rank], buffer.ptr());
            live.push(buffer);
        }
        let offsets: Vec<u8> = live
            .iter()
            .flat_map(|b| (b.offset() as u64).to_le_bytes())
            .collect();
        let all = world.all_gather_bytes(&offsets)?;
        assert!(
            all.iter().all(|o| *o == offsets),
            "offset sequences differ across ranks"
        );
        drop(live);
        world.barrier()?;
        assert_eq!(
            world.heap_free(),
            world.heap_len(),
            "everything freed and coalesced"
        );
        world.barrier()
    });
}

#[test]
fn allocation_makes_no_device_to_host_sync() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let backend = world.backend();
        let before = backend.device_to_host_syncs();
        let mut tables = Vec::new();
        for i in 0..200usize {
            let (buffer, bases) = world.allocate_symmetric::<u32>(1 + i * 13)?;
            tables.push(bases.device_ptr());
            drop(buffer);
        }
        let (keep, _) = world.allocate_aligned::<u64>(512, 1 << 16)?;
        let e = world.empty::<u8>(100)?;
        let z = world.zeros::<u16>(100)?;
        let f = world.full::<u32>(100, 7)?;
        let s = world.from_slice(&[1u8, 2, 3])?;
        let after = backend.device_to_host_syncs();
        assert_eq!(
            after - before,
            0,
            "the allocation path synchronised with the device"
        );
        // The tables were really written: check the last ones (this syncs, on purpose).
        assert_eq!(
            device_table(&world, keep.peer_bases()),
            keep.peer_bases().entries()
        );
        assert!(
            backend.device_to_host_syncs() > after,
            "download is a counted sync"
        );
        drop((keep, e, z, f, s));
        world.barrier()
    });
}

#[test]
fn zeros_full_from_slice_empty_contents() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let (rank, n) = (world.rank(), world.world_size());
        let len = 1000 + n;
        // Dirty the memory first, so that zeros has something to clear.
        let dirty = world.full::<u8>(4 * len, 0xA5)?;
        let offset = dirty.offset();
        assert_eq!(world.read(&dirty)?, vec![0xA5; 4 * len]);
        drop(dirty);
        world.barrier()?;
        let zeros = world.zeros::<u32>(len)?;
        assert_eq!(zeros.offset(), offset, "first fit reuses the freed range");
        assert_eq!(world.read(&zeros)?, vec![0u32; len]);
        drop(zeros);
        world.barrier()?;
        // empty does not touch the memory: the zeros are still there, then a pattern.
        let empty = world.empty::<u32>(len)?;
        assert_eq!(empty.offset(), offset);
        assert_eq!(world.read(&empty)?, vec![0u32; len]);
        world.write(&empty, 0, &vec![0xDEAD_0000 + rank as u32; len])?;
        drop(empty);
        world.barrier()?;
        let empty = world.empty::<u32>(len)?;
        assert_eq!(
            world.read(&empty)?,
            vec![0xDEAD_0000 + rank as u32; len],
            "empty zeroed"
        );
        drop(empty);
        let full = world.full::<u64>(len, 0x0123_4567_89AB_CDEF ^ rank as u64)?;
        assert_eq!(full.len(), len);
        assert_eq!(
            world.read(&full)?,
            vec![0x0123_4567_89AB_CDEF ^ rank as u64; len]
        );
        let data: Vec<u16> = (0..len).map(|i| (i * 3 + rank * 1000) as u16).collect();
        let slice = world.from_slice(&data)?;
        assert_eq!(slice.len(), data.len());
        assert_eq!(
            world.read(&slice)?,
            data,
            "from_slice holds this rank's own data"
        );
        // write at an element offset.
        world.write(&slice, 10, &[9, 8, 7])?;
        let mut expected = data.clone();
        expected[10..13].copy_from_slice(&[9, 8, 7]);
        assert_eq!(world.read(&slice)?, expected);
        // Contents are per rank: a peer's copy holds the peer's data (a get checks it).
        let scratch = world.alloc::<u16>(slice.len())?;
        world.barrier()?;
        let peer = (rank + 1) % n;
        world.get(&scratch, &slice, peer)?;
        let got = world.read(&scratch)?;
        let mut theirs: Vec<u16> = (0..len).map(|i| (i * 3 + peer * 1000) as u16).collect();
        theirs[10..13].copy_from_slice(&[9, 8, 7]);
        assert_eq!(got, theirs);
        world.barrier()
    });
}

#[test]
fn put_get_every_byte_of_every_allocation() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let (rank, n) = (world.rank(), world.world_size());
        // Aligned regions (vector path) and odd ones (byte path), several element types.
        let (a, ta) = world.allocate_symmetric::<u8>(n * 4096)?;
        check_table(&world, &a, &ta)?;
        exchange(&world, &a, 1)?;
        let (b, tb) = world.allocate_symmetric::<u8>(n * 1003)?;
        check_table(&world, &b, &tb)?;
        exchange(&world, &b, 2)?;
        let (c, tc) = world.allocate_aligned::<u64>(n * 129, 1 << 12)?;
        check_table(&world, &c, &tc)?;
        exchange(&world, &c, 3)?;
        let (d, td) = world.allocate_symmetric::<[u16; 3]>(n * 77)?;
        check_table(&world, &d, &td)?;
        exchange(&world, &d, 4)?;
        // Free one in the middle; the next allocation reuses its range.
        let freed = b.offset();
        drop(b);
        world.barrier()?;
        let (e, te) = world.allocate_symmetric::<u32>(n * 200)?;
        assert_eq!(e.offset(), freed, "allocation after a free reuses the gap");
        check_table(&world, &e, &te)?;
        exchange(&world, &e, 5)?;
        // A rendezvous in between: heap allocations keep working after it.
        let user = world.alloc::<u8>(64 * 1024)?;
        let user_base = user.ptr();
        let rendezvous = Rendezvous::new(user)?;
        assert_eq!(rendezvous.table().entries()[rank], user_base);
        let (f, tf) = world.allocate_symmetric::<u8>(n * 333)?;
        check_table(&world, &f, &tf)?;
        exchange(&world, &f, 6)?;
        drop(rendezvous);
        let g = world.zeros::<u64>(n * 64)?;
        let tg = g.peer_bases().clone();
        check_table(&world, &g, &tg)?;
        exchange(&world, &g, 7)?;
        // Older allocations are still intact and still work after all that.
        exchange(&world, &a, 8)?;
        exchange(&world, &c, 9)?;
        drop((a, c, d, e, f, g));
        world.barrier()
    });
}

#[test]
fn largest_payload_one_mib_plus_three() {
    if super::skip() {
        return;
    }
    for n in [2, 3] {
        run(n, |world| {
            let (buffer, bases) = world.allocate_symmetric::<u8>(n * ((1 << 20) + 3))?;
            check_table(&world, &buffer, &bases)?;
            exchange(&world, &buffer, 11)
        });
    }
}

#[test]
fn put_and_get_at_element_offsets() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let (rank, n) = (world.rank(), world.world_size());
        let buffer = world.zeros::<u32>(64 * n)?;
        let words = [rank as u32 + 1, 0xABCD, 0x1234_5678 ^ rank as u32];
        let source = world.device_from_slice(&words)?;
        world.barrier()?;
        // Three words at element 64*me + 5 of every peer.
        let at = 64 * rank + 5;
        for to in 0..n {
            world.put(&buffer.slice(at..at + 3)?, &source, to)?;
        }
        world.barrier()?;
        let got = world.read(&buffer)?;
        for from in 0..n {
            let region = &got[64 * from..64 * (from + 1)];
            let theirs = [from as u32 + 1, 0xABCD, 0x1234_5678 ^ from as u32];
            assert_eq!(&region[5..8], &theirs);
            assert!(
                region[..5].iter().chain(&region[8..]).all(|&w| w == 0),
                "put wrote outside"
            );
        }
        // A one-element get from the last element of each peer's copy.
        let scratch = world.alloc::<u32>(1)?;
        for from in 0..n {
            let at = 64 * from + 7;
            world.get(&scratch, &buffer.slice(at..at + 1)?, from)?;
            assert_eq!(world.read(&scratch)?, [0x1234_5678 ^ from as u32]);
        }
        world.barrier()
    });
}

/// The safe put kernel (`SymViewMut::put_from`, which reads each thread's first vector
/// before the peer table) writes exactly its bytes into the peer's copy, whatever the
/// grid (a thread with no vector, one, or several), the alignment (16-aligned or not)
/// and the tail; a rank out of range writes nothing.
#[test]
fn safe_put_kernel_writes_exactly_its_bytes_on_any_grid() {
    if super::skip() {
        return;
    }
    use symmem::Grid;
    run(2, |world| {
        let (me, n) = (world.rank(), world.world_size());
        let to = (me + 1) % n;
        let bytes: Vec<u8> = (0..1100u32).map(|i| (i * 7 + 1) as u8).collect();
        let source = world.device_from_slice(&bytes)?;
        let dst = world.zeros::<u8>(1200)?;
        for grid in [
            Grid::new(1, 1),
            Grid::new(1, 7),
            Grid::new(3, 32),
            Grid::new(2, 256),
        ] {
            for (at, len) in [(0, 1), (0, 17), (16, 1000), (3, 15), (3, 1001), (32, 16)] {
                world.fill_zero(&dst)?;
                world.barrier()?;
                world.kernels().launch(
                    symmem_kernels::symmem_put,
                    grid,
                    (&dst.slice(at..at + len)?, &source.slice(..len)?, to as u32),
                )?;
                // A rank out of range: nothing, anywhere.
                world.kernels().launch(
                    symmem_kernels::symmem_put,
                    grid,
                    (&dst.slice(..)?, &source.slice(..)?, n as u32),
                )?;
                world.barrier()?;
                let got = world.read(&dst)?;
                let mut want = vec![0u8; 1200];
                want[at..at + len].copy_from_slice(&bytes[..len]);
                assert!(got == want, "{grid:?}, {len} bytes at {at}: wrong bytes");
                world.barrier()?;
            }
        }
        Ok(())
    });
}

#[test]
fn is_symmetric_inside_and_outside() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let (rank, n) = (world.rank(), world.world_size());
        let heap = world.heap_bases().entries()[rank];
        assert!(!world.is_symmetric(heap), "nothing allocated yet");
        let (a, ta) = world.allocate_symmetric::<u8>(1024)?;
        let (b, tb) = world.allocate_symmetric::<u64>(100)?;
        let end = b.ptr() + b.byte_len() as u64;
        for p in [a.ptr(), a.ptr() + 1, a.ptr() + 1023, b.ptr(), end - 1] {
            assert!(world.is_symmetric(p), "{p:#x} is inside a live allocation");
        }
        // b is the last allocation and 800 bytes long: its rounded range ends at 1024.
        let rounded_end = b.ptr() + 1024;
        for p in [
            heap - 1,
            rounded_end,
            heap + world.heap_len() as u64,
            0,
            u64::MAX,
        ] {
            assert!(!world.is_symmetric(p), "{p:#x} is outside every allocation");
        }
        let local = 0u64;
        assert!(
            !world.is_symmetric(std::ptr::from_ref(&local).addr() as u64),
            "a stack address"
        );
        for r in (0..n).filter(|&r| r != rank) {
            for p in [
                ta.entries()[r],
                tb.entries()[r],
                world.heap_bases().entries()[r],
            ] {
                assert!(
                    !world.is_symmetric(p),
                    "a peer's mapped address {p:#x} is not local"
                );
            }
        }
        let freed = b.ptr();
        drop(b);
        assert!(
            !world.is_symmetric(freed),
            "a freed allocation is not symmetric"
        );
        drop(a);
        world.barrier()
    });
}

#[test]
fn is_symmetric_false_one_past_the_end() {
    if super::skip() {
        return;
    }
    // One past the last element of a buffer whose length is not a multiple of the
    // 256-byte granule is outside the buffer, even though the allocator rounded it up.
    every_size(|world| {
        let (buffer, _) = world.allocate_symmetric::<u8>(1000)?;
        let end = buffer.ptr() + buffer.byte_len() as u64;
        assert!(world.is_symmetric(end - 1));
        assert!(
            !world.is_symmetric(end),
            "one past the end of a 1000-byte buffer"
        );
        assert!(
            world.translate(end, 0).is_err(),
            "translate one past the end"
        );
        world.barrier()
    });
}

#[test]
fn translate_equals_heap_base_arithmetic() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let (rank, n) = (world.rank(), world.world_size());
        let heap = world.heap_bases().entries().to_vec();
        let (first, _) = world.allocate_symmetric::<u8>(5000)?;
        let (buffer, bases) = world.allocate_aligned::<u32>(3000, 1 << 13)?;
        for (buf_ptr, buf_off, bytes) in [
            (first.ptr(), first.offset(), first.byte_len()),
            (buffer.ptr(), buffer.offset(), buffer.byte_len()),
        ] {
            for k in [0, 1, 255, 256, bytes as u64 / 2, bytes as u64 - 1] {
                for (to, &h) in heap.iter().enumerate() {
                    let remote = world.translate(buf_ptr + k, to)?;
                    assert_eq!(remote, h + buf_off as u64 + k);
                    assert_eq!(
                        remote,
                        buf_ptr + k - heap[rank] + heap[to],
                        "p - b[cur] + b[to]"
                    );
                }
            }
        }
        for (to, &entry) in bases.entries().iter().enumerate() {
            assert_eq!(world.translate(buffer.ptr(), to)?, entry);
        }
        assert_eq!(
            world.translate(buffer.ptr(), rank)?,
            buffer.ptr(),
            "identity on self"
        );
        assert!(n == bases.len());
        world.barrier()
    });
}

#[test]
fn all_gather_bytes_of_different_lengths() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let rank = world.rank();
        let mine: Vec<u8> = (0..rank * 3).map(|i| (i + rank) as u8).collect();
        let all = world.all_gather_bytes(&mine)?;
        assert_eq!(all.len(), world.world_size());
        for (r, got) in all.iter().enumerate() {
            assert_eq!(*got, (0..r * 3).map(|i| (i + r) as u8).collect::<Vec<_>>());
        }
        world.barrier()
    });
}

#[test]
fn into_raw_and_free_raw() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let (buffer, _) = world.allocate_symmetric::<u8>(3000)?;
        let offset = buffer.offset();
        let used = world.heap_len() - world.heap_free();
        assert_eq!(used, 3072, "3000 bytes round up to 3072");
        let raw = buffer.into_raw();
        assert_eq!(
            world.heap_len() - world.heap_free(),
            3072,
            "into_raw does not free"
        );
        world.free_raw(raw)?;
        assert_eq!(
            world.heap_len() - world.heap_free(),
            3072,
            "held until a barrier"
        );
        world.barrier()?;
        assert_eq!(world.heap_free(), world.heap_len());
        let (again, _) = world.allocate_symmetric::<u8>(3000)?;
        assert_eq!(again.offset(), offset);
        drop(again);
        world.barrier()
    });
}

/// What this rank puts with [`put_through`]: region `to` (of `region` bytes) holds the
/// pattern for rank `to`, for every rank.
fn put_source(
    world: &W,
    tag: usize,
    region: usize,
) -> symmem::Result<DeviceBuffer<u8, TestBackend>> {
    let (me, bytes) = (world.rank(), world.world_size() * region);
    let staged: Vec<u8> = (0..bytes)
        .map(|i| pattern(me, i / region, tag, i % region))
        .collect();
    world.device_from_slice(&staged)
}

/// Asserts that `got` (this rank's copy after every rank's [`put_through`]) holds, in
/// region `from`, the pattern rank `from` sent here.
fn assert_received(world: &W, got: &[u8], tag: usize, region: usize) {
    let me = world.rank();
    for (i, &b) in got.iter().enumerate() {
        assert_eq!(b, pattern(i / region, me, tag, i % region), "byte {i}");
    }
}

/// The put kernel (`symmem_put`, launched as a user launches a kernel) over any
/// provider's table: this rank's region of every peer's copy.
fn put_through(
    world: &W,
    provider: &(impl AsSymSlice<u8, TestBackend> + PeerBaseProvider),
    source: &DeviceBuffer<u8, TestBackend>,
    region: usize,
) -> symmem::Result<()> {
    let (me, n) = (world.rank(), world.world_size());
    assert_eq!(provider.table().entries()[me], provider.local_ptr());
    let shared = provider.as_sym_slice();
    assert_eq!(shared.ptr(), provider.local_ptr());
    assert_eq!(shared.peer_bases(), provider.table());
    let grid = world.backend().grid_for_bytes(region);
    for step in 0..n {
        let to = (me + step) % n;
        world.kernels().launch(
            symmem_kernels::symmem_put,
            grid,
            (
                &shared.slice(me * region..(me + 1) * region)?,
                &source.slice(to * region..(to + 1) * region)?,
                to as u32,
            ),
        )?;
    }
    Ok(())
}

#[test]
fn same_kernel_over_heap_and_rendezvous() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let (me, n) = (world.rank(), world.world_size());
        for (tag, region) in [(20, 4096usize), (21, 1001)] {
            let bytes = n * region;
            let source = put_source(&world, tag, region)?;

            let heap = world.zeros::<u8>(bytes)?;
            let user = world.device_zeros::<u8>(bytes)?;
            let user_base = user.ptr();
            let rendezvous = Rendezvous::new(user)?;
            let table = rendezvous.table();
            assert_eq!(table.len(), n);
            assert_eq!(
                table.entries()[me],
                user_base,
                "bases[cur] == the user's pointer"
            );
            assert_eq!(rendezvous.local_ptr(), user_base);
            assert_eq!(rendezvous.byte_len(), bytes);
            assert_pairwise_distinct("rendezvous table", table.entries());
            assert_eq!(device_table(&world, table), table.entries());
            for &entry in table.entries() {
                assert!(
                    !world.is_symmetric(entry),
                    "rendezvous memory is not in the heap"
                );
            }
            world.barrier()?;
            put_through(&world, &heap, &source, region)?;
            put_through(&world, &rendezvous, &source, region)?;
            world.barrier()?;
            let over_heap = world.read(&heap)?;
            let over_rendezvous = world.read(&rendezvous)?;
            assert!(
                over_heap == over_rendezvous,
                "the two providers gave different results"
            );
            assert_received(&world, &over_heap, tag, region);
            world.barrier()?;
            // The mappings go before the user's memory does (at the next barrier).
            drop(rendezvous);
        }
        world.barrier()
    });
}

/// A view of part of a rendezvous translates at its offset: 16 bytes at `16 * me` of
/// the next rank's allocation, launched with the rendezvous' table.
#[test]
fn rendezvous_slice_at_an_offset() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let (me, n) = (world.rank(), world.world_size());
        let user = world.device_zeros::<u8>(4096)?;
        let user_base = user.ptr();
        let rendezvous = Rendezvous::new(user)?;
        assert_eq!(rendezvous.byte_len(), 4096);
        assert_eq!(rendezvous.len(), 4096);
        let source = world.device_from_slice(&[me as u8 + 1; 16])?;
        world.barrier()?;
        let to = (me + 1) % n;
        let dst = rendezvous.slice(16 * me..16 * (me + 1))?;
        assert_eq!(dst.ptr(), user_base + 16 * me as u64);
        assert_eq!(
            dst.peer_ptr(to)?,
            rendezvous.table().entries()[to] + 16 * me as u64
        );
        world.kernels().launch(
            symmem_kernels::symmem_put,
            world.backend().grid_for_bytes(16),
            (&dst, &source, to as u32),
        )?;
        world.barrier()?;
        let from = (me + n - 1) % n;
        let got = world.read(&rendezvous.slice(16 * from..16 * (from + 1))?)?;
        assert_eq!(got, [from as u8 + 1; 16]);
        // Nothing else of this rank's allocation was written.
        let all = world.read(&rendezvous)?;
        assert!(
            all.iter()
                .enumerate()
                .all(|(i, &b)| (16 * from..16 * (from + 1)).contains(&i) || b == 0),
            "a put wrote outside its slice"
        );
        world.barrier()
    });
}

/// A table that some other library built (here: the addresses of a rendezvous' mappings,
/// handed over as plain numbers, as NVSHMEM's `nvshmem_ptr` or PyTorch symmetric memory's
/// `buffer_ptrs` would be) drives the same put kernel once symmem has checked and
/// uploaded it.
#[test]
fn external_table_drives_the_same_kernel() {
    if super::skip() {
        return;
    }
    every_size(|world| {
        let n = world.world_size();
        let (tag, region) = (30, 3001usize);
        let bytes = n * region;
        let source = put_source(&world, tag, region)?;
        let user = world.device_zeros::<u8>(bytes)?;
        let user_base = user.ptr();
        let rendezvous = Rendezvous::new(user)?;
        let addresses: Vec<u64> = rendezvous.table().entries().to_vec();
        // SAFETY: the addresses are the rendezvous' allocation on every rank, `bytes` bytes
        // each, mapped in this process while the rendezvous lives; it is dropped after the
        // table, with a barrier between.
        let external =
            unsafe { ExternalTable::<u8, _>::new(&world, user_base, bytes, &addresses)? };
        assert_eq!(external.table().entries(), &addresses[..]);
        assert_eq!(external.local_ptr(), user_base);
        assert_ne!(
            external.table().device_ptr(),
            rendezvous.table().device_ptr(),
            "an upload of its own"
        );
        assert_eq!(device_table(&world, external.table()), addresses);
        assert_eq!(n, addresses.len());
        world.barrier()?;
        put_through(&world, &external, &source, region)?;
        world.barrier()?;
        let got = world.read(&external)?;
        assert_eq!(got, world.read(&rendezvous)?, "the same memory");
        assert_received(&world, &got, tag, region);
        world.barrier()?;
        drop(external);
        drop(rendezvous);
        world.barrier()
    });
}
