//! The put/get/copy kernels' bodies run on CPU threads over buffers standing in for
//! peers, as the CPU backend runs them (`Kernel::run_on_host`), with their arguments
//! lowered by hand as the host lowers a symmetric buffer, a plain one and a table.
//!
//! The peers' copies are regions of one allocation at uneven offsets (so translated
//! pointers stay inside an allocation their provenance covers, which Miri checks), each
//! at a different address: translation is real, not the identity.

use std::sync::Barrier;
use symmem_arch::host::{BlockBarrier, HostThread};

struct StdBarrier(Barrier);
impl BlockBarrier for StdBarrier {
    fn wait(&self) {
        self.0.wait();
    }
}

/// Runs `body` on `blocks` x `threads` OS threads, as a GPU launch would.
fn launch(blocks: u32, threads: u32, body: impl Fn(&HostThread<'_>) + Sync) {
    let barriers: Vec<_> = (0..blocks)
        .map(|_| StdBarrier(Barrier::new(threads as usize)))
        .collect();
    std::thread::scope(|s| {
        for (b, barrier) in barriers.iter().enumerate() {
            for t in 0..threads {
                let body = &body;
                s.spawn(move || {
                    // SAFETY: each (block, thread) once, all threads of a block running.
                    let arch = unsafe { HostThread::new(t, b as u32, threads, blocks, barrier) };
                    body(&arch);
                });
            }
        }
    });
}

/// Lowered arguments handed to every thread of a launch, as a kernel's are.
#[derive(Clone, Copy)]
struct Args<A>(A);
// SAFETY: the kernels partition the memory between threads; the test joins them all.
unsafe impl<A> Sync for Args<A> {}
// SAFETY: as above.
unsafe impl<A> Send for Args<A> {}

impl<A: Copy> Args<A> {
    /// The arguments (a method, so closures capture the whole `Sync` wrapper).
    fn get(self) -> A {
        self.0
    }
}

/// Rank `rank`'s device table of `bases`, laid out as symmem uploads one: the rank and
/// the world size, then the entries (`symmem_device::TABLE_HEADER_WORDS`).
fn table(rank: usize, bases: &[u64]) -> Vec<u64> {
    assert_eq!(symmem_device::TABLE_HEADER_WORDS, 2);
    [rank as u64, bases.len() as u64]
        .into_iter()
        .chain(bases.iter().copied())
        .collect()
}

/// The kernels' argument for a table: its first entry, with the whole table's provenance
/// (the kernel reads the header in front of it).
fn entries(table: &[u64]) -> *const u64 {
    table.as_ptr().wrapping_add(2)
}

fn pattern(rank: usize, i: usize) -> u8 {
    (i.wrapping_mul(7) ^ rank.wrapping_mul(0x5b)) as u8
}

/// World of `n` ranks with per-rank buffers of `len` bytes at uneven offsets inside one
/// allocation; each rank puts its pattern into slot `rank` of every peer, then gets every
/// peer's slot back, and every byte is checked.
fn put_get_round(n: usize, len: usize, blocks: u32, threads: u32) {
    let stride = (n * len).next_multiple_of(16) + 48;
    let starts: Vec<usize> = (0..n).rev().map(|r| r * stride + 16 * (r % 3)).collect();
    let mut region = vec![0u8; n * stride + 64];
    let mut sources: Vec<Vec<u8>> = (0..n)
        .map(|r| (0..len).map(|i| pattern(r, i)).collect())
        .collect();
    let mut gathered = vec![vec![0u8; n * len]; n];
    let base = region.as_mut_ptr();
    let bases: Vec<u64> = starts
        .iter()
        .map(|&s| base.wrapping_add(s).addr() as u64)
        .collect();
    let tables: Vec<Vec<u64>> = (0..n).map(|rank| table(rank, &bases)).collect();
    for rank in 0..n {
        let src = sources[rank].as_mut_ptr();
        // This rank's slot `rank` of the buffer, as a symmetric view; the source.
        let dst = (base.wrapping_add(starts[rank] + rank * len), len as u64);
        for to in 0..n {
            let args = Args((
                (dst.0, dst.1, entries(&tables[rank])),
                (src.cast_const(), len as u64),
                (to as u32,),
            ));
            launch(blocks, threads, |arch| {
                // SAFETY: the lowered arguments of a symmetric view inside rank `rank`'s
                // buffer (whose table is `tables[rank]`, every copy inside `region`), a
                // view of this rank's source, and a rank.
                unsafe { symmem_kernels::symmem_put.run_on_host(arch, args.get()) }
            });
        }
    }
    for (to, &start) in starts.iter().enumerate() {
        for from in 0..n {
            let got = &region[start + from * len..][..len];
            let want: Vec<u8> = (0..len).map(|i| pattern(from, i)).collect();
            assert_eq!(got, &want[..], "rank {to} slot {from} (n {n}, len {len})");
        }
    }
    for (rank, out) in gathered.iter_mut().enumerate() {
        for from in 0..n {
            let src = (
                base.wrapping_add(starts[rank] + from * len).cast_const(),
                len as u64,
            );
            let args = Args((
                (out.as_mut_ptr().wrapping_add(from * len), len as u64),
                (src.0, src.1, entries(&tables[rank])),
                (from as u32,),
            ));
            launch(blocks, threads, |arch| {
                // SAFETY: as above, with rank `from`'s copy as the source.
                unsafe { symmem_kernels::symmem_get.run_on_host(arch, args.get()) }
            });
        }
        for from in 0..n {
            let slot = &out[from * len..][..len];
            assert!(
                slot.iter().enumerate().all(|(i, &b)| b == pattern(from, i)),
                "get by {rank} from {from}"
            );
        }
    }
}

/// A rank outside the table, and a peer whose entry is 0 (another node), get nothing:
/// the put writes no byte anywhere.
#[test]
fn put_to_a_rank_it_cannot_reach_writes_nothing() {
    let mut region = vec![0u8; 256];
    let base = region.as_mut_ptr();
    let bases = [base.addr() as u64, 0];
    let tables = table(0, &bases);
    let source = [7u8; 64];
    for to in [1u32, 2, 9, u32::MAX] {
        let args = Args((
            (base, 64u64, entries(&tables)),
            (source.as_ptr(), 64u64),
            (to,),
        ));
        launch(1, 2, |arch| {
            // SAFETY: a symmetric view of 64 bytes of `region` with its table, a source.
            unsafe { symmem_kernels::symmem_put.run_on_host(arch, args.get()) }
        });
    }
    assert!(region.iter().all(|&b| b == 0));
}

#[test]
fn put_and_get_move_every_byte_between_distinct_buffers() {
    // Miri interprets every thread: keep its worlds small.
    let worlds: &[(usize, usize)] = if cfg!(miri) {
        &[(1, 17), (2, 33), (3, 48)]
    } else {
        &[(1, 17), (2, 64), (3, 1000), (4, 4095)]
    };
    for &(n, len) in worlds {
        put_get_round(n, len, 2, if cfg!(miri) { 2 } else { 3 });
    }
}

#[test]
#[cfg_attr(miri, ignore = "large")]
fn put_and_get_large_and_odd_sizes() {
    for (n, len) in [(8, 1 << 16), (5, 65_537), (4, 15), (2, 0)] {
        put_get_round(n, len, 4, 4);
    }
}

#[test]
fn copy_handles_unaligned_views_and_stops_at_the_shorter() {
    let src: Vec<u8> = (0..301).map(|i| (i * 3) as u8).collect();
    let mut dst = vec![0u8; 310];
    // 300 bytes of destination, 301 of source (one past what fits): 300 move.
    let args = Args((
        (dst.as_mut_ptr().wrapping_add(5), 300u64),
        (src.as_ptr().wrapping_add(0), 301u64),
    ));
    launch(1, 4, |arch| {
        // SAFETY: 300 bytes fit after the destination's offset, 301 in the source.
        unsafe { symmem_kernels::symmem_copy.run_on_host(arch, args.get()) }
    });
    assert_eq!(&dst[5..305], &src[..300]);
    assert!(dst[..5].iter().chain(&dst[305..]).all(|&b| b == 0));
}
