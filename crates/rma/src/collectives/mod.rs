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
//! Reductions read 16 bytes per rank at a time ([`Reducible::unpack`], one vector load)
//! wherever the local addresses are 16-byte aligned (symmetric heaps' bases are, so a
//! symmetric address keeps its alignment on every rank), element by element elsewhere
//! and in the tail. They fold the ranks in rank order `0, 1, .., world-1`, accumulating
//! in [`Reducible::Acc`] (`f32` for [`bf16`] and [`struct@f16`]) and rounding once at the end, so every
//! rank gets bit-identical results and a host reference that folds in the same order
//! matches exactly. Float sums start from `+0.0` ([`Reducible::start`]), as the
//! barrier-free [`crate::lamport`] all-reduce does, so both give the same bits. Integer
//! sums wrap. `Min`/`Max` on floats follow `f32::min`/`f32::max` (`f64::min`/`f64::max`
//! for `f64`; a NaN operand is ignored).
//!
//! Every element type is plain loads, stores and arithmetic in registers (no atomic
//! arithmetic on the data), so every target serves every type: `f64` adds, mins and
//! maxes are native on sm_90 and gfx942/gfx950; `bf16` and `f16` are widened to `f32`.

mod fold;
mod movement;
mod one_shot;
mod reducible;
mod two_shot;

pub use movement::{all_gather, all_to_all, barrier, broadcast, copy, get, put, put_signal_add};
pub use one_shot::{all_reduce_one_shot, all_reduce_one_shot_from, reduce_scatter};
pub use reducible::{ReduceOp, Reducible};
pub use two_shot::{
    all_reduce_two_shot, all_reduce_two_shot_exchanging, all_reduce_two_shot_staged,
    all_reduce_two_shot_through, exchange_words,
};

use crate::{Team, copy::share, signal::barrier_words};
// The element types the documentation above names.
#[cfg(doc)]
use crate::{bf16, f16};
use symmem_arch::Arch;

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
