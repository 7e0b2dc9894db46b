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
//! # Streams and cudarc
//!
//! A rank's stream is a cudarc [`CudaStream`] of the primary context (cudarc's
//! `CudaContext::new` retains the same one): [`Cuda::new`] makes it, and
//! [`Cuda::from_cudarc_stream`] adopts a program's own instead, so that the program's
//! cudarc work and symmem's (copies, kernels, collectives, graph capture) run on one
//! stream, in the order enqueued. cudarc owns the stream and destroys it when the last
//! `Arc` goes; the backend holds one for its life and waits for the stream when dropped.
//! [`Cuda::cudarc_stream`] hands it out, and [`crate::CudarcView`] lends this rank's
//! memory to cudarc. Failures of cudarc's own releases are recorded in its context
//! (`CudaContext::check_err`), not in [`Cuda::drop_errors`].
//!
//! # Memory
//!
//! - The heap is VMM memory: `cuMemCreate` (POSIX fd handle type requested) mapped into
//!   a `cuMemAddressReserve` range with `cuMemMap` + `cuMemSetAccess`. It is exported as
//!   a file descriptor (`cuMemExportToShareableHandle`); [`Backend::import_heap`](super::Backend::import_heap) imports
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
//! for it in a kernel deadlocks both. So where ranks of one process share the device, a
//! world defers the frees of its [`crate::DeviceBuffer`]s to its next barrier (after the
//! rank's own work is complete, before any peer can pass it) or its departure
//! ([`Backend::syncs_wait_for_the_device`](super::Backend::syncs_wait_for_the_device)).
//! Symmetric buffers are safe: freeing one returns heap space and makes no driver call.
//! (Ranks as processes, or one GPU per rank, have no such coupling.) Errors during drop
//! never panic; they are recorded in the backend's own [`Cuda::drop_errors`], which the
//! heaps, mappings, allocations and modules it made share.
//!
//! # Several GPUs
//!
//! [`Cuda::for_rank`] places rank `r` on device `r % count`. A heap imported from another
//! device is mapped with access for this rank's device, which needs a peer-to-peer path
//! between the two: [`Backend::import_heap`](super::Backend::import_heap) asks the driver which device backs the
//! imported handle and answers [`Error::PeerUnreachable`] where `cuDeviceCanAccessPeer`
//! says no, instead of leaving a mapping whose first access faults. An in-process import
//! of another device's `cuMemAlloc` enables peer access from this rank's context to that
//! device's primary context (`cuCtxEnablePeerAccess`, once per pair) and keeps a retain
//! of it for the alias's lifetime. Cross-process IPC opens use
//! `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.

mod driver;
mod engine_heap;
mod handles;
mod staging;
pub mod timing;

/// The cudarc crate this backend is built on: the version whose types
/// [`Cuda::from_cudarc_stream`], [`Cuda::cudarc_stream`] and [`crate::CudarcView`] take, with
/// the features `std`, `driver`, `dynamic-loading` and `cuda-13000`. A program that loads
/// PTX with cudarc (`CudaContext::load_module`) depends on the same version itself, adding
/// its `nvrtc` feature.
pub use cudarc;

use super::gpu::{self, DeviceScope, DropErrors};
use super::ipc::IpcExport;
use super::{CodeObjects, DeviceRegion, HeapAccess, KernelLaunch, RangeExport, Sender, Shareable};
use crate::error::{Error, Result};
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaStream};
use handles::{Context, CudaDriver, KernelParams, Physical, VmmView, map_physical};
use std::ffi::CString;
use std::fmt;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};

/// The largest `gridDim.x` CUDA accepts.
const MAX_BLOCKS: u64 = i32::MAX as u64;

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

/// A peer's memory as mapped in this rank's address space: its VMM heap, its
/// `cuMemAlloc` opened with `cuIpcOpenMemHandle`, or (exported by this same process) a
/// non-owning alias that keeps a retain of the exporter's device's primary context where
/// that is another device.
pub type CudaMapping = gpu::Mapping<CudaDriver>;

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
        self.ctx.release(|| {
            // SAFETY: `ptr` came from `cuMemAlloc` and is owned by this value.
            unsafe { driver::mem_free(self.ptr) }
        });
    }
}

// Both backends' handles are the shared 64-byte encoding of `backend::ipc`.
const _: () = assert!(driver::IPC_HANDLE_BYTES == super::ipc::HANDLE_BYTES);

/// The heap size a heap export carries in [`Shareable::bytes`].
pub(super) fn decode_heap_size(bytes: &[u8]) -> Result<usize> {
    let size = bytes
        .try_into()
        .ok()
        .map(u64::from_le_bytes)
        .and_then(|s| usize::try_from(s).ok());
    size.ok_or(Error::BadMessage {
        from: None,
        what: "CUDA heap export (its size is not 8 bytes)",
    })
}

/// Decodes `bytes` from a peer as a CUDA heap's size, checking that it is a typed error
/// or re-encodes to the very bytes it came from (see [`super::check_handle_bytes`]).
///
/// # Panics
/// Where the decode breaks that.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_heap_size_bytes(bytes: &[u8]) {
    match decode_heap_size(bytes) {
        Ok(size) => assert_eq!((size as u64).to_le_bytes(), bytes),
        Err(e) => assert!(matches!(e, Error::BadMessage { from: None, .. }), "{e:?}"),
    }
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
    device: &str,
    major: i32,
    minor: i32,
) -> Result<(&'static str, &'static [u8])> {
    let all = objects.objects();
    let picked = pick_target(all.iter().map(|(target, _)| *target), major, minor)
        .and_then(|t| all.iter().copied().find(|(target, _)| *target == t))
        .ok_or_else(|| Error::NoCodeObject {
            module: objects.crate_name(),
            device: device.to_owned(),
            arch: format!("sm_{major}{minor}"),
            built: all.iter().map(|(target, _)| *target).collect(),
        })?;
    tracing::debug!(
        module = objects.crate_name(),
        device = %format!("sm_{major}{minor}"),
        ptx = picked.0,
        "code object picked (an older PTX target is compiled for the device by the driver)"
    );
    Ok(picked)
}

/// Page-locked host memory mapped into the device (`cuMemHostAlloc` with
/// `CU_MEMHOSTALLOC_DEVICEMAP`): the rank's control block of bounded waits. Freed on drop.
pub type CudaShared = gpu::HostMapped<CudaDriver>;

/// A kernel crate's PTX loaded on one device, every kernel loaded and found by name.
pub type CudaModule = gpu::Module<CudaDriver>;

/// The CUDA backend of one rank: a device, its primary context and a non-blocking
/// stream, which is a cudarc stream ([`Cuda::cudarc_stream`], [`Cuda::from_cudarc_stream`]). Kernel crates are loaded with [`Backend::load_module`](super::Backend::load_module).
///
/// # Examples
/// One rank per GPU (round-robin where ranks outnumber GPUs), the CPU backend where no
/// CUDA driver answers:
/// ```
/// use symmem::backend::{cpu::Cpu, cuda::Cuda};
/// use symmem::{Config, World};
///
/// let ranks = match Cuda::device_count() {
///     Ok(_) => symmem::spawn_ranks(2, &Config::default(), Cuda::for_rank, |w| Ok(w.rank()))?,
///     Err(e) if e.is_device_missing() => {
///         symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |w| Ok(w.rank()))?
///     }
///     Err(e) => return Err(e),
/// };
/// assert_eq!(ranks.len(), 2);
/// # Ok::<(), symmem::Error>(())
/// ```
/// An application's own stream instead: [`Cuda::from_cudarc_stream`]
/// ([`crate::guides::cudarc`]).
pub struct Cuda {
    major: i32,
    minor: i32,
    driver_version: i32,
    granularity: usize,
    vmm_fd_supported: bool,
    // Field order is drop order: the rank (which waits for its stream), the stream (which
    // cudarc destroys when no clone of it is left), staging, then the context retain.
    rank: gpu::Rank<CudaDriver>,
    stream: Arc<CudaStream>,
    staging: Mutex<staging::Staging>,
    ctx: Arc<Context>,
    /// This rank's hardware queue of the device (see `gpu::queues`), given back last.
    _queue: gpu::QueueSlot,
}

/// CUDA's hardware queues per context: `CUDA_DEVICE_MAX_CONNECTIONS` (1 to 32, 8 by
/// default); symmem asks for the most, 32, when it is unset (see `gpu::queues`), except
/// under MPS ([`under_mps`]).
static QUEUES: gpu::QueueSetting = gpu::QueueSetting {
    variable: "CUDA_DEVICE_MAX_CONNECTIONS",
    ours: 32,
    default: 8,
    set_by_us: std::sync::OnceLock::new(),
    leave_unset: under_mps,
};

/// Why `CUDA_DEVICE_MAX_CONNECTIONS` stays unset in an MPS client: the server's clients
/// share one pool of connections and each owns what it asked for, so 32 per process ran
/// the pool dry (on the H200, 4 ranks as processes under MPS: `cuDevicePrimaryCtxRetain`
/// failed with `CUDA_ERROR_OUT_OF_MEMORY` in every one). A process is a client when an
/// MPS control daemon's pipe is in `CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`).
fn under_mps() -> Option<&'static str> {
    let pipes = std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
        .filter(|d| !d.is_empty())
        .map_or_else(|| "/tmp/nvidia-mps".into(), std::path::PathBuf::from);
    pipes.join("control").exists().then_some(
        "an MPS control daemon is running: its clients share one pool of connections, \
         which 32 per process would run dry",
    )
}

impl fmt::Debug for Cuda {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runtime: [(&str, &dyn fmt::Debug); 2] = [
            ("driver_version", &self.driver_version),
            ("granularity", &self.granularity),
        ];
        self.rank.fmt_backend(f, "Cuda", &runtime)
    }
}

impl Cuda {
    /// GPUs the driver sees (after `cuInit`).
    ///
    /// # Errors
    /// [`Error::LibraryMissing`] without a
    /// usable `libcuda`, [`Error::NoDevice`] when the driver reports none.
    pub fn device_count() -> Result<usize> {
        if !driver::library_present() {
            return Err(Error::LibraryMissing {
                library: "libcuda.so",
            });
        }
        gpu::configure_queues(&QUEUES);
        driver::init()?;
        driver::driver_at_least(driver::DRIVER_FLOOR, "symmem's CUDA backend")?;
        driver::device_count()
    }

    /// Opens device `ordinal`, with a new non-blocking stream made through cudarc (see
    /// [`Cuda::cudarc_stream`]).
    ///
    /// # Errors
    /// [`Error::LibraryMissing`] when `libcuda` cannot be loaded (checked before any driver
    /// call, so it is never a panic) or is the toolkit's stub; [`Error::NoDevice`] when the
    /// driver sees no device or fewer than `ordinal + 1`; [`Error::HardwareQueues`] when
    /// this process's ranks on the device would outnumber its hardware queues
    /// (`CUDA_DEVICE_MAX_CONNECTIONS`); [`Error::Driver`] for any other driver failure.
    pub fn new(ordinal: usize) -> Result<Self> {
        if ordinal >= Self::device_count()? {
            return Err(Error::NoDevice { backend: "cuda" });
        }
        // Before this rank retains the primary context: whether someone else made it.
        let queue = gpu::QueueSlot::take(&QUEUES, ordinal, || {
            driver::primary_ctx_active(driver::device_get(ordinal)?)
        })?;
        let ctx = Arc::new(Context::retain_primary(ordinal, Arc::default())?);
        // cudarc's `CudaContext::new` retains the same primary context; its stream is this
        // rank's, destroyed by cudarc once the backend and every clone handed out are gone.
        // `fork` of the default stream rather than `new_stream`: the latter waits for the
        // whole device (`cuCtxSynchronize`) on a context's first stream, which other ranks'
        // collectives on this GPU could hold up (see "Several ranks on one GPU"); the fork
        // only orders its stream after the legacy default stream's work, which no symmem
        // stream (all non-blocking) takes part in.
        let stream = CudaContext::new(ordinal)?.default_stream().fork()?;
        Self::on_stream(ctx, stream, queue)
    }

    /// The backend of the device that `stream` belongs to, enqueueing all its work (copies,
    /// kernels, collectives, graph capture and replay) on `stream`: symmem's work and the
    /// work the caller enqueues on `stream` through cudarc run in the order they were
    /// enqueued, with no synchronisation between them.
    ///
    /// The backend keeps `stream` (a clone of the `Arc`) for its whole life and never
    /// destroys it: cudarc does, when the last clone is dropped. Each rank needs a stream
    /// of its own (ranks' collectives wait for each other on the device, so two ranks on
    /// one stream wait forever), made for example with
    /// `CudaContext::new(ordinal)?.new_stream()?`.
    ///
    /// # Errors
    /// [`Error::ForeignStream`] when `stream`'s context is not its device's primary context
    /// (the one every symmem backend and `CudaContext::new` use: memory of one context
    /// is not addressable from another), or when `stream` is a default stream
    /// (`CudaContext::default_stream`, `per_thread_stream`: one is shared by every user of
    /// the context and cannot be captured into a graph, the other is a different stream on
    /// each thread); as [`Cuda::new`] otherwise.
    pub fn from_cudarc_stream(stream: Arc<CudaStream>) -> Result<Self> {
        let ordinal = stream.context().ordinal();
        // The caller's context exists: it has the queues the variable said when it was
        // made, or the driver's default if symmem set the variable after that.
        let queue = gpu::QueueSlot::take(&QUEUES, ordinal, || Ok(true))?;
        let ctx = Arc::new(Context::retain_primary(ordinal, Arc::default())?);
        Self::on_stream(ctx, stream, queue)
    }

    /// The backend of `ctx`'s device on `stream`, holding hardware queue `queue`, after
    /// checking that `stream` is a stream of its own in that context.
    fn on_stream(
        ctx: Arc<Context>,
        stream: Arc<CudaStream>,
        queue: gpu::QueueSlot,
    ) -> Result<Self> {
        let ordinal = ctx.ordinal as usize;
        let foreign = |why| Error::ForeignStream {
            device: ordinal,
            why,
        };
        if !ctx.ctx.is(stream.context().cu_ctx()) {
            return Err(foreign("its context is not the device's primary context"));
        }
        let raw = driver::Stream::of_cudarc(&stream);
        if raw.is_default() {
            return Err(foreign("it is a default stream (legacy or per-thread)"));
        }
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

        let device = gpu::DeviceInfo {
            ordinal,
            name,
            arch: format!("sm_{major}{minor}"),
        };
        let owner = gpu::StreamOwner::Foreign {
            _keep: Box::new(Arc::clone(&stream)),
        };
        let rank = gpu::Rank::new(Arc::clone(&ctx), raw, owner, device);
        let staging = Mutex::new(staging::Staging::new(Arc::clone(&ctx))?);

        Ok(Self {
            major,
            minor,
            driver_version,
            granularity,
            vmm_fd_supported,
            rank,
            stream,
            staging,
            ctx,
            _queue: queue,
        })
    }

    /// The backend for `rank` on a machine with several GPUs: device
    /// `rank % device_count`, so one GPU per rank while there are enough and ranks
    /// sharing GPUs round-robin after that. `rank` is the rank's place on its machine:
    /// the world rank where every rank runs on one machine (ranks as threads), else
    /// [`crate::topology::local_rank`]'s.
    ///
    /// # Errors
    /// As [`Cuda::device_count`] and [`Cuda::new`].
    pub fn for_rank(rank: usize) -> Result<Self> {
        Self::new(rank % Self::device_count()?)
    }

    /// The stream this backend enqueues all its work on, as cudarc's: work a caller
    /// enqueues on it through cudarc (kernels with `launch_builder`, copies) and symmem's
    /// work run in the order they were enqueued, with no synchronisation between them, and
    /// a graph capture of the backend ([`Backend::begin_capture`](super::Backend::begin_capture)) records both. It
    /// is the stream [`Cuda::from_cudarc_stream`] was given, or the one [`Cuda::new`] made
    /// through cudarc; a clone stays valid after the backend is dropped, and cudarc
    /// destroys the stream when the last clone goes. Its context is the device's primary
    /// context, so cudarc allocations made through it are addressable by symmem's kernels
    /// and the reverse.
    pub fn cudarc_stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The device ordinal this backend drives.
    pub fn ordinal(&self) -> usize {
        self.rank.ordinal()
    }

    /// A retain of this backend's context, for copies between devices.
    pub fn context(&self) -> DeviceContext {
        DeviceContext(Arc::clone(&self.ctx))
    }

    /// A retain of device `ordinal`'s primary context (the one that device's backends
    /// use), for copies between devices. It belongs to no backend: a failure to release
    /// it is recorded in a record of its own, which goes with it.
    ///
    /// # Errors
    /// [`Error::NoDevice`] for an ordinal the driver does not know; [`Error::Driver`].
    pub fn device_context(ordinal: usize) -> Result<DeviceContext> {
        let ctx = Context::retain_primary(ordinal, Arc::default())?;
        Ok(DeviceContext(Arc::new(ctx)))
    }

    /// The device's architecture, `sm_{major}{minor}`.
    pub fn arch(&self) -> &str {
        self.rank.arch()
    }

    /// The driver's CUDA version (`cuDriverGetVersion`, e.g. 13000).
    pub fn driver_version(&self) -> i32 {
        self.driver_version
    }

    /// The driver calls that failed while dropping this backend or anything it made
    /// (heaps, mappings, allocations, modules, graphs, timers); hold it to read them
    /// after those are gone.
    pub fn drop_errors(&self) -> Arc<DropErrors> {
        Arc::clone(&self.ctx.drop_errors)
    }

    /// This rank's page-locked staging ring.
    fn staging(&self) -> Result<std::sync::MutexGuard<'_, staging::Staging>> {
        self.staging.lock().map_err(|_| Error::LockPoisoned {
            what: "the CUDA staging ring",
        })
    }
}

impl gpu::GpuBackend for Cuda {
    type Runtime = CudaDriver;
    type Heap = CudaHeap;
    type DeviceMemory = CudaDeviceMemory;
    type Graph = CudaGraph;

    fn rank(&self) -> &gpu::Rank<CudaDriver> {
        &self.rank
    }

    fn shared_drop_errors(&self) -> Arc<DropErrors> {
        self.drop_errors()
    }

    fn loads_kernels_lazily(&self) -> Option<bool> {
        driver::loads_lazily()
    }

    fn heap_granularity(&self) -> usize {
        self.granularity
    }

    fn create_heap(&self, bytes: usize) -> Result<CudaHeap> {
        if bytes == 0 {
            return Err(Error::ZeroSize);
        }
        if !self.vmm_fd_supported {
            return Err(Error::DeviceLacks {
                device: self.ctx.ordinal as usize,
                feature: "VMM allocations exportable as POSIX file descriptors \
                          (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)",
            });
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

    fn import_heap(&self, handle: Shareable, bytes: usize, _sender: Sender) -> Result<CudaMapping> {
        // A file descriptor of the peer's physical memory: what the driver maps is checked
        // by the driver itself (`cuMemMap` of more than the allocation fails), whoever sent it.
        let exported = decode_heap_size(&handle.bytes)?;
        let fd = handle.fd.ok_or(Error::BadMessage {
            from: None,
            what: "CUDA heap export without a file descriptor",
        })?;
        if bytes == 0 || bytes > exported {
            return Err(Error::BadPeerMemory {
                needed: bytes,
                size: exported as u64,
                why: "the peer exported a heap smaller than this rank maps",
            });
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
        Ok(CudaMapping::imported(view.mapped.base, bytes, view))
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
        self.rank.export_ipc(memory.ptr, memory.len, 0)
    }

    fn import_device_memory(
        &self,
        handle: Shareable,
        bytes: usize,
        sender: Sender,
    ) -> Result<CudaMapping> {
        let export = IpcExport::decode_covering(&handle, "CUDA IPC export", bytes)?;
        export.check_sender(sender, bytes)?;
        // The mapped range: `bytes` from `offset` of the exported allocation.
        let end = (export.offset + bytes as u64) as usize;
        if export.is_from_this_process() {
            // cuIpcOpenMemHandle fails with CUDA_ERROR_INVALID_CONTEXT in the exporting
            // process. All ranks of this process on one device share its primary context,
            // so the exporter's pointer is valid here as it is; another device's
            // allocation needs peer access from this context first. A pid is only a
            // claim: the pointer is aliased only if it is the base of an allocation of
            // this process, on the device named, covering what is mapped.
            let owned = driver::allocation_of(export.ptr)
                .ok()
                .filter(|&(base, size, ordinal)| {
                    base == export.ptr && size >= end && ordinal == export.ordinal as usize
                });
            if owned.is_none() {
                return Err(Error::BadPeerMemory {
                    needed: bytes,
                    size: export.len,
                    why: "the export names this process, but its pointer is the base of no \
                          allocation of this process on the device it names",
                });
            }
            let peer = if export.ordinal as usize == self.rank.ordinal() {
                None
            } else {
                let drop_errors = Arc::clone(&self.ctx.drop_errors);
                let peer = Context::retain_primary(export.ordinal as usize, drop_errors)?;
                self.ctx.check_reaches(peer.device, peer.ordinal)?;
                self.ctx.make_current()?;
                driver::ctx_enable_peer_access(peer.ctx)?;
                Some(DeviceContext(Arc::new(peer)))
            };
            return Ok(CudaMapping::alias(export.ptr + export.offset, bytes, peer));
        }
        let handle = export.handle_to_open(
            bytes,
            "a peer process's memory with no CUDA IPC handle (cuMemAllocAsync's \
                      stream-ordered pool, which cudarc allocates from, or VMM memory): \
                      ranks in other processes can map only cuMemAlloc/cudaMalloc memory; \
                      allocate it so, or use a symmetric buffer, or run the ranks as \
                      threads of one process",
        )?;
        self.ctx.make_current()?;
        let ptr = driver::ipc_open_mem_handle(handle)?;
        // Closed on drop, so also if the check below refuses it.
        let opened = CudaMapping::opened(Arc::clone(&self.ctx), ptr, end);
        // The driver's word on what was opened bounds what is mapped, not the peer's.
        let (base, size, _) = driver::allocation_of(ptr)?;
        export.check_opened(ptr, (base, size), bytes)?;
        Ok(opened.range(export.offset, bytes))
    }

    unsafe fn export_range(&self, ptr: u64, bytes: usize) -> Result<RangeExport> {
        let refuse = |why: String| Error::NotShareable {
            addr: ptr,
            bytes,
            why,
        };
        self.ctx.make_current()?;
        let (base, size, ordinal) = driver::allocation_of(ptr).map_err(|e| {
            refuse(format!(
                "the CUDA driver knows no device allocation of this process there ({e})"
            ))
        })?;
        if ordinal != self.rank.ordinal() {
            return Err(refuse(format!(
                "it is memory of device {ordinal}, not of this rank's device {}",
                self.rank.ordinal()
            )));
        }
        let shareable = self.rank.export_ipc_range(ptr, bytes, base, size)?;
        Ok(RangeExport {
            shareable,
            hold: None,
        })
    }

    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        let mut staging = self.staging()?;
        let count_sync = || self.rank.count_sync();
        // SAFETY: `dst` is device memory of this rank's address space (the caller's
        // contract), and the staging ring is only ever used with this backend's stream.
        unsafe { staging.upload(dst, src, self.rank.stream(), &count_sync) }
    }

    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<()> {
        let mut staging = self.staging()?;
        let count_sync = || self.rank.count_sync();
        // SAFETY: `src` is readable device memory (the caller's contract), and the
        // staging ring is only ever used with this backend's stream.
        unsafe { staging.download(dst, src, self.rank.stream(), &count_sync) }
    }

    fn load_module(&self, objects: &'static CodeObjects) -> Result<CudaModule> {
        let (target, ptx) = code_object_for(objects, self.rank.name(), self.major, self.minor)?;
        let image = CString::new(ptx.strip_suffix(&[0]).unwrap_or(ptx)).map_err(|_| {
            Error::BadCodeObject {
                module: objects.crate_name(),
                target: target.to_owned(),
                why: "the embedded PTX holds a NUL byte".to_owned(),
            }
        })?;
        let loaded = self.rank.load_module(|| driver::module_load_data(&image))?;
        let functions = driver::module_functions(loaded.module, &image)?
            .into_iter()
            .collect();
        Ok(CudaModule::new(objects, target, loaded, functions))
    }

    fn heap_access(&self, heap: &CudaHeap) -> Result<Box<dyn HeapAccess>> {
        Ok(Box::new(engine_heap::CudaEngineHeap::new(
            self.rank.ordinal(),
            heap.base(),
        )?))
    }

    unsafe fn kernel_args(&self, launch: &KernelLaunch<'_>) -> Result<KernelParams> {
        KernelParams::new(launch)
    }

    fn graph(&self, exec: driver::GraphExec) -> CudaGraph {
        CudaGraph {
            exec,
            ctx: Arc::clone(&self.ctx),
        }
    }
    unsafe fn replay(&self, graph: &CudaGraph) -> Result<()> {
        self.ctx.make_current()?;
        driver::graph_launch(graph.exec, self.rank.stream())
    }
}

/// Launches captured from a rank's stream ([`Backend::begin_capture`](super::Backend::begin_capture)), instantiated on
/// its context: one `cuGraphLaunch` replays them all. Dropping it destroys the
/// instantiation (the driver defers that while a launch of it is in flight).
#[derive(Debug)]
pub struct CudaGraph {
    exec: driver::GraphExec,
    ctx: Arc<Context>,
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        let drop_errors = &self.ctx.drop_errors;
        drop_errors.record(self.ctx.make_current());
        // SAFETY: instantiated in `end_capture` and not launched after this.
        drop_errors.record(unsafe { driver::graph_exec_destroy(self.exec) });
    }
}

#[cfg(test)]
mod tests;
