//! The CUDA driver behind the backend's handles: its calls as the shared GPU code makes
//! them ([`CudaDriver`]), the primary-context retain every handle keeps ([`Context`]), a
//! launch's parameters ([`KernelParams`]) and the VMM pieces of a heap (a physical
//! allocation, its reserved range and its mapping), each released on drop.

use super::{Cuda, DeviceContext, driver};
use crate::backend::gpu::{self, DeviceScope, DropErrors};
use crate::backend::ipc::HANDLE_BYTES;
use crate::backend::{BackendKind, Grid, KernelLaunch};
use crate::error::{Error, Result};
use std::ffi::{CStr, c_int, c_void};
use std::sync::Arc;

/// The CUDA driver's handles, as the shared GPU handles ([`gpu`]) release them.
#[derive(Debug)]
pub struct CudaDriver;

impl gpu::Runtime for CudaDriver {
    const NAME: &'static str = "CUDA";
    const KIND: BackendKind = BackendKind::Cuda;
    const MAX_BLOCKS: u64 = super::MAX_BLOCKS;
    type Scope = Context;
    type Stream = driver::Stream;
    type Module = driver::Module;
    type Function = driver::Function;
    type KernelArgs = KernelParams;
    type Graph = driver::Graph;
    type GraphExec = driver::GraphExec;
    type Imported = VmmView;
    type PeerRetain = DeviceContext;

    fn stream_synchronize(stream: driver::Stream) -> Result<()> {
        driver::stream_synchronize(stream)
    }
    fn stream_begin_capture(stream: driver::Stream) -> Result<()> {
        driver::stream_begin_capture(stream)
    }
    unsafe fn memset_d8_async(
        dst: u64,
        value: u8,
        bytes: usize,
        stream: driver::Stream,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { driver::memset_d8_async(dst, value, bytes, stream) }
    }
    fn stream_end_capture(stream: driver::Stream) -> Result<driver::Graph> {
        driver::stream_end_capture(stream)
    }
    fn graph_instantiate(graph: driver::Graph) -> Result<driver::GraphExec> {
        driver::graph_instantiate(graph)
    }
    unsafe fn graph_destroy(graph: driver::Graph) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { driver::graph_destroy(graph) }
    }
    fn ipc_get_mem_handle(ptr: u64) -> Result<[u8; HANDLE_BYTES]> {
        driver::ipc_get_mem_handle(ptr)
    }
    unsafe fn launch_kernel(
        function: driver::Function,
        grid: Grid,
        stream: driver::Stream,
        args: &mut KernelParams,
    ) -> Result<()> {
        let params = &mut args.pointers[..args.count];
        // SAFETY: forwarded from the caller; the driver copies the parameters before
        // returning.
        unsafe { driver::launch_kernel(function, grid.blocks, grid.threads, stream, params) }
    }
    fn host_alloc_mapped(bytes: usize) -> Result<(*mut u8, u64)> {
        driver::mem_host_alloc_mapped(bytes)
    }
    fn module_get_global(module: driver::Module, name: &CStr) -> Result<Option<(u64, usize)>> {
        driver::module_get_global(module, name)
    }
    fn module_word(module: driver::Module) -> u64 {
        module.word()
    }
    unsafe fn memcpy_htod(dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { driver::memcpy_htod(dst, src) }
    }
    unsafe fn module_unload(module: driver::Module) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { driver::module_unload(module) }
    }
    unsafe fn stream_destroy(stream: driver::Stream) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { driver::stream_destroy(stream) }
    }
    unsafe fn ipc_close_mem_handle(ptr: u64) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { driver::ipc_close_mem_handle(ptr) }
    }
    unsafe fn host_free(host: *mut u8) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { driver::mem_free_host(host) }
    }
}

/// The most parameters a kernel launch passes to `cuLaunchKernel`.
const MAX_KERNEL_PARAMS: usize = 16;

/// A launch's kernel parameters as `cuLaunchKernel` takes them: one pointer per
/// parameter, in order, to its value in the parameter's ABI type.
pub struct KernelParams {
    pointers: [*mut c_void; MAX_KERNEL_PARAMS],
    count: usize,
}

impl KernelParams {
    /// The parameters whose values `launch.args` point at, or [`Error::KernelArity`] for
    /// more than the driver call here passes.
    pub(super) fn new(launch: &KernelLaunch<'_>) -> Result<Self> {
        let args = launch.args;
        let mut pointers = [std::ptr::null_mut::<c_void>(); MAX_KERNEL_PARAMS];
        let params = pointers.get_mut(..args.len()).ok_or(Error::KernelArity {
            kernel: launch.name,
            args: args.len(),
            params: launch.slots.len(),
            max: MAX_KERNEL_PARAMS,
        })?;
        for (param, &arg) in params.iter_mut().zip(args) {
            *param = arg.cast_mut().cast();
        }
        Ok(Self {
            pointers,
            count: args.len(),
        })
    }
}

/// One retain of a device's primary context, with the record of drop failures of the
/// backend it serves; released on drop.
#[derive(Debug)]
pub struct Context {
    pub(super) device: driver::Device,
    pub(super) ordinal: c_int,
    pub(super) ctx: driver::Context,
    pub(super) drop_errors: Arc<DropErrors>,
}

impl DeviceScope for Context {
    fn make_current(&self) -> Result<()> {
        driver::ctx_set_current(self.ctx)
    }
    fn drop_errors(&self) -> &DropErrors {
        &self.drop_errors
    }
}

impl Context {
    /// Retains device `ordinal`'s primary context, recording a failure to release it in
    /// `drop_errors`. Checks first that `libcuda` loads and knows that device
    /// ([`Cuda::device_count`]), so no driver call can panic.
    pub(super) fn retain_primary(ordinal: usize, drop_errors: Arc<DropErrors>) -> Result<Self> {
        if ordinal >= Cuda::device_count()? {
            return Err(Error::NoDevice { backend: "cuda" });
        }
        let device = driver::device_get(ordinal)?;
        let ordinal = c_int::try_from(ordinal).map_err(|_| Error::NoDevice { backend: "cuda" })?;
        Ok(Self {
            device,
            ordinal,
            ctx: driver::primary_ctx_retain(device)?,
            drop_errors,
        })
    }

    /// [`Error::PeerUnreachable`] unless kernels of this context's device can access
    /// memory on device `peer` (always true for the device itself).
    pub(super) fn check_reaches(&self, peer: driver::Device, peer_ordinal: c_int) -> Result<()> {
        if peer_ordinal == self.ordinal || driver::device_can_access_peer(self.device, peer)? {
            return Ok(());
        }
        Err(Error::PeerUnreachable {
            device: self.ordinal as usize,
            peer_device: peer_ordinal as usize,
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        self.drop_errors
            .record(driver::primary_ctx_release(self.device));
    }
}

/// A VMM physical allocation handle (created or imported); released on drop.
#[derive(Debug)]
pub(super) struct Physical {
    pub(super) ctx: Arc<Context>,
    pub(super) handle: driver::MemHandle,
}

impl Drop for Physical {
    fn drop(&mut self) {
        self.ctx.release(|| {
            // SAFETY: the handle is owned by this value; mappings of it were unmapped
            // first (field order of the types that hold one).
            unsafe { driver::mem_release(self.handle) }
        });
    }
}

/// A reserved virtual-address range; freed on drop.
#[derive(Debug)]
pub(super) struct Reservation {
    pub(super) ctx: Arc<Context>,
    pub(super) base: u64,
    pub(super) len: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.ctx.release(|| {
            // SAFETY: the reservation is owned by this value and its mapping, if any, was
            // unmapped first (field order of the types that hold one).
            unsafe { driver::mem_address_free(self.base, self.len) }
        });
    }
}

/// A mapped range inside a [`Reservation`]; unmapped on drop.
#[derive(Debug)]
pub(super) struct Mapped {
    pub(super) ctx: Arc<Context>,
    pub(super) base: u64,
    pub(super) len: usize,
}

impl Drop for Mapped {
    fn drop(&mut self) {
        self.ctx.release(|| {
            // SAFETY: `(base, len)` was mapped by `map_physical`; the caller of the owning
            // heap/mapping synchronised work that touches it before dropping it.
            unsafe { driver::mem_unmap(self.base, self.len) }
        });
    }
}

/// A physical allocation mapped read/write at its own reservation. Fields drop in
/// order: unmap, then free the range, then release the handle.
#[derive(Debug)]
pub struct VmmView {
    pub(super) mapped: Mapped,
    pub(super) _reservation: Reservation,
    pub(super) physical: Physical,
}

/// Maps all `len` bytes of `physical` at a fresh reservation, read/write for the device.
pub(super) fn map_physical(physical: Physical, len: usize, align: usize) -> Result<VmmView> {
    let ctx = Arc::clone(&physical.ctx);
    let base = driver::mem_address_reserve(len, align)?;
    let reservation = Reservation {
        ctx: Arc::clone(&ctx),
        base,
        len,
    };
    // SAFETY: `(base, len)` is the fresh reservation above, with nothing mapped in it.
    unsafe { driver::mem_map(base, len, physical.handle)? };
    let mapped = Mapped {
        ctx: Arc::clone(&ctx),
        base,
        len,
    };
    driver::mem_set_access_rw(base, len, ctx.ordinal)?;
    Ok(VmmView {
        mapped,
        _reservation: reservation,
        physical,
    })
}
