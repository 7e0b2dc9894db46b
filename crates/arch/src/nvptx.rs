//! NVIDIA GPUs through `core::arch::nvptx` and PTX `fence` instructions.

use crate::{Arch, Scope};
use core::arch::{asm, nvptx};

/// The current thread of a kernel launched on an NVIDIA GPU.
#[derive(Clone, Copy, Debug)]
pub struct Gpu;

// SAFETY: the ids are the hardware's special registers; `bar.sync 0` is the CTA barrier.
unsafe impl Arch for Gpu {
    #[inline(always)]
    fn thread_id(&self) -> u32 {
        // SAFETY: reading a special register has no preconditions in a kernel.
        unsafe { nvptx::_thread_idx_x() }
    }
    #[inline(always)]
    fn block_id(&self) -> u32 {
        // SAFETY: as above.
        unsafe { nvptx::_block_idx_x() }
    }
    #[inline(always)]
    fn block_dim(&self) -> u32 {
        // SAFETY: as above.
        unsafe { nvptx::_block_dim_x() }
    }
    #[inline(always)]
    fn grid_dim(&self) -> u32 {
        // SAFETY: as above.
        unsafe { nvptx::_grid_dim_x() }
    }
    #[inline(always)]
    fn sync_block(&self) {
        // SAFETY: kernels call this from converged control flow (a documented rule of
        // every block-cooperative function in symmem).
        unsafe { nvptx::_syncthreads() }
    }
    #[inline(always)]
    fn sync_block_release(&self, _scope: Scope) {
        // `bar.sync` orders the block's accesses before every thread's later ones, and
        // a PTX release (or `fence.sc`) at any scope after it is cumulative over them:
        // nothing to add, and nothing is (the PTX is that of `sync_block`).
        self.sync_block();
    }
    #[inline(always)]
    fn fence(&self, scope: Scope) {
        // SAFETY: fences only order memory.
        unsafe {
            match scope {
                Scope::Block => asm!("fence.sc.cta;"),
                Scope::Device => asm!("fence.sc.gpu;"),
                Scope::System => asm!("fence.sc.sys;"),
            }
        }
    }
}

/// Lane 0's `v` on every lane of `mask` (two `shfl.sync.idx.b32`, one per half).
///
/// # Safety
/// Every lane of `mask` calls it from converged control flow, `mask` includes lane 0.
#[inline(always)]
pub(crate) unsafe fn broadcast_first(v: u64, mask: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller's contract; `shfl.sync` only exchanges registers.
    unsafe {
        asm!(
            "shfl.sync.idx.b32 {lo}, {vlo}, 0, 31, {mask};",
            "shfl.sync.idx.b32 {hi}, {vhi}, 0, 31, {mask};",
            lo = out(reg32) lo,
            hi = out(reg32) hi,
            vlo = in(reg32) v as u32,
            vhi = in(reg32) (v >> 32) as u32,
            mask = in(reg32) mask,
        );
    }
    lo as u64 | (hi as u64) << 32
}

/// Each lane of `mask` releases its accesses at `scope` (`fence.acq_rel`), then
/// `bar.warp.sync` over `mask`.
///
/// # Safety
/// As [`broadcast_first`].
#[inline(always)]
pub(crate) unsafe fn sync_warp_release(mask: u32, scope: Scope) {
    // SAFETY: fences only order memory; the barrier's lanes all arrive (the caller's
    // contract).
    unsafe {
        match scope {
            Scope::Block => asm!("fence.acq_rel.cta;"),
            Scope::Device => asm!("fence.acq_rel.gpu;"),
            Scope::System => asm!("fence.acq_rel.sys;"),
        }
        asm!("bar.warp.sync {mask};", mask = in(reg32) mask);
    }
}
