//! The CUDA backend: NVIDIA GPUs through the driver API, loaded at run time.
//!
//! `libcuda` is opened lazily by cudarc's `dynamic-loading` loader, so the crate builds
//! and its tests run where no CUDA is installed: [`Cuda::new`] probes for the library
//! first and answers [`Error::LibraryMissing`] or [`Error::NoDevice`] instead of letting
//! the loader panic. All raw driver calls live in the private `driver` module.
//!
//! # Contexts and threads
//!
//! Each [`Cuda`] retains the device's **primary context** (`cuDevicePrimaryCtxRetain`),
//! the one the CUDA runtime and PyTorch also use, and releases it when the last object
//! that needs it (the backend, a heap, a mapping or an allocation) is dropped. Ranks are
//! threads, so every method first makes that context current on the calling thread
//! (`cuCtxSetCurrent`, a cheap thread-local store). Several ranks on one GPU in one
//! process therefore share a context but each has its own non-blocking stream, its own
//! loaded module and its own heap; a pointer of one rank is valid in another rank's
//! kernels, which the in-process IPC path below relies on. (Separate `cuCtxCreate`
//! contexts would give each rank its own GPU address space on the same device, and raw
//! pointers could not cross between them.)
//!
//! # Memory
//!
//! - The heap is VMM memory: `cuMemCreate` (POSIX fd handle type requested) mapped into
//!   a `cuMemAddressReserve` range with `cuMemMap` + `cuMemSetAccess`. It is exported as
//!   a file descriptor (`cuMemExportToShareableHandle`); [`Backend::import_heap`] imports
//!   it and maps it into a *new* reservation, so the importer's base differs from the
//!   exporter's even in the same process.
//! - Plain allocations are `cuMemAlloc`, shared with `cuIpcGetMemHandle` /
//!   `cuIpcOpenMemHandle`. CUDA refuses to open an IPC handle in the process that made
//!   it, so an import in the exporting process returns a non-owning alias of the raw
//!   pointer (valid while the exporter's allocation lives).
//!
//! - Uploads and downloads stage through a page-locked ring of each rank's own
//!   (`cuMemHostAlloc`, 8 MiB, made with the backend): the driver's shared staging for
//!   pageable memory would couple ranks on one GPU (see `staging`). Uploads return
//!   without waiting for the device; a download synchronises the stream once per 8 MiB.
//!
//! Dropping memory does not wait for the device: the caller synchronises before freeing
//! memory that enqueued work still touches.
//!
//! # Several ranks on one GPU
//!
//! Collective kernels wait on the device for their peers. The driver's device-wide
//! synchronising calls (`cuMemFree` of a [`CudaDeviceMemory`], module loads, the
//! backend's teardown with its `cuMemFreeHost`) wait for every kernel of the process, a
//! peer's waiting collective included: one rank making such a call while another waits
//! for it in a kernel deadlocks both. So with in-process ranks sharing a GPU, free plain
//! device memory only between host barriers, or keep it for the world's lifetime.
//! Symmetric buffers are safe: freeing one returns heap space and makes no driver call.
//! (Ranks as processes, or one GPU per rank, have no such coupling.) Errors during drop
//! never panic; they are counted process-wide in [`Cuda::drop_errors`].
//!
//! # Several GPUs
//!
//! [`Cuda::for_rank`] places rank `r` on device `r % count`. A heap imported from another
//! device is mapped with access for this rank's device, which needs a peer-to-peer path
//! between the two: [`Backend::import_heap`] asks the driver which device backs the
//! imported handle and answers [`Error::PeerUnreachable`] where `cuDeviceCanAccessPeer`
//! says no, instead of leaving a mapping whose first access faults. An in-process import
//! of another device's `cuMemAlloc` enables peer access from this rank's context to that
//! device's primary context (`cuCtxEnablePeerAccess`, once per pair) and keeps a retain
//! of it for the alias's lifetime. Cross-process IPC opens use
//! `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.

mod driver;
mod engine_heap;
mod staging;
pub mod timing;

use super::ipc::IpcExport;
use super::{
    Backend, BackendKind, CodeObjects, DeviceRegion, Grid, HeapAccess, KernelLaunch, Shareable,
    SharedRegion,
};
use crate::error::{Error, Result};
use cudarc::driver::sys::CUdevice_attribute;
use std::collections::HashMap;
use std::ffi::{CString, c_int, c_void};
use std::fmt;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Threads per block of the default launch shape.
const THREADS: u32 = 256;
/// Bytes one thread moves in the default launch shape (one 16-byte vector).
const BYTES_PER_THREAD: u64 = 16;
/// The largest `gridDim.x` CUDA accepts.
const MAX_BLOCKS: u64 = i32::MAX as u64;

/// Errors raised while dropping CUDA objects, process-wide.
static DROP_ERRORS: AtomicU64 = AtomicU64::new(0);
/// The last such error, as text.
static LAST_DROP_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Records a failure of a call made in `Drop` (which must not panic).
fn record_drop(result: Result<()>) {
    if let Err(e) = result {
        DROP_ERRORS.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = LAST_DROP_ERROR.lock() {
            *last = Some(e.to_string());
        }
    }
}

/// One retain of a device's primary context; released on drop.
#[derive(Debug)]
struct Context {
    device: driver::Device,
    ordinal: c_int,
    ctx: driver::Context,
}

impl Context {
    /// Retains device `ordinal`'s primary context. Checks first that `libcuda` loads and
    /// knows that device ([`Cuda::device_count`]), so no driver call can panic.
    fn retain_primary(ordinal: usize) -> Result<Self> {
        if ordinal >= Cuda::device_count()? {
            return Err(Error::NoDevice { backend: "cuda" });
        }
        let device = driver::device_get(ordinal)?;
        let ordinal = c_int::try_from(ordinal).map_err(|_| Error::NoDevice { backend: "cuda" })?;
        Ok(Self {
            device,
            ordinal,
            ctx: driver::primary_ctx_retain(device)?,
        })
    }

    /// Makes the context current on the calling thread.
    fn make_current(&self) -> Result<()> {
        driver::ctx_set_current(self.ctx)
    }

    /// [`Error::PeerUnreachable`] unless kernels of this context's device can access
    /// memory on device `peer` (always true for the device itself).
    fn check_reaches(&self, peer: driver::Device, peer_ordinal: c_int) -> Result<()> {
        if peer_ordinal == self.ordinal || driver::device_can_access_peer(self.device, peer)? {
            return Ok(());
        }
        Err(Error::PeerUnreachable {
            device: self.ordinal as usize,
            peer_device: peer_ordinal as usize,
        })
    }
}

/// A retain of one device's primary context: what a copy between two devices names
/// ([`timing::Timer::memcpy_peer`]). Released on drop.
#[derive(Debug, Clone)]
pub struct DeviceContext(Arc<Context>);

impl DeviceContext {
    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.0.ordinal as usize
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        record_drop(driver::primary_ctx_release(self.device));
    }
}

/// The rank's loaded code object; unloaded on drop.
#[derive(Debug)]
struct LoadedModule {
    ctx: Arc<Context>,
    module: driver::Module,
}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        record_drop(self.ctx.make_current().and_then(|()| {
            // SAFETY: `Cuda::drop` synchronised the stream before its fields drop, so no
            // kernel of the module runs; the module is not used after this.
            unsafe { driver::module_unload(self.module) }
        }));
    }
}

/// The rank's stream; destroyed on drop.
#[derive(Debug)]
struct OwnedStream {
    ctx: Arc<Context>,
    stream: driver::Stream,
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        record_drop(self.ctx.make_current().and_then(|()| {
            // SAFETY: the stream was created by this backend and is not used after this.
            unsafe { driver::stream_destroy(self.stream) }
        }));
    }
}

/// A VMM physical allocation handle (created or imported); released on drop.
#[derive(Debug)]
struct Physical {
    ctx: Arc<Context>,
    handle: driver::MemHandle,
}

impl Drop for Physical {
    fn drop(&mut self) {
        record_drop(self.ctx.make_current().and_then(|()| {
            // SAFETY: the handle is owned by this value; mappings of it were unmapped
            // first (field order of the types that hold one).
            unsafe { driver::mem_release(self.handle) }
        }));
    }
}

/// A reserved virtual-address range; freed on drop.
#[derive(Debug)]
struct Reservation {
    ctx: Arc<Context>,
    base: u64,
    len: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        record_drop(self.ctx.make_current().and_then(|()| {
            // SAFETY: the reservation is owned by this value and its mapping, if any, was
            // unmapped first (field order of the types that hold one).
            unsafe { driver::mem_address_free(self.base, self.len) }
        }));
    }
}

/// A mapped range inside a [`Reservation`]; unmapped on drop.
#[derive(Debug)]
struct Mapped {
    ctx: Arc<Context>,
    base: u64,
    len: usize,
}

impl Drop for Mapped {
    fn drop(&mut self) {
        record_drop(self.ctx.make_current().and_then(|()| {
            // SAFETY: `(base, len)` was mapped by `map_physical`; the caller of the owning
            // heap/mapping synchronised work that touches it before dropping it.
            unsafe { driver::mem_unmap(self.base, self.len) }
        }));
    }
}

/// A physical allocation mapped read/write at its own reservation. Fields drop in
/// order: unmap, then free the range, then release the handle.
#[derive(Debug)]
struct VmmView {
    mapped: Mapped,
    _reservation: Reservation,
    physical: Physical,
}

/// Maps all `len` bytes of `physical` at a fresh reservation, read/write for the device.
fn map_physical(physical: Physical, len: usize, align: usize) -> Result<VmmView> {
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

/// This rank's symmetric heap: VMM memory mapped at this rank's base.
#[derive(Debug)]
pub struct CudaHeap {
    view: VmmView,
}

impl DeviceRegion for CudaHeap {
    fn base(&self) -> u64 {
        self.view.mapped.base
    }
    fn len(&self) -> usize {
        self.view.mapped.len
    }
}

/// Who owns the memory behind a [`CudaMapping`].
#[derive(Debug)]
enum MappingOwner {
    /// A peer's heap imported from its fd and mapped here.
    Vmm {
        /// Held for its drop (unmap, free the range, release the imported handle).
        _view: VmmView,
    },
    /// A peer's `cuMemAlloc` opened with `cuIpcOpenMemHandle`; closed on drop.
    Ipc {
        /// Held for its drop (`cuIpcCloseMemHandle`).
        _opened: IpcOpened,
    },
    /// An allocation of this same process: a non-owning alias of the exporter's pointer.
    Alias {
        /// For another device's allocation, a retain of that device's primary context,
        /// to which this rank's context has peer access.
        _peer: Option<DeviceContext>,
    },
}

/// A pointer from `cuIpcOpenMemHandle`; closed on drop.
#[derive(Debug)]
struct IpcOpened {
    ctx: Arc<Context>,
    ptr: u64,
}

impl Drop for IpcOpened {
    fn drop(&mut self) {
        record_drop(self.ctx.make_current().and_then(|()| {
            // SAFETY: `ptr` came from `cuIpcOpenMemHandle` and is not used after this.
            unsafe { driver::ipc_close_mem_handle(self.ptr) }
        }));
    }
}

/// A peer's memory as mapped in this rank's address space.
#[derive(Debug)]
pub struct CudaMapping {
    base: u64,
    len: usize,
    owner: MappingOwner,
}

impl CudaMapping {
    /// True when this mapping is a non-owning alias of memory exported by this same
    /// process (the in-process IPC path).
    pub fn is_alias(&self) -> bool {
        matches!(self.owner, MappingOwner::Alias { .. })
    }

    /// True when this mapping was opened with `cuIpcOpenMemHandle`.
    pub fn is_ipc(&self) -> bool {
        matches!(self.owner, MappingOwner::Ipc { .. })
    }
}

impl DeviceRegion for CudaMapping {
    fn base(&self) -> u64 {
        self.base
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// A plain `cuMemAlloc` allocation; freed on drop.
#[derive(Debug)]
pub struct CudaDeviceMemory {
    ctx: Arc<Context>,
    ptr: u64,
    len: usize,
}

impl DeviceRegion for CudaDeviceMemory {
    fn base(&self) -> u64 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for CudaDeviceMemory {
    fn drop(&mut self) {
        record_drop(self.ctx.make_current().and_then(|()| {
            // SAFETY: `ptr` came from `cuMemAlloc` and is owned by this value.
            unsafe { driver::mem_free(self.ptr) }
        }));
    }
}

// Both backends' handles are the shared 64-byte encoding of `backend::ipc`.
const _: () = assert!(driver::IPC_HANDLE_BYTES == super::ipc::HANDLE_BYTES);

/// The heap size a heap export carries in [`Shareable::bytes`].
fn decode_heap_size(bytes: &[u8]) -> Result<usize> {
    let size = bytes
        .try_into()
        .ok()
        .map(u64::from_le_bytes)
        .and_then(|s| usize::try_from(s).ok());
    size.ok_or_else(|| {
        Error::Bootstrap(format!(
            "CUDA heap handle of {} bytes, 8 expected",
            bytes.len()
        ))
    })
}

/// Picks among `targets` (`sm_NN` names) the one for compute capability
/// `major.minor`: the exact `sm_{major}{minor}`, else the newest plain `sm_NN` not
/// newer than the device (PTX is forward-compatible; arch-specific `sm_90a` is not).
fn pick_target<'a>(
    targets: impl IntoIterator<Item = &'a str>,
    major: i32,
    minor: i32,
) -> Option<&'a str> {
    let want = major * 10 + minor;
    let exact = format!("sm_{major}{minor}");
    let mut best: Option<(i32, &str)> = None;
    for t in targets {
        if t == exact {
            return Some(t);
        }
        let Some(n) = t.strip_prefix("sm_").and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if n <= want && best.is_none_or(|(b, _)| n > b) {
            best = Some((n, t));
        }
    }
    best.map(|(_, t)| t)
}

/// The object among `objects` for compute capability `major.minor` (see
/// [`pick_target`]), with its processor name.
fn code_object_for(
    objects: &'static CodeObjects,
    major: i32,
    minor: i32,
) -> Result<(&'static str, &'static [u8])> {
    let all = objects.objects();
    pick_target(all.iter().map(|(target, _)| *target), major, minor)
        .and_then(|t| all.iter().copied().find(|(target, _)| *target == t))
        .ok_or_else(|| Error::NoCodeObject {
            module: objects.crate_name(),
            arch: format!("sm_{major}{minor}"),
        })
}

/// The default launch shape for moving `bytes`: 256 threads per block and about one
/// 16-byte vector per thread (DESIGN.md, finding 3), at least one block.
fn grid_for_bytes(bytes: u64) -> Grid {
    let threads = bytes.div_ceil(BYTES_PER_THREAD);
    let blocks = threads.div_ceil(u64::from(THREADS)).clamp(1, MAX_BLOCKS);
    Grid {
        blocks: blocks as u32,
        threads: THREADS,
    }
}

/// Page-locked host memory mapped into the device (`cuMemHostAlloc` with
/// `CU_MEMHOSTALLOC_DEVICEMAP`): the rank's control block of bounded waits. Freed on drop.
pub struct CudaShared {
    host: *mut u8,
    device: u64,
    ctx: Arc<Context>,
}

// SAFETY: page-locked host memory of a context, accessed atomically by the host and the
// device; the pointer is not tied to a thread.
unsafe impl Send for CudaShared {}
// SAFETY: as above.
unsafe impl Sync for CudaShared {}

impl SharedRegion for CudaShared {
    fn host_ptr(&self) -> *mut u8 {
        self.host
    }
    fn device_ptr(&self) -> u64 {
        self.device
    }
}

impl Drop for CudaShared {
    fn drop(&mut self) {
        record_drop(self.ctx.make_current().and_then(|()| {
            // SAFETY: allocated by `alloc_shared`, freed once; the world drops it only
            // after its last synchronisation, so no kernel reads it any more.
            unsafe { driver::mem_free_host(self.host) }
        }));
    }
}

/// A kernel crate's PTX loaded on one device, every kernel loaded and found by name.
pub struct CudaModule {
    // Field order is drop order: the handles, then the module.
    functions: HashMap<String, driver::Function>,
    target: &'static str,
    crate_name: &'static str,
    loaded: LoadedModule,
}

impl CudaModule {
    /// The processor of the PTX that was loaded (`sm_90`, possibly older than the device).
    pub fn target(&self) -> &'static str {
        self.target
    }
}

impl fmt::Debug for CudaModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaModule")
            .field("crate", &self.crate_name)
            .field("target", &self.target)
            .field("kernels", &self.functions.len())
            .finish()
    }
}

/// The CUDA backend of one rank: a device, its primary context and a non-blocking
/// stream. Kernel crates are loaded with [`Backend::load_module`].
pub struct Cuda {
    // Field order is drop order: staging, stream, then the context retain.
    staging: Mutex<staging::Staging>,
    stream: OwnedStream,
    ctx: Arc<Context>,
    ordinal: usize,
    name: String,
    arch: String,
    major: i32,
    minor: i32,
    driver_version: i32,
    granularity: usize,
    vmm_fd_supported: bool,
    syncs: AtomicU64,
}

impl fmt::Debug for Cuda {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cuda")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("arch", &self.arch)
            .field("driver_version", &self.driver_version)
            .field("granularity", &self.granularity)
            .finish_non_exhaustive()
    }
}

impl Cuda {
    /// GPUs the driver sees (after `cuInit`). Errors: [`Error::LibraryMissing`] without a
    /// usable `libcuda`, [`Error::NoDevice`] when the driver reports none.
    pub fn device_count() -> Result<usize> {
        if !driver::library_present() {
            return Err(Error::LibraryMissing {
                library: "libcuda.so",
            });
        }
        driver::init()?;
        driver::device_count()
    }

    /// Opens device `ordinal`.
    ///
    /// # Errors
    /// [`Error::LibraryMissing`] when `libcuda` cannot be loaded (checked before any driver
    /// call, so it is never a panic) or is the toolkit's stub; [`Error::NoDevice`] when the
    /// driver sees no device or fewer than `ordinal + 1`; [`Error::Driver`] for any other
    /// driver failure.
    pub fn new(ordinal: usize) -> Result<Self> {
        let ctx = Arc::new(Context::retain_primary(ordinal)?);
        let driver_version = driver::driver_version()?;
        let device = ctx.device;
        ctx.make_current()?;

        let name = driver::device_name(device)?;
        let major = driver::device_attribute(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            device,
        )?;
        let minor = driver::device_attribute(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            device,
        )?;
        let vmm = driver::device_attribute(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            device,
        )? != 0;
        let fd = driver::device_attribute(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
            device,
        )? != 0;
        let vmm_fd_supported = vmm && fd;
        // Without VMM there is no heap; report the common 2 MiB so sizes still round.
        let granularity = if vmm_fd_supported {
            driver::allocation_granularity(ctx.ordinal)?
        } else {
            2 << 20
        };

        let stream = OwnedStream {
            ctx: Arc::clone(&ctx),
            stream: driver::stream_create_non_blocking()?,
        };
        let staging = Mutex::new(staging::Staging::new(Arc::clone(&ctx))?);

        Ok(Self {
            staging,
            stream,
            ctx,
            ordinal,
            name,
            arch: format!("sm_{major}{minor}"),
            major,
            minor,
            driver_version,
            granularity,
            vmm_fd_supported,
            syncs: AtomicU64::new(0),
        })
    }

    /// The backend for `rank` on a machine with several GPUs: device
    /// `rank % device_count`, so one GPU per rank while there are enough and ranks
    /// sharing GPUs round-robin after that.
    ///
    /// # Errors
    /// As [`Cuda::device_count`] and [`Cuda::new`].
    pub fn for_rank(rank: usize) -> Result<Self> {
        Self::new(rank % Self::device_count()?)
    }

    /// The device ordinal this backend drives.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// A retain of this backend's context, for copies between devices.
    pub fn context(&self) -> DeviceContext {
        DeviceContext(Arc::clone(&self.ctx))
    }

    /// A retain of device `ordinal`'s primary context (the one that device's backends
    /// use), for copies between devices.
    ///
    /// # Errors
    /// [`Error::NoDevice`] for an ordinal the driver does not know; [`Error::Driver`].
    pub fn device_context(ordinal: usize) -> Result<DeviceContext> {
        Ok(DeviceContext(Arc::new(Context::retain_primary(ordinal)?)))
    }

    /// The device's architecture, `sm_{major}{minor}`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The driver's CUDA version (`cuDriverGetVersion`, e.g. 13000).
    pub fn driver_version(&self) -> i32 {
        self.driver_version
    }

    /// How many driver calls made while dropping CUDA objects failed in this process.
    pub fn drop_errors() -> u64 {
        DROP_ERRORS.load(Ordering::Relaxed)
    }

    /// The last such failure, as text.
    pub fn last_drop_error() -> Option<String> {
        LAST_DROP_ERROR.lock().ok().and_then(|last| last.clone())
    }

    /// This rank's page-locked staging ring.
    fn staging(&self) -> Result<std::sync::MutexGuard<'_, staging::Staging>> {
        self.staging
            .lock()
            .map_err(|_| Error::Unsupported("CUDA staging ring poisoned"))
    }

    fn count_sync(&self) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        // Teardown only, not counted: nothing may be freed under a running kernel, so
        // wait for the stream before the fields drop.
        record_drop(
            self.ctx
                .make_current()
                .and_then(|()| driver::stream_synchronize(self.stream.stream)),
        );
    }
}

impl Backend for Cuda {
    type Heap = CudaHeap;
    type Mapping = CudaMapping;
    type DeviceMemory = CudaDeviceMemory;
    type Module = CudaModule;
    type Shared = CudaShared;

    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn device_name(&self) -> String {
        self.name.clone()
    }

    fn heap_granularity(&self) -> usize {
        self.granularity
    }

    fn create_heap(&self, bytes: usize) -> Result<CudaHeap> {
        if bytes == 0 {
            return Err(Error::ZeroSize);
        }
        if !self.vmm_fd_supported {
            return Err(Error::Unsupported(
                "this device has no VMM POSIX-fd allocations",
            ));
        }
        let len = bytes
            .checked_next_multiple_of(self.granularity)
            .ok_or(Error::TooLarge {
                requested: bytes,
                capacity: usize::MAX,
            })?;
        self.ctx.make_current()?;
        let handle = driver::mem_create(len, self.ctx.ordinal)?;
        let physical = Physical {
            ctx: Arc::clone(&self.ctx),
            handle,
        };
        Ok(CudaHeap {
            view: map_physical(physical, len, self.granularity)?,
        })
    }

    fn export_heap(&self, heap: &CudaHeap) -> Result<Shareable> {
        self.ctx.make_current()?;
        let fd = driver::export_fd(heap.view.physical.handle)?;
        Ok(Shareable {
            bytes: (heap.len() as u64).to_le_bytes().to_vec(),
            fd: Some(fd),
        })
    }

    fn import_heap(&self, handle: Shareable, bytes: usize) -> Result<CudaMapping> {
        let exported = decode_heap_size(&handle.bytes)?;
        let fd = handle
            .fd
            .ok_or_else(|| Error::Bootstrap("CUDA heap handle without a file descriptor".into()))?;
        if bytes == 0 || bytes > exported {
            return Err(Error::Bootstrap(format!(
                "peer exported a heap of {exported} bytes, {bytes} expected"
            )));
        }
        self.ctx.make_current()?;
        let imported = driver::import_fd(fd.as_fd())?;
        // The driver holds its own reference now; our copy of the fd closes here.
        drop(fd);
        let physical = Physical {
            ctx: Arc::clone(&self.ctx),
            handle: imported,
        };
        // A heap on another GPU maps here only over a peer-to-peer path.
        let owner = driver::mem_handle_device(physical.handle)?;
        let owner_ordinal =
            usize::try_from(owner).map_err(|_| Error::NoDevice { backend: "cuda" })?;
        self.ctx
            .check_reaches(driver::device_get(owner_ordinal)?, owner)?;
        let view = map_physical(physical, exported, self.granularity)?;
        Ok(CudaMapping {
            base: view.mapped.base,
            len: bytes,
            owner: MappingOwner::Vmm { _view: view },
        })
    }

    fn alloc_device(&self, bytes: usize) -> Result<CudaDeviceMemory> {
        if bytes == 0 {
            return Err(Error::ZeroSize);
        }
        self.ctx.make_current()?;
        let ptr = driver::mem_alloc(bytes)?;
        Ok(CudaDeviceMemory {
            ctx: Arc::clone(&self.ctx),
            ptr,
            len: bytes,
        })
    }

    fn export_device_memory(&self, memory: &CudaDeviceMemory) -> Result<Shareable> {
        self.ctx.make_current()?;
        let export = IpcExport {
            handle: driver::ipc_get_mem_handle(memory.ptr)?,
            pid: std::process::id(),
            ordinal: self.ordinal as u32,
            ptr: memory.ptr,
            len: memory.len as u64,
        };
        Ok(Shareable {
            bytes: export.encode(),
            fd: None,
        })
    }

    fn import_device_memory(&self, handle: Shareable, bytes: usize) -> Result<CudaMapping> {
        let export = IpcExport::decode(&handle.bytes, "CUDA")?;
        if bytes == 0 || bytes as u64 > export.len {
            return Err(Error::Bootstrap(format!(
                "peer exported {} bytes of device memory, {bytes} expected",
                export.len
            )));
        }
        if export.pid == std::process::id() {
            // cuIpcOpenMemHandle fails with CUDA_ERROR_INVALID_CONTEXT in the exporting
            // process. All ranks of this process on one device share its primary context,
            // so the exporter's pointer is valid here as it is; another device's
            // allocation needs peer access from this context first.
            let peer = if export.ordinal as usize == self.ordinal {
                None
            } else {
                let peer = Context::retain_primary(export.ordinal as usize)?;
                self.ctx.check_reaches(peer.device, peer.ordinal)?;
                self.ctx.make_current()?;
                driver::ctx_enable_peer_access(peer.ctx)?;
                Some(DeviceContext(Arc::new(peer)))
            };
            return Ok(CudaMapping {
                base: export.ptr,
                len: bytes,
                owner: MappingOwner::Alias { _peer: peer },
            });
        }
        self.ctx.make_current()?;
        let ptr = driver::ipc_open_mem_handle(&export.handle)?;
        let opened = IpcOpened {
            ctx: Arc::clone(&self.ctx),
            ptr,
        };
        Ok(CudaMapping {
            base: ptr,
            len: bytes,
            owner: MappingOwner::Ipc { _opened: opened },
        })
    }

    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.ctx.make_current()?;
        let mut staging = self.staging()?;
        // SAFETY: `dst` is device memory of this rank's address space (the caller's
        // contract), and the staging ring is only ever used with this backend's stream.
        unsafe { staging.upload(dst, src, self.stream.stream, &|| self.count_sync()) }
    }

    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.make_current()?;
        let mut staging = self.staging()?;
        // SAFETY: `src` is readable device memory (the caller's contract), and the
        // staging ring is only ever used with this backend's stream.
        unsafe { staging.download(dst, src, self.stream.stream, &|| self.count_sync()) }
    }

    unsafe fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.ctx.make_current()?;
        // SAFETY: `dst..dst+bytes` is device memory of this rank (the caller's contract).
        unsafe { driver::memset_d8_async(dst, value, bytes, self.stream.stream) }
    }

    fn load_module(&self, objects: &'static CodeObjects) -> Result<CudaModule> {
        let (target, ptx) = code_object_for(objects, self.major, self.minor)?;
        let image = CString::new(ptx.strip_suffix(&[0]).unwrap_or(ptx)).map_err(|_| {
            Error::NoCodeObject {
                module: objects.crate_name(),
                arch: format!("{target} (the embedded PTX holds a NUL byte)"),
            }
        })?;
        self.ctx.make_current()?;
        let module = LoadedModule {
            ctx: Arc::clone(&self.ctx),
            module: driver::module_load_data(&image)?,
        };
        let functions = driver::module_functions(module.module)?
            .into_iter()
            .collect();
        Ok(CudaModule {
            functions,
            target,
            crate_name: objects.crate_name(),
            loaded: module,
        })
    }

    fn alloc_shared(&self, bytes: usize) -> Result<CudaShared> {
        self.ctx.make_current()?;
        let (host, device) = driver::mem_host_alloc_mapped(bytes.max(1))?;
        Ok(CudaShared {
            host,
            device,
            ctx: Arc::clone(&self.ctx),
        })
    }

    fn heap_access(&self, heap: &CudaHeap) -> Result<Box<dyn HeapAccess>> {
        Ok(Box::new(engine_heap::CudaEngineHeap::new(
            self.ordinal,
            heap.base(),
        )?))
    }

    fn heap_host_ptr(&self, _: &CudaHeap) -> Option<*mut u8> {
        None
    }

    fn kernels_on_host(&self) -> bool {
        false
    }

    unsafe fn watch(&self, module: &mut CudaModule, control: &CudaShared) -> Result<()> {
        self.ctx.make_current()?;
        let Some(global) = driver::module_get_global(module.loaded.module, c"SYMMEM_CONTROL")?
        else {
            return Ok(());
        };
        // SAFETY: the module's 8-byte pointer global; no kernel of the module has been
        // launched yet (it was just loaded).
        unsafe { driver::memcpy_htod(global, &control.device.to_ne_bytes()) }
    }

    unsafe fn launch(
        &self,
        module: &CudaModule,
        launch: &KernelLaunch<'_>,
        grid: Grid,
    ) -> Result<()> {
        let function = *module
            .functions
            .get(launch.name)
            .ok_or(Error::KernelNotFound {
                module: module.crate_name,
                kernel: launch.name,
            })?;
        self.ctx.make_current()?;
        let mut params = [std::ptr::null_mut::<c_void>(); 16];
        let params = params
            .get_mut(..launch.args.len())
            .ok_or(Error::Unsupported("a kernel of more than 16 parameters"))?;
        for (param, &arg) in params.iter_mut().zip(launch.args) {
            *param = arg.cast_mut().cast();
        }
        // SAFETY: one pointer per kernel parameter, in order, each to a value of that
        // parameter's ABI type (the caller's contract); the driver copies them before
        // returning.
        unsafe {
            driver::launch_kernel(
                function,
                grid.blocks,
                grid.threads,
                self.stream.stream,
                params,
            )
        }
    }

    fn grid_for_bytes(&self, bytes: usize) -> Grid {
        grid_for_bytes(bytes as u64)
    }

    fn collective_grid(&self) -> Grid {
        // Few enough blocks that several ranks' grids fit on one GPU at once.
        Grid::new(8, 256)
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx.make_current()?;
        let synced = driver::stream_synchronize(self.stream.stream);
        self.count_sync();
        synced
    }

    fn device_to_host_syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    type Graph = CudaGraph;
    fn begin_capture(&self) -> Result<()> {
        self.ctx.make_current()?;
        driver::stream_begin_capture(self.stream.stream)
    }
    fn end_capture(&self) -> Result<CudaGraph> {
        self.ctx.make_current()?;
        let graph = driver::stream_end_capture(self.stream.stream)?;
        let exec = driver::graph_instantiate(graph);
        // SAFETY: the graph was ended above and is not used again (an instantiated graph
        // does not need it).
        record_drop(unsafe { driver::graph_destroy(graph) });
        Ok(CudaGraph {
            exec: exec?,
            ctx: Arc::clone(&self.ctx),
        })
    }
    unsafe fn replay(&self, graph: &CudaGraph) -> Result<()> {
        self.ctx.make_current()?;
        driver::graph_launch(graph.exec, self.stream.stream)
    }
}

/// Launches captured from a rank's stream ([`Backend::begin_capture`]), instantiated on
/// its context: one `cuGraphLaunch` replays them all. Dropping it destroys the
/// instantiation (the driver defers that while a launch of it is in flight).
#[derive(Debug)]
pub struct CudaGraph {
    exec: driver::GraphExec,
    ctx: Arc<Context>,
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        record_drop(self.ctx.make_current());
        // SAFETY: instantiated in `end_capture` and not launched after this.
        record_drop(unsafe { driver::graph_exec_destroy(self.exec) });
    }
}

#[cfg(test)]
mod tests {
    //! CPU-side checks run everywhere; `cuda_gpu_*` tests need a device and print
    //! `skipped: <reason>` (and pass) when [`Cuda::new`] fails.

    use super::*;
    use crate::backend::launch_lowered;
    use std::process::Command;

    /// The env var that turns a `cuda_gpu_child_*` test into the child half of a
    /// cross-process test (its value: the parent's export, hex-encoded).
    const CHILD_ENV: &str = "SYMMEM_CUDA_CHILD";

    fn device_or_skip() -> Option<Cuda> {
        match Cuda::new(0) {
            Ok(cuda) => {
                println!("device: {cuda:?}");
                Some(cuda)
            }
            Err(e) => {
                println!("skipped: {e}");
                None
            }
        }
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| {
                (i as u8)
                    .wrapping_mul(31)
                    .wrapping_add(seed ^ (i >> 8) as u8)
            })
            .collect()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A device address as the pointer type a kernel parameter lowers to.
    fn device<T>(addr: u64) -> *mut T {
        std::ptr::without_provenance_mut(addr as usize)
    }

    /// Runs one test of this module in a child process of this test binary.
    fn run_child(test: &str, env: &str) -> std::process::ExitStatus {
        let path = format!(
            "{}::{test}",
            module_path!()
                .split_once("::")
                .map_or(module_path!(), |(_, p)| p)
        );
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &path, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, env)
            .status()
            .unwrap()
    }

    #[test]
    fn cuda_new_is_typed_error_without_driver() {
        match Cuda::new(0) {
            Err(
                e @ (Error::LibraryMissing {
                    library: "libcuda.so",
                }
                | Error::NoDevice { backend: "cuda" }),
            ) => {
                println!("no CUDA here, as expected: {e}");
            }
            Ok(cuda) => println!("a CUDA device is present: {cuda:?}"),
            Err(e) => panic!("expected LibraryMissing or NoDevice, got {e:?}"),
        }
        // Every entry point answers the same way before touching a device.
        let typed = |e: &Error| {
            matches!(
                e,
                Error::LibraryMissing { .. } | Error::NoDevice { backend: "cuda" }
            )
        };
        if let Err(e) = Cuda::device_count() {
            assert!(typed(&e), "{e:?}");
            assert!(typed(&Cuda::for_rank(5).unwrap_err()));
            assert!(typed(&Cuda::device_context(0).unwrap_err()));
        }
        // Past the last device is NoDevice whatever the machine.
        let n = Cuda::device_count().unwrap_or(0);
        assert!(matches!(
            Cuda::device_context(n),
            Err(Error::NoDevice { .. } | Error::LibraryMissing { .. })
        ));
    }

    #[test]
    fn cuda_new_twice_does_not_panic() {
        // The loader state is process-wide: a second probe must answer the same way.
        let a = Cuda::new(0).map(|_| ()).map_err(|e| e.to_string());
        let b = Cuda::new(0).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(a, b);
    }

    #[test]
    fn cuda_default_grid_is_one_vector_per_thread() {
        assert_eq!(
            grid_for_bytes(0),
            Grid {
                blocks: 1,
                threads: 256
            }
        );
        assert_eq!(
            grid_for_bytes(1),
            Grid {
                blocks: 1,
                threads: 256
            }
        );
        assert_eq!(
            grid_for_bytes(4096),
            Grid {
                blocks: 1,
                threads: 256
            }
        );
        assert_eq!(
            grid_for_bytes(4097),
            Grid {
                blocks: 2,
                threads: 256
            }
        );
        assert_eq!(
            grid_for_bytes(2 << 30),
            Grid {
                blocks: 524_288,
                threads: 256
            }
        );
        assert_eq!(grid_for_bytes(u64::MAX).blocks, i32::MAX as u32);
    }

    #[test]
    fn cuda_code_object_pick_by_compute_capability() {
        let t = ["sm_80", "sm_90", "sm_90a", "gfx942"];
        assert_eq!(pick_target(t, 9, 0), Some("sm_90"));
        assert_eq!(pick_target(t, 10, 0), Some("sm_90"));
        assert_eq!(pick_target(t, 8, 6), Some("sm_80"));
        assert_eq!(pick_target(t, 7, 5), None);
        // A crate's objects: the pick and the error name the crate and the architecture.
        static OBJECTS: CodeObjects = CodeObjects::new(
            "some_kernels",
            &[
                ("gfx942", b"amd"),
                ("sm_80", b"ampere"),
                ("sm_90", b"hopper"),
            ],
        );
        assert_eq!(
            code_object_for(&OBJECTS, 9, 0).unwrap(),
            ("sm_90", &b"hopper"[..])
        );
        assert_eq!(
            code_object_for(&OBJECTS, 8, 9).unwrap(),
            ("sm_80", &b"ampere"[..])
        );
        match code_object_for(&OBJECTS, 7, 0) {
            Err(Error::NoCodeObject { module, arch }) => {
                assert_eq!((module, arch.as_str()), ("some_kernels", "sm_70"))
            }
            other => panic!("expected NoCodeObject, got {other:?}"),
        }
        // symmem's own objects: sm_90 must be there for the H200, with every kernel.
        let kernels = &crate::backend::code_objects::KERNELS;
        assert_eq!(kernels.crate_name(), "symmem_kernels");
        if kernels.objects().is_empty() {
            // host/build.rs builds the kernels for every target; only a stubbed build
            // script (a CPU-only checkout) embeds none.
            println!("skipped: this build embeds no code objects of symmem_kernels");
            return;
        }
        let (target, ptx) = code_object_for(kernels, 9, 0).unwrap();
        assert_eq!(target, "sm_90");
        let text = std::str::from_utf8(ptx).unwrap();
        for k in [
            symmem_kernels::symmem_put.name(),
            symmem_kernels::symmem_get.name(),
            symmem_kernels::symmem_copy.name(),
        ] {
            assert!(
                text.contains(&format!(".entry {k}(")),
                "{k} missing from the PTX"
            );
        }
    }

    #[test]
    fn cuda_ipc_export_bytes_roundtrip() {
        let e = IpcExport {
            handle: [7; 64],
            pid: 1234,
            ordinal: 3,
            ptr: 0x7f00_0000_1000,
            len: 4096,
        };
        let bytes = e.encode();
        assert_eq!(bytes.len(), IpcExport::BYTES);
        assert_eq!(IpcExport::decode(&bytes, "CUDA").unwrap(), e);
        assert!(matches!(
            IpcExport::decode(&bytes[1..], "CUDA"),
            Err(Error::Bootstrap(_))
        ));
        assert_eq!(
            decode_heap_size(&(2u64 << 20).to_le_bytes()).unwrap(),
            2 << 20
        );
        assert!(matches!(
            decode_heap_size(&[0; 4]),
            Err(Error::Bootstrap(_))
        ));
    }

    /// Two ranks in one process: each a heap, each imports the other's, rank 0 puts
    /// into rank 1's heap through a peer-base table on the device; rank 1 (on its own
    /// thread) reads its own mapping and checks every byte.
    #[test]
    fn cuda_gpu_two_ranks_put_through_imported_heap() {
        let Some(r0) = device_or_skip() else { return };
        put_through_imported_heap(r0, Cuda::new(0).unwrap());
    }

    /// The backends of ranks 0 and 1 on devices 0 and 1, or the reason there are none.
    fn two_devices_or_skip() -> Option<(Cuda, Cuda)> {
        match Cuda::device_count() {
            Ok(n) if n >= 2 => Some((Cuda::new(0).unwrap(), Cuda::new(1).unwrap())),
            Ok(n) => {
                println!("skipped: {n} CUDA device(s), this test needs 2");
                None
            }
            Err(e) => {
                println!("skipped: {e}");
                None
            }
        }
    }

    /// As above with the two ranks on two GPUs: each maps the other's heap over the
    /// peer-to-peer path (or gets [`Error::PeerUnreachable`] where there is none).
    #[test]
    fn cuda_gpu_two_devices_put_through_imported_heap() {
        let Some((r0, r1)) = two_devices_or_skip() else {
            return;
        };
        let (d0, d1) = (
            driver::device_get(0).unwrap(),
            driver::device_get(1).unwrap(),
        );
        if !driver::device_can_access_peer(d0, d1).unwrap() {
            let h1 = r1.create_heap(r1.heap_granularity()).unwrap();
            let err = r0
                .import_heap(r1.export_heap(&h1).unwrap(), h1.len())
                .unwrap_err();
            assert!(matches!(
                err,
                Error::PeerUnreachable {
                    device: 0,
                    peer_device: 1
                }
            ));
            println!("skipped: devices 0 and 1 have no peer path ({err})");
            return;
        }
        put_through_imported_heap(r0, r1);
    }

    /// Rank 0 puts into rank 1's heap through its mapping of it and rank 1 gets from
    /// rank 0's, each through a two-entry table; the allocation path never syncs.
    fn put_through_imported_heap(r0: Cuda, r1: Cuda) {
        let g = r0.heap_granularity();
        let k0 = r0
            .load_module(&crate::backend::code_objects::KERNELS)
            .unwrap();
        let k1 = r1
            .load_module(&crate::backend::code_objects::KERNELS)
            .unwrap();
        println!(
            "granularity {g}, driver {}, code object {}",
            r0.driver_version(),
            k0.target()
        );
        assert!(g > 0 && g.is_power_of_two());
        let heap_bytes = 2 * g;
        let h0 = r0.create_heap(heap_bytes).unwrap();
        let h1 = std::thread::scope(|s| {
            s.spawn(|| r1.create_heap(heap_bytes).unwrap())
                .join()
                .unwrap()
        });
        assert_eq!(h0.len(), heap_bytes);
        let m01 = r0
            .import_heap(r1.export_heap(&h1).unwrap(), heap_bytes)
            .unwrap();
        let m10 = r1
            .import_heap(r0.export_heap(&h0).unwrap(), heap_bytes)
            .unwrap();
        println!(
            "rank0 heap {:#x}, rank1 heap {:#x}, rank1's heap in rank0 {:#x}, rank0's heap in rank1 {:#x}",
            h0.base(),
            h1.base(),
            m01.base(),
            m10.base()
        );
        assert_ne!(m01.base(), h1.base(), "an import must get its own address");
        assert_ne!(m10.base(), h0.base());

        // Rank 0: source buffer and the 2-entry peer-base table, in device memory.
        let bytes = g + 4096 + 13; // crosses the vector/tail split
        let offset = 4096usize;
        let src = pattern(bytes, 0x5a);
        let src_dev = r0.alloc_device(bytes).unwrap();
        let table: Vec<u8> = [h0.base(), m01.base()]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let bases = r0.alloc_device(table.len()).unwrap();
        // SAFETY: both allocations were just made with these lengths.
        unsafe {
            r0.upload(src_dev.base(), &src).unwrap();
            r0.upload(bases.base(), &table).unwrap();
        }
        assert_eq!(
            r0.device_to_host_syncs(),
            0,
            "allocation/upload path must not sync"
        );

        // Rank 1 clears its heap and waits (one counted sync) before rank 0 writes.
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: rank 1's own heap, all of it, which nothing else uses yet.
                unsafe { r1.memset(h1.base(), 0, heap_bytes).unwrap() };
                r1.synchronize().unwrap();
            });
        });
        assert_eq!(r1.device_to_host_syncs(), 1);

        let grid = r0.grid_for_bytes(bytes);
        println!("put of {bytes} bytes with {grid:?}");
        // SAFETY: `dst` lies in rank 0's heap with `bytes` to spare, and translates
        // through the two-entry table to rank 1's heap mapped here; `src` holds `bytes`.
        unsafe {
            launch_lowered(
                &r0,
                &k0,
                symmem_kernels::symmem_put,
                grid,
                (
                    device(h0.base() + offset as u64),
                    device(src_dev.base()),
                    bytes as u64,
                    device(bases.base()),
                    2,
                    0,
                    1,
                ),
            )
            .unwrap()
        };
        r0.synchronize().unwrap();
        assert_eq!(r0.device_to_host_syncs(), 1);

        let mut got = vec![0xffu8; heap_bytes];
        std::thread::scope(|s| {
            // SAFETY: rank 1's own heap, which rank 0's put (complete) wrote.
            s.spawn(|| unsafe { r1.download(&mut got, h1.base()).unwrap() });
        });
        assert_eq!(r1.device_to_host_syncs(), 2);
        assert!(
            got[..offset].iter().all(|&b| b == 0),
            "bytes before the put changed"
        );
        assert!(got[offset..offset + bytes] == src[..], "put data differs");
        assert!(
            got[offset + bytes..].iter().all(|&b| b == 0),
            "bytes after the put changed"
        );
        // Rank 0 sees rank 1's heap through its own mapping too, and its own heap is untouched.
        let mut via0 = vec![0u8; bytes];
        let mut own0 = vec![0xffu8; 64];
        // SAFETY: rank 1's heap as mapped here and rank 0's own heap, inside both.
        unsafe {
            r0.download(&mut via0, m01.base() + offset as u64).unwrap();
            r0.memset(h0.base(), 0x11, 64).unwrap();
            r0.download(&mut own0, h0.base()).unwrap();
        }
        assert!(via0 == src);
        assert!(own0.iter().all(|&b| b == 0x11));
        assert_eq!(r0.device_to_host_syncs(), 3);

        // Get back: rank 1 reads rank 0's heap through its own table.
        let table1: Vec<u8> = [m10.base(), h1.base()]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let bases1 = r1.alloc_device(16).unwrap();
        // SAFETY: the table's allocation holds its 16 bytes.
        unsafe { r1.upload(bases1.base(), &table1).unwrap() };
        let dst1 = r1.alloc_device(64).unwrap();
        // SAFETY: `src` is rank 1's heap, which the table translates to rank 0's heap
        // mapped here; `dst` holds 64 bytes.
        unsafe {
            launch_lowered(
                &r1,
                &k1,
                symmem_kernels::symmem_get,
                r1.grid_for_bytes(64),
                (
                    device(dst1.base()),
                    device(h1.base()),
                    64,
                    device(bases1.base()),
                    2,
                    1,
                    0,
                ),
            )
            .unwrap()
        };
        let mut back = vec![0u8; 64];
        // SAFETY: the 64 bytes of `dst1`.
        unsafe { r1.download(&mut back, dst1.base()).unwrap() };
        assert!(
            back.iter().all(|&b| b == 0x11),
            "get through the imported heap: {back:?}"
        );

        drop((m01, m10, h0, h1, src_dev, bases, bases1, dst1));
        drop((k0, k1));
        drop((r0, r1));
        assert_eq!(
            Cuda::drop_errors(),
            0,
            "drop errors: {:?}",
            Cuda::last_drop_error()
        );
    }

    /// What `cuda`'s copy kernel reads at `src` (`len` bytes), through a fresh buffer.
    ///
    /// # Safety
    /// `src..src + len` is device memory `cuda`'s kernels may read.
    unsafe fn copy_kernel_read(cuda: &Cuda, src: u64, len: usize) -> Vec<u8> {
        let module = cuda
            .load_module(&crate::backend::code_objects::KERNELS)
            .unwrap();
        let dst = cuda.alloc_device(len).unwrap();
        let mut got = vec![0u8; len];
        // SAFETY: `dst` holds `len` bytes; `src` is the caller's.
        unsafe {
            launch_lowered(
                cuda,
                &module,
                symmem_kernels::symmem_copy,
                cuda.grid_for_bytes(len),
                (device(dst.base()), device(src), len as u64),
            )
            .unwrap();
            cuda.download(&mut got, dst.base()).unwrap();
        }
        got
    }

    /// In one process, rank 1 on device 1 imports rank 0's `cuMemAlloc` on device 0: an
    /// alias with peer access enabled, which rank 1's copy kernel reads.
    #[test]
    fn cuda_gpu_two_devices_in_process_alias() {
        let Some((r0, r1)) = two_devices_or_skip() else {
            return;
        };
        let len = (1 << 20) + 5;
        let mem = r0.alloc_device(len).unwrap();
        let data = pattern(len, 9);
        // SAFETY: the allocation just made, `len` bytes.
        unsafe { r0.upload(mem.base(), &data).unwrap() };
        r0.synchronize().unwrap();
        let alias = match r1.import_device_memory(r0.export_device_memory(&mem).unwrap(), len) {
            Ok(alias) => alias,
            Err(e @ Error::PeerUnreachable { .. }) => {
                println!("skipped: {e}");
                return;
            }
            Err(e) => panic!("cross-device alias: {e}"),
        };
        assert!(alias.is_alias());
        assert_eq!(alias.base(), mem.base());
        // SAFETY: the alias of `mem` (live), with peer access enabled for rank 1.
        let got = unsafe { copy_kernel_read(&r1, alias.base(), len) };
        assert!(got == data, "device 1 read device 0's memory wrong");
        drop((alias, mem));
        assert_eq!(Cuda::drop_errors(), 0, "{:?}", Cuda::last_drop_error());
    }

    /// `cuMemAlloc` + IPC in one process gives a non-owning alias; a copy kernel works on
    /// it; and a child process opens the same handle with `cuIpcOpenMemHandle` for real.
    #[test]
    fn cuda_gpu_device_memory_ipc_alias_and_child_process() {
        let Some(r0) = device_or_skip() else { return };
        let r1 = Cuda::new(0).unwrap();
        let len = 1 << 20;
        let mem = r0.alloc_device(len).unwrap();
        let data = pattern(len, 3);
        // SAFETY: the allocation just made, `len` bytes.
        unsafe { r0.upload(mem.base(), &data).unwrap() };
        let shared = r0.export_device_memory(&mem).unwrap();
        let bytes = shared.bytes.clone();
        let alias = r1.import_device_memory(shared, len).unwrap();
        assert!(alias.is_alias());
        assert_eq!(alias.base(), mem.base());
        assert_eq!(r0.device_to_host_syncs() + r1.device_to_host_syncs(), 0);
        r0.synchronize().unwrap();
        // Rank 1 copies from the alias with the direct copy kernel.
        // SAFETY: the alias of `mem`, which lives.
        assert!(unsafe { copy_kernel_read(&r1, alias.base(), len) } == data);

        let status = run_child("cuda_gpu_child_ipc_open", &hex(&bytes));
        assert!(status.success(), "child failed: {status}");
        let mut after = vec![0u8; 4096];
        // SAFETY: the first 4 KiB of `mem`.
        unsafe { r0.download(&mut after, mem.base()).unwrap() };
        assert!(
            after.iter().all(|&b| b == 0xa5),
            "child's write not visible"
        );
        drop((alias, mem));
        assert_eq!(
            Cuda::drop_errors(),
            0,
            "drop errors: {:?}",
            Cuda::last_drop_error()
        );
    }

    /// The child half of the test above: opens the parent's IPC handle, checks the
    /// parent's data, writes 0xa5 over the first 4 KiB.
    #[test]
    fn cuda_gpu_child_ipc_open() {
        let Ok(env) = std::env::var(CHILD_ENV) else {
            println!(
                "skipped: runs only as the child of cuda_gpu_device_memory_ipc_alias_and_child_process"
            );
            return;
        };
        let cuda = Cuda::new(0).unwrap();
        let len = 1 << 20;
        let m = cuda
            .import_device_memory(
                Shareable {
                    bytes: unhex(&env),
                    fd: None,
                },
                len,
            )
            .unwrap();
        assert!(m.is_ipc());
        println!(
            "child {}: opened the parent's allocation at {:#x}",
            std::process::id(),
            m.base()
        );
        let mut got = vec![0u8; len];
        // SAFETY: the parent's allocation as opened here, `len` bytes.
        unsafe { cuda.download(&mut got, m.base()).unwrap() };
        assert!(got == pattern(len, 3), "child read wrong data");
        // SAFETY: as above, its first 4 KiB.
        unsafe { cuda.memset(m.base(), 0xa5, 4096).unwrap() };
        cuda.synchronize().unwrap();
    }

    /// A heap exported as a POSIX fd, taken by a child process (pidfd_getfd), imported,
    /// mapped and written there.
    #[test]
    fn cuda_gpu_heap_fd_into_child_process() {
        let Some(r0) = device_or_skip() else { return };
        let g = r0.heap_granularity();
        let heap = r0.create_heap(g).unwrap();
        // SAFETY: the heap just made, `g` bytes.
        unsafe { r0.upload(heap.base(), &pattern(g, 9)).unwrap() };
        r0.synchronize().unwrap();
        let shared = r0.export_heap(&heap).unwrap();
        let fd = shared.fd.as_ref().unwrap();
        use std::os::fd::AsRawFd;
        let env = format!(
            "{}:{}:{}",
            std::process::id(),
            fd.as_raw_fd(),
            hex(&shared.bytes)
        );
        let status = run_child("cuda_gpu_child_heap_import", &env);
        assert!(status.success(), "child failed: {status}");
        let mut after = vec![0u8; g];
        // SAFETY: the heap, `g` bytes.
        unsafe { r0.download(&mut after, heap.base()).unwrap() };
        let mut want = pattern(g, 9);
        want[..8192].fill(0x3c);
        assert!(
            after == want,
            "child's write through its own mapping not visible"
        );
    }

    /// The child half of the test above.
    #[test]
    fn cuda_gpu_child_heap_import() {
        let Ok(env) = std::env::var(CHILD_ENV) else {
            println!("skipped: runs only as the child of cuda_gpu_heap_fd_into_child_process");
            return;
        };
        let mut parts = env.split(':');
        let pid: libc::pid_t = parts.next().unwrap().parse().unwrap();
        let remote_fd: libc::c_int = parts.next().unwrap().parse().unwrap();
        let bytes = unhex(parts.next().unwrap());
        // SAFETY: plain syscalls with integer arguments; results are checked.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(
            pidfd >= 0,
            "pidfd_open: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: as above.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, remote_fd, 0) };
        assert!(fd >= 0, "pidfd_getfd: {}", std::io::Error::last_os_error());
        use std::os::fd::FromRawFd;
        // SAFETY: both are fresh descriptors this process owns.
        let (fd, _pidfd) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fd as i32),
                std::os::fd::OwnedFd::from_raw_fd(pidfd as i32),
            )
        };
        let cuda = Cuda::new(0).unwrap();
        let g = cuda.heap_granularity();
        let m = cuda
            .import_heap(
                Shareable {
                    bytes,
                    fd: Some(fd),
                },
                g,
            )
            .unwrap();
        println!(
            "child {}: mapped the parent's heap at {:#x}",
            std::process::id(),
            m.base()
        );
        let mut got = vec![0u8; g];
        // SAFETY: the parent's heap as mapped here, `g` bytes.
        unsafe { cuda.download(&mut got, m.base()).unwrap() };
        assert!(got == pattern(g, 9), "child read wrong heap data");
        // SAFETY: as above, its first 8 KiB.
        unsafe { cuda.memset(m.base(), 0x3c, 8192).unwrap() };
        cuda.synchronize().unwrap();
    }

    #[test]
    fn cuda_gpu_bad_ordinal_and_zero_sizes() {
        let Some(r0) = device_or_skip() else { return };
        assert!(matches!(
            Cuda::new(4096),
            Err(Error::NoDevice { backend: "cuda" })
        ));
        assert!(matches!(r0.create_heap(0), Err(Error::ZeroSize)));
        assert!(matches!(r0.alloc_device(0), Err(Error::ZeroSize)));
        assert_eq!(r0.kind(), BackendKind::Cuda);
        assert!(!r0.device_name().is_empty());
        // A heap of one byte rounds up to the granularity.
        assert_eq!(r0.create_heap(1).unwrap().len(), r0.heap_granularity());
        assert_eq!(r0.device_to_host_syncs(), 0);
    }
}
