//! The HIP backend: AMD GPUs (gfx942 = MI300X, gfx950 = MI350) through the HIP runtime.
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
//! - **Devices**: the embedded code objects are gfx942 and gfx950, so a usable runtime is
//!   one that supports those GPUs: ROCm 6.0 or later for MI300X (gfx942) and the ROCm
//!   release that introduced MI350 (gfx950; 7.0) or later. The code objects are code
//!   object v5 (`amdhsa.version` 1.2), which those runtimes load.
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
//! during drop never panic; they are counted process-wide in [`Hip::drop_errors`].
//!
//! # Kernel arguments
//!
//! Launches pass the explicit kernarg segment as one buffer
//! (`HIP_LAUNCH_PARAM_BUFFER_POINTER`), built by [`pack_args`] with the AMDGPU rule
//! (each argument at the next multiple of its size, segment size = end of the last
//! one); `tests/tests/hip_abi.rs` checks it against every kernel's `.args` metadata in
//! the gfx942 and gfx950 code objects.

mod runtime;

pub use runtime::{BINDINGS_HIP_VERSION, FFI_FACTS, FfiFact, Relation};

use super::ipc::IpcExport;
use super::{Backend, BackendKind, DeviceRegion, Grid, Shareable};
use crate::code_objects::{self, CodeObject};
use crate::error::{Error, Result};
use crate::kernels::{KernelArg, KernelCall};
use std::collections::HashMap;
use std::ffi::{CString, c_int};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The kernel module whose code object this backend loads.
const MODULE: &str = "symmem_device";
/// Threads per block of the default launch shape.
const THREADS: u32 = 256;
/// Bytes one thread moves in the default launch shape (one 16-byte vector).
const BYTES_PER_THREAD: u64 = 16;
/// The most blocks of [`THREADS`] a launch may have: an HSA dispatch's grid size is a
/// 32-bit count of work-items.
const MAX_BLOCKS: u64 = u32::MAX as u64 / THREADS as u64;
/// The heap size granule. `hipMalloc` has no mapping granularity; 2 MiB (the large
/// page size of MI300's memory manager) keeps heap sizes the same on every backend.
const HEAP_GRANULARITY: usize = 2 << 20;

/// Errors raised while dropping HIP objects, process-wide.
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

/// One device of this process.
#[derive(Debug)]
struct Device {
    ordinal: c_int,
}

impl Device {
    /// Makes the device current on the calling thread.
    fn make_current(&self) -> Result<()> {
        runtime::set_device(self.ordinal)
    }
}

/// The rank's loaded code object; unloaded on drop.
#[derive(Debug)]
struct LoadedModule {
    device: Arc<Device>,
    module: runtime::Module,
}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        record_drop(self.device.make_current().and_then(|()| {
            // SAFETY: `Hip::drop` synchronised the stream before its fields drop, so no
            // kernel of the module runs; the module is not used after this.
            unsafe { runtime::module_unload(self.module) }
        }));
    }
}

/// The rank's stream; destroyed on drop.
#[derive(Debug)]
struct OwnedStream {
    device: Arc<Device>,
    stream: runtime::Stream,
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        record_drop(self.device.make_current().and_then(|()| {
            // SAFETY: the stream was created by this backend and is not used after this.
            unsafe { runtime::stream_destroy(self.stream) }
        }));
    }
}

/// Device memory from `hipMalloc` / `hipExtMallocWithFlags`; freed on drop.
#[derive(Debug)]
struct Allocation {
    device: Arc<Device>,
    ptr: u64,
    len: usize,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        record_drop(self.device.make_current().and_then(|()| {
            // SAFETY: `ptr` came from a HIP allocation and is owned by this value.
            unsafe { runtime::free(self.ptr) }
        }));
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

/// A pointer from `hipIpcOpenMemHandle`; closed on drop.
#[derive(Debug)]
struct IpcOpened {
    device: Arc<Device>,
    ptr: u64,
}

impl Drop for IpcOpened {
    fn drop(&mut self) {
        record_drop(self.device.make_current().and_then(|()| {
            // SAFETY: `ptr` came from `hipIpcOpenMemHandle` and is not used after this.
            unsafe { runtime::ipc_close_mem_handle(self.ptr) }
        }));
    }
}

/// Who owns the memory behind a [`HipMapping`].
#[derive(Debug)]
enum MappingOwner {
    /// A peer's memory opened with `hipIpcOpenMemHandle`; closed on drop.
    Ipc {
        /// Held for its drop (`hipIpcCloseMemHandle`).
        _opened: IpcOpened,
    },
    /// Memory of this same process: a non-owning alias of the exporter's pointer.
    Alias,
}

/// A peer's memory as mapped in this rank's address space.
#[derive(Debug)]
pub struct HipMapping {
    base: u64,
    len: usize,
    owner: MappingOwner,
}

impl HipMapping {
    /// True when this mapping is a non-owning alias of memory exported by this same
    /// process (the in-process IPC path).
    pub fn is_alias(&self) -> bool {
        matches!(self.owner, MappingOwner::Alias)
    }

    /// True when this mapping was opened with `hipIpcOpenMemHandle`.
    pub fn is_ipc(&self) -> bool {
        matches!(self.owner, MappingOwner::Ipc { .. })
    }
}

impl DeviceRegion for HipMapping {
    fn base(&self) -> u64 {
        self.base
    }
    fn len(&self) -> usize {
        self.len
    }
}

// Both backends' handles are the shared 64-byte encoding of `backend::ipc`.
const _: () = assert!(runtime::IPC_HANDLE_BYTES == super::ipc::HANDLE_BYTES);

/// The processor part of a `gcnArchName`: `gfx942:sramecc+:xnack-` → `gfx942`.
pub fn base_arch(gcn_arch_name: &str) -> &str {
    gcn_arch_name
        .split(':')
        .next()
        .unwrap_or(gcn_arch_name)
        .trim()
}

/// The embedded code object for a device whose `gcnArchName` is `gcn_arch_name`: the
/// one built for exactly its processor (AMD ISAs are not forward-compatible), else
/// [`Error::NoCodeObject`] naming the processor.
pub fn code_object_for(gcn_arch_name: &str) -> Result<CodeObject> {
    let arch = base_arch(gcn_arch_name);
    code_objects::find(MODULE, arch).ok_or_else(|| Error::NoCodeObject {
        arch: arch.to_owned(),
    })
}

/// A kernel's explicit arguments laid out as its kernarg segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedArgs {
    /// The segment's bytes: what `HIP_LAUNCH_PARAM_BUFFER_POINTER` points at. Its length
    /// is the segment size (`.kernarg_segment_size` of a kernel without hidden arguments).
    pub bytes: Vec<u8>,
    /// `(offset, size)` of each argument, in ABI order.
    pub fields: Vec<(usize, usize)>,
}

/// The kernarg buffer's alignment in [`Hip::launch`] (it is built in `u64` words).
pub const KERNARG_BUFFER_ALIGN: usize = 8;

/// The AMDGPU kernel ABI's layout of explicit arguments of the given sizes (pointers
/// and by-value integers, which is all the kernels take): in order, each at the next
/// offset that is a multiple of its size (its natural alignment: 8 for addresses and
/// `u64`, 4 for `u32`); the segment ends at the last argument's end. Returns each
/// argument's `(offset, size)` and the segment size.
pub fn kernarg_layout(sizes: impl IntoIterator<Item = usize>) -> (Vec<(usize, usize)>, usize) {
    let mut end = 0usize;
    let fields = sizes
        .into_iter()
        .map(|size| {
            let offset = end.next_multiple_of(size.max(1));
            end = offset + size;
            (offset, size)
        })
        .collect();
    (fields, end)
}

/// Packs `call`'s arguments, little-endian, at the offsets [`kernarg_layout`] gives.
/// Needs no device.
pub fn pack_args(call: &KernelCall) -> PackedArgs {
    let values: Vec<Vec<u8>> = call
        .args()
        .into_iter()
        .map(|arg| match arg {
            KernelArg::U64(v) => v.to_le_bytes().to_vec(),
            KernelArg::U32(v) => v.to_le_bytes().to_vec(),
        })
        .collect();
    let (fields, size) = kernarg_layout(values.iter().map(Vec::len));
    let mut bytes = vec![0u8; size];
    for (&(offset, len), value) in fields.iter().zip(&values) {
        bytes[offset..offset + len].copy_from_slice(value);
    }
    PackedArgs { bytes, fields }
}

/// One call of every [`KernelCall`] variant, each argument a distinct value, for the ABI
/// test. The exhaustive match below stops the build with `--features hip` when a
/// variant is added, until it is added here too.
pub fn kernel_call_samples() -> Vec<KernelCall> {
    use crate::kernels::{Cmp, DType, ReduceOp};
    // Argument `j` of sample `k`: a 64-bit value with `k` in its low byte and `j` in
    // every other byte, or a 32-bit one likewise, so a swapped, shifted or truncated
    // argument shows.
    let u64_ = |k: usize, j: u64| 0x0101_0101_0101_0100 * (j + 1) + k as u64;
    let u32_ = |k: usize, j: u32| 0x0101_0100 * (j + 1) + k as u32;
    let mut samples = vec![
        KernelCall::Put {
            dst: 0x1111_1111_1111_1101,
            src: 0x2222_2222_2222_2202,
            bytes: 0x3333_3333_3333_3303,
            bases: 0x4444_4444_4444_4404,
            world: 0x5555_5505,
            cur: 0x6666_6606,
            to: 0x7777_7707,
        },
        KernelCall::Get {
            dst: 0x1111_1111_1111_1111,
            src: 0x2222_2222_2222_2212,
            bytes: 0x3333_3333_3333_3313,
            bases: 0x4444_4444_4444_4414,
            world: 0x5555_5515,
            cur: 0x6666_6616,
            from: 0x7777_7717,
        },
        KernelCall::Copy {
            dst: 0x1111_1111_1111_1121,
            src: 0x2222_2222_2222_2222,
            bytes: 0x3333_3333_3333_3323,
        },
    ];
    let k = samples.len();
    samples.extend([
        KernelCall::RmaPut {
            dst: u64_(k, 0),
            src: u64_(k, 1),
            bases: u64_(k, 2),
            world: u32_(k, 3),
            rank: u32_(k, 4),
            bytes: u64_(k, 5),
            to: u32_(k, 6),
        },
        KernelCall::RmaGet {
            dst: u64_(k + 1, 0),
            src: u64_(k + 1, 1),
            bases: u64_(k + 1, 2),
            world: u32_(k + 1, 3),
            rank: u32_(k + 1, 4),
            bytes: u64_(k + 1, 5),
            from: u32_(k + 1, 6),
        },
        KernelCall::PutSignalAdd {
            dst: u64_(k + 2, 0),
            src: u64_(k + 2, 1),
            bases: u64_(k + 2, 2),
            world: u32_(k + 2, 3),
            rank: u32_(k + 2, 4),
            bytes: u64_(k + 2, 5),
            sig: u64_(k + 2, 6),
            to: u32_(k + 2, 7),
            value: u64_(k + 2, 8),
        },
        KernelCall::BarrierAll {
            bases: u64_(k + 3, 0),
            world: u32_(k + 3, 1),
            rank: u32_(k + 3, 2),
            sig: u64_(k + 3, 3),
        },
        KernelCall::AllGather {
            dst: u64_(k + 4, 0),
            src: u64_(k + 4, 1),
            bases: u64_(k + 4, 2),
            world: u32_(k + 4, 3),
            rank: u32_(k + 4, 4),
            bytes: u64_(k + 4, 5),
            sig: u64_(k + 4, 6),
        },
        KernelCall::AllToAll {
            dst: u64_(k + 5, 0),
            src: u64_(k + 5, 1),
            bases: u64_(k + 5, 2),
            world: u32_(k + 5, 3),
            rank: u32_(k + 5, 4),
            bytes: u64_(k + 5, 5),
            sig: u64_(k + 5, 6),
        },
        KernelCall::Broadcast {
            dst: u64_(k + 6, 0),
            src: u64_(k + 6, 1),
            bases: u64_(k + 6, 2),
            world: u32_(k + 6, 3),
            rank: u32_(k + 6, 4),
            bytes: u64_(k + 6, 5),
            sig: u64_(k + 6, 6),
            root: u32_(k + 6, 7),
        },
        KernelCall::AtomicAddAll {
            counter: u64_(k + 7, 0),
            bases: u64_(k + 7, 1),
            world: u32_(k + 7, 2),
            rank: u32_(k + 7, 3),
            iters: u32_(k + 7, 4),
        },
        KernelCall::SignalWaitUntil {
            bases: u64_(k + 8, 0),
            world: u32_(k + 8, 1),
            rank: u32_(k + 8, 2),
            sig: u64_(k + 8, 3),
            cmp: Cmp::Le,
            value: u64_(k + 8, 5),
        },
    ]);
    // Every reduction kernel: 3 algorithms x 3 operators x 3 element types.
    for make in [
        |op, dtype, dst, src, bases, world, rank, count, sig| KernelCall::AllReduceOneShot {
            op,
            dtype,
            dst,
            src,
            bases,
            world,
            rank,
            count,
            sig,
        },
        |op, dtype, dst, src, bases, world, rank, count, sig| KernelCall::AllReduceTwoShot {
            op,
            dtype,
            dst,
            src,
            bases,
            world,
            rank,
            count,
            sig,
        },
        |op, dtype, dst, src, bases, world, rank, count, sig| KernelCall::ReduceScatter {
            op,
            dtype,
            dst,
            src,
            bases,
            world,
            rank,
            count,
            sig,
        },
    ] {
        for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
            for dtype in [DType::F32, DType::Bf16, DType::I32] {
                let k = samples.len();
                samples.push(make(
                    op,
                    dtype,
                    u64_(k, 0),
                    u64_(k, 1),
                    u64_(k, 2),
                    u32_(k, 3),
                    u32_(k, 4),
                    u64_(k, 5),
                    u64_(k, 6),
                ));
            }
        }
    }
    let mut seen = [false; 15];
    for s in &samples {
        let i = match s {
            KernelCall::Put { .. } => 0,
            KernelCall::Get { .. } => 1,
            KernelCall::Copy { .. } => 2,
            KernelCall::RmaPut { .. } => 3,
            KernelCall::RmaGet { .. } => 4,
            KernelCall::PutSignalAdd { .. } => 5,
            KernelCall::BarrierAll { .. } => 6,
            KernelCall::AllGather { .. } => 7,
            KernelCall::AllToAll { .. } => 8,
            KernelCall::Broadcast { .. } => 9,
            KernelCall::AllReduceOneShot { .. } => 10,
            KernelCall::AllReduceTwoShot { .. } => 11,
            KernelCall::ReduceScatter { .. } => 12,
            KernelCall::AtomicAddAll { .. } => 13,
            KernelCall::SignalWaitUntil { .. } => 14,
        };
        seen[i] = true;
    }
    debug_assert!(
        seen.iter().all(|&s| s),
        "a KernelCall variant has no sample"
    );
    samples
}

/// The default launch shape for moving `bytes`: 256 threads per block and about one
/// 16-byte vector per thread (DESIGN.md, finding 3), at least one block, at most
/// [`MAX_BLOCKS`] (the kernels are grid-stride loops, so fewer blocks still cover all).
fn grid_for_bytes(bytes: u64) -> Grid {
    let threads = bytes.div_ceil(BYTES_PER_THREAD);
    let blocks = threads.div_ceil(u64::from(THREADS)).clamp(1, MAX_BLOCKS);
    Grid {
        blocks: blocks as u32,
        threads: THREADS,
    }
}

/// The HIP backend of one rank: a device, a non-blocking stream and the project's
/// kernels loaded for the device's architecture.
pub struct Hip {
    // Field order is drop order: functions, module, stream, then the device.
    functions: Mutex<HashMap<&'static str, runtime::Function>>,
    module: LoadedModule,
    stream: OwnedStream,
    device: Arc<Device>,
    ordinal: usize,
    name: String,
    arch: String,
    code_object_target: &'static str,
    runtime_version: i32,
    syncs: AtomicU64,
}

impl fmt::Debug for Hip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hip")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("arch", &self.arch)
            .field("code_object", &self.code_object_target)
            .field("runtime_version", &self.runtime_version)
            .finish_non_exhaustive()
    }
}

impl Hip {
    /// Opens device `ordinal`.
    ///
    /// # Errors
    /// [`Error::LibraryMissing`] when `libamdhip64` cannot be loaded (checked before any
    /// HIP call; never a panic), [`Error::Unsupported`] when it lacks an entry point used
    /// here; [`Error::NoDevice`] when the runtime sees no device or fewer than
    /// `ordinal + 1`; [`Error::NoCodeObject`] when no embedded code object is built for
    /// the device's processor; [`Error::Driver`] for any other HIP failure.
    pub fn new(ordinal: usize) -> Result<Self> {
        // The first call loads the runtime: a missing library or entry point is an `Err`.
        runtime::init()?;
        let runtime_version = runtime::runtime_version()?;
        if ordinal >= runtime::device_count()? {
            return Err(Error::NoDevice { backend: "hip" });
        }
        let ordinal_c = c_int::try_from(ordinal).map_err(|_| Error::NoDevice { backend: "hip" })?;
        let device = Arc::new(Device { ordinal: ordinal_c });
        device.make_current()?;
        let name = runtime::device_name(ordinal_c)?;
        let arch = runtime::arch_name(ordinal_c)?;
        let object = code_object_for(&arch)?;
        let module = LoadedModule {
            device: Arc::clone(&device),
            module: runtime::module_load_data(&aligned_copy(object.bytes))?,
        };
        let stream = OwnedStream {
            device: Arc::clone(&device),
            stream: runtime::stream_create_non_blocking()?,
        };
        Ok(Self {
            functions: Mutex::new(HashMap::new()),
            module,
            stream,
            device,
            ordinal,
            name,
            arch,
            code_object_target: object.target,
            runtime_version,
            syncs: AtomicU64::new(0),
        })
    }

    /// The device ordinal this backend drives.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's full `gcnArchName` (`gfx942:sramecc+:xnack-`).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The embedded code object that was loaded (`gfx942`, `gfx950`).
    pub fn code_object_target(&self) -> &'static str {
        self.code_object_target
    }

    /// The runtime's HIP version (`hipRuntimeGetVersion`, e.g. 60_032_830 for 6.0.32830).
    pub fn runtime_version(&self) -> i32 {
        self.runtime_version
    }

    /// How many HIP calls made while dropping HIP objects failed in this process.
    pub fn drop_errors() -> u64 {
        DROP_ERRORS.load(Ordering::Relaxed)
    }

    /// The last such failure, as text.
    pub fn last_drop_error() -> Option<String> {
        LAST_DROP_ERROR.lock().ok().and_then(|last| last.clone())
    }

    /// The kernel `name` of the loaded module, looked up once and cached.
    fn function(&self, name: &'static str) -> Result<runtime::Function> {
        let mut cache = self
            .functions
            .lock()
            .map_err(|_| Error::Unsupported("HIP function cache poisoned"))?;
        if let Some(&f) = cache.get(name) {
            return Ok(f);
        }
        let cname =
            CString::new(name).map_err(|_| Error::Unsupported("kernel name with a NUL byte"))?;
        let f = runtime::module_get_function(self.module.module, &cname)?;
        cache.insert(name, f);
        Ok(f)
    }

    fn count_sync(&self) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }

    /// Exports a HIP allocation of this rank.
    fn export(&self, memory: &Allocation) -> Result<Shareable> {
        self.device.make_current()?;
        let export = IpcExport {
            handle: runtime::ipc_get_mem_handle(memory.ptr)?,
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

    /// Maps a peer's export of at least `bytes` bytes.
    fn import(&self, handle: &Shareable, bytes: usize) -> Result<HipMapping> {
        let export = IpcExport::decode(&handle.bytes, "HIP")?;
        if bytes == 0 || bytes as u64 > export.len {
            return Err(Error::Bootstrap(format!(
                "peer exported {} bytes of HIP memory, {bytes} expected",
                export.len
            )));
        }
        self.device.make_current()?;
        if export.pid == std::process::id() {
            // HIP cannot open an IPC handle in the exporting process. Ranks of one
            // process share one address space, so the exporter's pointer is valid here
            // once this device may access the exporter's.
            if export.ordinal as usize != self.ordinal {
                let peer = c_int::try_from(export.ordinal)
                    .map_err(|_| Error::Bootstrap("HIP export of a bad device ordinal".into()))?;
                if !runtime::can_access_peer(self.device.ordinal, peer)? {
                    return Err(Error::Unsupported(
                        "in-process import of another GPU's memory without peer access",
                    ));
                }
                runtime::enable_peer_access(peer)?;
            }
            return Ok(HipMapping {
                base: export.ptr,
                len: bytes,
                owner: MappingOwner::Alias,
            });
        }
        let ptr = runtime::ipc_open_mem_handle(&export.handle, self.runtime_version)?;
        Ok(HipMapping {
            base: ptr,
            len: bytes,
            owner: MappingOwner::Ipc {
                _opened: IpcOpened {
                    device: Arc::clone(&self.device),
                    ptr,
                },
            },
        })
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

/// `bytes` copied into 8-byte-aligned storage (an ELF image is read in place by the
/// loader; `include_bytes!` data is only byte-aligned).
fn aligned_copy(bytes: &[u8]) -> AlignedBytes {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    AlignedBytes {
        words,
        len: bytes.len(),
    }
}

/// Bytes in `u64` storage.
struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl std::ops::Deref for AlignedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }
}

impl std::ops::DerefMut for AlignedBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.words)[..self.len]
    }
}

impl Drop for Hip {
    fn drop(&mut self) {
        // Teardown only, not counted: the module must not be unloaded under a running
        // kernel, so wait for the stream before the fields drop.
        record_drop(
            self.device
                .make_current()
                .and_then(|()| runtime::stream_synchronize(self.stream.stream)),
        );
    }
}

impl Backend for Hip {
    type Heap = HipHeap;
    type Mapping = HipMapping;
    type DeviceMemory = HipDeviceMemory;

    fn kind(&self) -> BackendKind {
        BackendKind::Hip
    }

    fn device_name(&self) -> String {
        self.name.clone()
    }

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

    fn import_heap(&self, handle: Shareable, bytes: usize) -> Result<HipMapping> {
        self.import(&handle, bytes)
    }

    fn alloc_device(&self, bytes: usize) -> Result<HipDeviceMemory> {
        Ok(HipDeviceMemory {
            memory: self.allocate(bytes, false)?,
        })
    }

    fn export_device_memory(&self, memory: &HipDeviceMemory) -> Result<Shareable> {
        self.export(&memory.memory)
    }

    fn import_device_memory(&self, handle: Shareable, bytes: usize) -> Result<HipMapping> {
        self.import(&handle, bytes)
    }

    fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.device.make_current()?;
        // SAFETY: `dst` is device memory of this rank's address space (the trait's
        // contract); the runtime validates the range. HIP stages pageable `src` before
        // this returns, so the caller may reuse it at once.
        unsafe { runtime::memcpy_htod_async(dst, src, self.stream.stream) }
    }

    fn download(&self, dst: &mut [u8], src: u64) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.device.make_current()?;
        // SAFETY: `src` is readable device memory (the trait's contract; the runtime
        // validates it), and the stream is synchronised below before `dst` is released.
        let copied = unsafe { runtime::memcpy_dtoh_async(dst, src, self.stream.stream) };
        // Synchronise even when enqueuing failed, so no copy into `dst` can be in flight.
        let synced = runtime::stream_synchronize(self.stream.stream);
        self.count_sync();
        copied.and(synced)
    }

    fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.device.make_current()?;
        // SAFETY: `dst..dst+bytes` is device memory of this rank (the trait's contract);
        // the runtime validates the range.
        unsafe { runtime::memset_d8_async(dst, value, bytes, self.stream.stream) }
    }

    fn launch(&self, call: &KernelCall, grid: Grid) -> Result<()> {
        self.device.make_current()?;
        let function = self.function(call.name())?;
        let mut kernargs = aligned_copy(&pack_args(call).bytes);
        // SAFETY: `kernargs` is the kernel's explicit kernarg segment laid out by
        // `pack_args` (the layout `tests/tests/hip_abi.rs` checks against the code
        // objects' metadata); the addresses are the caller's (trait contract) and the
        // kernels bound every access by the byte count.
        unsafe {
            runtime::launch_kernel(
                function,
                grid.blocks,
                grid.threads,
                self.stream.stream,
                &mut kernargs,
            )
        }
    }

    fn default_grid(&self, call: &KernelCall) -> Grid {
        grid_for_bytes(call.bytes())
    }

    fn synchronize(&self) -> Result<()> {
        self.device.make_current()?;
        let synced = runtime::stream_synchronize(self.stream.stream);
        self.count_sync();
        synced
    }

    fn device_to_host_syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    //! CPU-side checks run everywhere; `hip_gpu_*` tests need a device and print
    //! `skipped: <reason>` (and pass) when [`Hip::new`] fails.

    use super::*;

    fn device_or_skip() -> Option<Hip> {
        match Hip::new(0) {
            Ok(hip) => {
                println!("device: {hip:?}");
                Some(hip)
            }
            Err(e) => {
                println!("skipped: {e}");
                None
            }
        }
    }

    #[test]
    fn hip_new_is_typed_error_without_device() {
        match Hip::new(0) {
            Err(e @ (Error::LibraryMissing { .. } | Error::NoDevice { backend: "hip" })) => {
                println!("no HIP device here, as expected: {e:?}");
            }
            Ok(hip) => println!("a HIP device is present: {hip:?}"),
            Err(e) => panic!("expected LibraryMissing or NoDevice, got {e:?}"),
        }
        // The loader state is process-wide: a second call answers the same way.
        let a = Hip::new(0).map(|_| ()).map_err(|e| e.to_string());
        let b = Hip::new(0).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(a, b);
    }

    #[test]
    fn hip_arch_name_picks_code_object() {
        assert_eq!(base_arch("gfx942:sramecc+:xnack-"), "gfx942");
        assert_eq!(base_arch("gfx950"), "gfx950");
        assert_eq!(
            code_object_for("gfx942:sramecc+:xnack-").unwrap().target,
            "gfx942"
        );
        assert_eq!(
            code_object_for("gfx950:sramecc+:xnack-").unwrap().target,
            "gfx950"
        );
        for arch in ["gfx90a:sramecc+:xnack-", "gfx1100", ""] {
            match code_object_for(arch) {
                Err(Error::NoCodeObject { arch: a }) => assert_eq!(a, base_arch(arch)),
                other => panic!("{arch}: expected NoCodeObject, got {other:?}"),
            }
        }
        // An ELF, not PTX.
        let object = code_object_for("gfx942").unwrap();
        assert_eq!(&object.bytes[..4], b"\x7fELF");
    }

    #[test]
    fn hip_default_grid_fits_a_dispatch() {
        assert_eq!(
            grid_for_bytes(0),
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
        let max = grid_for_bytes(u64::MAX);
        assert!(u64::from(max.blocks) * u64::from(max.threads) <= u64::from(u32::MAX));
    }

    #[test]
    fn hip_pack_args_natural_alignment() {
        let p = pack_args(&KernelCall::Put {
            dst: 1,
            src: 2,
            bytes: 3,
            bases: 4,
            world: 5,
            cur: 6,
            to: 7,
        });
        assert_eq!(
            p.fields,
            vec![(0, 8), (8, 8), (16, 8), (24, 8), (32, 4), (36, 4), (40, 4)]
        );
        assert_eq!(p.bytes.len(), 44);
        assert_eq!(&p.bytes[36..40], &6u32.to_le_bytes());
        // One sample per kernel: no name twice (the exhaustive match keeps every variant).
        let samples = kernel_call_samples();
        let names: std::collections::HashSet<&str> = samples.iter().map(KernelCall::name).collect();
        assert_eq!(names.len(), samples.len());
    }

    #[test]
    fn hip_ipc_export_bytes_roundtrip() {
        let e = IpcExport {
            handle: [7; 64],
            pid: 1234,
            ordinal: 3,
            ptr: 0x7f00_0000_1000,
            len: 4096,
        };
        let bytes = e.encode();
        assert_eq!(bytes.len(), IpcExport::BYTES);
        assert_eq!(IpcExport::decode(&bytes, "HIP").unwrap(), e);
        assert!(matches!(
            IpcExport::decode(&bytes[1..], "HIP"),
            Err(Error::Bootstrap(_))
        ));
    }

    /// Two ranks in one process on device 0: heaps, exports/imports (aliases in one
    /// process), a put through the peer-base table and a get back.
    #[test]
    fn hip_gpu_two_ranks_put_and_get() {
        let Some(r0) = device_or_skip() else { return };
        let r1 = Hip::new(0).unwrap();
        let g = r0.heap_granularity();
        let h0 = r0.create_heap(g).unwrap();
        let h1 = r1.create_heap(g).unwrap();
        let m01 = r0.import_heap(r1.export_heap(&h1).unwrap(), g).unwrap();
        let m10 = r1.import_heap(r0.export_heap(&h0).unwrap(), g).unwrap();
        assert!(m01.is_alias() && m10.is_alias());
        let bytes = 4096 + 13;
        let src: Vec<u8> = (0..bytes).map(|i| (i * 31 + 7) as u8).collect();
        let src_dev = r0.alloc_device(bytes).unwrap();
        r0.upload(src_dev.base(), &src).unwrap();
        let table: Vec<u8> = [h0.base(), m01.base()]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let bases = r0.alloc_device(16).unwrap();
        r0.upload(bases.base(), &table).unwrap();
        r1.memset(h1.base(), 0, g).unwrap();
        r1.synchronize().unwrap();
        let put = KernelCall::Put {
            dst: h0.base() + 64,
            src: src_dev.base(),
            bytes: bytes as u64,
            bases: bases.base(),
            world: 2,
            cur: 0,
            to: 1,
        };
        r0.launch(&put, r0.default_grid(&put)).unwrap();
        r0.synchronize().unwrap();
        let mut got = vec![0xffu8; bytes + 128];
        r1.download(&mut got, h1.base()).unwrap();
        assert!(got[..64].iter().all(|&b| b == 0));
        assert!(got[64..64 + bytes] == src[..], "put data differs");
        assert!(got[64 + bytes..].iter().all(|&b| b == 0));

        let table1: Vec<u8> = [m10.base(), h1.base()]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let bases1 = r1.alloc_device(16).unwrap();
        r1.upload(bases1.base(), &table1).unwrap();
        r0.memset(h0.base(), 0x11, 64).unwrap();
        r0.synchronize().unwrap();
        let dst1 = r1.alloc_device(64).unwrap();
        let get = KernelCall::Get {
            dst: dst1.base(),
            src: h1.base(),
            bytes: 64,
            bases: bases1.base(),
            world: 2,
            cur: 1,
            from: 0,
        };
        r1.launch(&get, r1.default_grid(&get)).unwrap();
        let mut back = vec![0u8; 64];
        r1.download(&mut back, dst1.base()).unwrap();
        assert!(back.iter().all(|&b| b == 0x11), "get: {back:?}");
        drop((m01, m10, h0, h1, src_dev, bases, bases1, dst1));
        drop((r0, r1));
        assert_eq!(Hip::drop_errors(), 0, "{:?}", Hip::last_drop_error());
    }

    #[test]
    fn hip_gpu_bad_ordinal_and_zero_sizes() {
        let Some(r0) = device_or_skip() else { return };
        assert!(matches!(
            Hip::new(4096),
            Err(Error::NoDevice { backend: "hip" })
        ));
        assert!(matches!(r0.create_heap(0), Err(Error::ZeroSize)));
        assert!(matches!(r0.alloc_device(0), Err(Error::ZeroSize)));
        assert_eq!(r0.kind(), BackendKind::Hip);
        assert_eq!(r0.create_heap(1).unwrap().len(), r0.heap_granularity());
        assert_eq!(r0.device_to_host_syncs(), 0);
    }
}
