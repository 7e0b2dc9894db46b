//! What the host needs from a device runtime, as one small trait per backend.
//!
//! A backend instance belongs to one rank (its own device context and stream). It owns
//! device memory of three kinds, each an RAII value that frees itself on drop:
//! the rank's symmetric heap ([`Backend::Heap`]), mappings of peers' memory
//! ([`Backend::Mapping`]) and plain device allocations ([`Backend::DeviceMemory`]: peer
//! tables, and the user allocations the rendezvous provider shares).
//!
//! Memory is shared through a [`Shareable`]: opaque bytes plus at most one file
//! descriptor (a memfd on the CPU backend, a POSIX handle from the CUDA VMM API), which
//! every bootstrap knows how to hand to peers.

pub mod code_objects;
pub mod cpu;
pub mod cuda;
mod gpu;
#[cfg(feature = "hip")]
#[cfg_attr(docsrs, doc(cfg(feature = "hip")))]
pub mod hip;
mod ipc;

/// Decodes `bytes` from a peer as each GPU backend's handle bytes (an IPC export, one
/// covering `covering` bytes, a CUDA heap's size), checking that each is a typed error
/// or re-encodes to the very bytes it came from: the `fuzzing` module's door to those
/// checks. Here, above both backends, so that `ipc` imports nothing from `cuda`.
///
/// # Panics
/// Where a decode breaks that.
#[cfg(fuzzing)]
pub(crate) fn check_handle_bytes(bytes: &[u8], covering: usize) {
    ipc::check_export_bytes(bytes, covering);
    cuda::check_heap_size_bytes(bytes);
}

use crate::error::Result;
use std::os::fd::OwnedFd;
use symmem_arch::host::HostThread;
use symmem_device::{Kernel, Params, Slot};
/// The off-node engine's request ring, which [`Backend::watch`] hands a module.
pub use symmem_rma::engine::{NvshmemHeap, Ring};

pub use code_objects::CodeObjects;
pub use gpu::DropErrors;

/// A one-dimensional launch shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    /// Blocks in the grid (at least 1).
    pub blocks: u32,
    /// Threads per block (at least 1).
    pub threads: u32,
}

impl Grid {
    /// `blocks` blocks of `threads` threads.
    pub const fn new(blocks: u32, threads: u32) -> Self {
        Self { blocks, threads }
    }
}

/// Which runtime a backend drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// Ranks' heaps in shared memory, kernels on host threads.
    Cpu,
    /// NVIDIA GPUs through the CUDA driver API.
    Cuda,
    /// AMD GPUs through HIP.
    Hip,
}

impl BackendKind {
    /// The name used on command lines (`cpu`, `cuda`, `hip`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Hip => "hip",
        }
    }
}

/// What a peer needs to map a piece of memory: opaque bytes and at most one fd.
#[derive(Debug, Default)]
pub struct Shareable {
    /// Backend-defined bytes (an IPC handle, a size, an offset, the exporter's pid).
    pub bytes: Vec<u8>,
    /// A file descriptor that carries the memory, if the backend uses one.
    pub fd: Option<OwnedFd>,
}

/// Who sent an export, as the world verified it (the bootstrap's credentials of the
/// sending rank: [`Bootstrap::verified_pids`](crate::bootstrap::Bootstrap::verified_pids)),
/// never as the export claims. An import believes an export that names this process
/// (an alias of one of its allocations) only from a rank verified to be a thread of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sender {
    /// A rank verified to be a thread of this process.
    ThisProcess,
    /// A rank of another process, or one whose process could not be verified.
    Elsewhere,
}

impl Sender {
    /// The sender whose process the bootstrap verified as `pid` (`None`: unverified).
    pub fn verified(pid: Option<u32>) -> Self {
        if pid == Some(std::process::id()) {
            Self::ThisProcess
        } else {
            Self::Elsewhere
        }
    }
}

/// An export of the application's range ([`Backend::export_range`]): what peers map, and
/// what keeps the export good until every peer has let go of it.
#[derive(Debug)]
pub struct RangeExport {
    /// What peers import.
    pub shareable: Shareable,
    /// Dropped once every peer has unmapped the range (kept with the registration): the
    /// CPU backend then forgets the range, so a peer cannot name it again after it was
    /// freed. `None` where nothing needs to be let go (the GPUs' IPC handles).
    pub hold: Option<Box<dyn std::any::Any + Send>>,
}

/// A range of device memory visible at `base` in this rank's address space.
pub trait DeviceRegion: Send + Sync {
    /// Device address of the first byte.
    fn base(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True for an empty region.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Page-locked host memory that the device reaches too (mapped), at `host_ptr` for the
/// host and `device_ptr` for kernels: where a rank's bounded-wait control block lives
/// (`symmem_rma::watch::Control`), so the host reads what a wait recorded and sets the
/// abort word without a device synchronisation.
pub trait SharedRegion: Send + Sync {
    /// Where the host reads and writes it.
    fn host_ptr(&self) -> *mut u8;
    /// Where kernels read and write it.
    fn device_ptr(&self) -> u64;
}

/// A kernel's body, run by the CPU backend once per thread of a launch.
pub trait HostKernel: Send + Sync {
    /// Runs the body as thread `arch` of the launch.
    fn run(&self, arch: &HostThread<'_>);
    /// The same body with the same arguments, owned (what a CPU graph records).
    fn to_owned(&self) -> std::sync::Arc<dyn HostKernel>;
}

/// Bytes of a [`HeapAccess::inbox`]: room for the largest request a peer's proxy sends,
/// a staged put's header words and its [`symmem_rma::engine::STAGING_BYTES`] of data.
pub const INBOX_BYTES: usize = symmem_rma::engine::STAGING_BYTES + 64;

/// One operation a peer's request asks of this rank's heap through the off-node engine
/// ([`HeapAccess::start`]), at byte offsets the proxy has checked against the heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeapOp {
    /// Write the `len` bytes at byte `at` of the inbox (where the request was received,
    /// [`HeapAccess::inbox`]) at `offset` (a staged put).
    Write {
        /// Where, in bytes from the heap's start.
        offset: usize,
        /// Where the bytes start in the inbox.
        at: usize,
        /// How many bytes.
        len: usize,
    },
    /// Read `len` bytes at `offset` (a staged get).
    Read {
        /// Where, in bytes from the heap's start.
        offset: usize,
        /// How many bytes.
        len: usize,
    },
    /// Apply atomic request `request` to the element at `offset`
    /// ([`symmem_rma::engine::apply_atomic`]).
    Atomic {
        /// Where the aligned element is, in bytes from the heap's start.
        offset: usize,
        /// The request word (operation and element size).
        request: u64,
        /// The operand.
        operand: u64,
        /// The value compared with (compare-and-swap).
        compare: u64,
    },
}

/// What a finished [`HeapOp`] gives back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HeapDone {
    /// An atomic's old value's bits; 0 otherwise.
    pub old: u64,
    /// A read's bytes; empty otherwise.
    pub bytes: Vec<u8>,
}

/// How the off-node engine's target side reaches this rank's own heap
/// (`Backend::heap_access`): where staged puts land, where staged gets are read, and
/// where every atomic a peer sends through the engine is applied.
///
/// Operations are pipelined: [`HeapAccess::start`] returns once an operation is under
/// way, and [`HeapAccess::finish`] hands results back in the order the operations were
/// started, each once it is complete and visible to this rank's kernels. Operations take
/// effect in the order they were started. None waits behind this rank's own kernels
/// (which may be spinning on the very word one is about to write).
pub trait HeapAccess: Send {
    /// How many operations may be under way at once: the proxy starts one only while
    /// fewer than this are unfinished.
    fn capacity(&self) -> usize;
    /// Where the next operation's request is received: [`INBOX_BYTES`], unchanged by the
    /// heap until that operation is started, page-locked where the heap's copies read
    /// it, so a staged put's bytes reach the heap from where the wire left them (on
    /// CUDA, the copy engine reads them there: no copy on the host).
    fn inbox(&mut self) -> &mut [u8];
    /// Starts `op`, whose request is in the inbox; a [`HeapOp::Write`]'s bytes are read
    /// from there until the operation is finished (the next inbox is other memory).
    fn start(&mut self, op: HeapOp) -> Result<()>;
    /// The result of the oldest unfinished operation once it is complete, `None` while it
    /// is not (or none is under way).
    fn finish(&mut self) -> Result<Option<HeapDone>>;
}

/// One launch of a kernel, as the backends see it: built by
/// [`crate::Module::launch`] from a `#[kernel]` declaration and checked arguments.
pub struct KernelLaunch<'a> {
    /// The kernel's exported name in the code object.
    pub name: &'static str,
    /// One pointer per ABI primitive, in order (a parameter's one, or a view's two or
    /// three), to its value.
    pub args: &'a [*const ()],
    /// Each primitive's size, alignment and kind, in order.
    pub slots: &'a [Slot],
    /// The same kernel with the same arguments, for CPU threads.
    pub host: &'a dyn HostKernel,
}

/// Makes a rank's device current on the calling thread: for an off-node transport whose
/// library works on the current context (NVSHMEM).
pub trait DeviceBinding: Send + Sync {
    /// Makes the device current.
    ///
    /// # Errors
    /// The runtime's.
    fn make_current(&self) -> Result<()>;
}

/// What an off-node transport gives each module a world loads ([`Backend::watch`]): the
/// words its device code finds it by, and a step once the module is loaded. Every
/// off-node transport (`crate::transport::Link`) is one; the defaults give nothing.
pub trait ModuleTransport {
    /// A proxied transport's ring, whose words GPU modules get a copy of
    /// (`symmem_rma::engine::SYMMEM_ENGINE`, a global of GPU builds only: read without
    /// crossing the bus); `None` for a transport without one.
    fn ring(&self) -> Option<Ring> {
        None
    }
    /// What kernels built with NVSHMEM find in their module global `SYMMEM_NVSHMEM`
    /// (`symmem_rma::engine::SYMMEM_NVSHMEM`): the heap's NVSHMEM alias, for a transport
    /// through NVSHMEM; `None` for any other.
    fn nvshmem_heap(&self) -> Option<NvshmemHeap> {
        None
    }
    /// Sets up a CUDA module whose code calls the transport's device library (one with
    /// NVSHMEM's device state), once it is loaded and before any launch of it. The
    /// default does nothing.
    ///
    /// # Safety
    /// `module` is a loaded `CUmodule` of the rank's context, which is current, and stays
    /// loaded until the transport stops.
    unsafe fn init_cuda_module(&self, module: u64) -> Result<()> {
        let _ = module;
        Ok(())
    }
}

/// One rank's view of a device runtime.
///
/// Every method is called only by the rank that owns the instance; implementations need
/// `Send + Sync` so a world can move between threads, not to be called concurrently.
/// Methods that enqueue work (`upload`, `memset`, `launch`) are ordered on the rank's
/// stream; only [`Backend::download`] and [`Backend::synchronize`] wait for the device,
/// and the backend counts every such wait in [`Backend::device_to_host_syncs`].
///
/// The methods that take raw device addresses are `unsafe`: [`crate::World`] and the
/// typed handles ([`crate::DeviceBuffer`], [`crate::SymmetricBuffer`]) are the safe way.
/// A made-up address in safe code does not compile:
///
/// ```compile_fail,E0133
/// # use symmem::backend::{Backend, cpu::Cpu};
/// Cpu::new().memset(0x10, 0, 16).unwrap();
/// ```
pub trait Backend: Send + Sync + 'static {
    /// This rank's symmetric heap: physical memory and its local mapping.
    type Heap: DeviceRegion;
    /// A peer's memory mapped into this address space. Drop unmaps it.
    type Mapping: DeviceRegion;
    /// A plain device allocation, shareable through the rendezvous provider.
    type DeviceMemory: DeviceRegion;
    /// A kernel crate's code objects loaded on this device.
    type Module: Send + Sync;
    /// Host memory the device reaches too ([`SharedRegion`]).
    type Shared: SharedRegion;

    /// Which runtime this is.
    fn kind(&self) -> BackendKind;
    /// A human-readable device name.
    fn device_name(&self) -> String;
    /// The device's architecture as the runtime names it (`sm_90`, `gfx942`), which
    /// picks the code object a module loads; `None` where kernels run on the host.
    fn device_arch(&self) -> Option<String> {
        None
    }
    /// The ordinal of this rank's device in this process (`None` on the CPU backend,
    /// whose kernels run on the host). Ranks of one process on one device share its
    /// primary context, so each one's kernels dereference the others' device memory at
    /// the others' own addresses ([`crate::World::shares_address_space`]).
    fn device_ordinal(&self) -> Option<usize> {
        None
    }
    /// The allocation granularity of heaps; heap sizes are rounded up to it.
    fn heap_granularity(&self) -> usize;

    /// Allocates this rank's heap of `bytes` (a multiple of the granularity).
    fn create_heap(&self, bytes: usize) -> Result<Self::Heap>;
    /// Exports the heap so that peers can map it.
    fn export_heap(&self, heap: &Self::Heap) -> Result<Shareable>;
    /// Maps a peer's exported heap of `bytes` at a fresh address in this address space;
    /// `sender` is who sent it, as the world verified it.
    ///
    /// # Errors
    /// [`Error::BadPeerMemory`](crate::Error::BadPeerMemory) where the memory is
    /// smaller than `bytes` (as the runtime or the kernel says, whatever the export
    /// claims) or names this process from a rank that is not verified to be of it.
    fn import_heap(&self, handle: Shareable, bytes: usize, sender: Sender)
    -> Result<Self::Mapping>;

    /// Allocates plain device memory of `bytes` (the user-allocation path:
    /// `cuMemAlloc` on CUDA); its contents are undefined.
    fn alloc_device(&self, bytes: usize) -> Result<Self::DeviceMemory>;
    /// Exports a device allocation for the rendezvous provider (`cuIpcGetMemHandle`).
    fn export_device_memory(&self, memory: &Self::DeviceMemory) -> Result<Shareable>;
    /// Maps `bytes` of a peer's exported device memory (`cuIpcOpenMemHandle`): an
    /// export of [`Backend::export_device_memory`] or [`Backend::export_range`]; `sender`
    /// is who sent it, as the world verified it.
    ///
    /// # Errors
    /// [`Error::BadPeerMemory`](crate::Error::BadPeerMemory) where the allocation
    /// the runtime opened (`cuMemGetAddressRange`, `hipMemGetAddressRange`), or the range
    /// this process exported, does not hold `bytes` from the export's offset, whatever
    /// the export claims; or where the export names this process and `sender` is not
    /// [`Sender::ThisProcess`] (or the reverse).
    fn import_device_memory(
        &self,
        handle: Shareable,
        bytes: usize,
        sender: Sender,
    ) -> Result<Self::Mapping>;
    /// Exports `bytes` at `ptr`, this rank's memory that the application allocated (not
    /// the backend), for peers to map with [`Backend::import_device_memory`]: a GPU
    /// exports the IPC handle of the allocation that holds the range and the range's
    /// offset in it; memory the runtime gives no IPC handle, and the CPU backend's plain
    /// host memory, only ranks of this process can map (they alias the pointer; another
    /// process's import is [`Error::NotShareable`](crate::Error::NotShareable)).
    ///
    /// # Errors
    /// [`Error::NotShareable`](crate::Error::NotShareable) for a range that is not in one allocation of this
    /// rank's device.
    ///
    /// # Safety
    /// `ptr..ptr + bytes` is memory of this rank's device, allocated and live while any
    /// peer may map it.
    unsafe fn export_range(&self, ptr: u64, bytes: usize) -> Result<RangeExport>;

    /// Enqueues a host-to-device copy of `src` to device address `dst`. Returns once
    /// `src` may be reused; never waits for the device.
    ///
    /// # Safety
    /// `dst..dst + src.len()` is device memory of this rank, writable, and not in use by
    /// anything the copy could race with.
    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<()>;
    /// Copies `dst.len()` bytes from device address `src` to the host, after all work
    /// enqueued so far: one counted device-to-host synchronisation.
    ///
    /// # Safety
    /// `src..src + dst.len()` is readable device memory in this rank's address space.
    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<()>;
    /// Enqueues setting `bytes` bytes at `dst` to `value`.
    ///
    /// # Safety
    /// As [`Backend::upload`], for `dst..dst + bytes`.
    unsafe fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<()>;
    /// Loads `objects` for this device: the object built for its architecture (the
    /// newest one it can run).
    ///
    /// # Errors
    /// [`crate::Error::NoCodeObject`] if none of them runs here.
    fn load_module(&self, objects: &'static CodeObjects) -> Result<Self::Module>;
    /// Allocates `bytes` of zeroed host memory that this device reaches too.
    fn alloc_shared(&self, bytes: usize) -> Result<Self::Shared>;
    /// The off-node engine's access to `heap` from its proxy thread (the target's side of
    /// staged data and atomics): complete and visible to this rank's kernels when each
    /// call returns, never queued behind them.
    ///
    /// # Errors
    /// [`crate::Error::NoEngine`] where the backend has none; the backend's errors.
    fn heap_access(&self, heap: &Self::Heap) -> Result<Box<dyn HeapAccess>>;
    /// Where the host reaches `heap` at the very addresses kernels use (the CPU backend,
    /// whose heap is host memory); `None` where kernel memory is device memory. An
    /// off-node transport that reaches host memory moves data there directly.
    fn heap_host_ptr(&self, heap: &Self::Heap) -> Option<*mut u8>;
    /// True where kernels run on this process's threads (the CPU backend): a kernel's
    /// wait for the off-node engine may then do the engine's work itself.
    fn kernels_on_host(&self) -> bool;
    /// What makes this rank's device current on a thread, for a transport whose library
    /// works on the current context; `None` (the default) where there is none (the CPU).
    fn device_binding(&self) -> Option<std::sync::Arc<dyn DeviceBinding>> {
        None
    }
    /// True where the runtime's synchronising calls wait for every kernel of the context
    /// (freeing plain device memory: `cuMemFree`, `hipFree`; synchronising the context; a
    /// module load; a kernel's first, lazy load): ranks of one process that share a
    /// device then defer their frees to points where no peer's kernel can wait for them
    /// (see [`crate::World::barrier`]), and launch each collective step together (see
    /// [`crate::World::collectively`]).
    fn syncs_wait_for_the_device(&self) -> bool;
    /// Whether the runtime loads a kernel at its first launch rather than with its module
    /// (CUDA's `CUDA_MODULE_LOADING=LAZY`, the driver's default since CUDA 12.2), as the
    /// driver reports it (`cuModuleGetLoadingMode`); `None` where it cannot say (the CPU,
    /// HIP, a driver before CUDA 11.7). For the log: [`crate::World::collectively`] makes
    /// collectives safe either way.
    fn loads_kernels_lazily(&self) -> Option<bool> {
        None
    }
    /// Where this backend records the runtime calls that failed while it or anything it
    /// made was dropped (`Drop` must not panic), if it keeps such a record: the GPU
    /// backends do, the CPU backend has no call that can fail there. `World::finalize`
    /// reads it to report what failed during teardown.
    fn drop_record(&self) -> Option<std::sync::Arc<DropErrors>> {
        None
    }
    /// Points the bounded waits of `module`'s kernels at the control block `control`
    /// (the module global `SYMMEM_CONTROL` on GPUs; the kernel threads' control on the
    /// CPU) and, where the world runs an off-node transport, gives them what its device
    /// code needs: a proxied transport's ring (on GPUs a copy in the module global
    /// `SYMMEM_ENGINE`; kernel threads on the CPU find the ring through the control
    /// block), NVSHMEM's heap alias (`SYMMEM_NVSHMEM`, in modules built with NVSHMEM,
    /// which the transport then initialises: [`ModuleTransport::init_cuda_module`]).
    /// A module without those globals has no waits or no off-node requests: nothing to do.
    ///
    /// # Safety
    /// `control` holds a zeroed-or-host-initialised `symmem_rma::watch::Control` and
    /// outlives every launch of `module`; the transport's memory (a ring's `live` ring,
    /// slots, staging and tickets) outlives them too, and the transport stops before
    /// `module` is unloaded.
    unsafe fn watch(
        &self,
        module: &mut Self::Module,
        control: &Self::Shared,
        transport: Option<&dyn ModuleTransport>,
    ) -> Result<()>;
    /// Enqueues `launch` from `module` with launch shape `grid` (a CPU backend runs
    /// `launch.host` on threads and returns when they are done).
    ///
    /// # Errors
    /// [`crate::Error::KernelNotFound`] if `module` lacks the kernel.
    ///
    /// # Safety
    /// `launch.args` point at values of the kernel's parameter types (`launch.slots`),
    /// and every address among them satisfies the kernel's contract.
    unsafe fn launch(
        &self,
        module: &Self::Module,
        launch: &KernelLaunch<'_>,
        grid: Grid,
    ) -> Result<()>;
    /// The launch shape this backend uses to move `bytes` with a grid-stride kernel.
    fn grid_for_bytes(&self, bytes: usize) -> Grid;
    /// The launch shape of a collective's kernels by default (`Collectives::new`).
    fn collective_grid(&self) -> Grid;
    /// Waits until all enqueued work is done: one counted synchronisation.
    fn synchronize(&self) -> Result<()>;
    /// How many times this rank has waited for its device (downloads and synchronises).
    fn device_to_host_syncs(&self) -> u64;

    /// Work recorded from this rank's stream ([`Backend::begin_capture`]), replayable any
    /// number of times. Dropping it releases it (after replays in flight, on GPUs).
    type Graph: Send + Sync;
    /// Starts recording this rank's stream: until [`Backend::end_capture`], launches are
    /// recorded into a graph instead of running. Uploads, downloads, memsets and
    /// synchronisations are not recorded: callers do not make them while recording
    /// ([`crate::World::capture`] refuses them).
    fn begin_capture(&self) -> Result<()>;
    /// Ends the recording [`Backend::begin_capture`] started (always call it, also when
    /// recording failed, so the stream runs work again) and returns the graph.
    fn end_capture(&self) -> Result<Self::Graph>;
    /// Enqueues the recorded launches of `graph` again, in order, with the same arguments
    /// (the CPU backend runs them and returns when they are done).
    ///
    /// # Safety
    /// Every address the recorded launches use is still allocated and holds what their
    /// kernels' contracts ask for.
    unsafe fn replay(&self, graph: &Self::Graph) -> Result<()>;
}

/// The most ABI primitives a kernel takes: 16 parameters (the tuples `Params` is
/// implemented for) of at most three primitives each (a symmetric view).
pub(crate) const MAX_PRIMITIVES: usize = 48;

/// Enqueues `kernel` of `module` over `grid` on `backend` with arguments already lowered
/// to the kernel's ABI (`abi`): the one way a kernel reaches a backend. `Module::launch`
/// calls it after checking every handle; below the world (the engine's target side
/// applying a peer's atomic, backend tests whose heaps and tables are made by hand) it is
/// called directly.
///
/// # Safety
/// Every address in `abi` satisfies `kernel`'s contract: memory `backend`'s kernels
/// reach, of the lengths the other arguments give, alive until the launch completes.
pub(crate) unsafe fn launch_lowered<B: Backend, P: Params>(
    backend: &B,
    module: &B::Module,
    kernel: Kernel<P>,
    grid: Grid,
    abi: P::Abi,
) -> Result<()> {
    let host = HostBody { kernel, abi };
    let mut pointers = [std::ptr::null::<()>(); MAX_PRIMITIVES];
    let mut count = 0;
    P::visit(&host.abi, &mut |p| {
        pointers[count] = p;
        count += 1;
    });
    let mut slots = [Slot {
        size: 0,
        align: 1,
        kind: symmem_device::AbiKind::Int,
    }; MAX_PRIMITIVES];
    for (slot, s) in slots.iter_mut().zip(symmem_device::slots::<P>()) {
        *slot = s;
    }
    let launch = KernelLaunch {
        name: kernel.name(),
        args: &pointers[..count],
        slots: &slots[..count],
        host: &host,
    };
    // SAFETY: one pointer per primitive into `host.abi`, in order (`Params::visit`),
    // which outlives the call; the addresses in it are the caller's contract, and `host`
    // runs the same body with the same values.
    unsafe { backend.launch(module, &launch, grid) }
}

/// A kernel's body with its lowered arguments, run by the CPU backend on each thread.
struct HostBody<P: Params> {
    kernel: Kernel<P>,
    abi: P::Abi,
}

// SAFETY: the raw pointers in `abi` address memory that every thread of the launch may
// use as the kernel's contract allows (as on a GPU, where all threads share them).
unsafe impl<P: Params> Sync for HostBody<P> {}
// SAFETY: as above: the addresses mean the same on any thread of the process.
unsafe impl<P: Params> Send for HostBody<P> {}

impl<P: Params> HostKernel for HostBody<P> {
    fn run(&self, arch: &HostThread<'_>) {
        // SAFETY: `abi` satisfies the kernel's contract (`launch_lowered`'s caller), and
        // the CPU backend runs every thread of the launch with the same `abi`.
        unsafe { self.kernel.run_on_host(arch, self.abi) }
    }
    fn to_owned(&self) -> std::sync::Arc<dyn HostKernel> {
        std::sync::Arc::new(Self {
            kernel: self.kernel,
            abi: self.abi,
        })
    }
}
