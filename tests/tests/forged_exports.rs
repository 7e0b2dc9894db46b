//! A member that lies about the memory it shares (issue 53): an importer believes no
//! size, offset or origin a peer sends before the kernel or the runtime confirms it.
//! Ranks as threads on the CPU backend; rank 0's backend forges its exports while the
//! world registers memory (`World::register`), and every other rank must get
//! `BadPeerMemory`, never a mapping:
//!
//! - it exports a 4 KiB allocation while claiming the registration's whole size (the
//!   importer reads the memfd's real size);
//! - it names a range past the end of the one it registered (no rank of this process
//!   exports that range);
//! - it names a range whose registration has ended (forgotten once every peer let go).
//!
//! And at the backend: an export that names this process, from a rank not verified to
//! be of it, is refused. The same forgeries on CUDA (a handle of 1 MiB claimed as 1 GiB,
//! an offset past its end, opened in another process) are `cuda_gpu_child_ipc_open` and
//! `cuda_gpu_an_export_naming_this_process_aliases_only_its_own_allocations` in the
//! host crate's CUDA tests, run on a GPU.

use std::sync::{Arc, Mutex};
use symmem::backend::cpu::{Cpu, CpuMemory};
use symmem::backend::{
    Backend, BackendKind, DropErrors, Grid, HeapAccess, KernelLaunch, ModuleTransport, RangeExport,
    Sender, Shareable,
};
use symmem::{CodeObjects, Config, Error, RawRange, World};

/// How rank 0 lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Forgery {
    /// Its device memory export is of a fresh 4 KiB allocation, claiming the size asked.
    ClaimsMore,
    /// Its range export names the bytes right after the range.
    PastItsEnd,
    /// Its range exports, after the first, name the first range again.
    Stale,
}

/// The CPU backend, whose exports lie on the forging rank.
struct Forging {
    cpu: Cpu,
    forgery: Option<Forgery>,
    /// What a forged export shares instead, kept alive while the world may map it.
    small: Mutex<Vec<CpuMemory>>,
    /// The first range export's bytes (for [`Forgery::Stale`]).
    first: Mutex<Option<Vec<u8>>>,
}

impl Forging {
    fn new(rank: usize, forgery: Forgery) -> Self {
        Self {
            cpu: Cpu::new(),
            forgery: (rank == 0).then_some(forgery),
            small: Mutex::default(),
            first: Mutex::default(),
        }
    }
}

impl Backend for Forging {
    type Heap = CpuMemory;
    type Mapping = CpuMemory;
    type DeviceMemory = CpuMemory;
    type Module = <Cpu as Backend>::Module;
    type Shared = <Cpu as Backend>::Shared;
    type Graph = <Cpu as Backend>::Graph;

    fn kind(&self) -> BackendKind {
        self.cpu.kind()
    }
    fn device_name(&self) -> String {
        "forging CPU".into()
    }
    fn heap_granularity(&self) -> usize {
        self.cpu.heap_granularity()
    }
    fn create_heap(&self, bytes: usize) -> symmem::Result<CpuMemory> {
        self.cpu.create_heap(bytes)
    }
    fn export_heap(&self, heap: &CpuMemory) -> symmem::Result<Shareable> {
        self.cpu.export_heap(heap)
    }
    fn import_heap(&self, h: Shareable, bytes: usize, from: Sender) -> symmem::Result<CpuMemory> {
        self.cpu.import_heap(h, bytes, from)
    }
    fn alloc_device(&self, bytes: usize) -> symmem::Result<CpuMemory> {
        self.cpu.alloc_device(bytes)
    }
    fn export_device_memory(&self, memory: &CpuMemory) -> symmem::Result<Shareable> {
        if self.forgery != Some(Forgery::ClaimsMore) {
            return self.cpu.export_device_memory(memory);
        }
        let small = self.cpu.alloc_device(4096)?;
        let mut forged = self.cpu.export_device_memory(&small)?;
        forged.bytes = (symmem::backend::DeviceRegion::len(memory) as u64)
            .to_le_bytes()
            .to_vec();
        self.small.lock().expect("small").push(small);
        Ok(forged)
    }
    fn import_device_memory(
        &self,
        h: Shareable,
        bytes: usize,
        from: Sender,
    ) -> symmem::Result<CpuMemory> {
        self.cpu.import_device_memory(h, bytes, from)
    }
    unsafe fn export_range(&self, ptr: u64, bytes: usize) -> symmem::Result<RangeExport> {
        // SAFETY: forwarded from the caller.
        let mut export = unsafe { self.cpu.export_range(ptr, bytes) }?;
        let shared = &mut export.shareable.bytes;
        match self.forgery {
            // pid (4 bytes), address (8), length (8): the address moved past the end.
            Some(Forgery::PastItsEnd) => {
                shared[4..12].copy_from_slice(&(ptr + bytes as u64).to_le_bytes());
            }
            Some(Forgery::Stale) => {
                let mut first = self.first.lock().expect("first");
                match &*first {
                    Some(old) => shared.clone_from(old),
                    None => *first = Some(shared.clone()),
                }
            }
            Some(Forgery::ClaimsMore) | None => {}
        }
        Ok(export)
    }
    unsafe fn upload(&self, dst: u64, src: &[u8]) -> symmem::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.cpu.upload(dst, src) }
    }
    unsafe fn download(&self, dst: &mut [u8], src: u64) -> symmem::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.cpu.download(dst, src) }
    }
    unsafe fn memset(&self, dst: u64, value: u8, bytes: usize) -> symmem::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.cpu.memset(dst, value, bytes) }
    }
    fn load_module(&self, objects: &'static CodeObjects) -> symmem::Result<Self::Module> {
        self.cpu.load_module(objects)
    }
    fn alloc_shared(&self, bytes: usize) -> symmem::Result<Self::Shared> {
        self.cpu.alloc_shared(bytes)
    }
    fn heap_access(&self, heap: &CpuMemory) -> symmem::Result<Box<dyn HeapAccess>> {
        self.cpu.heap_access(heap)
    }
    fn heap_host_ptr(&self, heap: &CpuMemory) -> Option<*mut u8> {
        self.cpu.heap_host_ptr(heap)
    }
    fn kernels_on_host(&self) -> bool {
        self.cpu.kernels_on_host()
    }
    fn syncs_wait_for_the_device(&self) -> bool {
        self.cpu.syncs_wait_for_the_device()
    }
    fn drop_record(&self) -> Option<Arc<DropErrors>> {
        self.cpu.drop_record()
    }
    unsafe fn watch(
        &self,
        module: &mut Self::Module,
        control: &Self::Shared,
        transport: Option<&dyn ModuleTransport>,
    ) -> symmem::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.cpu.watch(module, control, transport) }
    }
    unsafe fn launch(
        &self,
        module: &Self::Module,
        launch: &KernelLaunch<'_>,
        grid: Grid,
    ) -> symmem::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.cpu.launch(module, launch, grid) }
    }
    fn grid_for_bytes(&self, bytes: usize) -> Grid {
        self.cpu.grid_for_bytes(bytes)
    }
    fn collective_grid(&self) -> Grid {
        self.cpu.collective_grid()
    }
    fn synchronize(&self) -> symmem::Result<()> {
        self.cpu.synchronize()
    }
    fn device_to_host_syncs(&self) -> u64 {
        self.cpu.device_to_host_syncs()
    }
    fn begin_capture(&self) -> symmem::Result<()> {
        self.cpu.begin_capture()
    }
    fn end_capture(&self) -> symmem::Result<Self::Graph> {
        self.cpu.end_capture()
    }
    unsafe fn replay(&self, graph: &Self::Graph) -> symmem::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.cpu.replay(graph) }
    }
}

const RANKS: usize = 3;

/// Runs `body` on [`RANKS`] ranks whose rank 0 commits `forgery`, and checks that every
/// importer (every other rank) got `BadPeerMemory` from the registration it returns,
/// and that the forger got an error too (none keeps a table).
fn refused(forgery: Forgery, body: impl Fn(&World<Forging>) -> symmem::Result<()> + Sync) {
    let results = symmem::spawn_ranks(
        RANKS,
        &Config::default(),
        |rank| Ok(Forging::new(rank, forgery)),
        |world| Ok(body(&world)),
    )
    .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        let got = result.expect("the world forms");
        match (rank, &got) {
            (0, Err(Error::PeerFailed { .. })) => {}
            (1.., Err(Error::BadPeerMemory { .. })) => {
                println!("{forgery:?}: rank {rank}: {}", got.unwrap_err());
            }
            _ => panic!("{forgery:?}: rank {rank}: {got:?}"),
        }
    }
}

#[test]
fn a_member_claiming_more_memory_than_it_exports_is_refused() {
    refused(Forgery::ClaimsMore, |world| {
        let mine = world.device_zeros::<u8>(1 << 20)?;
        world.register(mine).map(drop)
    });
}

#[test]
fn a_member_naming_a_range_past_its_end_is_refused() {
    refused(Forgery::PastItsEnd, |world| {
        let mut mine = vec![0u32; 1024];
        // SAFETY: `mine` outlives the registration, which ends with this call.
        let range = unsafe { RawRange::<u32>::new(mine.as_mut_ptr() as u64, mine.len()) };
        world.register(range).map(drop)
    });
}

#[test]
fn a_member_naming_a_range_whose_registration_ended_is_refused() {
    refused(Forgery::Stale, |world| {
        // Both live to the end (a freed `first` could be allocated again as `second`).
        let mut first = vec![0u32; 1024];
        // SAFETY: `first` outlives its registration, which every rank lets go of and a
        // barrier releases.
        let range = unsafe { RawRange::<u32>::new(first.as_mut_ptr() as u64, first.len()) };
        drop(world.register(range)?);
        world.barrier()?;
        let mut second = vec![0u32; 1024];
        // SAFETY: `second` outlives the registration, which ends with this call.
        let range = unsafe { RawRange::<u32>::new(second.as_mut_ptr() as u64, second.len()) };
        world.register(range).map(drop)
    });
}

/// An export that names this process is believed only from a rank verified to be a
/// thread of it; from one that is not, even a genuine export is refused.
#[test]
fn an_export_naming_this_process_needs_a_sender_of_this_process() {
    let cpu = Cpu::new();
    let mut mine = vec![7u32; 64];
    let (ptr, bytes) = (mine.as_mut_ptr() as u64, 64 * 4);
    // SAFETY: `mine` outlives the export and the mapping below.
    let export = unsafe { cpu.export_range(ptr, bytes) }.expect("export");
    let copy = |e: &RangeExport| Shareable {
        bytes: e.shareable.bytes.clone(),
        fd: None,
    };
    let got = cpu.import_device_memory(copy(&export), bytes, Sender::Elsewhere);
    assert!(matches!(got, Err(Error::BadPeerMemory { .. })), "{got:?}");
    let alias = cpu
        .import_device_memory(copy(&export), bytes, Sender::ThisProcess)
        .expect("a rank of this process maps the range it exports");
    assert_eq!(symmem::backend::DeviceRegion::base(&alias), ptr);
    // Once its export is let go of, the range is forgotten.
    drop((alias, export));
    let again = Shareable {
        bytes: [
            &std::process::id().to_le_bytes()[..],
            &ptr.to_le_bytes(),
            &(bytes as u64).to_le_bytes(),
        ]
        .concat(),
        fd: None,
    };
    let got = cpu.import_device_memory(again, bytes, Sender::ThisProcess);
    assert!(matches!(got, Err(Error::BadPeerMemory { .. })), "{got:?}");
}
