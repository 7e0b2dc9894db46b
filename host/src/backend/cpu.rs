//! The CPU backend: each rank's heap is an anonymous shared-memory file (memfd), peers
//! map it from its file descriptor at an address of their own, and kernels are the
//! `symmem-kernels` bodies run on host threads.
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

use super::{Backend, BackendKind, DeviceRegion, Grid, Shareable};
use crate::cpu_launch;
use crate::error::{Error, Result};
use crate::kernels::{DType, KernelCall, ReduceOp};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use symmem_arch::Arch;
use symmem_arch::host::HostThread;
use symmem_rma::collectives::{self, Reducible};
use symmem_rma::{AtomicOp, Bf16, Order, Scope, Team};
use symmem_translate::PeerBases;

/// The CPU backend of one rank.
#[derive(Debug, Default)]
pub struct Cpu {
    syncs: AtomicU64,
}

impl Cpu {
    /// A CPU backend; never fails.
    pub fn new() -> Self {
        Self::default()
    }
}

/// A shared mapping of a memfd (own memory, or a peer's). Drop unmaps it.
#[derive(Debug)]
pub struct CpuMemory {
    ptr: *mut u8,
    len: usize,
    fd: Option<OwnedFd>,
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
        // SAFETY: `ptr..ptr+len` is a mapping this value created and nobody else unmaps.
        // munmap of a valid mapping cannot fail.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The process's `RLIMIT_NOFILE`.
fn nofile_limit() -> libc::rlimit {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit to fill in.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    limit
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; false if it was there already.
fn raise_nofile_limit() -> bool {
    let mut limit = nofile_limit();
    if limit.rlim_cur >= limit.rlim_max {
        return false;
    }
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: `limit` is a valid rlimit; raising the soft limit up to the hard one needs
    // no privilege.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 }
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
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => {
                if !raised && raise_nofile_limit() {
                    raised = true;
                    continue;
                }
                return Err(Error::FdLimit {
                    what,
                    limit: nofile_limit().rlim_cur,
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
            let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
            // SAFETY: a NUL-terminated name and valid flags.
            let raw = unsafe { libc::memfd_create(c"symmem-heap".as_ptr(), flags) };
            if raw < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `raw` is a fresh descriptor nobody else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(raw) })
        })?;
        let size = libc::off_t::try_from(len).map_err(|_| Error::TooLarge {
            requested: len,
            capacity: libc::off_t::MAX as usize,
        })?;
        // SAFETY: `fd` is a valid memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(Error::last_os("ftruncate of the heap memfd"));
        }
        // Nobody, this rank or a peer, can change the size from now on (nor the seals).
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: `fd` is a valid memfd created with MFD_ALLOW_SEALING.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(Error::last_os("sealing the heap memfd"));
        }
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
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if region == libc::MAP_FAILED {
            return Err(Error::last_os("reserving address space for a heap"));
        }
        let region = region.cast::<u8>();
        let lead = region.addr().next_multiple_of(MAP_ALIGN) - region.addr();
        // SAFETY: `lead < MAP_ALIGN`, so `region + lead .. + len` lies in the reservation.
        let start = unsafe { region.add(lead) };
        // SAFETY: MAP_FIXED replaces only our own reservation, at a valid descriptor.
        let ptr = unsafe {
            libc::mmap(
                start.cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        // SAFETY: returning the unused ends of our own reservation (empty ranges are
        // skipped: munmap of length 0 fails harmlessly, but we avoid the call).
        unsafe {
            if lead > 0 {
                libc::munmap(region.cast(), lead);
            }
            let tail = MAP_ALIGN - lead;
            if tail > 0 {
                libc::munmap(start.add(len).cast(), tail);
            }
        }
        if ptr == libc::MAP_FAILED {
            // SAFETY: the middle of the reservation is still ours.
            unsafe { libc::munmap(start.cast(), len) };
            return Err(Error::last_os("mmap of a heap"));
        }
        Ok(Self {
            ptr: ptr.cast(),
            len,
            fd: None,
        })
    }

    fn export(&self) -> Result<Shareable> {
        let fd = self
            .fd
            .as_ref()
            .ok_or(Error::Unsupported("exporting a peer's mapping"))?;
        let fd = with_descriptor("dup of a heap fd", || fd.try_clone())?;
        Ok(Shareable {
            bytes: (self.len as u64).to_le_bytes().to_vec(),
            fd: Some(fd),
        })
    }

    fn import(handle: Shareable, len: usize) -> Result<Self> {
        let fd = handle
            .fd
            .ok_or_else(|| Error::Bootstrap("CPU handle without an fd".into()))?;
        let exported = handle
            .bytes
            .first_chunk()
            .map(|b| u64::from_le_bytes(*b))
            .ok_or_else(|| Error::Bootstrap("CPU handle without a size".into()))?;
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
        // SAFETY: `stat` is plain data that fstat fills in.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is a valid descriptor and `stat` a valid buffer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
            return Err(Error::last_os("fstat of a peer's memfd"));
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        if size < len as u64 {
            return Err(bad(size, "the memory is smaller than the peer announced"));
        }
        // SAFETY: F_GET_SEALS reads the seals of a valid descriptor (-1 for a file that
        // cannot be sealed, which then counts as unsealed).
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(bad(size, "the memory is not sealed against shrinking"));
        }
        Self::map(&fd, len)
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
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(page).unwrap_or(4096)
    }

    fn create_heap(&self, bytes: usize) -> Result<CpuMemory> {
        CpuMemory::create(bytes)
    }
    fn export_heap(&self, heap: &CpuMemory) -> Result<Shareable> {
        heap.export()
    }
    fn import_heap(&self, handle: Shareable, bytes: usize) -> Result<CpuMemory> {
        CpuMemory::import(handle, bytes)
    }

    fn alloc_device(&self, bytes: usize) -> Result<CpuMemory> {
        CpuMemory::create(bytes.max(1))
    }
    fn export_device_memory(&self, memory: &CpuMemory) -> Result<Shareable> {
        memory.export()
    }
    fn import_device_memory(&self, handle: Shareable, bytes: usize) -> Result<CpuMemory> {
        CpuMemory::import(handle, bytes)
    }

    fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: the caller passes a destination it owns of at least `src.len()` bytes
        // (every caller in this crate uploads into memory it allocated for that size).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), ptr_at(dst), src.len()) };
        Ok(())
    }
    fn download(&self, dst: &mut [u8], src: u64) -> Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as in `upload`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(ptr_at(src), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
    fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<()> {
        // SAFETY: as in `upload`.
        unsafe { ptr_at(dst).write_bytes(value, bytes) };
        Ok(())
    }

    fn launch(&self, call: &KernelCall, grid: Grid) -> Result<()> {
        // SAFETY: the world checked every address and rank it put into `call`: the
        // ranges lie in live mappings and tables of this process.
        unsafe { run_on_threads(call, grid) }
    }
    fn default_grid(&self, _call: &KernelCall) -> Grid {
        // The bodies are grid-stride loops over 16-byte vectors: on a CPU, threads of
        // one rank would share every cache line, so one thread per launch is fastest
        // (measured: 4 threads ran 4-5x slower). Ranks still run concurrently.
        Grid {
            blocks: 1,
            threads: 1,
        }
    }
    fn synchronize(&self) -> Result<()> {
        // Launches run to completion before `launch` returns: nothing to wait for.
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn device_to_host_syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

/// Runs `call`'s kernel body on host threads shaped like `grid` (errors: see
/// [`cpu_launch::launch`]).
///
/// # Safety
/// Every address in `call` must be valid for the accesses the kernel makes.
unsafe fn run_on_threads(call: &KernelCall, grid: Grid) -> Result<()> {
    // Addresses travel into the threads as integers (raw pointers are not `Sync`) and
    // become pointers again, with the provenance the mappings exposed, inside.
    match *call {
        KernelCall::Put {
            dst,
            src,
            bytes,
            bases,
            world,
            cur,
            to,
        } => {
            cpu_launch::launch(grid, |arch| {
                // SAFETY: forwarded from the caller.
                unsafe {
                    let bases = PeerBases::from_raw_parts(ptr_at(bases).cast(), world as usize);
                    let (dst, src) = (ptr_at(dst), ptr_at(src));
                    symmem_kernels::put(
                        arch,
                        dst,
                        src,
                        bytes as usize,
                        bases,
                        cur as usize,
                        to as usize,
                    );
                }
            })
        }
        KernelCall::Get {
            dst,
            src,
            bytes,
            bases,
            world,
            cur,
            from,
        } => {
            cpu_launch::launch(grid, |arch| {
                // SAFETY: forwarded from the caller.
                unsafe {
                    let bases = PeerBases::from_raw_parts(ptr_at(bases).cast(), world as usize);
                    let (dst, src) = (ptr_at(dst), ptr_at(src));
                    symmem_kernels::get(
                        arch,
                        dst,
                        src,
                        bytes as usize,
                        bases,
                        cur as usize,
                        from as usize,
                    );
                }
            })
        }
        KernelCall::Copy { dst, src, bytes } => {
            cpu_launch::launch(grid, |arch| {
                // SAFETY: forwarded from the caller.
                unsafe { symmem_kernels::copy(arch, ptr_at(dst), ptr_at(src), bytes as usize) }
            })
        }
        KernelCall::RmaPut {
            dst,
            src,
            bases,
            world,
            rank,
            bytes,
            to,
        } => {
            // SAFETY: the world that built the call passes a live table and a rank in range.
            let team = unsafe { team_at(bases, world, rank) };
            on_team(grid, &team, |arch, team| {
                // SAFETY: forwarded from the caller.
                unsafe {
                    collectives::put(
                        arch,
                        team,
                        ptr_at(dst),
                        ptr_at(src),
                        bytes as usize,
                        to as usize,
                    )
                }
            })
        }
        KernelCall::RmaGet {
            dst,
            src,
            bases,
            world,
            rank,
            bytes,
            from,
        } => {
            // SAFETY: the world that built the call passes a live table and a rank in range.
            let team = unsafe { team_at(bases, world, rank) };
            on_team(grid, &team, |arch, team| {
                // SAFETY: forwarded from the caller.
                unsafe {
                    collectives::get(
                        arch,
                        team,
                        ptr_at(dst),
                        ptr_at(src),
                        bytes as usize,
                        from as usize,
                    )
                }
            })
        }
        KernelCall::PutSignalAdd {
            dst,
            src,
            bases,
            world,
            rank,
            bytes,
            sig,
            to,
            value,
        } => {
            // SAFETY: the world that built the call passes a live table and a rank in range.
            let team = unsafe { team_at(bases, world, rank) };
            on_team(grid, &team, |arch, team| {
                // SAFETY: forwarded from the caller.
                unsafe {
                    collectives::put_signal_add(
                        arch,
                        team,
                        ptr_at(dst),
                        ptr_at(src),
                        bytes as usize,
                        ptr_at(sig).cast(),
                        value,
                        to as usize,
                    )
                }
            })
        }
        KernelCall::BarrierAll {
            bases,
            world,
            rank,
            sig,
        } => {
            // SAFETY: the world that built the call passes a live table and a rank in range.
            let team = unsafe { team_at(bases, world, rank) };
            on_team(grid, &team, |arch, team| {
                // SAFETY: forwarded from the caller.
                unsafe { collectives::barrier(arch, team, ptr_at(sig).cast()) }
            })
        }
        KernelCall::AllGather {
            dst,
            src,
            bases,
            world,
            rank,
            bytes,
            sig,
        } => {
            // SAFETY: the world that built the call passes a live table and a rank in range.
            let team = unsafe { team_at(bases, world, rank) };
            on_team(grid, &team, |arch, team| {
                // SAFETY: forwarded from the caller.
                unsafe {
                    collectives::all_gather(
                        arch,
                        team,
                        ptr_at(dst),
                        ptr_at(src),
                        bytes as usize,
                        ptr_at(sig).cast(),
                    )
                }
            })
        }
        KernelCall::AllToAll {
            dst,
            src,
            bases,
            world,
            rank,
            bytes,
            sig,
        } => {
            // SAFETY: the world that built the call passes a live table and a rank in range.
            let team = unsafe { team_at(bases, world, rank) };
            on_team(grid, &team, |arch, team| {
                // SAFETY: forwarded from the caller.
                unsafe {
                    collectives::all_to_all(
                        arch,
                        team,
                        ptr_at(dst),
                        ptr_at(src),
                        bytes as usize,
                        ptr_at(sig).cast(),
                    )
                }
            })
        }
        KernelCall::Broadcast {
            dst,
            src,
            bases,
            world,
            rank,
            bytes,
            sig,
            root,
        } => {
            // SAFETY: the world that built the call passes a live table and a rank in range.
            let team = unsafe { team_at(bases, world, rank) };
            on_team(grid, &team, |arch, team| {
                // SAFETY: forwarded from the caller.
                unsafe {
                    collectives::broadcast(
                        arch,
                        team,
                        ptr_at(dst),
                        ptr_at(src),
                        bytes as usize,
                        root as usize,
                        ptr_at(sig).cast(),
                    )
                }
            })
        }
        KernelCall::AllReduceOneShot {
            op,
            dtype,
            dst,
            src,
            bases,
            world,
            rank,
            count,
            sig,
        } => {
            let r = Reduction {
                kind: ReductionKind::OneShot,
                op,
                dst,
                src,
                count,
                sig,
            };
            // SAFETY: forwarded from the caller.
            unsafe { r.run(dtype, grid, bases, world, rank) }
        }
        KernelCall::AllReduceTwoShot {
            op,
            dtype,
            dst,
            src,
            bases,
            world,
            rank,
            count,
            sig,
        } => {
            let r = Reduction {
                kind: ReductionKind::TwoShot,
                op,
                dst,
                src,
                count,
                sig,
            };
            // SAFETY: forwarded from the caller.
            unsafe { r.run(dtype, grid, bases, world, rank) }
        }
        KernelCall::ReduceScatter {
            op,
            dtype,
            dst,
            src,
            bases,
            world,
            rank,
            count,
            sig,
        } => {
            let r = Reduction {
                kind: ReductionKind::ReduceScatter,
                op,
                dst,
                src,
                count,
                sig,
            };
            // SAFETY: forwarded from the caller.
            unsafe { r.run(dtype, grid, bases, world, rank) }
        }
        KernelCall::AtomicAddAll {
            counter,
            bases,
            world,
            rank,
            iters,
        } => {
            // SAFETY: the world that built the call passes a live table and a rank in range.
            let team = unsafe { team_at(bases, world, rank) };
            on_team(grid, &team, |_, team| {
                // The body of `symmem_rma_atomic_add_all` (device/kernels/src/rma.rs).
                let counter = ptr_at(counter).cast::<u64>();
                let (world, rank) = (world as usize, rank as usize);
                for _ in 0..iters {
                    for k in 0..world {
                        // SAFETY: forwarded from the caller; `to < world`.
                        unsafe {
                            team.atomic(
                                AtomicOp::Add,
                                counter,
                                1,
                                (rank + k) % world,
                                Order::AcqRel,
                                Scope::System,
                            )
                        };
                    }
                }
            })
        }
        KernelCall::SignalWaitUntil {
            bases,
            world,
            rank,
            sig,
            cmp,
            value,
        } => {
            // SAFETY: the world that built the call passes a live table and a rank in range.
            let team = unsafe { team_at(bases, world, rank) };
            on_team(grid, &team, |arch, team| {
                // The body of `symmem_rma_signal_wait_until`: one thread waits.
                if arch.block_id() == 0 && arch.thread_id() == 0 {
                    // SAFETY: forwarded from the caller.
                    unsafe { team.signal_wait_until(ptr_at(sig).cast(), cmp, value) };
                }
            })
        }
    }
}

/// The team of rank `rank` over the `world`-entry peer-base table at `bases`.
///
/// # Safety
/// `bases` is the address of `world` readable `u64`s that live as long as the team is
/// used, and `rank < world`.
unsafe fn team_at(bases: u64, world: u32, rank: u32) -> Team<'static> {
    // SAFETY: forwarded from the caller.
    unsafe { Team::from_raw_parts(ptr_at(bases).cast(), world, rank) }
}

/// Runs `body(arch, team)` on every thread of `grid`.
fn on_team<F>(grid: Grid, team: &Team<'_>, body: F) -> Result<()>
where
    F: Fn(&HostThread<'_>, &Team<'_>) + Sync,
{
    cpu_launch::launch(grid, |arch| body(arch, team))
}

/// Which reduction body a [`Reduction`] runs.
#[derive(Clone, Copy)]
enum ReductionKind {
    OneShot,
    TwoShot,
    ReduceScatter,
}

/// A reduction launch's own arguments (the team's come separately).
#[derive(Clone, Copy)]
struct Reduction {
    kind: ReductionKind,
    op: ReduceOp,
    dst: u64,
    src: u64,
    count: u64,
    sig: u64,
}

impl Reduction {
    /// Runs the body for `dtype`'s element type.
    ///
    /// # Safety
    /// As [`run_on_threads`].
    unsafe fn run(self, dtype: DType, grid: Grid, bases: u64, world: u32, rank: u32) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            match dtype {
                DType::F32 => self.run_typed::<f32>(grid, bases, world, rank),
                DType::Bf16 => self.run_typed::<Bf16>(grid, bases, world, rank),
                DType::I32 => self.run_typed::<i32>(grid, bases, world, rank),
            }
        }
    }

    /// # Safety
    /// As [`run_on_threads`]; `T` is the kernel's element type.
    unsafe fn run_typed<T: Reducible>(
        self,
        grid: Grid,
        bases: u64,
        world: u32,
        rank: u32,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        let team = unsafe { team_at(bases, world, rank) };
        on_team(grid, &team, |arch, team| {
            let (dst, src, count, sig) = (
                ptr_at(self.dst).cast::<T>(),
                ptr_at(self.src).cast::<T>().cast_const(),
                self.count as usize,
                ptr_at(self.sig).cast::<u64>(),
            );
            let op = self.op;
            // SAFETY: forwarded from the caller.
            unsafe {
                match self.kind {
                    ReductionKind::OneShot => {
                        collectives::all_reduce_one_shot(arch, team, op, dst, src, count, sig)
                    }
                    ReductionKind::TwoShot => {
                        collectives::all_reduce_two_shot(arch, team, op, dst, src, count, sig)
                    }
                    ReductionKind::ReduceScatter => {
                        collectives::reduce_scatter(arch, team, op, dst, src, count, sig)
                    }
                }
            }
        })
    }
}
