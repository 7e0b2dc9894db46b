//! Device-side timing for benchmarks: CUDA events, `cuMemcpyDtoDAsync`, and launches of
//! the backend's kernels on a stream of the timer's own.
//!
//! A [`Timer`] is made from a [`Cuda`] backend ([`Cuda::timer`]) and shares its primary
//! context. It loads the *same* embedded code object the backend loaded (so the timed
//! kernels are byte-for-byte the backend's), creates its own non-blocking stream and a
//! pair of events, and enqueues every timed operation on that stream: a
//! [`KernelCall`] with a [`Grid`] (use [`crate::backend::Backend::default_grid`] for the backend's shape)
//! or a device-to-device copy. [`Timer::time_ms`] records an event before and after what
//! a closure enqueues and returns the elapsed device time.
//!
//! Work the backend enqueued on its own stream is not ordered with the timer's stream:
//! call [`crate::backend::Backend::synchronize`] before timing work that depends on it. The timer's
//! waits are not counted in [`crate::backend::Backend::device_to_host_syncs`]: they are benchmark waits,
//! not the library's.
//!
//! This is the only file besides `driver.rs` that calls `cudarc::driver::sys`; each call
//! is checked and mapped to [`Error::Driver`] in the same way.

use super::{Context, Cuda, MODULE, record_drop};
use crate::backend::Grid;
use crate::code_objects;
use crate::error::{Error, Result};
use crate::kernels::{KernelArg, KernelCall};
use cudarc::driver::sys;
use std::ffi::{CStr, CString, c_uint, c_void};
use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex};

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

/// Maps a driver result to `Result` (as `driver::check` does).
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

/// A benchmark timer on a stream of its own; see the module documentation.
pub struct Timer {
    // Dropped by hand in `Drop` (events, module, stream), then the context retain.
    stream: sys::CUstream,
    module: sys::CUmodule,
    start: sys::CUevent,
    stop: sys::CUevent,
    /// Kernels looked up so far (`cuModuleGetFunction` once per name).
    functions: Mutex<Vec<(&'static str, sys::CUfunction)>>,
    ctx: Arc<Context>,
}

// SAFETY: driver-API handles are opaque tokens that the CUDA driver accepts from any
// thread of the process (the driver API is thread-safe); nothing is dereferenced here.
unsafe impl Send for Timer {}
// SAFETY: as above; every method makes the context current first.
unsafe impl Sync for Timer {}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer")
            .field("ordinal", &self.ctx.ordinal)
            .finish_non_exhaustive()
    }
}

/// `cuEventCreate(CU_EVENT_DEFAULT)` (timing enabled).
fn event_create() -> Result<sys::CUevent> {
    let mut e = MaybeUninit::<sys::CUevent>::uninit();
    let flags = sys::CUevent_flags::CU_EVENT_DEFAULT as c_uint;
    // SAFETY: `e` is a valid out-pointer.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(e.as_mut_ptr(), flags)
    })?;
    // SAFETY: written by the driver on success.
    Ok(unsafe { e.assume_init() })
}

impl Cuda {
    /// A [`Timer`] on this backend's device and context, with the backend's code object.
    ///
    /// # Errors
    /// [`Error::Driver`] when the stream, the events or the module cannot be made.
    pub fn timer(&self) -> Result<Timer> {
        self.ctx.make_current()?;
        let object = code_objects::find(MODULE, self.code_object_target).ok_or_else(|| {
            Error::NoCodeObject {
                arch: self.code_object_target.to_string(),
            }
        })?;
        let mut image = object.bytes.to_vec();
        if image.last() == Some(&0) {
            image.pop();
        }
        let image = CString::new(image).map_err(|_| Error::NoCodeObject {
            arch: format!("{} (embedded PTX holds a NUL byte)", object.target),
        })?;
        // Each handle is stored in `timer` as soon as it exists, so that `Drop` frees
        // what was made when a later step fails.
        let mut timer = Timer {
            stream: std::ptr::null_mut(),
            module: std::ptr::null_mut(),
            start: std::ptr::null_mut(),
            stop: std::ptr::null_mut(),
            functions: Mutex::new(Vec::new()),
            ctx: Arc::clone(&self.ctx),
        };
        let mut s = MaybeUninit::<sys::CUstream>::uninit();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
        // SAFETY: `s` is a valid out-pointer.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(s.as_mut_ptr(), flags)
        })?;
        // SAFETY: written by the driver on success.
        timer.stream = unsafe { s.assume_init() };
        let mut m = MaybeUninit::<sys::CUmodule>::uninit();
        // SAFETY: `image` is NUL-terminated and outlives the call; `m` is a valid out-pointer.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(m.as_mut_ptr(), image.as_ptr().cast::<c_void>())
        })?;
        // SAFETY: written by the driver on success.
        timer.module = unsafe { m.assume_init() };
        timer.start = event_create()?;
        timer.stop = event_create()?;
        Ok(timer)
    }
}

impl Timer {
    /// The kernel `name` of the timer's module, looked up once.
    fn function(&self, name: &'static str) -> Result<sys::CUfunction> {
        let mut cache = self
            .functions
            .lock()
            .map_err(|_| Error::Unsupported("timer function cache poisoned"))?;
        if let Some(&(_, f)) = cache.iter().find(|(n, _)| *n == name) {
            return Ok(f);
        }
        let cname = CString::new(name).map_err(|_| Error::Unsupported("kernel name with a NUL"))?;
        let mut f = MaybeUninit::<sys::CUfunction>::uninit();
        // SAFETY: the module is loaded, `cname` NUL-terminated, `f` a valid out-pointer.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(f.as_mut_ptr(), self.module, cname.as_ptr())
        })?;
        // SAFETY: written by the driver on success.
        let f = unsafe { f.assume_init() };
        cache.push((name, f));
        Ok(f)
    }

    /// Enqueues `call` with launch shape `grid` on the timer's stream.
    ///
    /// # Errors
    /// [`Error::Driver`] when the kernel is missing or the launch is refused.
    ///
    /// # Safety
    /// As for [`crate::backend::Backend::launch`]: the addresses in `call` are device memory of this
    /// context, valid for the kernel's accesses until the work completes.
    pub unsafe fn launch(&self, call: &KernelCall, grid: Grid) -> Result<()> {
        self.ctx.make_current()?;
        let function = self.function(call.name())?;
        let args = call.args();
        let mut u64s: Vec<u64> = Vec::with_capacity(args.len());
        let mut u32s: Vec<u32> = Vec::with_capacity(args.len());
        for a in &args {
            match *a {
                KernelArg::U64(v) => u64s.push(v),
                KernelArg::U32(v) => u32s.push(v),
            }
        }
        // Neither vector is touched again before the launch returns: the pointers hold.
        let (mut i64, mut i32) = (0, 0);
        let mut params: Vec<*mut c_void> = args
            .iter()
            .map(|a| match a {
                KernelArg::U64(_) => {
                    i64 += 1;
                    std::ptr::from_ref(&u64s[i64 - 1])
                        .cast_mut()
                        .cast::<c_void>()
                }
                KernelArg::U32(_) => {
                    i32 += 1;
                    std::ptr::from_ref(&u32s[i32 - 1])
                        .cast_mut()
                        .cast::<c_void>()
                }
            })
            .collect();
        // SAFETY: one pointer per kernel parameter, in ABI order (`KernelCall::args`), each
        // to a value of that parameter's width; the driver copies them before returning.
        // The addresses are the caller's (this function's contract).
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                function,
                grid.blocks,
                1,
                1,
                grid.threads,
                1,
                1,
                0,
                self.stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }

    /// Enqueues `cuMemcpyDtoDAsync` of `bytes` from `src` to `dst` on the timer's stream.
    ///
    /// # Errors
    /// [`Error::Driver`] when the driver refuses the copy.
    ///
    /// # Safety
    /// `src..src+bytes` is readable and `dst..dst+bytes` writable device memory of this
    /// context until the copy completes.
    pub unsafe fn memcpy_dtod(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.ctx.make_current()?;
        // SAFETY: forwarded from the caller; the stream is live.
        check("cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.stream)
        })
    }

    /// Records the start event, runs `enqueue` (which enqueues work on this timer), records
    /// the stop event, waits for it and returns the elapsed device time in milliseconds.
    ///
    /// # Errors
    /// Whatever `enqueue` returns, and [`Error::Driver`] from the event calls.
    pub fn time_ms(&self, enqueue: impl FnOnce(&Self) -> Result<()>) -> Result<f32> {
        self.ctx.make_current()?;
        // SAFETY: the event and the stream are live handles of the current context.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(self.start, self.stream)
        })?;
        let enqueued = enqueue(self);
        self.ctx.make_current()?;
        // SAFETY: as above.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(self.stop, self.stream)
        })?;
        // SAFETY: a recorded event of the current context.
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(self.stop)
        })?;
        enqueued?;
        let mut ms = 0f32;
        // SAFETY: both events were recorded and `stop` has completed; `ms` is valid.
        check("cuEventElapsedTime", unsafe {
            sys::cuEventElapsedTime_v2(&mut ms, self.start, self.stop)
        })?;
        Ok(ms)
    }

    /// Waits until everything enqueued on the timer's stream is done.
    ///
    /// # Errors
    /// [`Error::Driver`], for instance when an enqueued kernel faulted.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.make_current()?;
        // SAFETY: a live stream of the current context.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.stream)
        })
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        record_drop(self.ctx.make_current());
        if !self.stream.is_null() {
            // SAFETY: a live stream of this context; waited for before its module unloads.
            record_drop(check("cuStreamSynchronize", unsafe {
                sys::cuStreamSynchronize(self.stream)
            }));
        }
        for event in [self.start, self.stop] {
            if !event.is_null() {
                // SAFETY: created by `event_create`, not used after this.
                record_drop(check("cuEventDestroy", unsafe {
                    sys::cuEventDestroy_v2(event)
                }));
            }
        }
        if !self.module.is_null() {
            // SAFETY: the stream was synchronised above, so no kernel of it runs.
            record_drop(check("cuModuleUnload", unsafe {
                sys::cuModuleUnload(self.module)
            }));
        }
        if !self.stream.is_null() {
            // SAFETY: created in `Cuda::timer`, not used after this.
            record_drop(check("cuStreamDestroy", unsafe {
                sys::cuStreamDestroy_v2(self.stream)
            }));
        }
    }
}
