//! The HIP backend: AMD GPUs (gfx90a = MI200, gfx942 = MI300X, gfx950 = MI350) through the
//! HIP runtime.
//!
//! Behind the `hip` cargo feature. Types and constants come from `hip-sys` (HIP 5.4
//! bindings); the runtime itself is opened lazily by the private `runtime` module, so a
//! binary built with the feature starts where no ROCm is installed and [`Hip::new`]
//! answers [`Error::LibraryMissing`] or [`Error::NoDevice`] (see `runtime` for why the
//! entry points are looked up rather than linked).
//!
//! # Supported ROCm versions
//!
//! - **Build**: any ROCm whose headers `hip-sys`'s build script finds (`HIP_PATH`); CI
//!   builds against Debian's HIP 5.2.3 (`libamdhip64-dev`, `HIP_PATH=/usr`).
//! - **ABI**: every struct, size, flag and result code passed across the FFI
//!   ([`FFI_FACTS`]) is compared with the installed headers by
//!   `tests/tests/hip_layout.rs`: HIP 5.x headers against the 5.x layout; HIP 6+ headers
//!   against `hipDeviceProp_tR0000` / `hipDeviceProp_tR0600` and the 6.0 value of
//!   `hipIpcMemLazyEnablePeerAccess`. Both layouts and both flag values are handled at
//!   run time.
//! - **Devices**: `symmem-build` builds every kernel crate for gfx90a, gfx942 and gfx950
//!   (its default targets), so a usable runtime is one that supports those GPUs: ROCm
//!   6.0 or later for MI200 (gfx90a) and MI300X (gfx942), and the ROCm release that
//!   introduced MI350 (gfx950; 7.0) or later. The code objects are code object v5
//!   (`amdhsa.version` 1.2), which those runtimes load.
//!
//! # Devices and threads
//!
//! HIP's runtime API keeps a current device per thread; every method first calls
//! `hipSetDevice` (a thread-local store), so any thread may drive any rank. All ranks of
//! a process share one address space across GPUs.
//!
//! # Memory
//!
//! - The heap is fine-grained device memory (`hipExtMallocWithFlags(
//!   hipDeviceMallocFinegrained)`), so peers' atomics and signals on it are coherent.
//!   It is shared with `hipIpcGetMemHandle` / `hipIpcOpenMemHandle`.
//! - Plain allocations are `hipMalloc` (coarse-grained), shared the same way.
//! - HIP cannot open an IPC handle in the process that made it, so an import in the
//!   exporting process is a non-owning alias of the exporter's pointer (valid while the
//!   exporter's memory lives), as on CUDA; across GPUs the importer's device first gets
//!   peer access (`hipDeviceEnablePeerAccess`).
//!
//! Dropping memory does not wait for the device: the caller synchronises first. Errors
//! during drop never panic; they are recorded in the backend's own [`Hip::drop_errors`],
//! which the memory, mappings and modules it made share.
//!
//! # Modules
//!
//! [`Backend::load_module`](super::Backend::load_module) loads a kernel crate's [`CodeObjects`] as a [`HipModule`]:
//! the object built for exactly the device's processor (the `gcnArchName` without its
//! feature flags; AMD ISAs are not forward-compatible), else [`Error::NoCodeObject`].
//! It is loaded with `hipModuleLoadData`, and every kernel in it gets its
//! `hipFunction_t` at once, by name. The names come from the code object itself
//! ([`code_object_kernels`]): a kernel is the `<name>.kd` kernel-descriptor symbol the
//! AMDGPU ABI exports for each kernel, read from the ELF's dynamic symbol table (what the
//! loader resolves names through). A launch of a name the module lacks is
//! [`Error::KernelNotFound`].
//!
//! # Kernel arguments
//!
//! A launch passes the explicit kernarg segment as one buffer
//! (`HIP_LAUNCH_PARAM_BUFFER_POINTER`), built by [`pack_kernargs`] from the
//! [`KernelLaunch`]: each argument's `slot.size` bytes, read from its pointer, at the
//! next multiple of its `slot.align` ([`kernarg_layout`], the AMDGPU rule for the
//! kernels' by-value and pointer parameters); the segment ends at the last argument's
//! end. `tests/tests/hip_abi.rs` checks, for every kernel `#[kernel]` declares
//! (`symmem_device::declarations()`) and every AMD object of its crate,
//! that the object's `amdhsa.kernels` metadata lists exactly the declared kernels and
//! that each one's `.args` (offset, size, value kind) and `.kernarg_segment_size` are
//! what these slots and this layout give.
//!
//! # Graphs
//!
//! [`Backend::begin_capture`](super::Backend::begin_capture) puts the rank's stream in stream capture
//! (`hipStreamBeginCapture`, thread-local mode); launches until
//! [`Backend::end_capture`](super::Backend::end_capture) are recorded, each with a copy of its kernarg buffer, and
//! the graph is instantiated into a [`HipGraph`] that [`Backend::replay`](super::Backend::replay) launches on
//! the same stream (`hipGraphLaunch`).

mod code_object;
mod handles;
mod runtime;

pub use code_object::{
    KERNARG_BUFFER_ALIGN, base_arch, code_object_for, code_object_kernels, kernarg_layout,
    pack_kernargs,
};
pub use runtime::{BINDINGS_HIP_VERSION, FFI_FACTS, FfiFact, Relation};

use super::gpu::{self, DeviceScope, DropErrors, THREADS};
use super::ipc::IpcExport;
use super::{CodeObjects, DeviceRegion, HeapAccess, KernelLaunch, RangeExport, Sender, Shareable};
use crate::error::{Error, Result};
use code_object::{AlignedBytes, aligned_copy};
use handles::{Device, HipRuntime};
use std::ffi::{CString, c_int};
use std::fmt;
use std::sync::Arc;

/// The most blocks of [`THREADS`] a launch may have: an HSA dispatch's grid size is a
/// 32-bit count of work-items.
const MAX_BLOCKS: u64 = u32::MAX as u64 / THREADS as u64;
/// The heap size granule. `hipMalloc` has no mapping granularity; 2 MiB (the large
/// page size of MI300's memory manager) keeps heap sizes the same on every backend.
const HEAP_GRANULARITY: usize = 2 << 20;

/// Device memory from `hipMalloc` / `hipExtMallocWithFlags`; freed on drop.
#[derive(Debug)]
struct Allocation {
    device: Arc<Device>,
    ptr: u64,
    len: usize,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.device.release(|| {
            // SAFETY: `ptr` came from a HIP allocation and is owned by this value.
            unsafe { runtime::free(self.ptr) }
        });
    }
}

/// This rank's symmetric heap: fine-grained device memory.
#[derive(Debug)]
pub struct HipHeap {
    memory: Allocation,
}

impl DeviceRegion for HipHeap {
    fn base(&self) -> u64 {
        self.memory.ptr
    }
    fn len(&self) -> usize {
        self.memory.len
    }
}

/// A plain `hipMalloc` allocation; freed on drop.
#[derive(Debug)]
pub struct HipDeviceMemory {
    memory: Allocation,
}

impl DeviceRegion for HipDeviceMemory {
    fn base(&self) -> u64 {
        self.memory.ptr
    }
    fn len(&self) -> usize {
        self.memory.len
    }
}

/// A peer's memory as mapped in this rank's address space: opened with
/// `hipIpcOpenMemHandle`, or (exported by this same process) a non-owning alias.
pub type HipMapping = gpu::Mapping<HipRuntime>;

// Both backends' handles are the shared 64-byte encoding of `backend::ipc`.
const _: () = assert!(runtime::IPC_HANDLE_BYTES == super::ipc::HANDLE_BYTES);

/// Page-locked, coherent host memory mapped into the device (`hipHostMalloc` with
/// `hipHostMallocMapped | hipHostMallocPortable | hipHostMallocCoherent`): the rank's
/// control block of bounded waits. Freed with `hipHostFree` on drop.
pub type HipShared = gpu::HostMapped<HipRuntime>;

/// A kernel crate's code object loaded on one device, every kernel found by name.
pub type HipModule = gpu::Module<HipRuntime>;

/// The HIP backend of one rank: a device and a non-blocking stream. Kernel crates are
/// loaded with [`Backend::load_module`](super::Backend::load_module).
pub struct Hip {
    runtime_version: i32,
    // Field order is drop order: the rank (which waits for its stream), then the device.
    rank: gpu::Rank<HipRuntime>,
    device: Arc<Device>,
    /// This rank's hardware queue of the device (see `gpu::queues`), given back last.
    _queue: gpu::QueueSlot,
}

/// HIP's hardware queues per device and process: `GPU_MAX_HW_QUEUES` (4 by default);
/// symmem asks for 16 when it is unset (see `gpu::queues`).
static QUEUES: gpu::QueueSetting = gpu::QueueSetting {
    variable: "GPU_MAX_HW_QUEUES",
    ours: 16,
    default: 4,
    set_by_us: std::sync::OnceLock::new(),
    leave_unset: || None,
};

impl fmt::Debug for Hip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runtime_version: &dyn fmt::Debug = &self.runtime_version;
        self.rank
            .fmt_backend(f, "Hip", &[("runtime_version", runtime_version)])
    }
}

impl Hip {
    /// Opens device `ordinal`.
    ///
    /// # Errors
    /// [`Error::LibraryMissing`] when `libamdhip64` cannot be loaded (checked before any
    /// HIP call; never a panic), [`Error::MissingSymbol`] when it lacks an entry point used
    /// here; [`Error::NoDevice`] when the runtime sees no device or fewer than
    /// `ordinal + 1`; [`Error::Driver`] for any other HIP failure.
    pub fn new(ordinal: usize) -> Result<Self> {
        gpu::configure_queues(&QUEUES);
        // The first call loads the runtime: a missing library or entry point is an `Err`.
        runtime::init()?;
        let runtime_version = runtime::runtime_version()?;
        if ordinal >= runtime::device_count()? {
            return Err(Error::NoDevice { backend: "hip" });
        }
        let ordinal_c = c_int::try_from(ordinal).map_err(|_| Error::NoDevice { backend: "hip" })?;
        // HIP says nothing of who made its device state: where the runtime was started
        // before symmem set the variable, the user sets it (see `gpu::queues`).
        let queue = gpu::QueueSlot::take(&QUEUES, ordinal, || Ok(false))?;
        let device = Arc::new(Device {
            ordinal: ordinal_c,
            drop_errors: Arc::default(),
        });
        device.make_current()?;
        let name = runtime::device_name(ordinal_c)?;
        let arch = runtime::arch_name(ordinal_c)?;
        let stream = runtime::stream_create_non_blocking()?;
        let info = gpu::DeviceInfo {
            ordinal,
            name,
            arch,
        };
        Ok(Self {
            runtime_version,
            rank: gpu::Rank::new(Arc::clone(&device), stream, gpu::StreamOwner::Backend, info),
            device,
            _queue: queue,
        })
    }

    /// The device ordinal this backend drives.
    pub fn ordinal(&self) -> usize {
        self.rank.ordinal()
    }

    /// The device's full `gcnArchName` (`gfx942:sramecc+:xnack-`).
    pub fn arch(&self) -> &str {
        self.rank.arch()
    }

    /// The runtime's HIP version (`hipRuntimeGetVersion`, e.g. 60_032_830 for 6.0.32830).
    pub fn runtime_version(&self) -> i32 {
        self.runtime_version
    }

    /// The HIP calls that failed while dropping this backend or anything it made (heaps,
    /// mappings, allocations, modules, graphs); hold it to read them after those are gone.
    pub fn drop_errors(&self) -> Arc<DropErrors> {
        Arc::clone(&self.device.drop_errors)
    }

    /// Exports a HIP allocation of this rank.
    fn export(&self, memory: &Allocation) -> Result<Shareable> {
        self.rank.export_ipc(memory.ptr, memory.len, 0)
    }

    /// Maps `bytes` of a peer's export, which `sender` sent (see
    /// [`Backend::import_device_memory`](super::Backend::import_device_memory)).
    fn import(&self, handle: &Shareable, bytes: usize, sender: Sender) -> Result<HipMapping> {
        let export = IpcExport::decode_covering(handle, "HIP IPC export", bytes)?;
        export.check_sender(sender, bytes)?;
        // The mapped range: `bytes` from `offset` of the exported allocation.
        let end = (export.offset + bytes as u64) as usize;
        self.device.make_current()?;
        if export.is_from_this_process() {
            // HIP cannot open an IPC handle in the exporting process. Ranks of one
            // process share one address space, so the exporter's pointer is valid here
            // once this device may access the exporter's. A pid is only a claim: the
            // pointer is aliased only if it is the base of an allocation of this process
            // covering what is mapped.
            let owned = runtime::allocation_of(export.ptr)
                .ok()
                .filter(|&(base, size)| base == export.ptr && size >= end);
            if owned.is_none() {
                return Err(Error::BadPeerMemory {
                    needed: bytes,
                    size: export.len,
                    why: "the export names this process, but its pointer is the base of no \
                          allocation of this process",
                });
            }
            if export.ordinal as usize != self.rank.ordinal() {
                let peer = c_int::try_from(export.ordinal).map_err(|_| Error::BadMessage {
                    from: None,
                    what: "HIP IPC export (its device ordinal is out of range)",
                })?;
                if !runtime::can_access_peer(self.device.ordinal, peer)? {
                    return Err(Error::PeerUnreachable {
                        device: self.rank.ordinal(),
                        peer_device: export.ordinal as usize,
                    });
                }
                runtime::enable_peer_access(peer)?;
            }
            return Ok(HipMapping::alias(export.ptr + export.offset, bytes, None));
        }
        let handle = export.handle_to_open(
            bytes,
            "a peer process's memory with no HIP IPC handle (a stream-ordered \
                      pool's or VMM memory): ranks in other processes can map only \
                      hipMalloc memory; allocate it so, or use a symmetric buffer, or run \
                      the ranks as threads of one process",
        )?;
        let ptr = runtime::ipc_open_mem_handle(handle, self.runtime_version)?;
        // Closed on drop, so also if the check below refuses it.
        let opened = HipMapping::opened(Arc::clone(&self.device), ptr, end);
        // The runtime's word on what was opened bounds what is mapped, not the peer's.
        export.check_opened(ptr, runtime::allocation_of(ptr)?, bytes)?;
        Ok(opened.range(export.offset, bytes))
    }

    /// Allocates `bytes` with `hipMalloc` or, with `fine_grained`,
    /// `hipExtMallocWithFlags(hipDeviceMallocFinegrained)`.
    fn allocate(&self, bytes: usize, fine_grained: bool) -> Result<Allocation> {
        if bytes == 0 {
            return Err(Error::ZeroSize);
        }
        self.device.make_current()?;
        let ptr = if fine_grained {
            runtime::ext_malloc_with_flags(bytes, runtime::MALLOC_FINE_GRAINED)?
        } else {
            runtime::malloc(bytes)?
        };
        Ok(Allocation {
            device: Arc::clone(&self.device),
            ptr,
            len: bytes,
        })
    }
}

impl gpu::GpuBackend for Hip {
    type Runtime = HipRuntime;
    type Heap = HipHeap;
    type DeviceMemory = HipDeviceMemory;
    type Graph = HipGraph;

    fn heap_granularity(&self) -> usize {
        HEAP_GRANULARITY
    }

    fn create_heap(&self, bytes: usize) -> Result<HipHeap> {
        if bytes == 0 {
            return Err(Error::ZeroSize);
        }
        let len = bytes
            .checked_next_multiple_of(HEAP_GRANULARITY)
            .ok_or(Error::TooLarge {
                requested: bytes,
                capacity: usize::MAX,
            })?;
        Ok(HipHeap {
            memory: self.allocate(len, true)?,
        })
    }

    fn export_heap(&self, heap: &HipHeap) -> Result<Shareable> {
        self.export(&heap.memory)
    }

    fn import_heap(&self, handle: Shareable, bytes: usize, sender: Sender) -> Result<HipMapping> {
        self.import(&handle, bytes, sender)
    }

    fn alloc_device(&self, bytes: usize) -> Result<HipDeviceMemory> {
        Ok(HipDeviceMemory {
            memory: self.allocate(bytes, false)?,
        })
    }

    fn export_device_memory(&self, memory: &HipDeviceMemory) -> Result<Shareable> {
        self.export(&memory.memory)
    }

    fn import_device_memory(
        &self,
        handle: Shareable,
        bytes: usize,
        sender: Sender,
    ) -> Result<HipMapping> {
        self.import(&handle, bytes, sender)
    }

    unsafe fn export_range(&self, ptr: u64, bytes: usize) -> Result<RangeExport> {
        let refuse = |why: String| Error::NotShareable {
            addr: ptr,
            bytes,
            why,
        };
        self.device.make_current()?;
        let (base, size) = runtime::allocation_of(ptr).map_err(|e| {
            refuse(format!(
                "the HIP runtime knows no device allocation of this process there ({e})"
            ))
        })?;
        let shareable = self.rank.export_ipc_range(ptr, bytes, base, size)?;
        Ok(RangeExport {
            shareable,
            hold: None,
        })
    }

    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: `dst..dst + src.len()` is writable device memory of this rank that
        // nothing races with (the caller's contract). HIP stages pageable `src` before
        // this returns, so the caller may reuse it at once.
        unsafe { runtime::memcpy_htod_async(dst, src, self.rank.stream()) }
    }

    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<()> {
        // SAFETY: `src..src + dst.len()` is readable device memory of this rank's address
        // space (the caller's contract), and the stream is synchronised below before
        // `dst` is released.
        let copied = unsafe { runtime::memcpy_dtoh_async(dst, src, self.rank.stream()) };
        // Synchronise even when enqueuing failed, so no copy into `dst` can be in flight.
        let synced = runtime::stream_synchronize(self.rank.stream());
        self.rank.count_sync();
        copied.and(synced)
    }

    fn load_module(&self, objects: &'static CodeObjects) -> Result<HipModule> {
        let (target, image) = code_object_for(objects, self.rank.name(), self.rank.arch())?;
        let names = code_object_kernels(image).map_err(|why| Error::BadCodeObject {
            module: objects.crate_name(),
            target: target.to_owned(),
            why: format!("it is unreadable ({why})"),
        })?;
        let loaded = self
            .rank
            .load_module(|| runtime::module_load_data(&aligned_copy(image)))?;
        let functions = names
            .into_iter()
            .map(|name| {
                let cname = CString::new(name.as_str()).map_err(|_| Error::BadCodeObject {
                    module: objects.crate_name(),
                    target: target.to_owned(),
                    why: format!("its kernel name {name:?} holds a NUL byte"),
                })?;
                let function = runtime::module_get_function(loaded.module, &cname)?;
                Ok((name, function))
            })
            .collect::<Result<_>>()?;
        Ok(HipModule::new(objects, target, loaded, functions))
    }

    fn heap_access(&self, _: &HipHeap) -> Result<Box<dyn HeapAccess>> {
        Err(Error::NoEngine(
            "the off-node engine's staging path is built for the CPU and CUDA backends, \
             not yet for HIP",
        ))
    }

    unsafe fn kernel_args(&self, launch: &KernelLaunch<'_>) -> Result<AlignedBytes> {
        if launch.args.len() != launch.slots.len() {
            return Err(Error::KernelArity {
                kernel: launch.name,
                args: launch.args.len(),
                params: launch.slots.len(),
                max: crate::backend::MAX_PRIMITIVES,
            });
        }
        // SAFETY: each argument points at a value of its parameter's ABI type, whose size
        // its slot gives (the caller's contract); one argument per slot, checked above.
        let packed = unsafe { pack_kernargs(launch.slots, launch.args) };
        // The kernel's explicit kernarg segment in `kernarg_layout`'s layout (which
        // `tests/tests/hip_abi.rs` checks against the code objects' metadata for every
        // declared kernel), in storage aligned to KERNARG_BUFFER_ALIGN.
        Ok(aligned_copy(&packed))
    }

    fn rank(&self) -> &gpu::Rank<HipRuntime> {
        &self.rank
    }

    fn shared_drop_errors(&self) -> Arc<DropErrors> {
        self.drop_errors()
    }

    fn graph(&self, exec: runtime::GraphExec) -> HipGraph {
        HipGraph {
            exec,
            stream: Arc::clone(self.rank.owned_stream()),
        }
    }

    unsafe fn replay(&self, graph: &HipGraph) -> Result<()> {
        // A graph replays only on the stream it was captured from (its drop waits for
        // that stream alone).
        if !Arc::ptr_eq(&graph.stream, self.rank.owned_stream()) {
            return Err(Error::ForeignHandle);
        }
        self.device.make_current()?;
        runtime::graph_launch(graph.exec, self.rank.stream())
    }
}

/// Launches captured from a rank's stream ([`Backend::begin_capture`](super::Backend::begin_capture)), instantiated on
/// its device: one `hipGraphLaunch` replays them all, with the kernel arguments they were
/// captured with (HIP copies each launch's kernarg buffer into the graph).
///
/// Dropping it first waits for the rank's stream, so no replay of it is in flight (a
/// teardown wait, not counted in [`Backend::device_to_host_syncs`](super::Backend::device_to_host_syncs); HIP does not promise
/// to defer the destruction of a running graph as CUDA does), then destroys the
/// instantiation. It keeps the stream alive until then, also past the [`Hip`] backend.
/// If the wait fails, the instantiation is leaked rather than destroyed under a replay
/// that may still run. Failures are recorded in the capturing backend's [`Hip::drop_errors`].
#[derive(Debug)]
pub struct HipGraph {
    exec: runtime::GraphExec,
    stream: Arc<gpu::OwnedStream<HipRuntime>>,
}

impl Drop for HipGraph {
    fn drop(&mut self) {
        let device = &self.stream.scope;
        let idle = device
            .make_current()
            .and_then(|()| runtime::stream_synchronize(self.stream.stream));
        if idle.is_err() {
            device.drop_errors.record(idle);
            return;
        }
        // SAFETY: instantiated in `end_capture` and not launched after this; it is only
        // ever launched on this stream, which was synchronised above, so no launch of it
        // is in flight.
        device
            .drop_errors
            .record(unsafe { runtime::graph_exec_destroy(self.exec) });
    }
}

#[cfg(test)]
mod tests;
