//! The one module that calls the HIP runtime (`libamdhip64`).
//!
//! # Loading
//!
//! `hip-sys` links `libamdhip64` at build time and declares every entry point as an
//! `extern "C"` item. This module uses `hip-sys` for the *types and constants* of the
//! HIP 5.4 bindings (handles, `hipIpcMemHandle_t`, `hipDeviceProp_t`, flag values, error
//! codes), but calls the runtime through function pointers it looks up itself with
//! `dlopen`/`dlsym`, once per process ([`lib`]). Three reasons:
//!
//! 1. A missing runtime is a typed error. Nothing here references a `hip-sys` function,
//!    so the linker (`--as-needed`) records no `DT_NEEDED` on `libamdhip64`, and a binary
//!    built with `--features hip` starts on a machine without ROCm; [`lib`] answers
//!    [`Error::LibraryMissing`] (a missing entry point: [`Error::MissingSymbol`]).
//! 2. `hip-sys` types every return value as a Rust enum (`hipError_t`). A runtime newer
//!    than the 5.4 bindings can return a code the enum lacks, and an out-of-range enum
//!    value is undefined behaviour in Rust. The pointers here return `c_int`.
//! 3. ROCm 6 renamed the device-properties entry point with the struct it fills
//!    (`hipGetDevicePropertiesR0600`, a new layout; the 5.x layout lives on as
//!    `hipGetDevicePropertiesR0000`). The unversioned symbol `hip-sys` links is absent
//!    from newer runtimes. [`arch_name`] picks the versioned symbol at run time.
//!
//! Each function pointer's parameter list is checked at compile time against the
//! `hip-sys` prototype of the same name (a `const` coercion per entry point, which emits
//! no reference to the symbol), so only the return type differs from the bindings.
//!
//! # Wrappers
//!
//! Each wrapper is 1:1 over one entry point: it checks the result code before reading
//! any out-parameter and maps a failure to [`Error::Driver`] with `hipGetErrorName` /
//! `hipGetErrorString` text (`hipErrorNoDevice` becomes [`Error::NoDevice`]). Handles are
//! small `Copy` newtypes; who owns (and frees) them is decided in the RAII types of
//! `super`.

use crate::error::{Error, Result};
use hip_sys::hiprt as sys;
use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use std::ffi::{CStr, c_char, c_int, c_uchar, c_uint, c_void};
use std::mem::{MaybeUninit, offset_of, size_of};
use std::sync::OnceLock;

mod ffi_facts;

pub use ffi_facts::{BINDINGS_HIP_VERSION, FFI_FACTS, FfiFact, Relation};

/// A device address.
pub(super) type DevicePtr = u64;

/// A `hipStream_t`.
#[derive(Clone, Copy, Debug)]
pub struct Stream(sys::hipStream_t);
/// A `hipModule_t`.
#[derive(Clone, Copy, Debug)]
pub struct Module(sys::hipModule_t);
impl Module {
    /// The `hipModule_t` as an integer, for a library that takes it.
    pub(super) fn word(self) -> u64 {
        self.0.expose_provenance() as u64
    }
}
/// A `hipFunction_t`.
#[derive(Clone, Copy, Debug)]
pub struct Function(sys::hipFunction_t);
/// A `hipGraph_t` (a captured stream's work, before instantiation).
#[derive(Clone, Copy, Debug)]
pub struct Graph(sys::hipGraph_t);
/// A `hipGraphExec_t` (an instantiated graph, launched with [`graph_launch`]).
#[derive(Clone, Copy, Debug)]
pub struct GraphExec(sys::hipGraphExec_t);

// SAFETY: HIP handles are opaque tokens that the runtime accepts from any thread of the
// process (the HIP runtime API is thread-safe); nothing is dereferenced here.
unsafe impl Send for Stream {}
// SAFETY: as above; sharing the token shares no Rust-visible state.
unsafe impl Sync for Stream {}
// SAFETY: as for `Stream`.
unsafe impl Send for Module {}
// SAFETY: as for `Stream`.
unsafe impl Sync for Module {}
// SAFETY: as for `Stream`.
unsafe impl Send for Function {}
// SAFETY: as for `Stream`.
unsafe impl Sync for Function {}
// SAFETY: as for `Stream`.
unsafe impl Send for Graph {}
// SAFETY: as for `Stream`.
unsafe impl Sync for Graph {}
// SAFETY: as for `Stream`.
unsafe impl Send for GraphExec {}
// SAFETY: as for `Stream`.
unsafe impl Sync for GraphExec {}

/// Size of a `hipIpcMemHandle_t` (`char reserved[64]`, `HIP_IPC_HANDLE_SIZE`).
pub(super) const IPC_HANDLE_BYTES: usize = 64;
const _: () = assert!(size_of::<sys::hipIpcMemHandle_t>() == IPC_HANDLE_BYTES);

/// A `hipError_t` as the C ABI returns it: an `int`-sized enum.
type Rc = c_int;

/// `hipSuccess`.
const SUCCESS: Rc = sys::hipError_t::hipSuccess as Rc;
/// `hipErrorInvalidValue`.
const INVALID_VALUE: Rc = sys::hipError_t::hipErrorInvalidValue as Rc;
/// `hipErrorNoDevice`: `hipGetDeviceCount` found no device.
const NO_DEVICE: Rc = sys::hipError_t::hipErrorNoDevice as Rc;
/// `hipErrorInvalidDevice`: what HIP 5.2's `hipInit` answers on a machine without a GPU.
const INVALID_DEVICE: Rc = sys::hipError_t::hipErrorInvalidDevice as Rc;
/// `hipErrorPeerAccessAlreadyEnabled`.
const PEER_ACCESS_ALREADY_ENABLED: Rc = sys::hipError_t::hipErrorPeerAccessAlreadyEnabled as Rc;
/// `hipErrorNotFound`: `hipModuleGetGlobal` of a name the module does not define.
const NOT_FOUND: Rc = sys::hipError_t::hipErrorNotFound as Rc;

/// `hipDeviceMallocFinegrained`: device memory that peers access coherently
/// (cross-device atomics and signals).
pub(super) const MALLOC_FINE_GRAINED: c_uint = sys::hipDeviceMallocFinegrained;
/// `hipStreamNonBlocking`.
const STREAM_NON_BLOCKING: c_uint = sys::hipStreamNonBlocking;
/// `hipStreamCaptureModeThreadLocal`: a capture restricts only the capturing thread's
/// unsafe calls, not other threads' (other ranks' streams keep running work).
const STREAM_CAPTURE_MODE_THREAD_LOCAL: sys::hipStreamCaptureMode =
    sys::hipStreamCaptureMode::hipStreamCaptureModeThreadLocal;
/// `hipHostMallocPortable`: pinned for every device, not only the current one.
const HOST_MALLOC_PORTABLE: c_uint = sys::hipHostMallocPortable;
/// `hipHostMallocMapped`: mapped into the device's address space
/// (`hipHostGetDevicePointer`).
const HOST_MALLOC_MAPPED: c_uint = sys::hipHostMallocMapped;
/// `hipHostMallocCoherent`: fine-grained (coherent) host memory whatever
/// `HIP_HOST_COHERENT` says, so a running kernel sees the host's stores and the host sees
/// the kernel's atomics without a synchronisation.
const HOST_MALLOC_COHERENT: c_uint = sys::hipHostMallocCoherent;
/// `hipIpcMemLazyEnablePeerAccess` of HIP 5.x headers (the 5.4 bindings). HIP 6.0
/// changed the macro to `0x01`, and the runtime rejects any other value with
/// `hipErrorInvalidValue`; see [`ipc_open_mem_handle`].
const IPC_LAZY_ENABLE_PEER_ACCESS_V5: c_uint = sys::hipIpcMemLazyEnablePeerAccess;
/// `hipIpcMemLazyEnablePeerAccess` of HIP 6.0 and later headers.
const IPC_LAZY_ENABLE_PEER_ACCESS_V6: c_uint = 0x01;
/// `HIP_LAUNCH_PARAM_BUFFER_POINTER` (`(void*)0x01`).
const LAUNCH_PARAM_BUFFER_POINTER: usize = 0x01;
/// `HIP_LAUNCH_PARAM_BUFFER_SIZE` (`(void*)0x02`).
const LAUNCH_PARAM_BUFFER_SIZE: usize = 0x02;
/// `HIP_LAUNCH_PARAM_END` (`(void*)0x03`).
const LAUNCH_PARAM_END: usize = 0x03;

/// Offset of `gcnArchName` in the HIP 5.x `hipDeviceProp_t` (ROCm 6's
/// `hipDeviceProp_tR0000`), from the 5.4 bindings; the layout test compares it with the
/// installed headers.
pub(super) const GCN_ARCH_NAME_OFFSET_R0000: usize = offset_of!(sys::hipDeviceProp_t, gcnArchName);
/// Offset of `gcnArchName` in ROCm 6's `hipDeviceProp_tR0600`. No 6.x header is installed
/// here, so this is the value LLVM's `amdgpu-arch` uses (clang/tools/amdgpu-arch/
/// AMDGPUArchByHIP.cpp); the layout test checks it against the headers where they are 6.x.
pub(super) const GCN_ARCH_NAME_OFFSET_R0600: usize = 1160;
/// Length of `gcnArchName` in both layouts.
pub(super) const GCN_ARCH_NAME_BYTES: usize = 256;
/// Bytes of the zeroed buffer the properties are written into: larger than either
/// layout (HIP 5.x: `size_of::<hipDeviceProp_t>()`, 6.x R0600: 1472), checked by the
/// layout test.
pub(super) const DEVICE_PROP_BUFFER_BYTES: usize = 4096;
const _: () = assert!(size_of::<sys::hipDeviceProp_t>() <= DEVICE_PROP_BUFFER_BYTES);
const _: () = assert!(GCN_ARCH_NAME_OFFSET_R0600 + GCN_ARCH_NAME_BYTES <= DEVICE_PROP_BUFFER_BYTES);

/// Declares the table of required entry points: for each, a field holding its
/// function pointer (returning a raw `c_int` result), a compile-time check that the
/// parameter list equals `hip-sys`'s prototype, and its lookup in [`Lib::load`].
macro_rules! hip_entry_points {
    ($($name:ident($($arg:ty),*);)*) => {
        /// The HIP runtime's entry points, looked up once.
        #[allow(non_snake_case)]
        struct Lib {
            $($name: unsafe extern "C" fn($($arg),*) -> Rc,)*
            hipGetErrorName: unsafe extern "C" fn(Rc) -> *const c_char,
            hipGetErrorString: unsafe extern "C" fn(Rc) -> *const c_char,
            /// The device-properties entry point and the offset of `gcnArchName` in the
            /// struct it fills.
            get_device_properties: Option<(unsafe extern "C" fn(*mut c_void, c_int) -> Rc, usize)>,
            /// The runtime the pointers point into (held, so never closed).
            _library: Library,
        }

        // Each parameter list is `hip-sys`'s (only the return type differs). Evaluated
        // at compile time; the constants are never used, so no symbol is referenced.
        $(const _: unsafe extern "C" fn($($arg),*) -> sys::hipError_t = sys::$name;)*

        impl Lib {
            /// Looks every entry point up in `library`, which the table then holds.
            ///
            /// # Safety
            /// `library` is a HIP runtime.
            unsafe fn load(library: Library) -> Result<Self> {
                let handle = &library;
                Ok(Self {
                    $($name: {
                        // SAFETY: forwarded from the caller; the name is NUL-terminated.
                        let p = unsafe { symbol(handle, concat!(stringify!($name), "\0")) }
                            .ok_or(Error::MissingSymbol {
                                library: "libamdhip64",
                                symbol: stringify!($name),
                            })?;
                        // SAFETY: the symbol is the HIP entry point of that name, whose C
                        // prototype is the one above (checked against hip-sys).
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> Rc>(p)
                        }
                    },)*
                    // SAFETY: as above; `const char* hipGetErrorName(hipError_t)`.
                    hipGetErrorName: unsafe { error_text_fn(handle, "hipGetErrorName\0")? },
                    // SAFETY: as above; `const char* hipGetErrorString(hipError_t)`.
                    hipGetErrorString: unsafe { error_text_fn(handle, "hipGetErrorString\0")? },
                    // SAFETY: forwarded from the caller.
                    get_device_properties: unsafe { device_properties_fn(handle) },
                    _library: library,
                })
            }
        }
    };
}

hip_entry_points! {
    hipInit(c_uint);
    hipGetDeviceCount(*mut c_int);
    hipRuntimeGetVersion(*mut c_int);
    hipDeviceGet(*mut sys::hipDevice_t, c_int);
    hipDeviceGetName(*mut c_char, c_int, sys::hipDevice_t);
    hipSetDevice(c_int);
    hipDeviceCanAccessPeer(*mut c_int, c_int, c_int);
    hipDeviceEnablePeerAccess(c_int, c_uint);
    hipStreamCreateWithFlags(*mut sys::hipStream_t, c_uint);
    hipStreamDestroy(sys::hipStream_t);
    hipStreamSynchronize(sys::hipStream_t);
    hipStreamBeginCapture(sys::hipStream_t, sys::hipStreamCaptureMode);
    hipStreamEndCapture(sys::hipStream_t, *mut sys::hipGraph_t);
    hipGraphInstantiate(
        *mut sys::hipGraphExec_t, sys::hipGraph_t, *mut sys::hipGraphNode_t, *mut c_char, usize
    );
    hipGraphDestroy(sys::hipGraph_t);
    hipGraphLaunch(sys::hipGraphExec_t, sys::hipStream_t);
    hipGraphExecDestroy(sys::hipGraphExec_t);
    hipMalloc(*mut *mut c_void, usize);
    hipExtMallocWithFlags(*mut *mut c_void, usize, c_uint);
    hipFree(*mut c_void);
    hipIpcGetMemHandle(*mut sys::hipIpcMemHandle_t, *mut c_void);
    hipIpcOpenMemHandle(*mut *mut c_void, sys::hipIpcMemHandle_t, c_uint);
    hipIpcCloseMemHandle(*mut c_void);
    hipMemGetAddressRange(*mut sys::hipDeviceptr_t, *mut usize, sys::hipDeviceptr_t);
    hipModuleLoadData(*mut sys::hipModule_t, *const c_void);
    hipModuleUnload(sys::hipModule_t);
    hipModuleGetFunction(*mut sys::hipFunction_t, sys::hipModule_t, *const c_char);
    hipModuleLaunchKernel(
        sys::hipFunction_t, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint,
        sys::hipStream_t, *mut *mut c_void, *mut *mut c_void
    );
    hipMemcpyHtoDAsync(sys::hipDeviceptr_t, *mut c_void, usize, sys::hipStream_t);
    hipMemcpyDtoHAsync(*mut c_void, sys::hipDeviceptr_t, usize, sys::hipStream_t);
    hipMemsetD8Async(sys::hipDeviceptr_t, c_uchar, usize, sys::hipStream_t);
    hipHostMalloc(*mut *mut c_void, usize, c_uint);
    hipHostGetDevicePointer(*mut *mut c_void, *mut c_void, c_uint);
    hipHostFree(*mut c_void);
    hipModuleGetGlobal(*mut sys::hipDeviceptr_t, *mut usize, sys::hipModule_t, *const c_char);
    hipMemcpyHtoD(sys::hipDeviceptr_t, *mut c_void, usize);
}

// The two text functions take and return what hip-sys declares, modulo the enum.
const _: unsafe extern "C" fn(sys::hipError_t) -> *const c_char = sys::hipGetErrorName;
const _: unsafe extern "C" fn(sys::hipError_t) -> *const c_char = sys::hipGetErrorString;
// The 5.x properties entry point fills the bindings' struct.
const _: unsafe extern "C" fn(*mut sys::hipDeviceProp_t, c_int) -> sys::hipError_t =
    sys::hipGetDeviceProperties;

/// `dlsym(handle, name)`, `None` when absent (or null).
///
/// # Safety
/// `handle` is a HIP runtime; `name` ends with a NUL byte.
unsafe fn symbol(handle: &Library, name: &str) -> Option<*mut c_void> {
    debug_assert!(name.ends_with('\0'));
    // SAFETY: read as an untyped address, which any symbol is.
    let p = unsafe { handle.get::<*mut c_void>(name) }
        .ok()
        .map(|s| *s)?;
    (!p.is_null()).then_some(p)
}

/// Looks up `hipGetErrorName` or `hipGetErrorString`.
///
/// # Safety
/// As [`symbol`]; the symbol named is `const char* f(hipError_t)`.
unsafe fn error_text_fn(
    handle: &Library,
    name: &'static str,
) -> Result<unsafe extern "C" fn(Rc) -> *const c_char> {
    // SAFETY: forwarded from the caller.
    let Some(p) = (unsafe { symbol(handle, name) }) else {
        return Err(Error::MissingSymbol {
            library: "libamdhip64",
            symbol: "hipGetErrorName/String",
        });
    };
    // SAFETY: the symbol has the prototype the caller promises.
    Ok(unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Rc) -> *const c_char>(p) })
}

/// The device-properties entry point this runtime has, newest layout first (as LLVM's
/// `amdgpu-arch` does): `hipGetDevicePropertiesR0600` (HIP 6+), then
/// `hipGetDevicePropertiesR0000` (HIP 6+'s copy of the 5.x layout), then the unversioned
/// `hipGetDeviceProperties` (HIP 5.x), each with the offset of `gcnArchName` in its struct.
///
/// # Safety
/// As [`symbol`].
unsafe fn device_properties_fn(
    handle: &Library,
) -> Option<(unsafe extern "C" fn(*mut c_void, c_int) -> Rc, usize)> {
    let candidates = [
        ("hipGetDevicePropertiesR0600\0", GCN_ARCH_NAME_OFFSET_R0600),
        ("hipGetDevicePropertiesR0000\0", GCN_ARCH_NAME_OFFSET_R0000),
        ("hipGetDeviceProperties\0", GCN_ARCH_NAME_OFFSET_R0000),
    ];
    candidates.into_iter().find_map(|(name, offset)| {
        // SAFETY: forwarded from the caller; the name ends with NUL.
        let p = unsafe { symbol(handle, name) }?;
        // SAFETY: each of these is `hipError_t f(<props struct>*, int)`; the struct is
        // passed as an untyped buffer larger than any of the layouts.
        let f = unsafe {
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void, c_int) -> Rc>(p)
        };
        Some((f, offset))
    })
}

/// The names tried, in order: the development symlink, then the runtime sonames of
/// ROCm 7, 6 and 5 (all through the loader's search path), then ROCm's default prefix.
const LIBRARY_NAMES: [&str; 5] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "/opt/rocm/lib/libamdhip64.so",
];

/// The loaded runtime, or why it could not be loaded (computed once per process; the
/// library is never unloaded).
fn lib() -> Result<&'static Lib> {
    static LIB: OnceLock<std::result::Result<Lib, Error>> = OnceLock::new();
    let loaded = LIB.get_or_init(|| {
        let library = LIBRARY_NAMES.iter().find_map(|&name| {
            // SAFETY: dlopen runs the library's initialisers, which is what loading a
            // runtime means.
            unsafe { Library::open(Some(name), RTLD_NOW | RTLD_LOCAL) }.ok()
        });
        let Some(library) = library else {
            return Err(Error::LibraryMissing {
                library: "libamdhip64.so",
            });
        };
        // SAFETY: `library` is a HIP runtime opened above; the table holds it.
        unsafe { Lib::load(library) }
    });
    match loaded {
        Ok(lib) => Ok(lib),
        Err(Error::LibraryMissing { library }) => Err(Error::LibraryMissing { library }),
        Err(Error::MissingSymbol { library, symbol }) => {
            Err(Error::MissingSymbol { library, symbol })
        }
        Err(_) => Err(Error::LibraryMissing {
            library: "libamdhip64.so",
        }),
    }
}

/// `hipGetErrorName: hipGetErrorString` for `code`.
fn error_string(lib: &Lib, code: Rc) -> String {
    let text = |f: unsafe extern "C" fn(Rc) -> *const c_char| {
        // SAFETY: takes any int; returns a pointer to a static NUL-terminated string or null.
        let p = unsafe { f(code) };
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: non-null results point at static NUL-terminated strings of the runtime.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    format!(
        "{}: {}",
        text(lib.hipGetErrorName),
        text(lib.hipGetErrorString)
    )
}

/// Maps a result code to `Result`.
fn check(lib: &Lib, call: &'static str, rc: Rc) -> Result<()> {
    match rc {
        SUCCESS => Ok(()),
        NO_DEVICE => Err(Error::NoDevice { backend: "hip" }),
        code => Err(Error::Driver {
            call,
            code: i64::from(code),
            message: error_string(lib, code),
        }),
    }
}

/// `hipInit(0)`. Without a GPU, HIP 5.2's `hipInit` answers `hipErrorInvalidDevice`
/// (measured) and `hipGetDeviceCount` `hipErrorNoDevice`: a failing `hipInit` with no
/// device to count is [`Error::NoDevice`].
pub(super) fn init() -> Result<()> {
    let lib = lib()?;
    // SAFETY: no pointers.
    let rc = unsafe { (lib.hipInit)(0) };
    if rc == SUCCESS {
        return Ok(());
    }
    match device_count() {
        Err(e @ Error::NoDevice { .. }) => Err(e),
        Ok(0) => Err(Error::NoDevice { backend: "hip" }),
        _ => check(lib, "hipInit", rc),
    }
}

/// `hipRuntimeGetVersion`: `major * 10_000_000 + minor * 100_000 + patch`.
pub(super) fn runtime_version() -> Result<i32> {
    let lib = lib()?;
    let mut v = MaybeUninit::<c_int>::uninit();
    // SAFETY: `v` is a valid out-pointer.
    check(lib, "hipRuntimeGetVersion", unsafe {
        (lib.hipRuntimeGetVersion)(v.as_mut_ptr())
    })?;
    // SAFETY: written by the runtime on success.
    Ok(unsafe { v.assume_init() })
}

/// `hipGetDeviceCount`.
pub(super) fn device_count() -> Result<usize> {
    let lib = lib()?;
    let mut n = MaybeUninit::<c_int>::uninit();
    // SAFETY: `n` is a valid out-pointer.
    check(lib, "hipGetDeviceCount", unsafe {
        (lib.hipGetDeviceCount)(n.as_mut_ptr())
    })?;
    // SAFETY: written by the runtime on success.
    Ok(usize::try_from(unsafe { n.assume_init() }).unwrap_or(0))
}

/// `hipDeviceGet` + `hipDeviceGetName`.
pub(super) fn device_name(ordinal: c_int) -> Result<String> {
    let lib = lib()?;
    let mut dev = MaybeUninit::<sys::hipDevice_t>::uninit();
    // SAFETY: `dev` is a valid out-pointer.
    check(lib, "hipDeviceGet", unsafe {
        (lib.hipDeviceGet)(dev.as_mut_ptr(), ordinal)
    })?;
    // SAFETY: written by the runtime on success.
    let dev = unsafe { dev.assume_init() };
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` holds `buf.len()` bytes; the runtime writes a NUL-terminated name.
    check(lib, "hipDeviceGetName", unsafe {
        (lib.hipDeviceGetName)(buf.as_mut_ptr(), buf.len() as c_int, dev)
    })?;
    Ok(c_chars_to_string(&buf))
}

/// The bytes of `chars` up to the first NUL, as text.
fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The device's `gcnArchName` (`gfx942:sramecc+:xnack-`), read from the device
/// properties of whichever layout this runtime fills (see [`device_properties_fn`]).
pub(super) fn arch_name(ordinal: c_int) -> Result<String> {
    let lib = lib()?;
    let (get, offset) = lib.get_device_properties.ok_or(Error::MissingSymbol {
        library: "libamdhip64",
        symbol: "hipGetDeviceProperties{,R0000,R0600}",
    })?;
    // 8-aligned and zeroed: larger than every layout (checked at compile time and by the
    // layout test), so the runtime writes inside it and unread fields stay defined.
    let mut buf = vec![0u64; DEVICE_PROP_BUFFER_BYTES / 8];
    // SAFETY: `buf` is writable for DEVICE_PROP_BUFFER_BYTES, more than the struct.
    check(lib, "hipGetDeviceProperties", unsafe {
        get(buf.as_mut_ptr().cast::<c_void>(), ordinal)
    })?;
    let bytes: &[u8] = bytemuck::cast_slice(&buf);
    let field = &bytes[offset..offset + GCN_ARCH_NAME_BYTES];
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    Ok(String::from_utf8_lossy(&field[..end]).into_owned())
}

/// `hipSetDevice` on the calling thread (a thread-local store).
pub(super) fn set_device(ordinal: c_int) -> Result<()> {
    let lib = lib()?;
    // SAFETY: no pointers.
    check(lib, "hipSetDevice", unsafe { (lib.hipSetDevice)(ordinal) })
}

/// `hipDeviceCanAccessPeer(device, peer)`.
pub(super) fn can_access_peer(device: c_int, peer: c_int) -> Result<bool> {
    let lib = lib()?;
    let mut can = MaybeUninit::<c_int>::uninit();
    // SAFETY: `can` is a valid out-pointer.
    check(lib, "hipDeviceCanAccessPeer", unsafe {
        (lib.hipDeviceCanAccessPeer)(can.as_mut_ptr(), device, peer)
    })?;
    // SAFETY: written by the runtime on success.
    Ok(unsafe { can.assume_init() } != 0)
}

/// `hipDeviceEnablePeerAccess(peer, 0)` for the current device; already enabled is `Ok`.
pub(super) fn enable_peer_access(peer: c_int) -> Result<()> {
    let lib = lib()?;
    // SAFETY: no pointers.
    let rc = unsafe { (lib.hipDeviceEnablePeerAccess)(peer, 0) };
    if rc == PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    check(lib, "hipDeviceEnablePeerAccess", rc)
}

/// `hipStreamCreateWithFlags(hipStreamNonBlocking)` on the current device.
pub(super) fn stream_create_non_blocking() -> Result<Stream> {
    let lib = lib()?;
    let mut s = MaybeUninit::<sys::hipStream_t>::uninit();
    // SAFETY: `s` is a valid out-pointer.
    check(lib, "hipStreamCreateWithFlags", unsafe {
        (lib.hipStreamCreateWithFlags)(s.as_mut_ptr(), STREAM_NON_BLOCKING)
    })?;
    // SAFETY: written by the runtime on success.
    Ok(Stream(unsafe { s.assume_init() }))
}

/// `hipStreamDestroy`.
///
/// # Safety
/// `stream` came from [`stream_create_non_blocking`] and is not used afterwards.
pub(super) unsafe fn stream_destroy(stream: Stream) -> Result<()> {
    let lib = lib()?;
    // SAFETY: forwarded from the caller.
    check(lib, "hipStreamDestroy", unsafe {
        (lib.hipStreamDestroy)(stream.0)
    })
}

/// `hipStreamSynchronize`.
pub(super) fn stream_synchronize(stream: Stream) -> Result<()> {
    let lib = lib()?;
    // SAFETY: the caller passes a live stream.
    check(lib, "hipStreamSynchronize", unsafe {
        (lib.hipStreamSynchronize)(stream.0)
    })
}

/// `hipStreamBeginCapture(hipStreamCaptureModeThreadLocal)`: work this thread enqueues
/// on `stream` is recorded into a graph instead of running, until
/// [`stream_end_capture`]; other threads' HIP calls are not restricted.
pub(super) fn stream_begin_capture(stream: Stream) -> Result<()> {
    let lib = lib()?;
    // SAFETY: the caller passes a live stream; the mode is passed by value.
    check(lib, "hipStreamBeginCapture", unsafe {
        (lib.hipStreamBeginCapture)(stream.0, STREAM_CAPTURE_MODE_THREAD_LOCAL)
    })
}

/// `hipStreamEndCapture`: ends the capture begun on `stream` (the stream runs work
/// again) and returns its graph.
pub(super) fn stream_end_capture(stream: Stream) -> Result<Graph> {
    let lib = lib()?;
    let mut g = MaybeUninit::<sys::hipGraph_t>::uninit();
    // SAFETY: the caller passes a live stream; `g` is a valid out-pointer.
    check(lib, "hipStreamEndCapture", unsafe {
        (lib.hipStreamEndCapture)(stream.0, g.as_mut_ptr())
    })?;
    // SAFETY: written by the runtime on success.
    Ok(Graph(unsafe { g.assume_init() }))
}

/// `hipGraphInstantiate(graph)`, without an error node or a log buffer.
pub(super) fn graph_instantiate(graph: Graph) -> Result<GraphExec> {
    let lib = lib()?;
    let mut e = MaybeUninit::<sys::hipGraphExec_t>::uninit();
    // SAFETY: the caller passes a live graph; `e` is a valid out-pointer; the error-node
    // and log out-parameters are optional (null, with a log size of 0).
    check(lib, "hipGraphInstantiate", unsafe {
        (lib.hipGraphInstantiate)(
            e.as_mut_ptr(),
            graph.0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    })?;
    // SAFETY: written by the runtime on success.
    Ok(GraphExec(unsafe { e.assume_init() }))
}

/// `hipGraphDestroy`.
///
/// # Safety
/// `graph` came from [`stream_end_capture`] and is not used afterwards.
pub(super) unsafe fn graph_destroy(graph: Graph) -> Result<()> {
    let lib = lib()?;
    // SAFETY: forwarded from the caller.
    check(lib, "hipGraphDestroy", unsafe {
        (lib.hipGraphDestroy)(graph.0)
    })
}

/// `hipGraphLaunch` of `exec` on `stream`.
pub(super) fn graph_launch(exec: GraphExec, stream: Stream) -> Result<()> {
    let lib = lib()?;
    // SAFETY: the caller passes a live instantiated graph and a live stream.
    check(lib, "hipGraphLaunch", unsafe {
        (lib.hipGraphLaunch)(exec.0, stream.0)
    })
}

/// `hipGraphExecDestroy`.
///
/// # Safety
/// `exec` came from [`graph_instantiate`], no launch of it is in flight, and it is not
/// used afterwards.
pub(super) unsafe fn graph_exec_destroy(exec: GraphExec) -> Result<()> {
    let lib = lib()?;
    // SAFETY: forwarded from the caller.
    check(lib, "hipGraphExecDestroy", unsafe {
        (lib.hipGraphExecDestroy)(exec.0)
    })
}

/// `hipModuleLoadData` of a code object (an ELF `.hsaco`).
pub(super) fn module_load_data(image: &[u8]) -> Result<Module> {
    let lib = lib()?;
    let mut m = MaybeUninit::<sys::hipModule_t>::uninit();
    // SAFETY: `image` outlives the call (the runtime copies what it keeps); `m` is a
    // valid out-pointer.
    check(lib, "hipModuleLoadData", unsafe {
        (lib.hipModuleLoadData)(m.as_mut_ptr(), image.as_ptr().cast::<c_void>())
    })?;
    // SAFETY: written by the runtime on success.
    Ok(Module(unsafe { m.assume_init() }))
}

/// `hipModuleUnload`.
///
/// # Safety
/// No kernel of `module` is running or enqueued, and its functions are not used afterwards.
pub(super) unsafe fn module_unload(module: Module) -> Result<()> {
    let lib = lib()?;
    // SAFETY: forwarded from the caller.
    check(lib, "hipModuleUnload", unsafe {
        (lib.hipModuleUnload)(module.0)
    })
}

/// `hipModuleGetFunction`.
pub(super) fn module_get_function(module: Module, name: &CStr) -> Result<Function> {
    let lib = lib()?;
    let mut f = MaybeUninit::<sys::hipFunction_t>::uninit();
    // SAFETY: `module` is loaded, `name` NUL-terminated, `f` a valid out-pointer.
    check(lib, "hipModuleGetFunction", unsafe {
        (lib.hipModuleGetFunction)(f.as_mut_ptr(), module.0, name.as_ptr())
    })?;
    // SAFETY: written by the runtime on success.
    Ok(Function(unsafe { f.assume_init() }))
}

/// `hipModuleLaunchKernel` with a 1-D grid, no dynamic LDS, and the explicit kernel
/// arguments as one buffer (`HIP_LAUNCH_PARAM_BUFFER_POINTER` / `_SIZE`): the runtime
/// reads each argument at its metadata offset in `kernargs`.
///
/// # Safety
/// `kernargs` is the kernel's explicit kernarg segment, laid out as its metadata says
/// (`super::pack_kernargs`), and the addresses in it are valid for the kernel's accesses.
pub(super) unsafe fn launch_kernel(
    function: Function,
    blocks: u32,
    threads: u32,
    stream: Stream,
    kernargs: &mut [u8],
) -> Result<()> {
    let lib = lib()?;
    let mut size: usize = kernargs.len();
    let mut extra: [*mut c_void; 5] = [
        std::ptr::without_provenance_mut(LAUNCH_PARAM_BUFFER_POINTER),
        kernargs.as_mut_ptr().cast::<c_void>(),
        std::ptr::without_provenance_mut(LAUNCH_PARAM_BUFFER_SIZE),
        (&raw mut size).cast::<c_void>(),
        std::ptr::without_provenance_mut(LAUNCH_PARAM_END),
    ];
    // SAFETY: `extra` is the documented BUFFER_POINTER, ptr, BUFFER_SIZE, &size, END
    // list; the buffer and `size` outlive the call (the runtime copies the arguments
    // before returning); the rest is forwarded from the caller.
    check(lib, "hipModuleLaunchKernel", unsafe {
        (lib.hipModuleLaunchKernel)(
            function.0,
            blocks,
            1,
            1,
            threads,
            1,
            1,
            0,
            stream.0,
            std::ptr::null_mut(),
            extra.as_mut_ptr(),
        )
    })
}

/// `hipMalloc` (coarse-grained device memory).
pub(super) fn malloc(bytes: usize) -> Result<DevicePtr> {
    let lib = lib()?;
    let mut p = MaybeUninit::<*mut c_void>::uninit();
    // SAFETY: `p` is a valid out-pointer.
    check(lib, "hipMalloc", unsafe {
        (lib.hipMalloc)(p.as_mut_ptr(), bytes)
    })?;
    // SAFETY: written by the runtime on success.
    Ok(unsafe { p.assume_init() }.addr() as DevicePtr)
}

/// `hipExtMallocWithFlags(flags)`.
pub(super) fn ext_malloc_with_flags(bytes: usize, flags: c_uint) -> Result<DevicePtr> {
    let lib = lib()?;
    let mut p = MaybeUninit::<*mut c_void>::uninit();
    // SAFETY: `p` is a valid out-pointer.
    check(lib, "hipExtMallocWithFlags", unsafe {
        (lib.hipExtMallocWithFlags)(p.as_mut_ptr(), bytes, flags)
    })?;
    // SAFETY: written by the runtime on success.
    Ok(unsafe { p.assume_init() }.addr() as DevicePtr)
}

/// A device address as the `void*` HIP takes (device pointers are plain integers to the
/// host; no Rust provenance is involved).
fn dptr(p: DevicePtr) -> *mut c_void {
    std::ptr::without_provenance_mut(p as usize)
}

/// `hipFree`.
///
/// # Safety
/// `ptr` came from [`malloc`] or [`ext_malloc_with_flags`] and is not used afterwards.
pub(super) unsafe fn free(ptr: DevicePtr) -> Result<()> {
    let lib = lib()?;
    // SAFETY: forwarded from the caller.
    check(lib, "hipFree", unsafe { (lib.hipFree)(dptr(ptr)) })
}

/// `hipIpcGetMemHandle`: the 64 opaque bytes of an IPC handle for an allocation's base.
pub(super) fn ipc_get_mem_handle(ptr: DevicePtr) -> Result<[u8; IPC_HANDLE_BYTES]> {
    let lib = lib()?;
    let mut h = MaybeUninit::<sys::hipIpcMemHandle_t>::uninit();
    // SAFETY: `h` is a valid out-pointer; the runtime validates `ptr`.
    check(lib, "hipIpcGetMemHandle", unsafe {
        (lib.hipIpcGetMemHandle)(h.as_mut_ptr(), dptr(ptr))
    })?;
    // SAFETY: written by the runtime on success.
    let h = unsafe { h.assume_init() };
    Ok(h.reserved.map(|c| c as u8))
}

/// The allocation of this process that contains `ptr` (`hipMemGetAddressRange`): its
/// base and length. Errors where `ptr` lies in no allocation of this process.
pub(super) fn allocation_of(ptr: DevicePtr) -> Result<(DevicePtr, usize)> {
    let lib = lib()?;
    let (mut base, mut size): (sys::hipDeviceptr_t, usize) = (std::ptr::null_mut(), 0);
    // SAFETY: both out-pointers are valid; the runtime only reads `ptr` as an address.
    check(lib, "hipMemGetAddressRange", unsafe {
        (lib.hipMemGetAddressRange)(&raw mut base, &raw mut size, ptr as sys::hipDeviceptr_t)
    })?;
    Ok((base as DevicePtr, size))
}

/// `hipIpcOpenMemHandle(hipIpcMemLazyEnablePeerAccess)`.
///
/// The runtime accepts only its own headers' value of the flag (`0` up to HIP 5.x, `1`
/// from 6.0) and checks it before doing anything else, so the value for
/// `runtime_version` is tried first and the other one after an `hipErrorInvalidValue`.
pub(super) fn ipc_open_mem_handle(
    handle: &[u8; IPC_HANDLE_BYTES],
    runtime_version: i32,
) -> Result<DevicePtr> {
    let lib = lib()?;
    let h = sys::hipIpcMemHandle_t {
        reserved: handle.map(|b| b as c_char),
    };
    let flags = if runtime_version >= 60_000_000 {
        [
            IPC_LAZY_ENABLE_PEER_ACCESS_V6,
            IPC_LAZY_ENABLE_PEER_ACCESS_V5,
        ]
    } else {
        [
            IPC_LAZY_ENABLE_PEER_ACCESS_V5,
            IPC_LAZY_ENABLE_PEER_ACCESS_V6,
        ]
    };
    let mut rc = INVALID_VALUE;
    let mut p: *mut c_void = std::ptr::null_mut();
    for flag in flags {
        // SAFETY: `p` is a valid out-pointer; the handle is passed by value.
        rc = unsafe { (lib.hipIpcOpenMemHandle)(&raw mut p, h, flag) };
        if rc != INVALID_VALUE {
            break;
        }
    }
    check(lib, "hipIpcOpenMemHandle", rc)?;
    Ok(p.addr() as DevicePtr)
}

/// `hipIpcCloseMemHandle`.
///
/// # Safety
/// `ptr` came from [`ipc_open_mem_handle`] and is not used afterwards.
pub(super) unsafe fn ipc_close_mem_handle(ptr: DevicePtr) -> Result<()> {
    let lib = lib()?;
    // SAFETY: forwarded from the caller.
    check(lib, "hipIpcCloseMemHandle", unsafe {
        (lib.hipIpcCloseMemHandle)(dptr(ptr))
    })
}

/// `hipMemcpyHtoDAsync` from pageable `src`.
///
/// # Safety
/// `dst..dst + src.len()` is device memory writable by the current device.
pub(super) unsafe fn memcpy_htod_async(dst: DevicePtr, src: &[u8], stream: Stream) -> Result<()> {
    let lib = lib()?;
    // SAFETY: `src` is valid for reads of its length (HIP's prototype is not const but
    // the runtime only reads it); `dst` is forwarded from the caller.
    check(lib, "hipMemcpyHtoDAsync", unsafe {
        (lib.hipMemcpyHtoDAsync)(
            dptr(dst),
            src.as_ptr().cast_mut().cast::<c_void>(),
            src.len(),
            stream.0,
        )
    })
}

/// `hipMemcpyDtoHAsync` into `dst`.
///
/// # Safety
/// `src..src + dst.len()` is device memory readable by the current device, and `stream`
/// is synchronised before `dst` is read, moved or freed.
pub(super) unsafe fn memcpy_dtoh_async(
    dst: &mut [u8],
    src: DevicePtr,
    stream: Stream,
) -> Result<()> {
    let lib = lib()?;
    // SAFETY: `dst` is valid for writes of its length; the rest is forwarded.
    check(lib, "hipMemcpyDtoHAsync", unsafe {
        (lib.hipMemcpyDtoHAsync)(
            dst.as_mut_ptr().cast::<c_void>(),
            dptr(src),
            dst.len(),
            stream.0,
        )
    })
}

/// `hipMemsetD8Async`.
///
/// # Safety
/// `dst..dst + bytes` is device memory writable by the current device.
pub(super) unsafe fn memset_d8_async(
    dst: DevicePtr,
    value: u8,
    bytes: usize,
    stream: Stream,
) -> Result<()> {
    let lib = lib()?;
    // SAFETY: forwarded from the caller.
    check(lib, "hipMemsetD8Async", unsafe {
        (lib.hipMemsetD8Async)(dptr(dst), value, bytes, stream.0)
    })
}

/// `hipHostMalloc(hipHostMallocPortable | hipHostMallocMapped | hipHostMallocCoherent)`:
/// `bytes` of page-locked, coherent host memory mapped into the device's address space,
/// with its device address (`hipHostGetDevicePointer`). Zeroed.
pub(super) fn host_malloc_mapped(bytes: usize) -> Result<(*mut u8, DevicePtr)> {
    let lib = lib()?;
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer.
    check(lib, "hipHostMalloc", unsafe {
        (lib.hipHostMalloc)(
            &raw mut p,
            bytes,
            HOST_MALLOC_PORTABLE | HOST_MALLOC_MAPPED | HOST_MALLOC_COHERENT,
        )
    })?;
    // SAFETY: on success `p` holds `bytes` writable bytes of host memory.
    unsafe { p.cast::<u8>().write_bytes(0, bytes) };
    let mut d: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a mapped allocation of this runtime; `d` a valid out-pointer.
    let mapped = check(lib, "hipHostGetDevicePointer", unsafe {
        (lib.hipHostGetDevicePointer)(&raw mut d, p, 0)
    });
    if let Err(e) = mapped {
        // SAFETY: allocated above and not used afterwards.
        let _ = unsafe { host_free(p.cast::<u8>()) };
        return Err(e);
    }
    Ok((p.cast::<u8>(), d.addr() as DevicePtr))
}

/// `hipHostFree`.
///
/// # Safety
/// `host` came from [`host_malloc_mapped`], no kernel uses it any more, and it is not
/// used afterwards.
pub(super) unsafe fn host_free(host: *mut u8) -> Result<()> {
    let lib = lib()?;
    // SAFETY: forwarded from the caller.
    check(lib, "hipHostFree", unsafe {
        (lib.hipHostFree)(host.cast::<c_void>())
    })
}

/// The device address and size of `module`'s global `name`, or `None` if it has none
/// (`hipModuleGetGlobal` answers `hipErrorNotFound`).
pub(super) fn module_get_global(module: Module, name: &CStr) -> Result<Option<(DevicePtr, usize)>> {
    let lib = lib()?;
    let mut d: sys::hipDeviceptr_t = std::ptr::null_mut();
    let mut bytes: usize = 0;
    // SAFETY: `module` is loaded, `name` NUL-terminated, both out-pointers valid.
    let rc =
        unsafe { (lib.hipModuleGetGlobal)(&raw mut d, &raw mut bytes, module.0, name.as_ptr()) };
    if rc == NOT_FOUND {
        return Ok(None);
    }
    check(lib, "hipModuleGetGlobal", rc)?;
    Ok(Some((d.addr() as DevicePtr, bytes)))
}

/// `hipMemcpyHtoD`: a synchronous copy of `src` to device address `dst`.
///
/// # Safety
/// `dst..dst + src.len()` is device memory writable by the current device, not in use by
/// a running kernel.
pub(super) unsafe fn memcpy_htod(dst: DevicePtr, src: &[u8]) -> Result<()> {
    let lib = lib()?;
    // SAFETY: `src` is valid for reads of its length (HIP's prototype is not const but
    // the runtime only reads it); `dst` is forwarded from the caller.
    check(lib, "hipMemcpyHtoD", unsafe {
        (lib.hipMemcpyHtoD)(
            dptr(dst),
            src.as_ptr().cast_mut().cast::<c_void>(),
            src.len(),
        )
    })
}
