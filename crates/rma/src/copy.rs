//! Cooperative byte copies: the engine under every get, put and copy.
//!
//! `n` bytes move from `src` to `dst`, the work split over `lanes` participants (the
//! threads of a block, for the `_block` functions). The widest element that the
//! *relative* alignment of the two pointers allows carries the middle:
//!
//! * `dst - src` a multiple of 16: a head of up to 15 bytes brings `dst` to a 16-byte
//!   boundary, the middle moves as [`U32x4`] (one 16-byte vector load and store per
//!   element: `global_load/store_dwordx4`, `ld/st.global.v4.b32`), and a tail of up to
//!   15 bytes finishes;
//! * otherwise the same with [`U32x2`], `u32`, `u16` or single bytes, whichever is the
//!   widest that keeps both sides aligned.
//!
//! A lane with at least four elements to move loads four before storing them, so a grid
//! smaller than the data still keeps enough loads in flight. Head and tail bytes go one
//! per lane. A lane's accesses are disjoint from every other
//! lane's, so concurrent lanes never race.

use symmem_arch::Arch;
use symmem_translate::{U32x2, U32x4};

/// Bytes in the widest element: one 16-byte vector.
pub const VECTOR_BYTES: usize = core::mem::size_of::<U32x4>();

/// Lane `lane` of `lanes` does its share of copying `n` bytes from `src` to `dst`.
/// When every lane in `0..lanes` has returned, all `n` bytes have been read and written.
///
/// # Safety
/// `lane < lanes`; `src..src+n` readable and `dst..dst+n` writable; the ranges do not
/// overlap; no one else writes `dst..dst+n` (or `src..src+n`) until every lane is done.
#[inline(always)]
pub unsafe fn copy_lanes(lane: usize, lanes: usize, dst: *mut u8, src: *const u8, n: usize) {
    let rel = dst.addr().wrapping_sub(src.addr());
    // SAFETY: forwarded; each arm's element width divides `rel`, which the engine needs.
    unsafe {
        if rel.is_multiple_of(16) {
            copy_as::<U32x4>(lane, lanes, dst, src, n)
        } else if rel.is_multiple_of(8) {
            copy_as::<U32x2>(lane, lanes, dst, src, n)
        } else if rel.is_multiple_of(4) {
            copy_as::<u32>(lane, lanes, dst, src, n)
        } else if rel.is_multiple_of(2) {
            copy_as::<u16>(lane, lanes, dst, src, n)
        } else {
            bytes(lane, lanes, dst, src, n)
        }
    }
}

/// Loads in flight per round of [`copy_alone`].
const ALONE_DEPTH: usize = 16;

/// One thread copies `n` bytes from `src` to `dst`, `ALONE_DEPTH` (16) loads in flight
/// before their stores (where the pointers' relative alignment allows 16-byte vectors;
/// otherwise as [`copy_lanes`] with one lane). The off-node engine's staging where one
/// thread alone moves a request's bytes between kernel memory and the ring's host memory
/// (a get's reply, a single thread's put; a block's put is staged by warps): each
/// round costs a memory latency, so with four loads in flight a 4 KiB put's copy took
/// about 21 us of its 49 on an H100.
///
/// # Safety
/// As [`copy_lanes`] with one lane.
#[inline(always)]
pub unsafe fn copy_alone(dst: *mut u8, src: *const u8, n: usize) {
    let w = VECTOR_BYTES;
    if !dst.addr().wrapping_sub(src.addr()).is_multiple_of(w) {
        // SAFETY: forwarded.
        return unsafe { copy_lanes(0, 1, dst, src, n) };
    }
    let head = ((w - dst.addr() % w) % w).min(n);
    let rounds = (n - head) / (w * ALONE_DEPTH);
    let done = head + rounds * w * ALONE_DEPTH;
    // SAFETY: head <= n; `dst + head` and `src + head` are 16-byte aligned (`w` divides
    // `dst - src`); round r's elements end at `head + (r + 1) w ALONE_DEPTH <= done <= n`;
    // the rest is forwarded.
    unsafe {
        bytes(0, 1, dst, src, head);
        let (vd, vs) = (dst.add(head).cast::<U32x4>(), src.add(head).cast::<U32x4>());
        // Spelled out: indices the compiler sees as constants keep the batch in registers
        // (a loop over an array put it in local memory on nvptx).
        macro_rules! round {
            ($at:expr; $($i:literal)*) => {{
                let batch = [$(vs.add($at + $i).read()),*];
                $(vd.add($at + $i).write(batch[$i]);)*
            }};
        }
        for r in 0..rounds {
            round!(r * ALONE_DEPTH; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
        }
        copy_lanes(0, 1, dst.add(done), src.add(done), n - done);
    }
}

/// The thread's share of a block-cooperative copy (no barrier: see [`copy_lanes`]).
///
/// # Safety
/// As [`copy_lanes`], with the block's threads as the lanes.
#[inline(always)]
pub unsafe fn copy_block<A: Arch>(arch: &A, dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: thread_id < block_dim (Arch's contract); the rest is forwarded.
    unsafe {
        copy_lanes(
            arch.thread_id() as usize,
            arch.block_dim() as usize,
            dst,
            src,
            n,
        )
    }
}

/// Part `part` of `0..n` split into `parts` contiguous pieces whose starts are multiples
/// of `granule` (so every piece keeps the whole range's alignment). Returns
/// `(start, len)`; pieces past the end are empty.
#[inline(always)]
pub const fn share(n: usize, granule: usize, part: usize, parts: usize) -> (usize, usize) {
    let granules = n.div_ceil(granule);
    let per = granules.div_ceil(parts) * granule;
    let start = if part * per < n { part * per } else { n };
    let end = if start + per < n { start + per } else { n };
    (start, end - start)
}

/// Head bytes, `V` elements, tail bytes. `dst - src` must be a multiple of `size_of::<V>()`.
#[inline(always)]
unsafe fn copy_as<V: Copy>(lane: usize, lanes: usize, dst: *mut u8, src: *const u8, n: usize) {
    let w = core::mem::size_of::<V>();
    let head = ((w - dst.addr() % w) % w).min(n);
    let body = (n - head) / w;
    let done = head + body * w;
    // SAFETY: head <= n.
    unsafe { bytes(lane, lanes, dst, src, head) };
    // SAFETY: `dst + head` is `w`-aligned, and so is `src + head` since `w` divides
    // `dst - src`; element i < body ends at `head + (i + 1) w <= n`.
    unsafe {
        let (vd, vs) = (dst.add(head).cast::<V>(), src.add(head).cast::<V>());
        let mut i = lane;
        // Four loads in flight before their stores (the ranges do not overlap, so the
        // compiler may not reorder them itself but we may): a grid with fewer lanes than
        // elements keeps enough bytes moving to saturate memory.
        while i + 3 * lanes < body {
            let (a, b) = (vs.add(i).read(), vs.add(i + lanes).read());
            let (c, d) = (vs.add(i + 2 * lanes).read(), vs.add(i + 3 * lanes).read());
            vd.add(i).write(a);
            vd.add(i + lanes).write(b);
            vd.add(i + 2 * lanes).write(c);
            vd.add(i + 3 * lanes).write(d);
            i += 4 * lanes;
        }
        while i < body {
            vd.add(i).write(vs.add(i).read());
            i += lanes;
        }
    }
    // SAFETY: done <= n.
    unsafe { bytes(lane, lanes, dst.add(done), src.add(done), n - done) };
}

#[inline(always)]
unsafe fn bytes(lane: usize, lanes: usize, dst: *mut u8, src: *const u8, n: usize) {
    let mut i = lane;
    while i < n {
        // SAFETY: i < n.
        unsafe { dst.add(i).write(src.add(i).read()) };
        i += lanes;
    }
}
