//! Modules and their kernels: loading and unloading a module, its kernels (enumerated
//! and loaded at once, or looked up by the names in the PTX), its globals, and launching
//! a kernel.

use super::library::{DRIVER_ENUMERATES, driver_version, newer};
use super::{DevicePtr, Function, Module, Stream, check};
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::ffi::{CStr, CString, c_uint, c_void};
use std::mem::MaybeUninit;

/// `cuModuleLoadData` of a NUL-terminated PTX image (or a cubin).
pub(in crate::backend::cuda) fn module_load_data(image: &CStr) -> Result<Module> {
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
pub(in crate::backend::cuda) unsafe fn module_unload(module: Module) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuModuleUnload", unsafe { sys::cuModuleUnload(module.0) })
}

/// Every kernel of `module`, by name, each loaded now (`cuModuleGetFunctionCount`,
/// `cuModuleEnumerateFunctions`, `cuFuncGetName`, `cuFuncLoad`; CUDA 12.4+). Loading
/// at once matters: under lazy loading (CUDA's default) a kernel loads at its first
/// launch, and a load can wait for the device's running kernels, which may be waiting
/// for a peer that is itself loading.
pub(in crate::backend::cuda) fn module_functions(
    module: Module,
    ptx: &CStr,
) -> Result<Vec<(String, Function)>> {
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
pub(in crate::backend::cuda) fn module_functions_by_name(
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
pub(in crate::backend::cuda) fn ptx_entries(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines().filter_map(|line| {
        let rest = line.trim().split_once(".entry")?.1.trim_start();
        rest.split(['(', ' ', '\t'])
            .next()
            .filter(|n| !n.is_empty())
    })
}

/// The device address of `module`'s global `name`, or `None` if it has none
/// (`cuModuleGetGlobal`).
pub(in crate::backend::cuda) fn module_get_global(
    module: Module,
    name: &CStr,
) -> Result<Option<(DevicePtr, usize)>> {
    let (mut d, mut bytes): (DevicePtr, usize) = (0, 0);
    // SAFETY: `module` is loaded, `name` NUL-terminated, both out-pointers valid.
    let rc = unsafe { sys::cuModuleGetGlobal_v2(&mut d, &mut bytes, module.0, name.as_ptr()) };
    if rc == sys::cudaError_enum::CUDA_ERROR_NOT_FOUND {
        return Ok(None);
    }
    check("cuModuleGetGlobal", rc)?;
    Ok(Some((d, bytes)))
}

/// `cuLaunchKernel` with a 1-D grid and no dynamic shared memory.
///
/// # Safety
/// `params` holds one pointer per kernel parameter, in order, each to a value of the
/// parameter's size, all valid for the call; the kernel's accesses are in bounds.
pub(in crate::backend::cuda) unsafe fn launch_kernel(
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
