//! The reductions' per-thread loops: a thread's elements folded over every rank, 16-byte
//! vectors [`IN_FLIGHT`] at a time and then element by element, and copied between local
//! buffers (the staged two-shot's copies in and out).

use super::{ReduceOp, Reducible};
use crate::team::write_each;
use crate::{Team, U32x4};

/// Element `i` folded over every rank's symmetric `src`, in rank order.
#[inline(always)]
unsafe fn fold<T: Reducible>(team: &Team<'_>, op: ReduceOp, src: *const T) -> T {
    // SAFETY: the caller passes a symmetric element readable on every rank.
    unsafe {
        let mut acc = T::start(op, team.load(src, 0).widen());
        for r in 1..team.world() {
            acc = T::combine(op, acc, team.load(src, r).widen());
        }
        T::narrow(acc)
    }
}

/// Elements per 16 bytes of `T`.
pub(super) const fn granule<T>() -> usize {
    16 / core::mem::size_of::<T>()
}

/// Vectors a thread folds at once: their loads from one rank are all in flight
/// together. One at a time, a thread waits a whole load latency per rank and vector,
/// which below a few MiB (a collective's few blocks) bounded the reductions' time. Four,
/// not eight: eight `bf16` accumulators of eight `f32` lanes each spilled to scratch on
/// gfx942 (the codegen test showed), and four keep every type in registers.
const IN_FLIGHT: usize = 4;

/// `[f(0), f(1), .., f(IN_FLIGHT - 1)]` written out: straight-line code, where a loop
/// (or `array::map`) over a batch of eight-lane `bf16`/`f16` accumulators stayed a loop
/// and kept them in local memory (the PTX showed).
macro_rules! batch {
    ($f:expr) => {{
        let f = $f;
        [f(0), f(1), f(2), f(3)]
    }};
}
const _: () = assert!(IN_FLIGHT == 4, "batch! writes out IN_FLIGHT places");

/// The [`granule`] elements at each of `at` in symmetric `src` (16-byte aligned on
/// every rank) folded over every rank in rank order, one vector each: per rank, one
/// 16-byte load per vector, all issued before any is combined; the same result bit for
/// bit as [`fold`] of each element.
#[inline(always)]
unsafe fn fold_vectors<T: Reducible>(
    team: &Team<'_>,
    op: ReduceOp,
    src: *const T,
    at: [usize; IN_FLIGHT],
) -> [U32x4; IN_FLIGHT] {
    // SAFETY: the caller passes symmetric, 16-byte aligned vectors readable everywhere.
    let from = |r| unsafe { team.load_each::<T, U32x4, IN_FLIGHT>(src, &at, r) };
    let first = from(0);
    let mut acc = batch!(|u: usize| T::start_lanes(op, T::unpack(first[u])));
    for r in 1..team.world() {
        let vs = from(r);
        acc = batch!(|u: usize| T::combine_lanes(op, acc[u], T::unpack(vs[u])));
    }
    batch!(|u: usize| T::pack(acc[u]))
}

/// Folds this thread's elements of `start..start + len` (`start` a multiple of the
/// granule) over every rank's symmetric `src` and hands the results on: when
/// `aligned`, 16-byte groups of [`granule`] elements as vectors, [`IN_FLIGHT`] at a
/// time, to `vectors((at, vs, real))` (element indices and their vectors, the first
/// `real` of them this thread's: a last, partial round reloads its first vector in the
/// other places; whole arrays, not slices, so that they stay in registers);
/// the remaining elements one by one to `scalar(i, x)`. Threads stride over both.
///
/// # Safety
/// `src.add(i)` symmetric and readable on every rank for every `i` in the range, 16-byte
/// aligned everywhere when `aligned`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn fold_my_elements<T: Reducible>(
    (tid, threads): (usize, usize),
    team: &Team<'_>,
    op: ReduceOp,
    src: *const T,
    (start, len): (usize, usize),
    aligned: bool,
    mut vectors: impl FnMut((&[usize; IN_FLIGHT], &[U32x4; IN_FLIGHT], usize)),
    mut scalar: impl FnMut(usize, T),
) {
    let g = granule::<T>();
    let whole = if aligned { len / g } else { 0 };
    let mut j = tid;
    while j < whole {
        let (at, real) = batch_at::<IN_FLIGHT>(j, threads, start, whole, g);
        // SAFETY: every index is one of this thread's whole vectors (forwarded).
        let vs = unsafe { fold_vectors(team, op, src, at) };
        vectors((&at, &vs, real));
        j += IN_FLIGHT * threads;
    }
    let mut i = start + whole * g + tid;
    while i < start + len {
        // SAFETY: inside the range (forwarded).
        scalar(i, unsafe { fold(team, op, src.add(i)) });
        i += threads;
    }
}

/// The element indices of the batch of `N` whole vectors a thread starts at vector `j`
/// of `whole` (`start + v * g` for vectors `j`, `j + threads`, ..), and how many of
/// them are real: the places past the last are vector `j` again.
#[inline(always)]
fn batch_at<const N: usize>(
    j: usize,
    threads: usize,
    start: usize,
    whole: usize,
    g: usize,
) -> ([usize; N], usize) {
    let real = (whole - j).div_ceil(threads).min(N);
    let vector = |u| if u < real { j + u * threads } else { j };
    (core::array::from_fn(|u| start + vector(u) * g), real)
}

/// Vectors a thread copies at once ([`copy_my_elements`]): a copy holds no accumulators,
/// so more of its loads fit in registers than a fold's (against [`IN_FLIGHT`] on an
/// H100, the staged all-reduce went from 18.3 to 16.8 us at 1 MiB on 2 ranks, and
/// was unchanged at 256 KiB: `BENCHMARKS.md`, issue 43).
const COPY_IN_FLIGHT: usize = 16;

/// Copies this thread's elements of `start..start + len` from local `src` to local
/// `dst`: when `aligned`, 16-byte vectors, [`COPY_IN_FLIGHT`] loads before their
/// stores, then the rest element by element. Threads stride over both.
///
/// # Safety
/// `src` readable and `dst` writable over the range, not overlapping, both 16-byte
/// aligned when `aligned`.
#[inline(always)]
pub(super) unsafe fn copy_my_elements<T: Copy>(
    (tid, threads): (usize, usize),
    dst: *mut T,
    src: *const T,
    (start, len): (usize, usize),
    aligned: bool,
) {
    let g = granule::<T>();
    let whole = if aligned { len / g } else { 0 };
    let mut j = tid;
    // SAFETY: every index lies in the range (forwarded).
    unsafe {
        while j < whole {
            let (at, real) = batch_at::<COPY_IN_FLIGHT>(j, threads, start, whole, g);
            let vs: [U32x4; COPY_IN_FLIGHT] =
                core::array::from_fn(|u| src.add(at[u]).cast::<U32x4>().read());
            write_each(dst, (&at, &vs, real));
            j += COPY_IN_FLIGHT * threads;
        }
        let mut i = start + whole * g + tid;
        while i < start + len {
            dst.add(i).write(src.add(i).read());
            i += threads;
        }
    }
}

/// Whether every address is 16-byte aligned (the vector path's condition).
#[inline(always)]
pub(super) fn all_aligned<const N: usize>(addrs: [usize; N]) -> bool {
    addrs.iter().fold(0, |acc, a| acc | a) % 16 == 0
}
