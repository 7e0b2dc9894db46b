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

use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::ffi::{CStr, CString, c_int, c_uint, c_void};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

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

/// Whether `libcuda` can be loaded. Must be true before any other wrapper is called.
pub(super) fn library_present() -> bool {
    // Not cudarc's own probe, which exists only where cudarc loads the driver at run time
    // (the application may link it instead).
    // SAFETY: `dlopen` of the driver library, closed again at once; it runs the library's
    // initialisers but calls nothing in it.
    DRIVER_LIBRARIES
        .iter()
        .any(|&name| unsafe { libloading::Library::new(name) }.is_ok())
}

/// The names the driver library goes by (cudarc's candidates on Linux).
const DRIVER_LIBRARIES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// `cuInit(0)`. A stub `libcuda` (the toolkit's link stub) is `LibraryMissing`.
pub(super) fn init() -> Result<()> {
    // SAFETY: no pointers; `library_present` was checked by the caller.
    let rc = unsafe { sys::cuInit(0) };
    if rc == sys::CUresult::CUDA_ERROR_STUB_LIBRARY {
        return Err(Error::LibraryMissing {
            library: "libcuda.so",
        });
    }
    check("cuInit", rc)
}

/// The oldest driver symmem's CUDA backend runs on (CUDA 11.4: `cuGraphInstantiateWithFlags`
/// is the newest call it cannot do without); older is [`Error::DriverTooOld`] at
/// [`super::Cuda::device_count`].
pub(super) const DRIVER_FLOOR: i32 = 11040;

/// The driver from which a module's kernels are enumerated and loaded at once
/// (`cuModuleEnumerateFunctions`, `cuFuncLoad`: CUDA 12.4); before it they are looked up
/// by the names in the PTX.
const DRIVER_ENUMERATES: i32 = 12040;

/// The driver from which CUDA events give elapsed times through `cuEventElapsedTime_v2`
/// (CUDA 12.8), the only form the bindings of CUDA 13 have.
const DRIVER_ELAPSED_V2: i32 = 12080;

/// The driver's entry points newer than the oldest bindings symmem builds with (CUDA
/// 11.4; the application picks cudarc's CUDA version): looked up by name in the driver
/// library this process has loaded, so symmem compiles against any bindings and calls
/// them only where the driver has them. `None` where it has not.
struct Newer {
    /// Keeps the library (already loaded by the driver's first call) open.
    _library: Option<libloading::Library>,
    get_function_count: Option<unsafe extern "C" fn(*mut c_uint, sys::CUmodule) -> sys::CUresult>,
    enumerate_functions:
        Option<unsafe extern "C" fn(*mut sys::CUfunction, c_uint, sys::CUmodule) -> sys::CUresult>,
    func_get_name: Option<
        unsafe extern "C" fn(*mut *const std::ffi::c_char, sys::CUfunction) -> sys::CUresult,
    >,
    func_load: Option<unsafe extern "C" fn(sys::CUfunction) -> sys::CUresult>,
    /// `cuModuleGetLoadingMode` (CUDA 11.7).
    loading_mode: Option<unsafe extern "C" fn(*mut c_int) -> sys::CUresult>,
}

/// [`Newer`], looked up once.
fn newer() -> &'static Newer {
    static NEWER: std::sync::OnceLock<Newer> = std::sync::OnceLock::new();
    NEWER.get_or_init(|| {
        // SAFETY: the driver library, which this process has loaded already (`cuInit`
        // ran): opening it again runs no initialiser.
        let library = DRIVER_LIBRARIES
            .into_iter()
            .find_map(|name| unsafe { libloading::Library::new(name) }.ok());
        // SAFETY: each symbol, where the driver has it, is the entry point of that name,
        // whose C prototype (cuda.h) is the field's type.
        let symbol = |name: &[u8]| unsafe {
            library
                .as_ref()
                .and_then(|l| l.get::<*mut c_void>(name).ok().map(|p| *p))
                .filter(|p| !p.is_null())
        };
        // SAFETY: a symbol of the prototype the field names (see above).
        unsafe {
            Newer {
                get_function_count: symbol(b"cuModuleGetFunctionCount\0")
                    .map(|p| std::mem::transmute(p)),
                enumerate_functions: symbol(b"cuModuleEnumerateFunctions\0")
                    .map(|p| std::mem::transmute(p)),
                func_get_name: symbol(b"cuFuncGetName\0").map(|p| std::mem::transmute(p)),
                func_load: symbol(b"cuFuncLoad\0").map(|p| std::mem::transmute(p)),
                loading_mode: symbol(b"cuModuleGetLoadingMode\0").map(|p| std::mem::transmute(p)),
                _library: library,
            }
        }
    })
}

/// Whether the driver loads each kernel at its first launch (`cuModuleGetLoadingMode`
/// says `CU_MODULE_LAZY_LOADING`, 2) rather than with its module (`CU_MODULE_EAGER_LOADING`,
/// 1): `CUDA_MODULE_LOADING` as the driver read it at `cuInit`. `None` where the driver
/// lacks the call (before CUDA 11.7) or it fails.
pub(super) fn loads_lazily() -> Option<bool> {
    let query = newer().loading_mode?;
    let mut mode: c_int = 0;
    // SAFETY: `mode` is a valid out-pointer; the driver is initialised.
    let status = unsafe { query(&mut mode) };
    (status == sys::CUresult::CUDA_SUCCESS).then_some(mode == 2)
}

/// [`Error::DriverTooOld`] naming `what` unless the driver is `needed` or newer.
pub(super) fn driver_at_least(needed: i32, what: &'static str) -> Result<()> {
    let found = driver_version()?;
    if found < needed {
        return Err(Error::DriverTooOld {
            found,
            needed,
            what,
        });
    }
    Ok(())
}

/// `cuDriverGetVersion`.
pub(super) fn driver_version() -> Result<i32> {
    let mut v = MaybeUninit::<c_int>::uninit();
    // SAFETY: `v` is a valid out-pointer.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(v.as_mut_ptr())
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { v.assume_init() })
}

/// `cuDeviceGetCount`.
pub(super) fn device_count() -> Result<usize> {
    let mut n = MaybeUninit::<c_int>::uninit();
    // SAFETY: `n` is a valid out-pointer.
    check("cuDeviceGetCount", unsafe {
        sys::cuDeviceGetCount(n.as_mut_ptr())
    })?;
    // SAFETY: written by the driver on success.
    Ok(usize::try_from(unsafe { n.assume_init() }).unwrap_or(0))
}

/// `cuDeviceGet`.
pub(super) fn device_get(ordinal: usize) -> Result<Device> {
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
pub(super) fn device_name(dev: Device) -> Result<String> {
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
pub(super) fn device_attribute(attr: sys::CUdevice_attribute, dev: Device) -> Result<i32> {
    let mut v = MaybeUninit::<c_int>::uninit();
    // SAFETY: `v` is a valid out-pointer.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(v.as_mut_ptr(), attr, dev)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { v.assume_init() })
}

/// `cuDevicePrimaryCtxRetain`: one more reference to the device's primary context.
pub(super) fn primary_ctx_retain(dev: Device) -> Result<Context> {
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
pub(super) fn primary_ctx_active(dev: Device) -> Result<bool> {
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
pub(super) fn primary_ctx_release(dev: Device) -> Result<()> {
    // SAFETY: no pointers; the caller owns one retain of this device's primary context.
    check("cuDevicePrimaryCtxRelease", unsafe {
        sys::cuDevicePrimaryCtxRelease_v2(dev)
    })
}

/// `cuDeviceCanAccessPeer`: whether kernels on `dev` can access memory on `peer`.
pub(super) fn device_can_access_peer(dev: Device, peer: Device) -> Result<bool> {
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
pub(super) fn ctx_enable_peer_access(peer: Context) -> Result<()> {
    // SAFETY: `peer` is a live context (the caller holds a retain of it).
    match unsafe { sys::cuCtxEnablePeerAccess(peer.0, 0) } {
        sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
        rc => check("cuCtxEnablePeerAccess", rc),
    }
}

/// `cuCtxSetCurrent` on the calling thread.
pub(super) fn ctx_set_current(ctx: Context) -> Result<()> {
    // SAFETY: `ctx` is a live context (the caller holds a retain of it).
    check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx.0) })
}

/// `cuStreamDestroy`.
///
/// # Safety
/// `stream` is owned by the caller (no other library destroys it) and is not used
/// afterwards.
pub(super) unsafe fn stream_destroy(stream: Stream) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuStreamDestroy", unsafe {
        sys::cuStreamDestroy_v2(stream.0)
    })
}

/// `cuStreamSynchronize`.
pub(super) fn stream_synchronize(stream: Stream) -> Result<()> {
    // SAFETY: the caller passes a live stream of the current context.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(stream.0)
    })
}

/// `cuModuleLoadData` of a NUL-terminated PTX image (or a cubin).
pub(super) fn module_load_data(image: &CStr) -> Result<Module> {
    let mut m = MaybeUninit::<sys::CUmodule>::uninit();
    // SAFETY: `image` is NUL-terminated and outlives the call; `m` is a valid out-pointer.
    check("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(m.as_mut_ptr(), image.as_ptr().cast::<c_void>())
    })?;
    // SAFETY: written by the driver on success.
    Ok(Module(unsafe { m.assume_init() }))
}

/// `cuModuleUnload`.
///
/// # Safety
/// No kernel of `module` is running or enqueued, and its functions are not used afterwards.
pub(super) unsafe fn module_unload(module: Module) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuModuleUnload", unsafe { sys::cuModuleUnload(module.0) })
}

/// Every kernel of `module`, by name, each loaded now (`cuModuleGetFunctionCount`,
/// `cuModuleEnumerateFunctions`, `cuFuncGetName`, `cuFuncLoad`; CUDA 12.4+). Loading
/// at once matters: under lazy loading (CUDA's default) a kernel loads at its first
/// launch, and a load can wait for the device's running kernels, which may be waiting
/// for a peer that is itself loading.
pub(super) fn module_functions(module: Module, ptx: &CStr) -> Result<Vec<(String, Function)>> {
    let n = newer();
    let (Some(count_of), Some(enumerate), Some(name_of), Some(load)) = (
        n.get_function_count,
        n.enumerate_functions,
        n.func_get_name,
        n.func_load,
    ) else {
        return module_functions_by_name(module, ptx);
    };
    if driver_version()? < DRIVER_ENUMERATES {
        return module_functions_by_name(module, ptx);
    }
    let mut count: c_uint = 0;
    // SAFETY: `module` is loaded; `count` is a valid out-pointer.
    check("cuModuleGetFunctionCount", unsafe {
        count_of(&mut count, module.0)
    })?;
    let mut functions = vec![std::ptr::null_mut(); count as usize];
    // SAFETY: `functions` has room for `count` handles.
    check("cuModuleEnumerateFunctions", unsafe {
        enumerate(functions.as_mut_ptr(), count, module.0)
    })?;
    functions
        .into_iter()
        .map(|f| {
            let mut name = std::ptr::null();
            // SAFETY: `f` is a function of the loaded module; `name` a valid out-pointer.
            check("cuFuncGetName", unsafe { name_of(&mut name, f) })?;
            // SAFETY: on success the driver returns a NUL-terminated name that lives as
            // long as the module.
            let name = unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
            // SAFETY: `f` is a function of the loaded module.
            check("cuFuncLoad", unsafe { load(f) })?;
            Ok((name, Function(f)))
        })
        .collect()
}

/// [`module_functions`] on a driver before CUDA 12.4: every kernel the PTX declares
/// (`.entry NAME(`), looked up by name (`cuModuleGetFunction`). Such a kernel loads at its
/// first launch where the driver loads lazily (`CUDA_MODULE_LOADING=LAZY`, its default from
/// CUDA 12.2), which a tracing `warn` says: set `CUDA_MODULE_LOADING=EAGER` there.
pub(super) fn module_functions_by_name(
    module: Module,
    ptx: &CStr,
) -> Result<Vec<(String, Function)>> {
    let text = ptx.to_string_lossy();
    if std::env::var("CUDA_MODULE_LOADING").as_deref() != Ok("EAGER") {
        tracing::warn!(
            driver = driver_version()?,
            "this driver cannot load a module's kernels at once (CUDA 12.4 can): set \
             CUDA_MODULE_LOADING=EAGER, or a kernel's first launch may wait for running kernels"
        );
    }
    ptx_entries(&text)
        .map(|name| {
            let c_name = CString::new(name).map_err(|_| Error::BadCodeObject {
                module: "a loaded module",
                target: String::new(),
                why: "a PTX entry's name holds a NUL byte".to_owned(),
            })?;
            let mut f = std::ptr::null_mut();
            // SAFETY: `module` is loaded; `f` a valid out-pointer; the name NUL-terminated.
            check("cuModuleGetFunction", unsafe {
                sys::cuModuleGetFunction(&mut f, module.0, c_name.as_ptr())
            })?;
            Ok((name.to_owned(), Function(f)))
        })
        .collect()
}

/// The kernel names a PTX module declares: the word before `(` on each `.entry` line.
pub(super) fn ptx_entries(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines().filter_map(|line| {
        let rest = line.trim().split_once(".entry")?.1.trim_start();
        rest.split(['(', ' ', '\t'])
            .next()
            .filter(|n| !n.is_empty())
    })
}

/// `cuLaunchKernel` with a 1-D grid and no dynamic shared memory.
///
/// # Safety
/// `params` holds one pointer per kernel parameter, in order, each to a value of the
/// parameter's size, all valid for the call; the kernel's accesses are in bounds.
pub(super) unsafe fn launch_kernel(
    function: Function,
    blocks: u32,
    threads: u32,
    stream: Stream,
    params: &mut [*mut c_void],
) -> Result<()> {
    // SAFETY: forwarded from the caller; the driver copies the parameters before returning.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            function.0,
            blocks,
            1,
            1,
            threads,
            1,
            1,
            0,
            stream.0,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

/// `cuMemAlloc`.
pub(super) fn mem_alloc(bytes: usize) -> Result<DevicePtr> {
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
pub(super) unsafe fn mem_free(ptr: DevicePtr) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemFree", unsafe { sys::cuMemFree_v2(ptr) })
}

/// `cuIpcGetMemHandle`: the 64 opaque bytes of an IPC handle for a `cuMemAlloc` base.
pub(super) fn ipc_get_mem_handle(ptr: DevicePtr) -> Result<[u8; IPC_HANDLE_BYTES]> {
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
pub(super) fn allocation_of(ptr: DevicePtr) -> Result<(DevicePtr, usize, usize)> {
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
pub(super) fn ipc_open_mem_handle(handle: &[u8; IPC_HANDLE_BYTES]) -> Result<DevicePtr> {
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
pub(super) unsafe fn ipc_close_mem_handle(ptr: DevicePtr) -> Result<()> {
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
pub(super) fn allocation_granularity(ordinal: c_int) -> Result<usize> {
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
pub(super) fn mem_create(bytes: usize, ordinal: c_int) -> Result<MemHandle> {
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
pub(super) fn mem_handle_device(handle: MemHandle) -> Result<c_int> {
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
pub(super) unsafe fn mem_release(handle: MemHandle) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
}

/// `cuMemAddressReserve` of `bytes` of virtual address space aligned to `align`.
pub(super) fn mem_address_reserve(bytes: usize, align: usize) -> Result<DevicePtr> {
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
pub(super) unsafe fn mem_address_free(ptr: DevicePtr, bytes: usize) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemAddressFree", unsafe {
        sys::cuMemAddressFree(ptr, bytes)
    })
}

/// `cuMemMap` of all `bytes` of `handle` at `ptr`.
///
/// # Safety
/// `(ptr, bytes)` lies in a reservation of this process with nothing mapped there.
pub(super) unsafe fn mem_map(ptr: DevicePtr, bytes: usize, handle: MemHandle) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemMap", unsafe {
        sys::cuMemMap(ptr, bytes, 0, handle, 0)
    })
}

/// `cuMemUnmap`.
///
/// # Safety
/// `(ptr, bytes)` was mapped by [`mem_map`], and no device work that touches it is pending.
pub(super) unsafe fn mem_unmap(ptr: DevicePtr, bytes: usize) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr, bytes) })
}

/// `cuMemSetAccess`: read/write for device `ordinal` on `(ptr, bytes)`.
pub(super) fn mem_set_access_rw(ptr: DevicePtr, bytes: usize, ordinal: c_int) -> Result<()> {
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
pub(super) fn export_fd(handle: MemHandle) -> Result<OwnedFd> {
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
pub(super) fn import_fd(fd: BorrowedFd<'_>) -> Result<MemHandle> {
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

/// `cuMemcpyHtoDAsync` from `src`.
///
/// # Safety
/// `dst..dst + src.len()` is device memory writable by this context. When `src` is
/// page-locked the copy runs asynchronously: `src` stays allocated and unchanged until
/// `stream` has passed the copy.
pub(super) unsafe fn memcpy_htod_async(dst: DevicePtr, src: &[u8], stream: Stream) -> Result<()> {
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
pub(super) unsafe fn memcpy_dtoh_async(
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
pub(super) unsafe fn memset_d8_async(
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
pub(super) unsafe fn memcpy_dtod_async(
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
pub(super) unsafe fn memcpy_peer_async(
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

/// `cuEventCreate(CU_EVENT_DEFAULT)`: an event that records timing.
pub(super) fn event_create() -> Result<Event> {
    let mut e = MaybeUninit::<sys::CUevent>::uninit();
    let flags = sys::CUevent_flags::CU_EVENT_DEFAULT as c_uint;
    // SAFETY: `e` is a valid out-pointer.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(e.as_mut_ptr(), flags)
    })?;
    // SAFETY: written by the driver on success.
    Ok(Event(unsafe { e.assume_init() }))
}

/// `cuEventCreate(CU_EVENT_DISABLE_TIMING)`: an event only for completion queries and
/// waits, cheaper to record than a timing one.
pub(super) fn event_create_untimed() -> Result<Event> {
    let mut e = MaybeUninit::<sys::CUevent>::uninit();
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
    // SAFETY: `e` is a valid out-pointer.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(e.as_mut_ptr(), flags)
    })?;
    // SAFETY: written by the driver on success.
    Ok(Event(unsafe { e.assume_init() }))
}

/// `cuEventQuery`: `Ok(true)` when the work before the event's last record has completed,
/// `Ok(false)` while it is pending.
pub(super) fn event_query(event: Event) -> Result<bool> {
    // SAFETY: a live event of the current context (the callers' invariant).
    match unsafe { sys::cuEventQuery(event.0) } {
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        rc => check("cuEventQuery", rc).map(|()| true),
    }
}

/// `cuEventDestroy`.
///
/// # Safety
/// `event` came from [`event_create`] and is not used afterwards.
pub(super) unsafe fn event_destroy(event: Event) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuEventDestroy", unsafe { sys::cuEventDestroy_v2(event.0) })
}

/// `cuEventRecord` on `stream`.
pub(super) fn event_record(event: Event, stream: Stream) -> Result<()> {
    // SAFETY: both are live handles of the current context (the callers' invariant).
    check("cuEventRecord", unsafe {
        sys::cuEventRecord(event.0, stream.0)
    })
}

/// `cuEventSynchronize`.
pub(super) fn event_synchronize(event: Event) -> Result<()> {
    // SAFETY: a live, recorded event.
    check("cuEventSynchronize", unsafe {
        sys::cuEventSynchronize(event.0)
    })
}

/// `cuEventElapsedTime` between two completed events, in milliseconds (through cudarc,
/// which calls the form its bindings have: `_v2` from CUDA 13, which needs a driver from
/// 12.8).
pub(super) fn event_elapsed_ms(start: Event, stop: Event) -> Result<f32> {
    if sys::CUDA_VERSION >= 13000 {
        driver_at_least(
            DRIVER_ELAPSED_V2,
            "timing with CUDA events (cuEventElapsedTime_v2)",
        )?;
    }
    // SAFETY: both events were recorded and have completed.
    Ok(unsafe { cudarc::driver::result::event::elapsed(start.0, stop.0) }?)
}

/// `cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE)`: `bytes` of page-locked host memory the
/// copy engines reach directly.
pub(super) fn mem_host_alloc(bytes: usize) -> Result<*mut u8> {
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
pub(super) fn mem_host_alloc_mapped(bytes: usize) -> Result<(*mut u8, DevicePtr)> {
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

/// The device address of `module`'s global `name`, or `None` if it has none
/// (`cuModuleGetGlobal`).
pub(super) fn module_get_global(module: Module, name: &CStr) -> Result<Option<(DevicePtr, usize)>> {
    let (mut d, mut bytes): (DevicePtr, usize) = (0, 0);
    // SAFETY: `module` is loaded, `name` NUL-terminated, both out-pointers valid.
    let rc = unsafe { sys::cuModuleGetGlobal_v2(&mut d, &mut bytes, module.0, name.as_ptr()) };
    if rc == sys::cudaError_enum::CUDA_ERROR_NOT_FOUND {
        return Ok(None);
    }
    check("cuModuleGetGlobal", rc)?;
    Ok(Some((d, bytes)))
}

/// `cuMemcpyHtoD`: a synchronous copy of `src` to device address `dst`.
///
/// # Safety
/// `dst..dst + src.len()` is writable device memory of the current context, not in use
/// by a running kernel.
pub(super) unsafe fn memcpy_htod(dst: DevicePtr, src: &[u8]) -> Result<()> {
    // SAFETY: forwarded from the caller; `src` is readable for its length.
    check("cuMemcpyHtoD", unsafe {
        sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast::<c_void>(), src.len())
    })
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `ptr` came from [`mem_host_alloc`], no copy into or out of it is pending, and it is not
/// used afterwards.
pub(super) unsafe fn mem_free_host(ptr: *mut u8) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuMemFreeHost", unsafe {
        sys::cuMemFreeHost(ptr.cast::<c_void>())
    })
}

/// `cuStreamBeginCapture` in thread-local mode: work this thread enqueues on `stream` is
/// recorded into a graph instead of running, and other threads' driver calls are not
/// restricted.
pub(super) fn stream_begin_capture(stream: Stream) -> Result<()> {
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream of the current context.
    check("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(stream.0, mode)
    })
}

/// `cuStreamEndCapture`: ends the capture begun on `stream` and returns its graph.
pub(super) fn stream_end_capture(stream: Stream) -> Result<Graph> {
    let mut g = MaybeUninit::<sys::CUgraph>::uninit();
    // SAFETY: a live stream in capture; `g` is a valid out-pointer.
    check("cuStreamEndCapture", unsafe {
        sys::cuStreamEndCapture(stream.0, g.as_mut_ptr())
    })?;
    // SAFETY: written by the driver on success.
    Ok(Graph(unsafe { g.assume_init() }))
}

/// `cuGraphInstantiateWithFlags(graph, 0)`.
pub(super) fn graph_instantiate(graph: Graph) -> Result<GraphExec> {
    let mut e = MaybeUninit::<sys::CUgraphExec>::uninit();
    // SAFETY: a live graph; `e` is a valid out-pointer.
    check("cuGraphInstantiate", unsafe {
        sys::cuGraphInstantiateWithFlags(e.as_mut_ptr(), graph.0, 0)
    })?;
    // SAFETY: written by the driver on success.
    Ok(GraphExec(unsafe { e.assume_init() }))
}

/// `cuGraphDestroy` (an instantiated graph does not need its source graph).
///
/// # Safety
/// `graph` came from [`stream_end_capture`] and is not used afterwards.
pub(super) unsafe fn graph_destroy(graph: Graph) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuGraphDestroy", unsafe { sys::cuGraphDestroy(graph.0) })
}

/// `cuGraphLaunch` on `stream`.
pub(super) fn graph_launch(exec: GraphExec, stream: Stream) -> Result<()> {
    // SAFETY: a live executable graph and stream of the current context.
    check("cuGraphLaunch", unsafe {
        sys::cuGraphLaunch(exec.0, stream.0)
    })
}

/// `cuGraphExecDestroy` (deferred by the driver while a launch of it is in flight).
///
/// # Safety
/// `exec` came from [`graph_instantiate`] and is not launched afterwards.
pub(super) unsafe fn graph_exec_destroy(exec: GraphExec) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuGraphExecDestroy", unsafe {
        sys::cuGraphExecDestroy(exec.0)
    })
}
