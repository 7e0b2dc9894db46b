//! Loading the driver: whether `libcuda` is there, `cuInit`, the driver's version and the
//! versions symmem needs, and the entry points newer than the oldest bindings ([`Newer`]),
//! looked up by name at run time.

use super::check;
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::ffi::{c_int, c_uint, c_void};
use std::mem::MaybeUninit;

/// Whether `libcuda` can be loaded. Must be true before any other wrapper is called.
pub(in crate::backend::cuda) fn library_present() -> bool {
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
pub(in crate::backend::cuda) fn init() -> Result<()> {
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
/// [`Cuda::device_count`](crate::backend::cuda::Cuda::device_count).
pub(in crate::backend::cuda) const DRIVER_FLOOR: i32 = 11040;

/// The driver from which a module's kernels are enumerated and loaded at once
/// (`cuModuleEnumerateFunctions`, `cuFuncLoad`: CUDA 12.4); before it they are looked up
/// by the names in the PTX.
pub(super) const DRIVER_ENUMERATES: i32 = 12040;

/// The driver from which CUDA events give elapsed times through `cuEventElapsedTime_v2`
/// (CUDA 12.8), the only form the bindings of CUDA 13 have.
pub(super) const DRIVER_ELAPSED_V2: i32 = 12080;

/// The driver's entry points newer than the oldest bindings symmem builds with (CUDA
/// 11.4; the application picks cudarc's CUDA version): looked up by name in the driver
/// library this process has loaded, so symmem compiles against any bindings and calls
/// them only where the driver has them. `None` where it has not.
pub(super) struct Newer {
    /// Keeps the library (already loaded by the driver's first call) open.
    _library: Option<libloading::Library>,
    pub(super) get_function_count:
        Option<unsafe extern "C" fn(*mut c_uint, sys::CUmodule) -> sys::CUresult>,
    pub(super) enumerate_functions:
        Option<unsafe extern "C" fn(*mut sys::CUfunction, c_uint, sys::CUmodule) -> sys::CUresult>,
    pub(super) func_get_name: Option<
        unsafe extern "C" fn(*mut *const std::ffi::c_char, sys::CUfunction) -> sys::CUresult,
    >,
    pub(super) func_load: Option<unsafe extern "C" fn(sys::CUfunction) -> sys::CUresult>,
    /// `cuModuleGetLoadingMode` (CUDA 11.7).
    loading_mode: Option<unsafe extern "C" fn(*mut c_int) -> sys::CUresult>,
}

/// [`Newer`], looked up once.
pub(super) fn newer() -> &'static Newer {
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
pub(in crate::backend::cuda) fn loads_lazily() -> Option<bool> {
    let query = newer().loading_mode?;
    let mut mode: c_int = 0;
    // SAFETY: `mode` is a valid out-pointer; the driver is initialised.
    let status = unsafe { query(&mut mode) };
    (status == sys::CUresult::CUDA_SUCCESS).then_some(mode == 2)
}

/// [`Error::DriverTooOld`] naming `what` unless the driver is `needed` or newer.
pub(in crate::backend::cuda) fn driver_at_least(needed: i32, what: &'static str) -> Result<()> {
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
pub(in crate::backend::cuda) fn driver_version() -> Result<i32> {
    let mut v = MaybeUninit::<c_int>::uninit();
    // SAFETY: `v` is a valid out-pointer.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(v.as_mut_ptr())
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { v.assume_init() })
}
