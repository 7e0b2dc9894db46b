//! The collectives that move bytes without reducing them: grid-level put, get, copy, put
//! with signal and barrier, then all-gather, all-to-all and broadcast.

use super::{block_share, block_sig};
use crate::Team;
use symmem_arch::Arch;

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

/// Grid-level copy between two peers: `n` bytes from symmetric `src` on rank `from` to
/// symmetric `dst` on rank `to`, each block moving its share; this rank may be either or
/// neither. No synchronisation with the peers.
///
/// # Safety
/// As [`Team::copy_nbi_block`], for the whole grid.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    from: usize,
    to: usize,
) {
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: the share lies in 0..n; forwarded from the caller.
    unsafe { team.copy_block(arch, dst.add(start), src.add(start), len, from, to) }
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
/// Returns [`Team::barrier_block`]'s answer: false when it gave up.
#[must_use = "false means peers may not be in this call: write nothing into them"]
pub unsafe fn barrier<A: Arch>(arch: &A, team: &Team<'_>, sig: *mut u64) -> bool {
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
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        for k in 0..world {
            let to = (rank + k) % world;
            team.put_nbi_block(arch, dst.add(rank * n + start), src.add(start), len, to);
        }
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
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
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
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
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
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
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        team.get_nbi_block(arch, dst.add(start), src.add(start), len, root);
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
    }
}
