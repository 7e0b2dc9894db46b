//! AMD GPUs through `core::arch::amdgpu`, plus the few operations Rust cannot spell on
//! amdgcn (inline `asm!` is unsupported there): the block and grid sizes, read from the
//! HSA dispatch packet, and scoped fences. Those come from the LLVM IR library that
//! `symmem-build` generates and links into every AMD code object; each is an
//! `alwaysinline` function, so no call survives in the code object.

use crate::{Arch, Scope};
use core::arch::amdgpu;

unsafe extern "C" {
    fn symmem_amdgpu_block_dim_x() -> u32;
    fn symmem_amdgpu_grid_dim_x() -> u32;
    fn symmem_amdgpu_fence_workgroup();
    fn symmem_amdgpu_fence_agent();
    fn symmem_amdgpu_fence_system();
    fn symmem_amdgpu_fence_release_workgroup();
    fn symmem_amdgpu_fence_release_agent();
    fn symmem_amdgpu_fence_release_system();
    fn symmem_amdgpu_call_outlined(
        f: crate::Outlined,
        a: u64,
        b: u64,
        c: u64,
        d: u64,
        e: u64,
        g: u64,
    ) -> u64;
}

/// [`crate::call_outlined`] on amdgcn: the IR library's call, `noinline` at the site.
///
/// # Safety
/// Those of `f`.
#[inline(always)]
pub(crate) unsafe fn call_outlined(
    f: crate::Outlined,
    a: u64,
    b: u64,
    c: u64,
    d: u64,
    e: u64,
    g: u64,
) -> u64 {
    // SAFETY: forwarded from the caller.
    unsafe { symmem_amdgpu_call_outlined(f, a, b, c, d, e, g) }
}

/// The current work-item of a kernel launched on an AMD GPU.
#[derive(Clone, Copy, Debug)]
pub struct Gpu;

// SAFETY: the ids are the hardware's; sizes come from the dispatch packet of this launch;
// `s_barrier` is the workgroup barrier.
unsafe impl Arch for Gpu {
    #[inline(always)]
    fn thread_id(&self) -> u32 {
        amdgpu::workitem_id_x()
    }
    #[inline(always)]
    fn block_id(&self) -> u32 {
        amdgpu::workgroup_id_x()
    }
    #[inline(always)]
    fn block_dim(&self) -> u32 {
        // SAFETY: reads the dispatch packet, which every HSA kernel launch provides.
        unsafe { symmem_amdgpu_block_dim_x() }
    }
    #[inline(always)]
    fn grid_dim(&self) -> u32 {
        // SAFETY: as above.
        unsafe { symmem_amdgpu_grid_dim_x() }
    }
    #[inline(always)]
    fn sync_block(&self) {
        self.fence(Scope::Block);
        amdgpu::s_barrier();
        self.fence(Scope::Block);
    }
    #[inline(always)]
    fn sync_block_release(&self, scope: Scope) {
        // Each wave's waitcnt counters cover only its own accesses, so each wave waits
        // for its own before the barrier; one wave's release after it could not.
        // SAFETY: fences only order memory.
        unsafe {
            match scope {
                Scope::Block => symmem_amdgpu_fence_release_workgroup(),
                Scope::Device => symmem_amdgpu_fence_release_agent(),
                Scope::System => symmem_amdgpu_fence_release_system(),
            }
        }
        self.sync_block();
    }
    #[inline(always)]
    fn fence(&self, scope: Scope) {
        // SAFETY: fences only order memory.
        unsafe {
            match scope {
                Scope::Block => symmem_amdgpu_fence_workgroup(),
                Scope::Device => symmem_amdgpu_fence_agent(),
                Scope::System => symmem_amdgpu_fence_system(),
            }
        }
    }
}

/// The wave releases every lane's accesses at `scope`, then a wave barrier: the
/// wavefront's half of [`crate::LaneGroup::sync_release`] (its counters cover all its lanes).
#[inline(always)]
pub(crate) fn sync_wave_release(scope: Scope) {
    // SAFETY: fences only order memory.
    unsafe {
        match scope {
            Scope::Block => symmem_amdgpu_fence_release_workgroup(),
            Scope::Device => symmem_amdgpu_fence_release_agent(),
            Scope::System => symmem_amdgpu_fence_release_system(),
        }
    }
    amdgpu::wave_barrier();
}
