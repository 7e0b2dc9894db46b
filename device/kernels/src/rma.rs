//! Point-to-point entry points over `symmem-rma`: grid-level put, get, put with signal,
//! and the cross-rank barrier. Every block moves its share (`symmem_rma::copy::share`).

use crate::Gpu;
use symmem_rma::{Team, collectives};

/// Put: `n` bytes from local `src` to symmetric `dst` on rank `to`.
///
/// # Safety
/// `bases` holds `world` entries, `rank, to < world`; see `symmem_rma::collectives::put`.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn symmem_rma_put(
    dst: *mut u8,
    src: *const u8,
    bases: *const u64,
    world: u32,
    rank: u32,
    n: u64,
    to: u32,
) {
    // SAFETY: the host passes a device-resident table of `world` entries and checked
    // ranks and ranges.
    unsafe {
        let team = Team::from_raw_parts(bases, world, rank);
        collectives::put(&Gpu, &team, dst, src, n as usize, to as usize)
    }
}

/// Get: `n` bytes from symmetric `src` on rank `from` into local `dst`.
///
/// # Safety
/// As `symmem_rma_put`; see `symmem_rma::collectives::get`.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn symmem_rma_get(
    dst: *mut u8,
    src: *const u8,
    bases: *const u64,
    world: u32,
    rank: u32,
    n: u64,
    from: u32,
) {
    // SAFETY: as in `symmem_rma_put`.
    unsafe {
        let team = Team::from_raw_parts(bases, world, rank);
        collectives::get(&Gpu, &team, dst, src, n as usize, from as usize)
    }
}

/// Put with signal: every block puts its share, then adds `value` to the symmetric
/// signal word `sig` on rank `to`; the data is complete once it grew by
/// `grid_dim * value`.
///
/// # Safety
/// As `symmem_rma_put`; `sig` symmetric and 8-aligned.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn symmem_rma_put_signal_add(
    dst: *mut u8,
    src: *const u8,
    bases: *const u64,
    world: u32,
    rank: u32,
    n: u64,
    sig: *mut u64,
    to: u32,
    value: u64,
) {
    // SAFETY: as in `symmem_rma_put`.
    unsafe {
        let team = Team::from_raw_parts(bases, world, rank);
        collectives::put_signal_add(&Gpu, &team, dst, src, n as usize, sig, value, to as usize)
    }
}

/// Barrier across all ranks over the symmetric signal array `sig`
/// (`symmem_rma::collectives::signal_words(world, grid_dim)` words, zeroed once).
///
/// # Safety
/// As `symmem_rma_put`; every rank launches it with the same grid.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn symmem_barrier_all(
    bases: *const u64,
    world: u32,
    rank: u32,
    sig: *mut u64,
) {
    // SAFETY: as in `symmem_rma_put`.
    unsafe {
        let team = Team::from_raw_parts(bases, world, rank);
        collectives::barrier(&Gpu, &team, sig)
    }
}
