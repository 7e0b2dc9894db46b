//! The put/get/copy bodies run on CPU threads over buffers standing in for peers.
//!
//! The peers' copies are regions of one allocation at uneven offsets (so translated
//! pointers stay inside an allocation their provenance covers, which Miri checks), each
//! at a different address: translation is real, not the identity.

use std::sync::Barrier;
use symmem_arch::host::{BlockBarrier, HostThread};
use symmem_translate::PeerBases;

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

/// A pointer handed to every thread of a launch, as a kernel argument is.
#[derive(Clone, Copy)]
struct Arg(*mut u8);
// SAFETY: the kernels partition the memory between threads; the test joins them all.
unsafe impl Sync for Arg {}
// SAFETY: as above.
unsafe impl Send for Arg {}

impl Arg {
    /// The pointer (a method, so closures capture the whole `Sync` wrapper).
    fn ptr(self) -> *mut u8 {
        self.0
    }
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
    for rank in 0..n {
        let table = PeerBases::new(&bases);
        let src = sources[rank].as_mut_ptr();
        for to in 0..n {
            let (dst, src) = (Arg(base.wrapping_add(starts[rank] + rank * len)), Arg(src));
            launch(blocks, threads, |arch| {
                // SAFETY: dst..dst+len lies in rank `rank`'s buffer, translated into
                // rank `to`'s buffer inside `region`; src is this rank's source.
                unsafe { symmem_kernels::put(arch, dst.ptr(), src.ptr(), len, table, rank, to) }
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
        let table = PeerBases::new(&bases);
        for from in 0..n {
            let src = Arg(base.wrapping_add(starts[rank] + from * len));
            let dst = Arg(out.as_mut_ptr().wrapping_add(from * len));
            launch(blocks, threads, |arch| {
                // SAFETY: as above, with rank `from`'s copy as the source.
                unsafe { symmem_kernels::get(arch, dst.ptr(), src.ptr(), len, table, rank, from) }
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
fn copy_handles_unaligned_pointers() {
    let src: Vec<u8> = (0..301).map(|i| (i * 3) as u8).collect();
    let mut dst = vec![0u8; 310];
    let d = Arg(dst.as_mut_ptr().wrapping_add(5));
    let s = Arg(src.as_ptr().wrapping_add(1).cast_mut());
    launch(1, 4, |arch| {
        // SAFETY: 300 bytes fit after both offsets; the ranges do not overlap.
        unsafe { symmem_kernels::copy(arch, d.ptr(), s.ptr(), 300) }
    });
    assert_eq!(&dst[5..305], &src[1..301]);
    assert!(dst[..5].iter().chain(&dst[305..]).all(|&b| b == 0));
}
