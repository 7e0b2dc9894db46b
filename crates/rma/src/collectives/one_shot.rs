//! The one-shot reductions: every rank reads every rank's symmetric source and reduces
//! into its own local `dst` ([`all_reduce_one_shot`], [`all_reduce_one_shot_from`] through
//! another table, and [`reduce_scatter`], which reduces only this rank's chunk).

use super::fold::{all_aligned, fold_my_elements, granule};
use super::{ReduceOp, Reducible, block_share, block_sig};
use crate::Team;
use crate::team::write_each;
use symmem_arch::Arch;

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
    // SAFETY: forwarded; the team's own table translates `src` for every rank.
    unsafe { all_reduce_one_shot_from(arch, team, team, op, dst, src, count, sig) }
}

/// [`all_reduce_one_shot`] reading rank `r`'s `src` where table `sources` translates it,
/// while `team` synchronises: the all-reduce across nodes, whose `sources` point at local
/// copies of the off-node ranks' `src` (fetched in bulk through the engine before the
/// launch) and at the on-node ranks' own.
///
/// # Safety
/// As [`all_reduce_one_shot`]; `sources` has `team`'s rank and world size, and
/// translates `src` to `count` readable elements for every rank, 16-byte aligned where
/// `src` is, unchanged until every rank has passed the closing barrier.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_one_shot_from<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    sources: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, count, granule::<T>());
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    let aligned = all_aligned([dst.addr(), src.addr()]);
    // SAFETY: forwarded from the caller; every index lies in start..start + len <= count,
    // and vectors are used only when both sides are 16-byte aligned.
    unsafe {
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        fold_my_elements(
            (tid, threads),
            sources,
            op,
            src,
            (start, len),
            aligned,
            |batch| write_each(dst, batch),
            |i, x| dst.add(i).write(x),
        );
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
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
    let chunk = src.wrapping_add(rank * count);
    let aligned = all_aligned([dst.addr(), chunk.addr()]);
    // SAFETY: forwarded from the caller; rank * count + i < world * count, and vectors
    // are used only when both sides are 16-byte aligned.
    unsafe {
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        fold_my_elements(
            (tid, threads),
            team,
            op,
            chunk,
            (start, len),
            aligned,
            |batch| write_each(dst, batch),
            |i, x| dst.add(i).write(x),
        );
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
    }
}
