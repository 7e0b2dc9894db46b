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
//! - **Devices**: `symmem-build` builds every kernel crate for gfx942 and gfx950, so a
//!   usable runtime is one that supports those GPUs: ROCm 6.0 or later for MI300X
//!   (gfx942) and the ROCm release that introduced MI350 (gfx950; 7.0) or later. The
//!   code objects are code object v5 (`amdhsa.version` 1.2), which those runtimes load.
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
//! # Modules
//!
//! [`Backend::load_module`] loads a kernel crate's [`CodeObjects`] as a [`HipModule`]:
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
//! (`symmem_device::declarations()`) and the gfx942 and gfx950 objects of its crate,
//! that the object's `amdhsa.kernels` metadata lists exactly the declared kernels and
//! that each one's `.args` (offset, size, value kind) and `.kernarg_segment_size` are
//! what these slots and this layout give.
//!
//! # Graphs
//!
//! [`Backend::begin_capture`] puts the rank's stream in stream capture
//! (`hipStreamBeginCapture`, thread-local mode); launches until
//! [`Backend::end_capture`] are recorded, each with a copy of its kernarg buffer, and
//! the graph is instantiated into a [`HipGraph`] that [`Backend::replay`] launches on
//! the same stream (`hipGraphLaunch`).

mod runtime;

pub use runtime::{BINDINGS_HIP_VERSION, FFI_FACTS, FfiFact, Relation};

use super::ipc::IpcExport;
use super::{
    Backend, BackendKind, CodeObjects, DeviceRegion, Grid, HeapAccess, KernelLaunch, Shareable,
    SharedRegion,
};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::ffi::{CString, c_int};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use symmem_device::Slot;

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

/// A loaded code object; unloaded on drop.
#[derive(Debug)]
struct LoadedModule {
    device: Arc<Device>,
    module: runtime::Module,
}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        record_drop(self.device.make_current().and_then(|()| {
            // SAFETY: a module's owner drops it only once no kernel of it runs (a world
            // keeps its modules until it has left, which synchronises its stream; the
            // tests synchronise first); the module is not used after this.
            unsafe { runtime::module_unload(self.module) }
        }));
    }
}

/// The rank's stream; destroyed on drop (shared by the backend and its graphs, so it
/// outlives every graph that replays on it).
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

/// The object among `objects` for a device whose `gcnArchName` is `gcn_arch_name`, with
/// its processor name: the AMD object (`gfx*`) built for exactly its processor (AMD ISAs
/// are not forward-compatible), else [`Error::NoCodeObject`] naming the crate and the
/// processor.
pub fn code_object_for(
    objects: &'static CodeObjects,
    gcn_arch_name: &str,
) -> Result<(&'static str, &'static [u8])> {
    let arch = base_arch(gcn_arch_name);
    objects
        .objects()
        .iter()
        .copied()
        .find(|(processor, _)| processor.starts_with("gfx") && *processor == arch)
        .ok_or_else(|| Error::NoCodeObject {
            module: objects.crate_name(),
            arch: arch.to_owned(),
        })
}

/// The kernarg buffer's alignment in [`Hip`]'s launch (it is built in `u64` words).
pub const KERNARG_BUFFER_ALIGN: usize = 8;

/// The AMDGPU kernel ABI's layout of explicit arguments with the given slots (pointers
/// and by-value numbers, which is all a `#[kernel]` takes): in order, each at the next
/// offset that is a multiple of its alignment (`slot.align`: 8 for addresses, `u64`,
/// `i64` and `f64`, 4 for `u32`, `i32` and `f32`); the segment ends at the last
/// argument's end. Returns each argument's `(offset, size)` and the segment size.
pub fn kernarg_layout(slots: &[Slot]) -> (Vec<(usize, usize)>, usize) {
    let mut end = 0usize;
    let fields = slots
        .iter()
        .map(|slot| {
            let offset = end.next_multiple_of(slot.align.max(1));
            end = offset + slot.size;
            (offset, slot.size)
        })
        .collect();
    (fields, end)
}

/// A launch's explicit kernarg segment: for each parameter, the `slots[i].size` bytes
/// `args[i]` points at (its value in the parameter's ABI type, in the host's byte order,
/// little-endian like the device's), at the offset [`kernarg_layout`] gives; padding is
/// zero. Its length is the segment size. This is what [`Hip`]'s launch passes as
/// `HIP_LAUNCH_PARAM_BUFFER_POINTER`, from a [`KernelLaunch`]'s `slots` and `args`.
/// Needs no device.
///
/// # Panics
/// If `slots` and `args` differ in length.
///
/// # Safety
/// Each `args[i]` is valid for reads of `slots[i].size` bytes (as a [`KernelLaunch`]'s
/// are: each points at a value of its parameter's ABI type).
pub unsafe fn pack_kernargs(slots: &[Slot], args: &[*const ()]) -> Vec<u8> {
    assert_eq!(slots.len(), args.len(), "one kernel argument per parameter");
    let (fields, size) = kernarg_layout(slots);
    let mut bytes = vec![0u8; size];
    for (&(offset, len), &arg) in fields.iter().zip(args) {
        // SAFETY: `arg` is readable for `len` bytes (the caller's contract), and the
        // field lies inside `bytes` (the layout ends at its last field's end).
        let value = unsafe { std::slice::from_raw_parts(arg.cast::<u8>(), len) };
        bytes[offset..offset + len].copy_from_slice(value);
    }
    bytes
}

/// The names of the kernels an AMDGPU code object (an ELF `.hsaco`) exports: every
/// defined, non-hidden global `STT_OBJECT` symbol `<name>.kd` (the kernel descriptor
/// the AMDGPU ABI emits for each kernel, which `hipModuleGetFunction` resolves `name`
/// to), from the dynamic symbol table, or the static one in an object without one.
/// Sorted, each once. Needs no device; reads no further than `image`'s bounds.
///
/// # Errors
/// A description of what is wrong when `image` is not a 64-bit little-endian AMDGPU ELF
/// with a well-formed symbol table.
pub fn code_object_kernels(image: &[u8]) -> std::result::Result<Vec<String>, &'static str> {
    elf::kernel_names(image)
}

/// Reading the kernel-descriptor symbols of an AMDGPU ELF, with every read bounds-checked.
mod elf {
    /// `EM_AMDGPU`.
    const EM_AMDGPU: u16 = 224;
    /// `SHT_SYMTAB`.
    const SHT_SYMTAB: u32 = 2;
    /// `SHT_DYNSYM`.
    const SHT_DYNSYM: u32 = 11;
    /// `STT_OBJECT`.
    const STT_OBJECT: u8 = 1;
    /// `STB_GLOBAL`.
    const STB_GLOBAL: u8 = 1;
    /// `STB_WEAK`.
    const STB_WEAK: u8 = 2;
    /// `STV_INTERNAL` and `STV_HIDDEN`: invisible to the loader.
    const STV_INTERNAL: u8 = 1;
    const STV_HIDDEN: u8 = 2;
    /// Bytes of an `Elf64_Shdr`.
    const SHDR_BYTES: usize = 64;
    /// Bytes of an `Elf64_Sym`.
    const SYM_BYTES: usize = 24;

    type Parse<T> = std::result::Result<T, &'static str>;

    /// `N` bytes of `b` at `at`.
    fn bytes<const N: usize>(b: &[u8], at: usize, what: &'static str) -> Parse<[u8; N]> {
        at.checked_add(N)
            .and_then(|end| b.get(at..end))
            .and_then(|s| s.try_into().ok())
            .ok_or(what)
    }

    fn u16_at(b: &[u8], at: usize, what: &'static str) -> Parse<u16> {
        bytes(b, at, what).map(u16::from_le_bytes)
    }

    fn u32_at(b: &[u8], at: usize, what: &'static str) -> Parse<u32> {
        bytes(b, at, what).map(u32::from_le_bytes)
    }

    fn usize_at(b: &[u8], at: usize, what: &'static str) -> Parse<usize> {
        bytes(b, at, what)
            .map(u64::from_le_bytes)
            .and_then(|v| usize::try_from(v).map_err(|_| what))
    }

    /// One section header: its type, the range of its contents in the image, its
    /// `sh_link` and its entry size.
    struct Section<'a> {
        kind: u32,
        data: &'a [u8],
        link: usize,
        entry_size: usize,
    }

    /// Section `index` of `image`, whose section headers are `entry` bytes each from
    /// offset `table`.
    fn section<'a>(
        image: &'a [u8],
        table: usize,
        entry: usize,
        index: usize,
    ) -> Parse<Section<'a>> {
        let at = index
            .checked_mul(entry)
            .and_then(|o| o.checked_add(table))
            .ok_or("section header table out of range")?;
        let what = "section header out of the image";
        let kind = u32_at(image, at + 4, what)?;
        let offset = usize_at(image, at + 24, what)?;
        let size = usize_at(image, at + 32, what)?;
        let link = u32_at(image, at + 40, what)? as usize;
        let entry_size = usize_at(image, at + 56, what)?;
        // SHT_NOBITS (8) has no contents in the image.
        let data = if kind == 8 {
            &[][..]
        } else {
            offset
                .checked_add(size)
                .and_then(|end| image.get(offset..end))
                .ok_or("section contents out of the image")?
        };
        Ok(Section {
            kind,
            data,
            link,
            entry_size,
        })
    }

    /// See [`super::code_object_kernels`].
    pub(super) fn kernel_names(image: &[u8]) -> Parse<Vec<String>> {
        if image.get(..4) != Some(b"\x7fELF") {
            return Err("not an ELF image");
        }
        let header = "ELF header truncated";
        if bytes::<2>(image, 4, header)? != [2, 1] {
            return Err("not a 64-bit little-endian ELF");
        }
        if u16_at(image, 18, header)? != EM_AMDGPU {
            return Err("not an AMDGPU ELF");
        }
        let table = usize_at(image, 40, header)?;
        let entry = usize::from(u16_at(image, 58, header)?);
        let mut count = usize::from(u16_at(image, 60, header)?);
        if table == 0 {
            return Err("no section header table");
        }
        if entry < SHDR_BYTES {
            return Err("section headers too small");
        }
        if count == 0 {
            // Extended numbering: the count is section 0's `sh_size`.
            count = usize_at(image, table + 32, "section header out of the image")?;
        }
        let mut symtab = None;
        for index in 0..count {
            let s = section(image, table, entry, index)?;
            match s.kind {
                SHT_DYNSYM => {
                    symtab = Some(s);
                    break;
                }
                SHT_SYMTAB if symtab.is_none() => symtab = Some(s),
                _ => {}
            }
        }
        let symtab = symtab.ok_or("no symbol table")?;
        if symtab.link >= count {
            return Err("symbol table names no string table");
        }
        let strings = section(image, table, entry, symtab.link)?.data;
        let sym_bytes = if symtab.entry_size == 0 {
            SYM_BYTES
        } else {
            symtab.entry_size
        };
        if sym_bytes < SYM_BYTES {
            return Err("symbols too small");
        }
        let mut names = Vec::new();
        for sym in symtab.data.chunks_exact(sym_bytes) {
            let what = "symbol truncated";
            let name_at = u32_at(sym, 0, what)? as usize;
            let [info, other] = bytes::<2>(sym, 4, what)?;
            let shndx = u16_at(sym, 6, what)?;
            let bind = info >> 4;
            let visibility = other & 3;
            if info & 0xf != STT_OBJECT
                || !(bind == STB_GLOBAL || bind == STB_WEAK)
                || visibility == STV_INTERNAL
                || visibility == STV_HIDDEN
                || shndx == 0
            {
                continue;
            }
            let name = strings
                .get(name_at..)
                .and_then(|s| s.split(|&b| b == 0).next().filter(|_| s.contains(&0)))
                .ok_or("symbol name out of the string table")?;
            if let Some(kernel) = name.strip_suffix(b".kd").filter(|k| !k.is_empty()) {
                let kernel = std::str::from_utf8(kernel).map_err(|_| "kernel name not UTF-8")?;
                names.push(kernel.to_owned());
            }
        }
        names.sort_unstable();
        names.dedup();
        Ok(names)
    }
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

/// Page-locked, coherent host memory mapped into the device (`hipHostMalloc` with
/// `hipHostMallocMapped | hipHostMallocPortable | hipHostMallocCoherent`): the rank's
/// control block of bounded waits. Freed with `hipHostFree` on drop.
#[derive(Debug)]
pub struct HipShared {
    host: *mut u8,
    device: u64,
    owner: Arc<Device>,
}

// SAFETY: page-locked host memory of the process, accessed atomically by the host and
// the device; the pointer is not tied to a thread, and `hipHostFree` may run on any.
unsafe impl Send for HipShared {}
// SAFETY: as above; `&HipShared` only hands out the addresses.
unsafe impl Sync for HipShared {}

impl SharedRegion for HipShared {
    fn host_ptr(&self) -> *mut u8 {
        self.host
    }
    fn device_ptr(&self) -> u64 {
        self.device
    }
}

impl Drop for HipShared {
    fn drop(&mut self) {
        record_drop(self.owner.make_current().and_then(|()| {
            // SAFETY: allocated by `alloc_shared`, freed once; the world drops it only
            // after its last synchronisation, so no kernel reads it any more.
            unsafe { runtime::host_free(self.host) }
        }));
    }
}

/// A kernel crate's code object loaded on one device, every kernel found by name.
pub struct HipModule {
    // Field order is drop order: the handles, then the module.
    functions: HashMap<String, runtime::Function>,
    target: &'static str,
    crate_name: &'static str,
    loaded: LoadedModule,
}

impl HipModule {
    /// The processor of the code object that was loaded (`gfx942`, `gfx950`).
    pub fn target(&self) -> &'static str {
        self.target
    }

    /// The kernel crate it was built from.
    pub fn crate_name(&self) -> &'static str {
        self.crate_name
    }

    /// How many kernels the code object holds (each with its function handle).
    pub fn kernel_count(&self) -> usize {
        self.functions.len()
    }
}

impl fmt::Debug for HipModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipModule")
            .field("crate", &self.crate_name)
            .field("target", &self.target)
            .field("kernels", &self.functions.len())
            .finish()
    }
}

/// The HIP backend of one rank: a device and a non-blocking stream. Kernel crates are
/// loaded with [`Backend::load_module`].
pub struct Hip {
    // Field order is drop order: the stream, then the device.
    stream: Arc<OwnedStream>,
    device: Arc<Device>,
    ordinal: usize,
    name: String,
    arch: String,
    runtime_version: i32,
    syncs: AtomicU64,
}

impl fmt::Debug for Hip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hip")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("arch", &self.arch)
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
    /// `ordinal + 1`; [`Error::Driver`] for any other HIP failure.
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
        let stream = Arc::new(OwnedStream {
            device: Arc::clone(&device),
            stream: runtime::stream_create_non_blocking()?,
        });
        Ok(Self {
            stream,
            device,
            ordinal,
            name,
            arch,
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
        // Teardown only, not counted: the stream must not be destroyed under running
        // work, so wait for it before the fields drop.
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
    type Module = HipModule;
    type Shared = HipShared;

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

    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.device.make_current()?;
        // SAFETY: `dst..dst + src.len()` is writable device memory of this rank that
        // nothing races with (the caller's contract). HIP stages pageable `src` before
        // this returns, so the caller may reuse it at once.
        unsafe { runtime::memcpy_htod_async(dst, src, self.stream.stream) }
    }

    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.device.make_current()?;
        // SAFETY: `src..src + dst.len()` is readable device memory of this rank's address
        // space (the caller's contract), and the stream is synchronised below before
        // `dst` is released.
        let copied = unsafe { runtime::memcpy_dtoh_async(dst, src, self.stream.stream) };
        // Synchronise even when enqueuing failed, so no copy into `dst` can be in flight.
        let synced = runtime::stream_synchronize(self.stream.stream);
        self.count_sync();
        copied.and(synced)
    }

    unsafe fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.device.make_current()?;
        // SAFETY: `dst..dst + bytes` is writable device memory of this rank that nothing
        // races with (the caller's contract).
        unsafe { runtime::memset_d8_async(dst, value, bytes, self.stream.stream) }
    }

    fn load_module(&self, objects: &'static CodeObjects) -> Result<HipModule> {
        let (target, image) = code_object_for(objects, &self.arch)?;
        let names = code_object_kernels(image).map_err(|why| Error::NoCodeObject {
            module: objects.crate_name(),
            arch: format!("{target} (the embedded code object is unreadable: {why})"),
        })?;
        self.device.make_current()?;
        let module = LoadedModule {
            device: Arc::clone(&self.device),
            module: runtime::module_load_data(&aligned_copy(image))?,
        };
        let functions = names
            .into_iter()
            .map(|name| {
                let cname = CString::new(name.as_str())
                    .map_err(|_| Error::Unsupported("kernel name with a NUL byte"))?;
                let function = runtime::module_get_function(module.module, &cname)?;
                Ok((name, function))
            })
            .collect::<Result<_>>()?;
        Ok(HipModule {
            functions,
            target,
            crate_name: objects.crate_name(),
            loaded: module,
        })
    }

    fn alloc_shared(&self, bytes: usize) -> Result<HipShared> {
        self.device.make_current()?;
        let (host, device) = runtime::host_malloc_mapped(bytes.max(1))?;
        Ok(HipShared {
            host,
            device,
            owner: Arc::clone(&self.device),
        })
    }

    fn heap_host_ptr(&self, _: &HipHeap) -> Option<*mut u8> {
        None
    }

    fn kernels_on_host(&self) -> bool {
        false
    }

    fn heap_access(&self, _: &HipHeap) -> Result<Box<dyn HeapAccess>> {
        Err(Error::NoEngine(
            "the off-node engine's staging path is built for the CPU and CUDA backends, \
             not yet for HIP",
        ))
    }

    unsafe fn watch(&self, module: &mut HipModule, control: &HipShared) -> Result<()> {
        self.device.make_current()?;
        let Some((global, bytes)) =
            runtime::module_get_global(module.loaded.module, c"SYMMEM_CONTROL")?
        else {
            return Ok(());
        };
        let pointer = control.device.to_ne_bytes();
        if bytes != pointer.len() {
            return Err(Error::Unsupported(
                "a code object whose SYMMEM_CONTROL global is not an 8-byte pointer",
            ));
        }
        // SAFETY: the module's 8-byte pointer global (its size checked above), in this
        // device's memory; no kernel of the module has been launched yet (it was just
        // loaded), so none reads it during the copy.
        unsafe { runtime::memcpy_htod(global, &pointer) }
    }

    unsafe fn launch(
        &self,
        module: &HipModule,
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
        if launch.args.len() != launch.slots.len() {
            return Err(Error::Unsupported(
                "a kernel launch without one argument per parameter",
            ));
        }
        // SAFETY: each argument points at a value of its parameter's ABI type, whose size
        // its slot gives (the caller's contract); one argument per slot, checked above.
        let packed = unsafe { pack_kernargs(launch.slots, launch.args) };
        let mut kernargs = aligned_copy(&packed);
        self.device.make_current()?;
        // SAFETY: `kernargs` is the kernel's explicit kernarg segment in `kernarg_layout`'s
        // layout (which `tests/tests/hip_abi.rs` checks against the code objects'
        // metadata for every declared kernel), in storage aligned to
        // KERNARG_BUFFER_ALIGN; the addresses in it satisfy the kernel's contract (the
        // caller's).
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

    fn grid_for_bytes(&self, bytes: usize) -> Grid {
        grid_for_bytes(bytes as u64)
    }

    fn collective_grid(&self) -> Grid {
        // Few enough blocks that several ranks' grids fit on one GPU at once.
        Grid::new(8, 256)
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

    type Graph = HipGraph;

    fn begin_capture(&self) -> Result<()> {
        self.device.make_current()?;
        runtime::stream_begin_capture(self.stream.stream)
    }

    fn end_capture(&self) -> Result<HipGraph> {
        self.device.make_current()?;
        let graph = runtime::stream_end_capture(self.stream.stream)?;
        let exec = runtime::graph_instantiate(graph);
        // SAFETY: the graph was ended above and is not used again; the executable graph
        // does not need it (the runtimes this backend supports, ROCm 6.0 and later, clone
        // the graph's nodes, kernarg buffers included, when instantiating).
        record_drop(unsafe { runtime::graph_destroy(graph) });
        Ok(HipGraph {
            exec: exec?,
            stream: Arc::clone(&self.stream),
        })
    }

    unsafe fn replay(&self, graph: &HipGraph) -> Result<()> {
        // A graph replays only on the stream it was captured from (its drop waits for
        // that stream alone).
        if !Arc::ptr_eq(&graph.stream, &self.stream) {
            return Err(Error::Unsupported(
                "replaying a HIP graph on a rank other than the one that captured it",
            ));
        }
        self.device.make_current()?;
        runtime::graph_launch(graph.exec, self.stream.stream)
    }
}

/// Launches captured from a rank's stream ([`Backend::begin_capture`]), instantiated on
/// its device: one `hipGraphLaunch` replays them all, with the kernel arguments they were
/// captured with (HIP copies each launch's kernarg buffer into the graph).
///
/// Dropping it first waits for the rank's stream, so no replay of it is in flight (a
/// teardown wait, not counted in [`Backend::device_to_host_syncs`]; HIP does not promise
/// to defer the destruction of a running graph as CUDA does), then destroys the
/// instantiation. It keeps the stream alive until then, also past the [`Hip`] backend.
/// If the wait fails, the instantiation is leaked rather than destroyed under a replay
/// that may still run. Failures are counted in [`Hip::drop_errors`].
#[derive(Debug)]
pub struct HipGraph {
    exec: runtime::GraphExec,
    stream: Arc<OwnedStream>,
}

impl Drop for HipGraph {
    fn drop(&mut self) {
        let idle = self
            .stream
            .device
            .make_current()
            .and_then(|()| runtime::stream_synchronize(self.stream.stream));
        if idle.is_err() {
            record_drop(idle);
            return;
        }
        // SAFETY: instantiated in `end_capture` and not launched after this; it is only
        // ever launched on this stream, which was synchronised above, so no launch of it
        // is in flight.
        record_drop(unsafe { runtime::graph_exec_destroy(self.exec) });
    }
}

#[cfg(test)]
mod tests {
    //! CPU-side checks run everywhere; `hip_gpu_*` tests need a device and print
    //! `skipped: <reason>` (and pass) when [`Hip::new`] fails.

    use super::*;
    use crate::backend::HostKernel;
    use crate::backend::launch_lowered;
    use symmem_arch::host::HostThread;
    use symmem_device::{Kernel, Params};

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

    /// A device address as the pointer type a kernel parameter lowers to.
    fn device<T>(addr: u64) -> *mut T {
        std::ptr::without_provenance_mut(addr as usize)
    }

    /// The slots of `kernel`'s parameters.
    fn slots_of<P: Params>(_: Kernel<P>) -> &'static [Slot] {
        P::SLOTS
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
        static OBJECTS: CodeObjects = CodeObjects::new(
            "some_kernels",
            &[
                ("sm_90", b"ptx"),
                ("gfx942", b"mi300"),
                ("gfx950", b"mi350"),
            ],
        );
        assert_eq!(
            code_object_for(&OBJECTS, "gfx942:sramecc+:xnack-").unwrap(),
            ("gfx942", &b"mi300"[..])
        );
        assert_eq!(
            code_object_for(&OBJECTS, "gfx950").unwrap(),
            ("gfx950", &b"mi350"[..])
        );
        // Exactly the device's processor: no older or newer one stands in.
        for arch in ["gfx90a:sramecc+:xnack-", "gfx941", "gfx1100", "sm_90", ""] {
            match code_object_for(&OBJECTS, arch) {
                Err(Error::NoCodeObject { module, arch: a }) => {
                    assert_eq!((module, a.as_str()), ("some_kernels", base_arch(arch)))
                }
                other => panic!("{arch}: expected NoCodeObject, got {other:?}"),
            }
        }
        // symmem's own objects: gfx942 and gfx950 ELF images.
        let kernels = &crate::backend::code_objects::KERNELS;
        if kernels.objects().is_empty() {
            println!("skipped: this build embeds no code objects of symmem_kernels");
            return;
        }
        for arch in ["gfx942:sramecc+:xnack-", "gfx950:sramecc+:xnack-"] {
            let (target, image) = code_object_for(kernels, arch).unwrap();
            assert_eq!(target, base_arch(arch));
            assert_eq!(&image[..4], b"\x7fELF", "{target}");
        }
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
    fn hip_pack_kernargs_natural_alignment() {
        // symmem_put(dst, src, n: u64, bases: PeerTable, world, cur, to: u32).
        let slots = slots_of(symmem_kernels::symmem_put);
        let (fields, size) = kernarg_layout(slots);
        assert_eq!(
            fields,
            vec![(0, 8), (8, 8), (16, 8), (24, 8), (32, 4), (36, 4), (40, 4)]
        );
        assert_eq!(size, 44);
        // Each value at its offset, whatever its type; padding before an 8-aligned
        // value after a 4-byte one is zero.
        type P = (u32, u64, f32, f64, i32, *const u8);
        let abi: <P as Params>::Abi = (
            0x0101_0101,
            0x0202_0202_0202_0202,
            1.5,
            -2.25,
            -5,
            device::<u8>(0x0606_0606_0606_0606),
        );
        let mut args = Vec::new();
        P::visit(&abi, &mut |p| args.push(p));
        // SAFETY: `args` points into `abi`, one pointer per slot of `P`.
        let bytes = unsafe { pack_kernargs(P::SLOTS, &args) };
        let (fields, size) = kernarg_layout(P::SLOTS);
        assert_eq!(
            fields,
            vec![(0, 4), (8, 8), (16, 4), (24, 8), (32, 4), (40, 8)]
        );
        assert_eq!(bytes.len(), size);
        assert_eq!(size, 48);
        assert_eq!(&bytes[0..4], &0x0101_0101u32.to_le_bytes());
        assert_eq!(&bytes[4..8], &[0; 4]);
        assert_eq!(&bytes[8..16], &0x0202_0202_0202_0202u64.to_le_bytes());
        assert_eq!(&bytes[16..20], &1.5f32.to_le_bytes());
        assert_eq!(&bytes[20..24], &[0; 4]);
        assert_eq!(&bytes[24..32], &(-2.25f64).to_le_bytes());
        assert_eq!(&bytes[32..36], &(-5i32).to_le_bytes());
        assert_eq!(&bytes[40..48], &0x0606_0606_0606_0606u64.to_le_bytes());
        // No parameters, no segment.
        // SAFETY: no arguments to read.
        assert!(unsafe { pack_kernargs(&[], &[]) }.is_empty());
    }

    /// `info` of a symbol: binding and type.
    const GLOBAL_OBJECT: u8 = 0x11;
    const WEAK_OBJECT: u8 = 0x21;
    const LOCAL_OBJECT: u8 = 0x01;
    const GLOBAL_FUNC: u8 = 0x12;

    /// A minimal 64-bit AMDGPU ELF: section 1 a string table, section 2 a symbol table
    /// of type `kind` (`SHT_DYNSYM` 11 or `SHT_SYMTAB` 2) holding `symbols`
    /// (`name, info, other, shndx`) after the null symbol.
    fn tiny_elf(kind: u32, symbols: &[(&str, u8, u8, u16)]) -> Vec<u8> {
        let mut strings = vec![0u8];
        let mut table = vec![0u8; 24];
        for &(name, info, other, shndx) in symbols {
            let mut sym = [0u8; 24];
            sym[..4].copy_from_slice(&(strings.len() as u32).to_le_bytes());
            sym[4] = info;
            sym[5] = other;
            sym[6..8].copy_from_slice(&shndx.to_le_bytes());
            table.extend_from_slice(&sym);
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
        }
        let strings_at = 64;
        let table_at = (strings_at + strings.len()).next_multiple_of(8);
        let headers_at = (table_at + table.len()).next_multiple_of(8);
        let mut image = vec![0u8; headers_at + 3 * 64];
        image[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        image[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
        image[18..20].copy_from_slice(&224u16.to_le_bytes()); // EM_AMDGPU
        image[40..48].copy_from_slice(&(headers_at as u64).to_le_bytes());
        image[58..60].copy_from_slice(&64u16.to_le_bytes());
        image[60..62].copy_from_slice(&3u16.to_le_bytes());
        image[strings_at..strings_at + strings.len()].copy_from_slice(&strings);
        image[table_at..table_at + table.len()].copy_from_slice(&table);
        let mut header = |index: usize, kind: u32, at: usize, len: usize, link: u32, entry: u64| {
            let h = &mut image[headers_at + 64 * index..][..64];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[24..32].copy_from_slice(&(at as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(len as u64).to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            h[56..64].copy_from_slice(&entry.to_le_bytes());
        };
        header(1, 3, strings_at, strings.len(), 0, 0);
        header(2, kind, table_at, table.len(), 1, 24);
        image
    }

    #[test]
    fn hip_kernel_names_are_the_exported_kernel_descriptors() {
        let symbols = [
            ("ring_step.kd", GLOBAL_OBJECT, 3, 1), // protected, as the AMDGPU backend emits
            ("ring_step", GLOBAL_FUNC, 3, 1),
            ("all_reduce.kd", WEAK_OBJECT, 0, 1),
            ("local.kd", LOCAL_OBJECT, 0, 1),
            ("hidden.kd", GLOBAL_OBJECT, 2, 1),
            ("undefined.kd", GLOBAL_OBJECT, 0, 0),
            ("table", GLOBAL_OBJECT, 0, 1),
            ("ring_step.kd", GLOBAL_OBJECT, 3, 1),
        ];
        for kind in [11, 2] {
            assert_eq!(
                code_object_kernels(&tiny_elf(kind, &symbols)).unwrap(),
                ["all_reduce", "ring_step"],
                "symbol table of type {kind}"
            );
        }
        assert_eq!(
            code_object_kernels(&tiny_elf(11, &[])).unwrap(),
            Vec::<String>::new()
        );
        // Not AMDGPU ELF, or cut anywhere: an error, never a panic or a read past the end.
        let image = tiny_elf(11, &symbols);
        assert!(code_object_kernels(b"// PTX .version 8.0").is_err());
        let mut x86 = image.clone();
        x86[18] = 62;
        assert_eq!(code_object_kernels(&x86), Err("not an AMDGPU ELF"));
        for len in 0..image.len() {
            assert!(code_object_kernels(&image[..len]).is_err(), "cut at {len}");
        }
        // Corrupt offsets and counts anywhere in the headers: still no panic.
        for at in (16..64).chain(image.len() - 192..image.len()) {
            let mut bad = image.clone();
            bad[at] ^= 0xff;
            let _ = code_object_kernels(&bad);
        }
    }

    /// symmem's own gfx942 and gfx950 objects: the kernel names `load_module` reads are
    /// the kernels of `symmem-kernels` (that every declared kernel is there, with its
    /// ABI, is `tests/tests/hip_abi.rs`'s check).
    #[test]
    fn hip_code_objects_name_their_kernels() {
        let kernels = &crate::backend::code_objects::KERNELS;
        if kernels.objects().is_empty() {
            println!("skipped: this build embeds no code objects of symmem_kernels");
            return;
        }
        let declared: Vec<&str> = symmem_device::declarations()
            .filter(|d| d.crate_name == kernels.crate_name())
            .map(|d| d.name)
            .collect();
        for target in ["gfx942", "gfx950"] {
            let image = kernels.find(target).expect(target);
            let names = code_object_kernels(image).unwrap();
            println!("{target}: {} kernels", names.len());
            for kernel in [
                symmem_kernels::symmem_put.name(),
                symmem_kernels::symmem_get.name(),
                symmem_kernels::symmem_copy.name(),
            ] {
                assert!(names.iter().any(|n| n == kernel), "{target}: no {kernel}");
            }
            for name in &names {
                assert!(
                    declared.contains(&name.as_str()),
                    "{target}: {name} is not declared"
                );
            }
        }
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
        let k0 = r0
            .load_module(&crate::backend::code_objects::KERNELS)
            .unwrap();
        let k1 = r1
            .load_module(&crate::backend::code_objects::KERNELS)
            .unwrap();
        println!("{k0:?}");
        let g = r0.heap_granularity();
        let h0 = r0.create_heap(g).unwrap();
        let h1 = r1.create_heap(g).unwrap();
        let m01 = r0.import_heap(r1.export_heap(&h1).unwrap(), g).unwrap();
        let m10 = r1.import_heap(r0.export_heap(&h0).unwrap(), g).unwrap();
        assert!(m01.is_alias() && m10.is_alias());
        let bytes = 4096 + 13;
        let src: Vec<u8> = (0..bytes).map(|i| (i * 31 + 7) as u8).collect();
        let src_dev = r0.alloc_device(bytes).unwrap();
        let table: Vec<u8> = [h0.base(), m01.base()]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let bases = r0.alloc_device(16).unwrap();
        // SAFETY: the allocations just made, of these lengths; rank 1's whole heap.
        unsafe {
            r0.upload(src_dev.base(), &src).unwrap();
            r0.upload(bases.base(), &table).unwrap();
            r1.memset(h1.base(), 0, g).unwrap();
        }
        r1.synchronize().unwrap();
        // SAFETY: `dst` lies in rank 0's heap with `bytes` to spare, and translates
        // through the two-entry table to rank 1's heap; `src` holds `bytes`.
        unsafe {
            launch_lowered(
                &r0,
                &k0,
                symmem_kernels::symmem_put,
                r0.grid_for_bytes(bytes),
                (
                    device(h0.base() + 64),
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
        let mut got = vec![0xffu8; bytes + 128];
        // SAFETY: rank 1's own heap, inside it.
        unsafe { r1.download(&mut got, h1.base()).unwrap() };
        assert!(got[..64].iter().all(|&b| b == 0));
        assert!(got[64..64 + bytes] == src[..], "put data differs");
        assert!(got[64 + bytes..].iter().all(|&b| b == 0));

        let table1: Vec<u8> = [m10.base(), h1.base()]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let bases1 = r1.alloc_device(16).unwrap();
        // SAFETY: the table's allocation holds its 16 bytes; rank 0's own heap.
        unsafe {
            r1.upload(bases1.base(), &table1).unwrap();
            r0.memset(h0.base(), 0x11, 64).unwrap();
        }
        r0.synchronize().unwrap();
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
        assert!(back.iter().all(|&b| b == 0x11), "get: {back:?}");
        drop((m01, m10, h0, h1, src_dev, bases, bases1, dst1));
        drop((k0, k1));
        drop((r0, r1));
        assert_eq!(Hip::drop_errors(), 0, "{:?}", Hip::last_drop_error());
    }

    /// A launch captured into a graph does not run until replayed; each replay runs it
    /// again with the captured arguments, reading what its source holds by then.
    #[test]
    fn hip_gpu_capture_and_replay() {
        let Some(r0) = device_or_skip() else { return };
        let module = r0
            .load_module(&crate::backend::code_objects::KERNELS)
            .unwrap();
        let bytes = 4096 + 5;
        let src = r0.alloc_device(bytes).unwrap();
        let dst = r0.alloc_device(bytes).unwrap();
        // SAFETY: `dst`'s own bytes.
        unsafe { r0.memset(dst.base(), 0, bytes).unwrap() };
        r0.synchronize().unwrap();
        r0.begin_capture().unwrap();
        // SAFETY: `dst` and `src` hold `bytes` each and outlive every replay below.
        let launched = unsafe {
            launch_lowered(
                &r0,
                &module,
                symmem_kernels::symmem_copy,
                r0.grid_for_bytes(bytes),
                (
                    device(dst.base()),
                    device::<u8>(src.base()).cast_const(),
                    bytes as u64,
                ),
            )
        };
        let graph = r0.end_capture();
        launched.unwrap();
        let graph = graph.unwrap();
        let mut got = vec![0xffu8; bytes];
        // SAFETY: `dst`'s own bytes.
        unsafe { r0.download(&mut got, dst.base()).unwrap() };
        assert!(got.iter().all(|&b| b == 0), "the captured launch ran");
        for value in [0x5a, 0xc3] {
            // SAFETY: `src`'s own bytes, ordered before the replay on the stream; the
            // replayed launch's buffers are alive and hold `bytes` each.
            unsafe {
                r0.memset(src.base(), value, bytes).unwrap();
                r0.replay(&graph).unwrap();
                r0.download(&mut got, dst.base()).unwrap();
            }
            assert!(got.iter().all(|&b| b == value), "replay of {value:#x}");
        }
        // Another rank's backend refuses the graph before enqueuing anything.
        let other = Hip::new(0).unwrap();
        // SAFETY: refused before anything is enqueued.
        let refused = unsafe { other.replay(&graph) };
        assert!(matches!(refused, Err(Error::Unsupported(_))), "{refused:?}");
        drop(graph);
        drop((src, dst, module, other, r0));
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
        // A crate without an object for this processor, and a kernel the module lacks.
        static NONE: CodeObjects = CodeObjects::new("no_kernels", &[]);
        assert!(matches!(
            r0.load_module(&NONE),
            Err(Error::NoCodeObject {
                module: "no_kernels",
                ..
            })
        ));
        let module = r0
            .load_module(&crate::backend::code_objects::KERNELS)
            .unwrap();
        assert!(module.kernel_count() > 0);
        struct Nothing;
        impl HostKernel for Nothing {
            fn run(&self, _: &HostThread<'_>) {}
            fn to_owned(&self) -> Arc<dyn HostKernel> {
                Arc::new(Nothing)
            }
        }
        let launch = KernelLaunch {
            name: "no_such_kernel",
            args: &[],
            slots: &[],
            host: &Nothing,
        };
        // SAFETY: no arguments; the launch is refused before anything is enqueued.
        let refused = unsafe { r0.launch(&module, &launch, Grid::new(1, 1)) };
        assert!(matches!(
            refused,
            Err(Error::KernelNotFound {
                module: "symmem_kernels",
                kernel: "no_such_kernel"
            })
        ));
    }
}
