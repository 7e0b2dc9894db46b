//! symmem's kernels, exported for AMD (`.hsaco`) and NVIDIA (`.ptx`) code objects.
//!
//! Each entry point is a thin `extern "gpu-kernel"` wrapper: it builds the target's
//! [`Gpu`] arch handle and calls the shared body from `symmem-kernels`. Argument lists
//! use only `u64`/pointer and `u32` parameters, in an order the host's launch code packs.
//!
//! The `symmem-rma` entry points (modules `rma`, `collectives`, `probes`) take their
//! arguments in one order: buffer pointers, the peer-base table, `world`, `rank`,
//! counts, the signal array, then any extra ranks or values.
#![no_std]
#![feature(abi_gpu_kernel)]

#[cfg(target_arch = "amdgpu")]
use symmem_arch::amdgpu::Gpu;
#[cfg(target_arch = "nvptx64")]
use symmem_arch::nvptx::Gpu;
use symmem_translate::PeerBases;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// Translated put: `n` bytes from local `src` into rank `to`'s copy of the symmetric
/// buffer at local address `dst`, whose peer-base table is `bases[0..world]`.
///
/// # Safety
/// See `symmem_kernels::put`.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn symmem_put(
    dst: *mut u8,
    src: *const u8,
    n: u64,
    bases: *const u64,
    world: u32,
    cur: u32,
    to: u32,
) {
    // SAFETY: the host passes a device-resident table of `world` entries.
    let bases = unsafe { PeerBases::from_raw_parts(bases, world as usize) };
    // SAFETY: forwarded from the host launch, which checked ranks and ranges.
    unsafe { symmem_kernels::put(&Gpu, dst, src, n as usize, bases, cur as usize, to as usize) }
}

/// Translated get: `n` bytes from rank `from`'s copy of the symmetric buffer at local
/// address `src` into local `dst`.
///
/// # Safety
/// See `symmem_kernels::get`.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn symmem_get(
    dst: *mut u8,
    src: *const u8,
    n: u64,
    bases: *const u64,
    world: u32,
    cur: u32,
    from: u32,
) {
    // SAFETY: as in `symmem_put`.
    let bases = unsafe { PeerBases::from_raw_parts(bases, world as usize) };
    // SAFETY: as in `symmem_put`.
    unsafe {
        symmem_kernels::get(
            &Gpu,
            dst,
            src,
            n as usize,
            bases,
            cur as usize,
            from as usize,
        )
    }
}

/// Direct copy with no translation: the baseline the translated kernels are measured
/// against.
///
/// # Safety
/// See `symmem_kernels::copy`.
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn symmem_copy(dst: *mut u8, src: *const u8, n: u64) {
    // SAFETY: forwarded from the host launch.
    unsafe { symmem_kernels::copy(&Gpu, dst, src, n as usize) }
}

mod collectives;
mod probes;
mod rma;
