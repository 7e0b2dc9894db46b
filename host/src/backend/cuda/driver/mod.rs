//! The one module that calls the CUDA driver (`cudarc::driver::sys`).
//!
//! Each wrapper is a 1:1 thin layer over one driver entry point: it checks the
//! `CUresult` before reading any out-parameter and maps a failure to
//! [`Error::Driver`] with `cuGetErrorString`'s text (`CUDA_ERROR_NO_DEVICE` becomes
//! [`Error::NoDevice`]). Handles are small `Copy` newtypes; who owns them (and frees
//! them) is decided one level up, in the RAII types of `super`.
//!
//! cudarc's loader (`dynamic-loading`) panics when `libcuda` cannot be opened, and when a
//! symbol is missing from it. [`library_present`] is called before any other wrapper, so
//! the first case is an `Err`. Every symbol used here exists in every driver that supports
//! the VMM POSIX-fd path (CUDA 10.2 and later), so the second case cannot arise on a driver
//! this backend can use at all.
//!
//! Its parts, one seam each: `library` (loading the driver, its version, late-bound entry
//! points), `device` (devices and contexts), `memory` (device memory, IPC handles, VMM),
//! `copy` (page-locked host memory and copies), `module` (modules, kernels, launch) and
//! `stream` (streams, events, graphs). This file holds the handle types and the check
//! every call's result goes through.

mod copy;
mod device;
mod library;
mod memory;
mod module;
mod stream;

pub(super) use copy::{
    mem_free_host, mem_host_alloc, mem_host_alloc_mapped, memcpy_dtod_async, memcpy_dtoh_async,
    memcpy_htod, memcpy_htod_async, memcpy_peer_async, memset_d8_async,
};
pub(super) use device::{
    ctx_enable_peer_access, ctx_set_current, device_attribute, device_can_access_peer,
    device_count, device_get, device_name, primary_ctx_active, primary_ctx_release,
    primary_ctx_retain,
};
pub(super) use library::{
    DRIVER_FLOOR, driver_at_least, driver_version, init, library_present, loads_lazily,
};
pub(super) use memory::{
    allocation_granularity, allocation_of, export_fd, import_fd, ipc_close_mem_handle,
    ipc_get_mem_handle, ipc_open_mem_handle, mem_address_free, mem_address_reserve, mem_alloc,
    mem_create, mem_free, mem_handle_device, mem_map, mem_release, mem_set_access_rw, mem_unmap,
};
pub(super) use module::{
    launch_kernel, module_functions, module_get_global, module_load_data, module_unload,
};
// Only the tests call these outside `driver`.
#[cfg(test)]
pub(super) use module::{module_functions_by_name, ptx_entries};
pub(super) use stream::{
    event_create, event_create_untimed, event_destroy, event_elapsed_ms, event_query, event_record,
    event_synchronize, graph_destroy, graph_exec_destroy, graph_instantiate, graph_launch,
    stream_begin_capture, stream_destroy, stream_end_capture, stream_synchronize,
};

use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::ffi::CStr;

/// A device address.
pub(super) type DevicePtr = sys::CUdeviceptr;
/// A device ordinal handle (`CUdevice`).
pub(super) type Device = sys::CUdevice;
/// A VMM physical allocation handle (`CUmemGenericAllocationHandle`).
pub(super) type MemHandle = sys::CUmemGenericAllocationHandle;

/// A `CUcontext`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Context(sys::CUcontext);
/// A `CUstream`.
#[derive(Clone, Copy, Debug)]
pub struct Stream(sys::CUstream);
impl Context {
    /// Whether this is the context `raw` (another library's handle of it).
    pub(super) fn is(self, raw: sys::CUcontext) -> bool {
        self.0 == raw
    }
}

impl Stream {
    /// The `CUstream` a cudarc stream wraps. The caller keeps `stream` alive while the
    /// handle is used.
    pub(super) fn of_cudarc(stream: &cudarc::driver::CudaStream) -> Self {
        Self::from_raw(stream.cu_stream())
    }

    /// The handle `raw`.
    pub(super) fn from_raw(raw: sys::CUstream) -> Self {
        Self(raw)
    }

    /// Whether this is a handle of a default stream rather than a stream of its own:
    /// `NULL` or `CU_STREAM_LEGACY` (0x1, the legacy default stream) or
    /// `CU_STREAM_PER_THREAD` (0x2, a different stream on each thread). `cuda.h` defines
    /// the two constants as these addresses; cudarc's bindings do not name them.
    pub(super) fn is_default(self) -> bool {
        matches!(self.0 as usize, 0..=2)
    }
}

/// A `CUmodule`.
#[derive(Clone, Copy, Debug)]
pub struct Module(sys::CUmodule);
impl Module {
    /// The `CUmodule` as an integer, for a library that takes it (NVSHMEM's
    /// `nvshmemx_cumodule_init`).
    pub(super) fn word(self) -> u64 {
        self.0.expose_provenance() as u64
    }
}
/// A `CUfunction`.
#[derive(Clone, Copy, Debug)]
pub struct Function(sys::CUfunction);

// SAFETY: driver-API handles are opaque tokens that the CUDA driver accepts from any
// thread of the process (the driver API is thread-safe); nothing is dereferenced here.
unsafe impl Send for Context {}
// SAFETY: as above; sharing the token shares no Rust-visible state.
unsafe impl Sync for Context {}
// SAFETY: as for `Context`.
unsafe impl Send for Stream {}
// SAFETY: as for `Context`.
unsafe impl Sync for Stream {}
// SAFETY: as for `Context`.
unsafe impl Send for Module {}
// SAFETY: as for `Context`.
unsafe impl Sync for Module {}
// SAFETY: as for `Context`.
unsafe impl Send for Function {}
// SAFETY: as for `Context`.
unsafe impl Sync for Function {}

/// A `CUevent` (created with timing enabled).
#[derive(Clone, Copy, Debug)]
pub(super) struct Event(sys::CUevent);
// SAFETY: as for `Context`.
unsafe impl Send for Event {}
// SAFETY: as for `Context`.
unsafe impl Sync for Event {}

/// A `CUgraph` (a captured stream's work, before instantiation).
#[derive(Clone, Copy, Debug)]
pub struct Graph(sys::CUgraph);
/// A `CUgraphExec` (an instantiated graph, launched with [`graph_launch`]).
#[derive(Clone, Copy, Debug)]
pub struct GraphExec(sys::CUgraphExec);
// SAFETY: as for `Context`.
unsafe impl Send for GraphExec {}
// SAFETY: as for `Context`.
unsafe impl Sync for GraphExec {}

/// Size of a `CUipcMemHandle`.
pub(super) const IPC_HANDLE_BYTES: usize = 64;

/// The text `cuGetErrorString` gives for `code`.
fn error_string(code: sys::CUresult) -> String {
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: `text` is a valid out-pointer; the driver stores a pointer to a static string.
    let rc = unsafe { sys::cuGetErrorString(code, &mut text) };
    if rc != sys::CUresult::CUDA_SUCCESS || text.is_null() {
        return format!("{code:?}");
    }
    // SAFETY: on success `text` points to a NUL-terminated static string of the driver.
    let text = unsafe { CStr::from_ptr(text) };
    format!("{code:?}: {}", text.to_string_lossy())
}

/// Maps a driver result to `Result`.
fn check(call: &'static str, rc: sys::CUresult) -> Result<()> {
    match rc {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        sys::CUresult::CUDA_ERROR_NO_DEVICE => Err(Error::NoDevice { backend: "cuda" }),
        code => Err(Error::Driver {
            call,
            code: code as i64,
            message: error_string(code),
        }),
    }
}

/// A failed cudarc call, as symmem reports a driver failure ([`Error::Driver`]; with
/// `CUDA_ERROR_NO_DEVICE`, [`Error::NoDevice`]), so code that mixes the two can use `?`
/// on both.
impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        let code = e.0;
        if code == sys::CUresult::CUDA_ERROR_NO_DEVICE {
            return Error::NoDevice { backend: "cuda" };
        }
        // The driver's text where it loads (it does after any real cudarc call; a
        // `DriverError` made by hand without it must not reach the panicking loader).
        let message = if library_present() {
            error_string(code)
        } else {
            format!("{code:?}")
        };
        Error::Driver {
            call: "a cudarc call",
            code: code as i64,
            message,
        }
    }
}
