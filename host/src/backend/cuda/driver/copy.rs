//! Page-locked host memory and copies: host allocations (mapped into the device or not)
//! and the copies and fills between host and device memory and between devices.

use super::{Context, DevicePtr, Stream, check};
use crate::error::Result;
use cudarc::driver::sys;
use std::ffi::c_void;

/// `cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE)`: `bytes` of page-locked host memory the
/// copy engines reach directly.
pub(in crate::backend::cuda) fn mem_host_alloc(bytes: usize) -> Result<*mut u8> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer.
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(&mut p, bytes, sys::CU_MEMHOSTALLOC_PORTABLE)
    })?;
    Ok(p.cast::<u8>())
}

/// `cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)`: `bytes` of
/// page-locked host memory mapped into the device's address space, with its device
/// address (`cuMemHostGetDevicePointer`). Zeroed.
pub(in crate::backend::cuda) fn mem_host_alloc_mapped(
    bytes: usize,
) -> Result<(*mut u8, DevicePtr)> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer.
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(
            &mut p,
            bytes,
            sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP,
        )
    })?;
    // SAFETY: `p` holds `bytes` writable bytes.
    unsafe { p.cast::<u8>().write_bytes(0, bytes) };
    let mut d: DevicePtr = 0;
    // SAFETY: `p` is a mapped allocation of this context; `d` a valid out-pointer.
    let mapped = check("cuMemHostGetDevicePointer", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0)
    });
    if let Err(e) = mapped {
        // SAFETY: allocated above and not used afterwards.
        let _ = unsafe { mem_free_host(p.cast::<u8>()) };
        return Err(e);
    }
    Ok((p.cast::<u8>(), d))
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `ptr` came from [`mem_host_alloc`], no copy into or out of it is pending, and it is not
/// used afterwards.
pub(in crate::backend::cuda) unsafe fn mem_free_host(ptr: *mut u8) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemFreeHost", unsafe {
        sys::cuMemFreeHost(ptr.cast::<c_void>())
    })
}

/// `cuMemcpyHtoDAsync` from `src`.
///
/// # Safety
/// `dst..dst + src.len()` is device memory writable by this context. When `src` is
/// page-locked the copy runs asynchronously: `src` stays allocated and unchanged until
/// `stream` has passed the copy.
pub(in crate::backend::cuda) unsafe fn memcpy_htod_async(
    dst: DevicePtr,
    src: &[u8],
    stream: Stream,
) -> Result<()> {
    // SAFETY: `src` is valid for reads of its length; `dst` is forwarded from the caller.
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast::<c_void>(), src.len(), stream.0)
    })
}

/// `cuMemcpyDtoHAsync` into `dst`.
///
/// # Safety
/// `src..src + dst.len()` is device memory readable by this context, and `stream` is
/// synchronised before `dst` is read, moved or freed.
pub(in crate::backend::cuda) unsafe fn memcpy_dtoh_async(
    dst: &mut [u8],
    src: DevicePtr,
    stream: Stream,
) -> Result<()> {
    // SAFETY: `dst` is valid for writes of its length; the rest is forwarded.
    check("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast::<c_void>(), src, dst.len(), stream.0)
    })
}

/// `cuMemsetD8Async`.
///
/// # Safety
/// `dst..dst + bytes` is device memory writable by this context.
pub(in crate::backend::cuda) unsafe fn memset_d8_async(
    dst: DevicePtr,
    value: u8,
    bytes: usize,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(dst, value, bytes, stream.0)
    })
}

/// `cuMemcpyDtoDAsync`.
///
/// # Safety
/// `src..src + bytes` is readable and `dst..dst + bytes` writable device memory of this
/// context until the copy completes.
pub(in crate::backend::cuda) unsafe fn memcpy_dtod_async(
    dst: DevicePtr,
    src: DevicePtr,
    bytes: usize,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemcpyDtoDAsync", unsafe {
        sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream.0)
    })
}

/// `cuMemcpyPeerAsync`: `bytes` from `src` in `src_ctx` to `dst` in `dst_ctx`, on `stream`.
///
/// # Safety
/// `src..src + bytes` is readable device memory of `src_ctx`'s device and
/// `dst..dst + bytes` writable device memory of `dst_ctx`'s, until the copy completes;
/// both contexts are live.
pub(in crate::backend::cuda) unsafe fn memcpy_peer_async(
    dst: DevicePtr,
    dst_ctx: Context,
    src: DevicePtr,
    src_ctx: Context,
    bytes: usize,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemcpyPeerAsync", unsafe {
        sys::cuMemcpyPeerAsync(dst, dst_ctx.0, src, src_ctx.0, bytes, stream.0)
    })
}

/// `cuMemcpyHtoD`: a synchronous copy of `src` to device address `dst`.
///
/// # Safety
/// `dst..dst + src.len()` is writable device memory of the current context, not in use
/// by a running kernel.
pub(in crate::backend::cuda) unsafe fn memcpy_htod(dst: DevicePtr, src: &[u8]) -> Result<()> {
    // SAFETY: forwarded from the caller; `src` is readable for its length.
    check("cuMemcpyHtoD", unsafe {
        sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast::<c_void>(), src.len())
    })
}
