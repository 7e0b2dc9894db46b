//! Device memory: `cuMemAlloc` allocations and their IPC handles, the allocation an
//! address lies in, and the VMM calls of the heap (physical allocations, address
//! reservations, mappings, access, export and import as POSIX file descriptors).

use super::{DevicePtr, IPC_HANDLE_BYTES, MemHandle, check};
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::ffi::{c_int, c_uint, c_void};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `cuMemAlloc`.
pub(in crate::backend::cuda) fn mem_alloc(bytes: usize) -> Result<DevicePtr> {
    let mut p = MaybeUninit::<DevicePtr>::uninit();
    // SAFETY: `p` is a valid out-pointer.
    check("cuMemAlloc", unsafe {
        sys::cuMemAlloc_v2(p.as_mut_ptr(), bytes)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { p.assume_init() })
}

/// `cuMemFree`.
///
/// # Safety
/// `ptr` came from [`mem_alloc`] and is not used afterwards.
pub(in crate::backend::cuda) unsafe fn mem_free(ptr: DevicePtr) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemFree", unsafe { sys::cuMemFree_v2(ptr) })
}

/// `cuIpcGetMemHandle`: the 64 opaque bytes of an IPC handle for a `cuMemAlloc` base.
pub(in crate::backend::cuda) fn ipc_get_mem_handle(
    ptr: DevicePtr,
) -> Result<[u8; IPC_HANDLE_BYTES]> {
    let mut h = MaybeUninit::<sys::CUipcMemHandle>::uninit();
    // SAFETY: `h` is a valid out-pointer; the driver validates `ptr`.
    check("cuIpcGetMemHandle", unsafe {
        sys::cuIpcGetMemHandle(h.as_mut_ptr(), ptr)
    })?;
    // SAFETY: written by the driver on success.
    let h = unsafe { h.assume_init() };
    Ok(h.reserved.map(|c| c as u8))
}

/// The allocation that contains `ptr`, from the driver's records of this process
/// (`cuPointerGetAttribute`: `RANGE_START_ADDR`, `RANGE_SIZE`, `DEVICE_ORDINAL`): its
/// base, its length and its device's ordinal. Errors where `ptr` lies in no allocation of
/// this process.
pub(in crate::backend::cuda) fn allocation_of(ptr: DevicePtr) -> Result<(DevicePtr, usize, usize)> {
    use sys::CUpointer_attribute::{
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
    };
    let (mut base, mut size, mut ordinal): (DevicePtr, usize, c_int) = (0, 0, -1);
    // SAFETY: each out-pointer is valid and of the type the driver writes for its
    // attribute (a `CUdeviceptr`, a `size_t`, an `int`).
    unsafe {
        check(
            "cuPointerGetAttribute(RANGE_START_ADDR)",
            sys::cuPointerGetAttribute(
                (&raw mut base).cast(),
                CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                ptr,
            ),
        )?;
        check(
            "cuPointerGetAttribute(RANGE_SIZE)",
            sys::cuPointerGetAttribute(
                (&raw mut size).cast(),
                CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                ptr,
            ),
        )?;
        check(
            "cuPointerGetAttribute(DEVICE_ORDINAL)",
            sys::cuPointerGetAttribute(
                (&raw mut ordinal).cast(),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr,
            ),
        )?;
    }
    Ok((base, size, usize::try_from(ordinal).unwrap_or(usize::MAX)))
}

/// `cuIpcOpenMemHandle(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)`.
pub(in crate::backend::cuda) fn ipc_open_mem_handle(
    handle: &[u8; IPC_HANDLE_BYTES],
) -> Result<DevicePtr> {
    let h = sys::CUipcMemHandle {
        reserved: handle.map(|b| b as std::ffi::c_char),
    };
    let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as c_uint;
    let mut p = MaybeUninit::<DevicePtr>::uninit();
    // SAFETY: `p` is a valid out-pointer; the handle is passed by value.
    check("cuIpcOpenMemHandle", unsafe {
        sys::cuIpcOpenMemHandle_v2(p.as_mut_ptr(), h, flags)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { p.assume_init() })
}

/// `cuIpcCloseMemHandle`.
///
/// # Safety
/// `ptr` came from [`ipc_open_mem_handle`] and is not used afterwards.
pub(in crate::backend::cuda) unsafe fn ipc_close_mem_handle(ptr: DevicePtr) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuIpcCloseMemHandle", unsafe {
        sys::cuIpcCloseMemHandle(ptr)
    })
}

/// Allocation properties of a heap on device `ordinal`: pinned device memory that can be
/// exported as a POSIX file descriptor.
fn heap_prop(ordinal: c_int) -> sys::CUmemAllocationProp {
    // SAFETY: the C struct, all zero: valid (every enum of it has a 0 value, the pointer
    // is null); its fields and their shapes vary with the bindings' CUDA version, so it
    // is filled field by field.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes =
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location = device_location(ordinal);
    prop
}

/// The C layout of a `CUmemLocation` in every CUDA version: its type, then a 32-bit id
/// (the bindings of CUDA 13.2 and later hold the id in a union).
#[repr(C)]
#[derive(Clone, Copy)]
struct MemLocation {
    type_: sys::CUmemLocationType,
    id: c_int,
}

const _: () = assert!(size_of::<MemLocation>() == size_of::<sys::CUmemLocation>());

/// The location of device `ordinal`, whatever shape the bindings give `CUmemLocation`.
fn device_location(ordinal: c_int) -> sys::CUmemLocation {
    let location = MemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal,
    };
    // SAFETY: both are `repr(C)`, of the same size, the type then the 32-bit id.
    unsafe { std::mem::transmute::<MemLocation, sys::CUmemLocation>(location) }
}

/// `cuMemGetAllocationGranularity(MINIMUM)` for heap allocations on device `ordinal`.
pub(in crate::backend::cuda) fn allocation_granularity(ordinal: c_int) -> Result<usize> {
    let prop = heap_prop(ordinal);
    let mut g = MaybeUninit::<usize>::uninit();
    let option = sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
    // SAFETY: `prop` and `g` are valid for the call.
    check("cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(g.as_mut_ptr(), &prop, option)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { g.assume_init() })
}

/// `cuMemCreate` of `bytes` (a multiple of the granularity) of exportable memory on
/// device `ordinal`.
pub(in crate::backend::cuda) fn mem_create(bytes: usize, ordinal: c_int) -> Result<MemHandle> {
    let prop = heap_prop(ordinal);
    let mut h = MaybeUninit::<MemHandle>::uninit();
    // SAFETY: `prop` and `h` are valid for the call.
    check("cuMemCreate", unsafe {
        sys::cuMemCreate(h.as_mut_ptr(), bytes, &prop, 0)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { h.assume_init() })
}

/// The device ordinal whose memory backs `handle` (`cuMemGetAllocationPropertiesFromHandle`).
pub(in crate::backend::cuda) fn mem_handle_device(handle: MemHandle) -> Result<c_int> {
    let mut prop = MaybeUninit::<sys::CUmemAllocationProp>::zeroed();
    // SAFETY: `prop` is a valid out-pointer; the driver validates `handle`.
    check("cuMemGetAllocationPropertiesFromHandle", unsafe {
        sys::cuMemGetAllocationPropertiesFromHandle(prop.as_mut_ptr(), handle)
    })?;
    // SAFETY: written by the driver on success.
    let prop = unsafe { prop.assume_init() };
    // SAFETY: as in `device_location`: the same C layout.
    Ok(unsafe { std::mem::transmute::<sys::CUmemLocation, MemLocation>(prop.location) }.id)
}

/// `cuMemRelease`.
///
/// # Safety
/// `handle` came from [`mem_create`] or [`import_fd`] and is not used afterwards (mappings
/// of it may remain; the memory is freed when the last one is unmapped).
pub(in crate::backend::cuda) unsafe fn mem_release(handle: MemHandle) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
}

/// `cuMemAddressReserve` of `bytes` of virtual address space aligned to `align`.
pub(in crate::backend::cuda) fn mem_address_reserve(
    bytes: usize,
    align: usize,
) -> Result<DevicePtr> {
    let mut p = MaybeUninit::<DevicePtr>::uninit();
    // SAFETY: `p` is a valid out-pointer; no fixed address is requested.
    check("cuMemAddressReserve", unsafe {
        sys::cuMemAddressReserve(p.as_mut_ptr(), bytes, align, 0, 0)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { p.assume_init() })
}

/// `cuMemAddressFree`.
///
/// # Safety
/// `(ptr, bytes)` is a reservation from [`mem_address_reserve`] with nothing mapped in
/// it, not used afterwards.
pub(in crate::backend::cuda) unsafe fn mem_address_free(
    ptr: DevicePtr,
    bytes: usize,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemAddressFree", unsafe {
        sys::cuMemAddressFree(ptr, bytes)
    })
}

/// `cuMemMap` of all `bytes` of `handle` at `ptr`.
///
/// # Safety
/// `(ptr, bytes)` lies in a reservation of this process with nothing mapped there.
pub(in crate::backend::cuda) unsafe fn mem_map(
    ptr: DevicePtr,
    bytes: usize,
    handle: MemHandle,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemMap", unsafe {
        sys::cuMemMap(ptr, bytes, 0, handle, 0)
    })
}

/// `cuMemUnmap`.
///
/// # Safety
/// `(ptr, bytes)` was mapped by [`mem_map`], and no device work that touches it is pending.
pub(in crate::backend::cuda) unsafe fn mem_unmap(ptr: DevicePtr, bytes: usize) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr, bytes) })
}

/// `cuMemSetAccess`: read/write for device `ordinal` on `(ptr, bytes)`.
pub(in crate::backend::cuda) fn mem_set_access_rw(
    ptr: DevicePtr,
    bytes: usize,
    ordinal: c_int,
) -> Result<()> {
    let desc = sys::CUmemAccessDesc {
        location: device_location(ordinal),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: `desc` is one valid descriptor; the driver validates the range.
    check("cuMemSetAccess", unsafe {
        sys::cuMemSetAccess(ptr, bytes, &desc, 1)
    })
}

/// `cuMemExportToShareableHandle(POSIX_FILE_DESCRIPTOR)`: a new fd owned by the caller.
pub(in crate::backend::cuda) fn export_fd(handle: MemHandle) -> Result<OwnedFd> {
    let mut fd: c_int = -1;
    let kind = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    // SAFETY: for a POSIX fd handle type the driver writes an `int` to the out-pointer.
    check("cuMemExportToShareableHandle", unsafe {
        sys::cuMemExportToShareableHandle((&raw mut fd).cast::<c_void>(), handle, kind, 0)
    })?;
    if fd < 0 {
        return Err(Error::Driver {
            call: "cuMemExportToShareableHandle",
            code: i64::from(fd),
            message: "the driver returned no file descriptor".into(),
        });
    }
    // SAFETY: on success `fd` is a new open descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // The driver does not say whether its descriptor is close-on-exec: make it so, so that
    // a program this process starts does not inherit the heap.
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC).map_err(|e| Error::Os {
        what: "making an exported heap's descriptor close-on-exec",
        source: e.into(),
    })?;
    Ok(fd)
}

/// `cuMemImportFromShareableHandle(POSIX_FILE_DESCRIPTOR)`. The fd stays the caller's.
pub(in crate::backend::cuda) fn import_fd(fd: BorrowedFd<'_>) -> Result<MemHandle> {
    let mut h = MaybeUninit::<MemHandle>::uninit();
    let kind = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    // For POSIX fds the OS handle is the fd value itself, cast to a pointer.
    let os_handle = fd.as_raw_fd() as usize as *mut c_void;
    // SAFETY: `h` is a valid out-pointer; `fd` is open for the duration of the call.
    check("cuMemImportFromShareableHandle", unsafe {
        sys::cuMemImportFromShareableHandle(h.as_mut_ptr(), os_handle, kind)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { h.assume_init() })
}
