//! Collectives as kernel bodies, built on [`Team`]'s operations.
//!
//! Every body is grid-level: each block of the launch takes one contiguous share of
//! the data ([`crate::copy::share`], starts 16-byte aligned relative to the buffers)
//! and synchronises with the *same block* on every other rank through its own
//! [`Team::barrier_block`] over `world` words of the signal array. So:
//!
//! * every rank must launch the same collective with the same grid and counts;
//! * `sig` is a symmetric array of [`signal_words`]`(world, blocks)` `u64`s, zero before
//!   its first use, reused by later collectives of the same team (the counters only
//!   grow).
//!
//! Each collective starts with a barrier (no rank writes into a peer's buffer, or reads
//! its source, before that peer has reached the collective) and ends with one (on
//! return this rank's result is complete and no peer still reads this rank's source).
//!
//! Reductions fold the ranks in rank order `0, 1, .., world-1`, accumulating in
//! [`Reducible::Acc`] (`f32` for [`Bf16`]) and rounding once at the end, so every rank
//! gets bit-identical results and a host reference that folds in the same order matches
//! exactly. Integer sums wrap. `Min`/`Max` on floats follow `f32::min`/`f32::max`
//! (a NaN operand is ignored).

use crate::{Bf16, Team, copy::share, signal::barrier_words};
use symmem_arch::Arch;

/// A reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (wrapping for integers).
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
    impl Sealed for crate::Bf16 {}
}

/// An element type the reductions support: `f32`, [`Bf16`], `i32`.
pub trait Reducible: Copy + sealed::Sealed {
    /// The type partial results are kept in.
    type Acc: Copy;
    /// The element as an accumulator.
    fn widen(self) -> Self::Acc;
    /// The accumulator rounded back to an element.
    fn narrow(acc: Self::Acc) -> Self;
    /// `op(a, b)`.
    fn combine(op: ReduceOp, a: Self::Acc, b: Self::Acc) -> Self::Acc;
}

impl Reducible for f32 {
    type Acc = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[inline(always)]
    fn narrow(acc: f32) -> f32 {
        acc
    }
    #[inline(always)]
    fn combine(op: ReduceOp, a: f32, b: f32) -> f32 {
        match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
}

impl Reducible for Bf16 {
    type Acc = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn narrow(acc: f32) -> Bf16 {
        Bf16::from_f32(acc)
    }
    #[inline(always)]
    fn combine(op: ReduceOp, a: f32, b: f32) -> f32 {
        f32::combine(op, a, b)
    }
}

impl Reducible for i32 {
    type Acc = i32;
    #[inline(always)]
    fn widen(self) -> i32 {
        self
    }
    #[inline(always)]
    fn narrow(acc: i32) -> i32 {
        acc
    }
    #[inline(always)]
    fn combine(op: ReduceOp, a: i32, b: i32) -> i32 {
        match op {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
}

/// Signal words a collective launched with `blocks` blocks needs: `world` per block.
pub const fn signal_words(world: usize, blocks: usize) -> usize {
    barrier_words(world) * blocks
}

/// This block's barrier words.
#[inline(always)]
fn block_sig<A: Arch>(arch: &A, team: &Team<'_>, sig: *mut u64) -> *mut u64 {
    sig.wrapping_add(arch.block_id() as usize * barrier_words(team.world()))
}

/// This block's share `(start, len)` of `n` units, where `granule` units make 16 bytes.
#[inline(always)]
fn block_share<A: Arch>(arch: &A, n: usize, granule: usize) -> (usize, usize) {
    share(
        n,
        granule,
        arch.block_id() as usize,
        arch.grid_dim() as usize,
    )
}

/// Grid-level put: `n` bytes from local `src` to symmetric `dst` on rank `to`, each
/// block moving its share. No synchronisation with the peer (see the signal forms).
///
/// # Safety
/// As [`Team::put_nbi_block`], for the whole grid.
#[inline(always)]
pub unsafe fn put<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    to: usize,
) {
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: the share lies in 0..n; forwarded from the caller.
    unsafe { team.put_block(arch, dst.add(start), src.add(start), len, to) }
}

/// Grid-level get: `n` bytes from symmetric `src` on rank `from` into local `dst`.
///
/// # Safety
/// As [`Team::get_nbi_block`], for the whole grid.
#[inline(always)]
pub unsafe fn get<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    from: usize,
) {
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: the share lies in 0..n; forwarded from the caller.
    unsafe { team.get_block(arch, dst.add(start), src.add(start), len, from) }
}

/// Grid-level put with signal: every block puts its share of `n` bytes from local
/// `src` to symmetric `dst` on rank `to`, then adds `value` to the signal at symmetric
/// `sig` on rank `to` (release). Once the signal has grown by `grid_dim * value`, all
/// `n` bytes are visible there.
///
/// # Safety
/// As [`Team::put_with_signal_block`], for the whole grid.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn put_signal_add<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    sig: *mut u64,
    value: u64,
    to: usize,
) {
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: the share lies in 0..n; forwarded from the caller.
    unsafe {
        team.put_with_signal_block(
            arch,
            dst.add(start),
            src.add(start),
            len,
            sig,
            crate::SignalOp::Add,
            value,
            to,
        )
    }
}

/// A barrier across all ranks, every block with its peers' same block.
///
/// # Safety
/// `sig` as in the module docs; every rank launches it with the same grid.
#[inline(always)]
pub unsafe fn barrier<A: Arch>(arch: &A, team: &Team<'_>, sig: *mut u64) {
    // SAFETY: forwarded from the caller.
    unsafe { team.barrier_block(arch, block_sig(arch, team, sig)) }
}

/// All-gather: rank `r`'s local `src[0..n]` (bytes) lands in every rank's symmetric
/// `dst[r*n..(r+1)*n]`. Pushes: each rank writes its share into every peer.
///
/// # Safety
/// `dst` symmetric with `world * n` writable bytes on every rank, `src` local with `n`
/// readable bytes not overlapping `dst`; `sig` and launches as in the module docs.
#[inline(always)]
pub unsafe fn all_gather<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    sig: *mut u64,
) {
    let (world, rank) = (team.world(), team.rank());
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: forwarded from the caller; shares lie inside the ranges above.
    unsafe {
        team.barrier_block(arch, sig);
        for k in 0..world {
            let to = (rank + k) % world;
            team.put_nbi_block(arch, dst.add(rank * n + start), src.add(start), len, to);
        }
        team.barrier_block(arch, sig);
    }
}

/// All-to-all: chunk `j` (bytes `j*n..(j+1)*n`) of rank `i`'s local `src` lands in
/// chunk `i` of rank `j`'s symmetric `dst`.
///
/// # Safety
/// `dst` symmetric and `src` local, each with `world * n` bytes, not overlapping;
/// `sig` and launches as in the module docs.
#[inline(always)]
pub unsafe fn all_to_all<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    sig: *mut u64,
) {
    let (world, rank) = (team.world(), team.rank());
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: forwarded from the caller; shares lie inside the ranges above.
    unsafe {
        team.barrier_block(arch, sig);
        for k in 0..world {
            let to = (rank + k) % world;
            team.put_nbi_block(
                arch,
                dst.add(rank * n + start),
                src.add(to * n + start),
                len,
                to,
            );
        }
        team.barrier_block(arch, sig);
    }
}

/// Broadcast: rank `root`'s symmetric `src[0..n]` (bytes) lands in every rank's local
/// `dst[0..n]` (the root's included). Pulls from the root.
///
/// # Safety
/// `root < world`; `src` symmetric with `n` readable bytes, `dst` local with `n`
/// writable bytes, not overlapping; `sig` and launches as in the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn broadcast<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    root: usize,
    sig: *mut u64,
) {
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: forwarded from the caller.
    unsafe {
        team.barrier_block(arch, sig);
        team.get_nbi_block(arch, dst.add(start), src.add(start), len, root);
        team.barrier_block(arch, sig);
    }
}

/// Element `i` folded over every rank's symmetric `src`, in rank order.
#[inline(always)]
unsafe fn fold<T: Reducible>(team: &Team<'_>, op: ReduceOp, src: *const T) -> T {
    // SAFETY: the caller passes a symmetric element readable on every rank.
    unsafe {
        let mut acc = team.load(src, 0).widen();
        for r in 1..team.world() {
            acc = T::combine(op, acc, team.load(src, r).widen());
        }
        T::narrow(acc)
    }
}

/// Elements per 16 bytes of `T`.
const fn granule<T>() -> usize {
    16 / core::mem::size_of::<T>()
}

/// One-shot all-reduce: every rank reads every rank's symmetric `src[0..count]` and
/// writes the reduction into its local `dst[0..count]`.
///
/// # Safety
/// `src` symmetric with `count` readable elements, `dst` local with `count` writable
/// ones, both aligned, not overlapping; `sig` and launches as in the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_one_shot<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, count, granule::<T>());
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    // SAFETY: forwarded from the caller; i < start + len <= count.
    unsafe {
        team.barrier_block(arch, sig);
        let mut i = start + tid;
        while i < start + len {
            dst.add(i).write(fold(team, op, src.add(i)));
            i += threads;
        }
        team.barrier_block(arch, sig);
    }
}

/// Two-shot all-reduce: rank `r` reduces the `r`-th piece of each block's share from
/// every rank's symmetric `src` and writes it into that piece of every rank's
/// symmetric `dst` (reduce-scatter then all-gather, fused; each element is read
/// `world` times and written `world` times in all, instead of `world²` reads).
///
/// # Safety
/// `src` and `dst` symmetric with `count` elements each, aligned, not overlapping;
/// `sig` and launches as in the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_two_shot<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    let (world, rank) = (team.world(), team.rank());
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, count, granule::<T>());
    let (piece, plen) = share(len, granule::<T>(), rank, world);
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    // SAFETY: forwarded from the caller; i < start + piece + plen <= count.
    unsafe {
        team.barrier_block(arch, sig);
        let mut i = start + piece + tid;
        while i < start + piece + plen {
            let v = fold(team, op, src.add(i));
            for k in 0..world {
                team.store(dst.add(i), v, (rank + k) % world);
            }
            i += threads;
        }
        team.barrier_block(arch, sig);
    }
}

/// Reduce-scatter: rank `r`'s local `dst[0..count]` gets the reduction over every rank
/// of chunk `r` (`src[r*count..(r+1)*count]`) of the symmetric `src`.
///
/// # Safety
/// `src` symmetric with `world * count` readable elements, `dst` local with `count`
/// writable ones, aligned, not overlapping; `sig` and launches as in the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce_scatter<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    let rank = team.rank();
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, count, granule::<T>());
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    // SAFETY: forwarded from the caller; rank * count + i < world * count.
    unsafe {
        team.barrier_block(arch, sig);
        let mut i = start + tid;
        while i < start + len {
            dst.add(i).write(fold(team, op, src.add(rank * count + i)));
            i += threads;
        }
        team.barrier_block(arch, sig);
    }
}
