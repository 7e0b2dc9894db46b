//! Devices and contexts: counting and naming devices, their attributes, primary
//! contexts, peer access and the calling thread's current context.

use super::{Context, Device, check};
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::ffi::{c_int, c_uint};
use std::mem::MaybeUninit;

/// `cuDeviceGetCount`.
pub(in crate::backend::cuda) fn device_count() -> Result<usize> {
    let mut n = MaybeUninit::<c_int>::uninit();
    // SAFETY: `n` is a valid out-pointer.
    check("cuDeviceGetCount", unsafe {
        sys::cuDeviceGetCount(n.as_mut_ptr())
    })?;
    // SAFETY: written by the driver on success.
    Ok(usize::try_from(unsafe { n.assume_init() }).unwrap_or(0))
}

/// `cuDeviceGet`.
pub(in crate::backend::cuda) fn device_get(ordinal: usize) -> Result<Device> {
    let ordinal = c_int::try_from(ordinal).map_err(|_| Error::NoDevice { backend: "cuda" })?;
    let mut d = MaybeUninit::<Device>::uninit();
    // SAFETY: `d` is a valid out-pointer.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(d.as_mut_ptr(), ordinal)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { d.assume_init() })
}

/// `cuDeviceGetName`.
pub(in crate::backend::cuda) fn device_name(dev: Device) -> Result<String> {
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: `buf` holds `buf.len()` bytes; the driver writes a NUL-terminated name.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev)
    })?;
    // Reinterpret the C chars as bytes and cut at the first NUL (the driver wrote one).
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `cuDeviceGetAttribute`.
pub(in crate::backend::cuda) fn device_attribute(
    attr: sys::CUdevice_attribute,
    dev: Device,
) -> Result<i32> {
    let mut v = MaybeUninit::<c_int>::uninit();
    // SAFETY: `v` is a valid out-pointer.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(v.as_mut_ptr(), attr, dev)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { v.assume_init() })
}

/// `cuDevicePrimaryCtxRetain`: one more reference to the device's primary context.
pub(in crate::backend::cuda) fn primary_ctx_retain(dev: Device) -> Result<Context> {
    let mut c = MaybeUninit::<sys::CUcontext>::uninit();
    // SAFETY: `c` is a valid out-pointer.
    check("cuDevicePrimaryCtxRetain", unsafe {
        sys::cuDevicePrimaryCtxRetain(c.as_mut_ptr(), dev)
    })?;
    // SAFETY: written by the driver on success.
    Ok(Context(unsafe { c.assume_init() }))
}

/// `cuDevicePrimaryCtxGetState`: whether the device's primary context exists (someone
/// retained it, or the runtime made it).
pub(in crate::backend::cuda) fn primary_ctx_active(dev: Device) -> Result<bool> {
    let (mut flags, mut active) = (
        MaybeUninit::<c_uint>::uninit(),
        MaybeUninit::<c_int>::uninit(),
    );
    // SAFETY: valid out-pointers.
    check("cuDevicePrimaryCtxGetState", unsafe {
        sys::cuDevicePrimaryCtxGetState(dev, flags.as_mut_ptr(), active.as_mut_ptr())
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { active.assume_init() } != 0)
}

/// `cuDevicePrimaryCtxRelease`: drops one reference taken by [`primary_ctx_retain`].
pub(in crate::backend::cuda) fn primary_ctx_release(dev: Device) -> Result<()> {
    // SAFETY: no pointers; the caller owns one retain of this device's primary context.
    check("cuDevicePrimaryCtxRelease", unsafe {
        sys::cuDevicePrimaryCtxRelease_v2(dev)
    })
}

/// `cuDeviceCanAccessPeer`: whether kernels on `dev` can access memory on `peer`.
pub(in crate::backend::cuda) fn device_can_access_peer(dev: Device, peer: Device) -> Result<bool> {
    let mut v = MaybeUninit::<c_int>::uninit();
    // SAFETY: `v` is a valid out-pointer.
    check("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(v.as_mut_ptr(), dev, peer)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { v.assume_init() } != 0)
}

/// `cuCtxEnablePeerAccess(peer, 0)` from the current context; access that is already
/// enabled counts as success.
pub(in crate::backend::cuda) fn ctx_enable_peer_access(peer: Context) -> Result<()> {
    // SAFETY: `peer` is a live context (the caller holds a retain of it).
    match unsafe { sys::cuCtxEnablePeerAccess(peer.0, 0) } {
        sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
        rc => check("cuCtxEnablePeerAccess", rc),
    }
}

/// `cuCtxSetCurrent` on the calling thread.
pub(in crate::backend::cuda) fn ctx_set_current(ctx: Context) -> Result<()> {
    // SAFETY: `ctx` is a live context (the caller holds a retain of it).
    check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx.0) })
}
