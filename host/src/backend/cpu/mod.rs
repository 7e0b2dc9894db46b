//! The CPU backend: each rank's heap is an anonymous shared-memory file (memfd), peers
//! map it from its file descriptor at an address of their own, and a kernel is its
//! `#[kernel]` body run on host threads (every kernel, symmem's and a user's alike).
//!
//! memfds live in no file system, so nothing is left in `/dev/shm` after a run, a crash
//! or a killed rank: the memory goes when the last descriptor and mapping go.
//!
//! Every memfd is sealed at its size (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`)
//! before it is shared, and an import checks the memory it is handed rather than the
//! size the peer announced: it must be at least as large as the mapping (`fstat`) and
//! sealed against shrinking, or the import is [`Error::BadPeerMemory`]. A mapping can
//! then never reach past the end of its file, which would kill this process with
//! `SIGBUS`.
//!
//! Each heap and each plain allocation holds one descriptor, as a CUDA VMM allocation
//! holds a handle, so that it can be exported whenever a rendezvous asks. When the
//! process runs out of descriptors (`EMFILE`), the backend raises its soft
//! `RLIMIT_NOFILE` to the hard limit once (as Go's runtime and the JVM do at start) and
//! tries again; past the hard limit an allocation is [`Error::FdLimit`], naming it.

pub mod threads;

use super::{
    Backend, BackendKind, CodeObjects, DeviceRegion, Grid, HeapAccess, HeapDone, HeapOp,
    HostKernel, INBOX_BYTES, KernelLaunch, RangeExport, Sender, Shareable, SharedRegion,
};
use crate::error::{Error, Result};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::process::{Resource, Rlimit};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The CPU backend of one rank.
#[derive(Debug, Default)]
pub struct Cpu {
    syncs: AtomicU64,
    /// While recording ([`Backend::begin_capture`]): the launches recorded so far.
    recording: Mutex<Option<Vec<Recorded>>>,
}

/// One launch a CPU graph recorded: the body with its arguments, the rank's control block
/// and the grid.
struct Recorded {
    host: Arc<dyn HostKernel>,
    control: usize,
    grid: Grid,
}

impl std::fmt::Debug for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorded")
            .field("grid", &self.grid)
            .finish_non_exhaustive()
    }
}

/// Launches recorded from a CPU rank ([`Backend::begin_capture`]): a replay runs them
/// again, in order, with the same arguments.
#[derive(Debug)]
pub struct CpuGraph {
    launches: Vec<Recorded>,
}

/// Runs `host` over `grid` on threads whose waits watch `control`.
fn run_launch(host: &dyn HostKernel, control: usize, grid: Grid) -> Result<()> {
    threads::run(grid, |arch| {
        // Each kernel thread's waits watch the rank's control block (the caller of
        // `watch` keeps it alive for every launch).
        symmem_rma::watch::set_thread_control(std::ptr::with_exposed_provenance_mut(control));
        host.run(arch)
    })
}

impl Cpu {
    /// A CPU backend; never fails.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Host memory for the control block (on the CPU every address is the host's).
#[derive(Debug)]
pub struct CpuShared {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: plain heap memory, accessed atomically by the host and the kernel threads.
unsafe impl Send for CpuShared {}
// SAFETY: as above.
unsafe impl Sync for CpuShared {}

impl SharedRegion for CpuShared {
    fn host_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn device_ptr(&self) -> u64 {
        self.ptr.as_ptr().addr() as u64
    }
}

impl Drop for CpuShared {
    fn drop(&mut self) {
        // SAFETY: allocated in `alloc_shared` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A loaded kernel crate on the CPU: the bodies are compiled into the program, so all
/// it holds is where the kernel threads' bounded waits look (the control block).
#[derive(Debug, Default)]
pub struct CpuModule {
    control: usize,
}

/// A shared mapping of a memfd (own memory, or a peer's), unmapped on drop; or an alias
/// of host memory of this process that another rank of it registered
/// ([`Backend::export_range`]), which it leaves alone.
#[derive(Debug)]
pub struct CpuMemory {
    ptr: *mut u8,
    len: usize,
    fd: Option<OwnedFd>,
    alias: bool,
}

// SAFETY: the mapping is plain shared memory; access to it is the kernels' business and
// is synchronised by symmem's collectives, exactly as device memory is.
unsafe impl Send for CpuMemory {}
// SAFETY: as above.
unsafe impl Sync for CpuMemory {}

impl DeviceRegion for CpuMemory {
    fn base(&self) -> u64 {
        self.ptr.expose_provenance() as u64
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for CpuMemory {
    fn drop(&mut self) {
        if self.alias {
            return;
        }
        // SAFETY: `ptr..ptr+len` is a mapping this value created and nobody else unmaps.
        // munmap of a valid mapping cannot fail.
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

/// A limit as `struct rlimit` holds it: `RLIM_INFINITY` (`u64::MAX`) for none.
fn rlim(limit: Option<u64>) -> u64 {
    limit.unwrap_or(u64::MAX)
}

/// The process's `RLIMIT_NOFILE`.
fn nofile_limit() -> Rlimit {
    rustix::process::getrlimit(Resource::Nofile)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; false if it was there already.
fn raise_nofile_limit() -> bool {
    let limit = nofile_limit();
    if rlim(limit.current) >= rlim(limit.maximum) {
        return false;
    }
    // Raising the soft limit up to the hard one needs no privilege.
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    rustix::process::setrlimit(Resource::Nofile, raised).is_ok()
}

/// Runs `open`, which makes a new descriptor. Out of descriptors, raises the soft
/// `RLIMIT_NOFILE` to the hard limit once and tries again; still out, the error is
/// [`Error::FdLimit`].
fn with_descriptor<T>(
    what: &'static str,
    mut open: impl FnMut() -> std::io::Result<T>,
) -> Result<T> {
    let mut raised = false;
    loop {
        match open() {
            Err(e) if e.raw_os_error() == Some(Errno::MFILE.raw_os_error()) => {
                if !raised && raise_nofile_limit() {
                    raised = true;
                    continue;
                }
                return Err(Error::FdLimit {
                    what,
                    limit: rlim(nofile_limit().current),
                });
            }
            other => return other.map_err(|source| Error::Os { what, source }),
        }
    }
}

impl CpuMemory {
    /// A fresh memfd of `len` bytes, sealed at that size and mapped shared.
    fn create(len: usize) -> Result<Self> {
        let fd = with_descriptor("memfd_create", || {
            let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
            Ok(rustix::fs::memfd_create(c"symmem-heap", flags)?)
        })?;
        // A file's size is an `off_t`.
        if i64::try_from(len).is_err() {
            return Err(Error::TooLarge {
                requested: len,
                capacity: i64::MAX as usize,
            });
        }
        rustix::fs::ftruncate(&fd, len as u64)
            .map_err(Error::errno("ftruncate of the heap memfd"))?;
        // Nobody, this rank or a peer, can change the size from now on (nor the seals).
        let seals = SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
        rustix::fs::fcntl_add_seals(&fd, seals).map_err(Error::errno("sealing the heap memfd"))?;
        let mut memory = Self::map(&fd, len)?;
        memory.fd = Some(fd);
        Ok(memory)
    }

    /// Maps `len` bytes of `fd` shared, at a fresh [`MAP_ALIGN`]-aligned address (so
    /// every mapping of the same memory gets its own address, and heap offsets aligned up
    /// to 2 MiB give addresses aligned as much on every rank, as on a GPU).
    fn map(fd: &OwnedFd, len: usize) -> Result<Self> {
        let reserve = len + MAP_ALIGN;
        // SAFETY: reserving fresh address space; nothing existing is replaced.
        let region = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                reserve,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(Error::errno("reserving address space for a heap"))?
        .cast::<u8>();
        let lead = region.addr().next_multiple_of(MAP_ALIGN) - region.addr();
        // SAFETY: `lead < MAP_ALIGN`, so `region + lead .. + len` lies in the reservation.
        let start = unsafe { region.add(lead) };
        // SAFETY: MAP_FIXED replaces only our own reservation, at a valid descriptor.
        let mapped = unsafe {
            rustix::mm::mmap(
                start.cast(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::FIXED,
                fd,
                0,
            )
        };
        // SAFETY: returning the unused ends of our own reservation (empty ranges are
        // skipped: munmap of length 0 fails harmlessly, but we avoid the call).
        unsafe {
            if lead > 0 {
                let _ = rustix::mm::munmap(region.cast(), lead);
            }
            let tail = MAP_ALIGN - lead;
            if tail > 0 {
                let _ = rustix::mm::munmap(start.add(len).cast(), tail);
            }
        }
        let ptr = match mapped {
            Ok(ptr) => ptr,
            Err(e) => {
                // SAFETY: the middle of the reservation is still ours.
                let _ = unsafe { rustix::mm::munmap(start.cast(), len) };
                return Err(Error::errno("mmap of a heap")(e));
            }
        };
        Ok(Self {
            ptr: ptr.cast(),
            len,
            fd: None,
            alias: false,
        })
    }

    fn export(&self) -> Result<Shareable> {
        let fd = self.fd.as_ref().ok_or(Error::NotExportable {
            what: "a mapping of a peer's heap",
        })?;
        let fd = with_descriptor("dup of a heap fd", || fd.try_clone())?;
        Ok(Shareable {
            bytes: (self.len as u64).to_le_bytes().to_vec(),
            fd: Some(fd),
        })
    }

    /// An export of the application's `len` bytes at `ptr` (plain host memory, which no
    /// descriptor carries): this process's id and the range. Recorded while its hold
    /// lives, so that an import that names this process aliases only ranges a rank of it
    /// exports now.
    fn export_range(ptr: u64, len: usize) -> RangeExport {
        *lock_exported().entry((ptr, len)).or_insert(0) += 1;
        let mut bytes = std::process::id().to_le_bytes().to_vec();
        bytes.extend_from_slice(&ptr.to_le_bytes());
        bytes.extend_from_slice(&(len as u64).to_le_bytes());
        RangeExport {
            shareable: Shareable { bytes, fd: None },
            hold: Some(Box::new(ExportedRange { ptr, len })),
        }
    }

    /// Maps `len` bytes of a peer's [`CpuMemory::export_range`]: an alias where the
    /// peer is a verified thread of this process and a rank of it exports that range
    /// now, else [`Error::BadPeerMemory`] (a claim of this process from elsewhere, or a
    /// range nobody exports) or [`Error::NotShareable`] (plain host memory does not
    /// cross processes).
    fn import_range(bytes: &[u8], len: usize, sender: Sender) -> Result<Self> {
        let bad = || Error::BadMessage {
            from: None,
            what: "CPU range export (expected a pid, an address and a length)",
        };
        let (pid, rest) = bytes.split_first_chunk::<4>().ok_or_else(bad)?;
        let (ptr, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let exported: [u8; 8] = rest.try_into().map_err(|_| bad())?;
        let (pid, ptr) = (u32::from_le_bytes(*pid), u64::from_le_bytes(*ptr));
        let exported = u64::from_le_bytes(exported);
        if pid != std::process::id() {
            return Err(Error::NotShareable {
                addr: ptr,
                bytes: len,
                why: format!(
                    "plain host memory of another process (pid {pid}): on the CPU backend \
                     ranks as processes share only symmem's allocations (DeviceBuffer, \
                     symmetric buffers); register one of those, or run the ranks as threads"
                ),
            });
        }
        if sender != Sender::ThisProcess {
            return Err(Error::BadPeerMemory {
                needed: len,
                size: exported,
                why: "the export names this process, but the rank that sent it is not \
                      verified to be a thread of this process",
            });
        }
        let known = lock_exported().contains_key(&(ptr, exported as usize));
        if !known || (len as u64) > exported {
            return Err(Error::BadPeerMemory {
                needed: len,
                size: exported,
                why: "the export names this process, but no rank of it exported that range",
            });
        }
        Ok(Self {
            ptr: ptr_at(ptr),
            len,
            fd: None,
            alias: true,
        })
    }

    fn import(handle: Shareable, len: usize, sender: Sender) -> Result<Self> {
        if handle.fd.is_none() && handle.bytes.len() == 20 {
            return Self::import_range(&handle.bytes, len, sender);
        }
        let fd = handle.fd.ok_or(Error::BadMessage {
            from: None,
            what: "CPU heap export without a file descriptor",
        })?;
        let exported = handle
            .bytes
            .first_chunk()
            .map(|b| u64::from_le_bytes(*b))
            .ok_or(Error::BadMessage {
                from: None,
                what: "CPU heap export without a size",
            })?;
        let bad = |size, why| Error::BadPeerMemory {
            needed: len,
            size,
            why,
        };
        if exported < len as u64 {
            return Err(bad(exported, "the peer exported less than this rank maps"));
        }
        // Check the memory itself, not the peer's word: its size now, and that it can
        // never shrink below the mapping later.
        let stat = rustix::fs::fstat(&fd).map_err(Error::errno("fstat of a peer's memfd"))?;
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        if size < len as u64 {
            return Err(bad(size, "the memory is smaller than the peer announced"));
        }
        // A file that cannot be sealed (an error) counts as unsealed.
        let sealed = rustix::fs::fcntl_get_seals(&fd).is_ok_and(|s| s.contains(SealFlags::SHRINK));
        if !sealed {
            return Err(bad(size, "the memory is not sealed against shrinking"));
        }
        Self::map(&fd, len)
    }
}

/// Every range of this process's host memory a rank exports now with
/// [`Backend::export_range`] (address, bytes), with how many exports of it are held: an
/// import that names this process aliases only these, so a peer's claim cannot point
/// this rank's kernels at other memory, nor at a range whose registration has ended (its
/// memory may be freed). An entry goes with the last [`ExportedRange`] of it.
static EXPORTED_RANGES: Mutex<std::collections::BTreeMap<(u64, usize), usize>> =
    Mutex::new(std::collections::BTreeMap::new());

fn lock_exported() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<(u64, usize), usize>>
{
    EXPORTED_RANGES.lock().unwrap_or_else(|p| p.into_inner())
}

/// One held export of a range ([`RangeExport::hold`]): dropped once every peer has let
/// go of the registration, when the range is forgotten unless another export holds it.
#[derive(Debug)]
struct ExportedRange {
    ptr: u64,
    len: usize,
}

impl Drop for ExportedRange {
    fn drop(&mut self) {
        let mut ranges = lock_exported();
        if let Some(holds) = ranges.get_mut(&(self.ptr, self.len)) {
            *holds -= 1;
            if *holds == 0 {
                ranges.remove(&(self.ptr, self.len));
            }
        }
    }
}

/// Alignment of every CPU-backend mapping (a GPU heap's granularity).
const MAP_ALIGN: usize = 2 << 20;

fn ptr_at(addr: u64) -> *mut u8 {
    std::ptr::with_exposed_provenance_mut(addr as usize)
}

impl Backend for Cpu {
    type Heap = CpuMemory;
    type Mapping = CpuMemory;
    type DeviceMemory = CpuMemory;
    type Module = CpuModule;
    type Shared = CpuShared;

    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }
    fn device_name(&self) -> String {
        format!(
            "host CPU ({} threads)",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        )
    }
    fn heap_granularity(&self) -> usize {
        rustix::param::page_size()
    }

    fn create_heap(&self, bytes: usize) -> Result<CpuMemory> {
        CpuMemory::create(bytes)
    }
    fn export_heap(&self, heap: &CpuMemory) -> Result<Shareable> {
        heap.export()
    }
    fn import_heap(&self, handle: Shareable, bytes: usize, sender: Sender) -> Result<CpuMemory> {
        CpuMemory::import(handle, bytes, sender)
    }

    fn alloc_device(&self, bytes: usize) -> Result<CpuMemory> {
        CpuMemory::create(bytes.max(1))
    }
    fn export_device_memory(&self, memory: &CpuMemory) -> Result<Shareable> {
        memory.export()
    }
    fn import_device_memory(
        &self,
        handle: Shareable,
        bytes: usize,
        sender: Sender,
    ) -> Result<CpuMemory> {
        CpuMemory::import(handle, bytes, sender)
    }
    unsafe fn export_range(&self, ptr: u64, bytes: usize) -> Result<RangeExport> {
        Ok(CpuMemory::export_range(ptr, bytes))
    }

    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: the caller passes writable memory of this process of `src.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), ptr_at(dst), src.len()) };
        Ok(())
    }
    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller passes readable memory of this process of `dst.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(ptr_at(src), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
    unsafe fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<()> {
        // SAFETY: the caller passes writable memory of this process of `bytes` bytes.
        unsafe { ptr_at(dst).write_bytes(value, bytes) };
        Ok(())
    }

    fn load_module(&self, _objects: &'static CodeObjects) -> Result<CpuModule> {
        // The bodies are compiled into the program: there is nothing to load.
        Ok(CpuModule::default())
    }
    fn alloc_shared(&self, bytes: usize) -> Result<CpuShared> {
        let layout =
            std::alloc::Layout::from_size_align(bytes.max(1), 64).map_err(|_| Error::TooLarge {
                requested: bytes,
                capacity: isize::MAX as usize,
            })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(ptr).ok_or_else(|| Error::Os {
            what: "host memory for a control block",
            source: std::io::ErrorKind::OutOfMemory.into(),
        })?;
        Ok(CpuShared { ptr, layout })
    }
    fn heap_access(&self, heap: &CpuMemory) -> Result<Box<dyn HeapAccess>> {
        // SAFETY: the heap's mapping in this process; the world keeps it until the
        // engine has stopped.
        Ok(Box::new(unsafe {
            HostHeap::new(std::ptr::with_exposed_provenance_mut(heap.base() as usize))
        }))
    }
    fn heap_host_ptr(&self, heap: &CpuMemory) -> Option<*mut u8> {
        Some(std::ptr::with_exposed_provenance_mut(heap.base() as usize))
    }
    fn kernels_on_host(&self) -> bool {
        true
    }
    fn syncs_wait_for_the_device(&self) -> bool {
        false
    }
    unsafe fn watch(
        &self,
        module: &mut CpuModule,
        control: &CpuShared,
        _transport: Option<&dyn super::ModuleTransport>,
    ) -> Result<()> {
        module.control = control.host_ptr().expose_provenance();
        Ok(())
    }
    unsafe fn launch(
        &self,
        module: &CpuModule,
        launch: &KernelLaunch<'_>,
        grid: Grid,
    ) -> Result<()> {
        let control = module.control;
        let mut recording = self.recording.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(launches) = recording.as_mut() {
            launches.push(Recorded {
                host: launch.host.to_owned(),
                control,
                grid,
            });
            return Ok(());
        }
        drop(recording);
        run_launch(launch.host, control, grid)
    }
    fn grid_for_bytes(&self, _bytes: usize) -> Grid {
        // The bodies are grid-stride loops over 16-byte vectors: on a CPU, threads of
        // one rank would share every cache line, so one thread per launch is fastest
        // (measured: 4 threads ran 4-5x slower). Ranks still run concurrently.
        Grid {
            blocks: 1,
            threads: 1,
        }
    }
    fn collective_grid(&self) -> Grid {
        // One thread per rank: threads of one rank would share cache lines (see
        // `grid_for_bytes`).
        Grid::new(1, 1)
    }
    fn synchronize(&self) -> Result<()> {
        // Launches run to completion before `launch` returns: nothing to wait for.
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn device_to_host_syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    type Graph = CpuGraph;
    fn begin_capture(&self) -> Result<()> {
        let mut recording = self.recording.lock().unwrap_or_else(|p| p.into_inner());
        if recording.is_some() {
            return Err(Error::Capturing {
                call: "beginning a capture",
            });
        }
        *recording = Some(Vec::new());
        Ok(())
    }
    fn end_capture(&self) -> Result<CpuGraph> {
        let launches = self
            .recording
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or(Error::NotCapturing {
                call: "ending a capture",
            })?;
        Ok(CpuGraph { launches })
    }
    unsafe fn replay(&self, graph: &CpuGraph) -> Result<()> {
        graph
            .launches
            .iter()
            .try_for_each(|l| run_launch(&*l.host, l.control, l.grid))
    }
}

/// A heap in this process's address space (the CPU backend's memfd heap), as the
/// off-node engine's target side reaches it ([`Backend::heap_access`]). Every operation
/// is complete when [`HeapAccess::start`] returns; its result waits in `done`.
struct HostHeap {
    base: *mut u8,
    done: VecDeque<HeapDone>,
    /// Where peers' requests are received ([`HeapAccess::inbox`]).
    inbox: Vec<u8>,
}

impl HostHeap {
    /// The heap at `base`.
    ///
    /// # Safety
    /// `base` is the start of this rank's heap, mapped read-write in this process for
    /// as long as the value lives; callers pass offsets inside it.
    unsafe fn new(base: *mut u8) -> Self {
        Self {
            base,
            done: VecDeque::new(),
            inbox: vec![0; INBOX_BYTES],
        }
    }
}

// SAFETY: the heap is shared memory, reachable from any thread of the process.
unsafe impl Send for HostHeap {}

/// Operations a [`HostHeap`] holds results for at once (each is complete at once; this
/// only bounds the results the proxy has not collected).
const HOST_HEAP_CAPACITY: usize = 16;

impl HeapAccess for HostHeap {
    fn capacity(&self) -> usize {
        HOST_HEAP_CAPACITY
    }

    fn inbox(&mut self) -> &mut [u8] {
        &mut self.inbox
    }

    fn start(&mut self, op: HeapOp) -> Result<()> {
        let done = match op {
            HeapOp::Write { offset, at, len } => {
                let bytes =
                    self.inbox
                        .get(at..at.saturating_add(len))
                        .ok_or_else(|| Error::Engine {
                            peer: None,
                            what: format!("a write of {len} bytes at {at} outside the inbox"),
                        })?;
                // SAFETY: inside the heap (the proxy checks every request's range); peers'
                // stores through the engine are ordered by the proxy, and the release
                // fence publishes them.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(offset), len)
                };
                std::sync::atomic::fence(Ordering::Release);
                HeapDone::default()
            }
            HeapOp::Read { offset, len } => {
                let mut bytes = vec![0u8; len];
                // SAFETY: inside the heap (checked by the proxy).
                unsafe {
                    std::ptr::copy_nonoverlapping(self.base.add(offset), bytes.as_mut_ptr(), len)
                };
                HeapDone { old: 0, bytes }
            }
            HeapOp::Atomic {
                offset,
                request,
                operand,
                compare,
            } => HeapDone {
                // SAFETY: an aligned element inside the heap (checked by the proxy), which
                // kernels access only atomically.
                old: unsafe {
                    symmem_rma::engine::apply_atomic(
                        self.base.add(offset),
                        request,
                        operand,
                        compare,
                    )
                },
                bytes: Vec::new(),
            },
        };
        self.done.push_back(done);
        Ok(())
    }

    fn finish(&mut self) -> Result<Option<HeapDone>> {
        Ok(self.done.pop_front())
    }
}
