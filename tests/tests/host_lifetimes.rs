//! Nothing is freed while a peer still maps it: every rank's exported memory (its heap,
//! a rendezvous' allocation) is freed only after every peer has unmapped it, whatever
//! order the ranks drop things in and however late one of them is.
//!
//! The ranks run on a recording backend: the CPU backend with every export tagged and
//! every unmap and free logged in one process-wide order. The memory model of the CPU
//! backend forgives an early free (a memfd lives while a mapping does); the HIP heap,
//! and CUDA and HIP IPC exports, do not, which is why the order is checked here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use symmem::backend::cpu::{Cpu, CpuMemory};
use symmem::backend::{
    Backend, BackendKind, DeviceRegion, DropErrors, Grid, KernelLaunch, RangeExport, Sender,
    Shareable,
};
use symmem::{CodeObjects, Config, Error, Rendezvous};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// Rank `rank` unmapped its mapping of export `tag`.
    Unmap { tag: u64, rank: usize },
    /// The exporter freed export `tag`.
    Free { tag: u64 },
    /// Rank `rank` freed plain device memory it never exported (logged where its frees
    /// wait for the device).
    DeviceFree { rank: usize },
}

/// Every event of the test, in the order it happened.
static LOG: Mutex<Vec<Event>> = Mutex::new(Vec::new());
static TAGS: AtomicU64 = AtomicU64::new(1);

fn log(event: Event) {
    LOG.lock().unwrap_or_else(|p| p.into_inner()).push(event);
}

/// Memory of the recording backend: logs its end.
#[derive(Debug)]
struct Logged {
    inner: CpuMemory,
    end: Option<Event>,
}

impl DeviceRegion for Logged {
    fn base(&self) -> u64 {
        self.inner.base()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        if let Some(event) = self.end {
            log(event);
        }
    }
}

/// The CPU backend of rank `rank`, recording.
#[derive(Debug)]
struct Recording {
    cpu: Cpu,
    rank: usize,
    /// Its record of failed releases ([`Backend::drop_record`]).
    errors: Arc<DropErrors>,
    /// Dropping it records a failed release (as a GPU backend whose context teardown
    /// failed would).
    fail_on_drop: bool,
    /// It answers that its frees wait for the device, as a GPU backend's do
    /// ([`Backend::syncs_wait_for_the_device`]), and logs them.
    frees_wait: bool,
}

impl Drop for Recording {
    fn drop(&mut self) {
        if self.fail_on_drop {
            self.errors.record(Err(Error::Driver {
                call: "a release that fails on purpose",
                code: -1,
                message: "recorded by the test".into(),
            }));
        }
    }
}

/// The two tests share the event log: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

impl Recording {
    /// Rank `rank`'s recording backend; with `fail_on_drop`, its drop records a failed
    /// release.
    fn new(rank: usize, fail_on_drop: bool) -> Self {
        Self {
            cpu: Cpu::new(),
            rank,
            errors: Arc::default(),
            fail_on_drop,
            frees_wait: false,
        }
    }

    /// Rank `rank`'s recording backend whose frees wait for the device.
    fn frees_waiting(rank: usize) -> Self {
        let mut backend = Self::new(rank, false);
        backend.frees_wait = true;
        backend
    }

    fn plain(inner: CpuMemory) -> Logged {
        Logged { inner, end: None }
    }

    /// Exports `memory` under a fresh tag (prefixed to the handle), which its drop logs.
    fn export(&self, memory: &mut Logged, inner: Shareable) -> Shareable {
        let tag = TAGS.fetch_add(1, Ordering::Relaxed);
        memory.end = Some(Event::Free { tag });
        let mut bytes = tag.to_le_bytes().to_vec();
        bytes.extend(inner.bytes);
        Shareable {
            bytes,
            fd: inner.fd,
        }
    }

    fn import(
        &self,
        handle: Shareable,
        map: impl FnOnce(Shareable) -> symmem::Result<CpuMemory>,
    ) -> symmem::Result<Logged> {
        let tag = u64::from_le_bytes(handle.bytes[..8].try_into().expect("tagged"));
        let inner = map(Shareable {
            bytes: handle.bytes[8..].to_vec(),
            fd: handle.fd,
        })?;
        Ok(Logged {
            inner,
            end: Some(Event::Unmap {
                tag,
                rank: self.rank,
            }),
        })
    }
}

/// Heaps and device memory are exported once each (by the world and by a rendezvous), so
/// the tag is set through a shared reference: a cell in the memory.
struct Cell(Mutex<Logged>);

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cell")
    }
}

impl DeviceRegion for Cell {
    fn base(&self) -> u64 {
        self.0.lock().expect("cell").base()
    }
    fn len(&self) -> usize {
        self.0.lock().expect("cell").len()
    }
}

impl Backend for Recording {
    type Heap = Cell;
    type Mapping = Logged;
    type DeviceMemory = Cell;
    type Module = <Cpu as Backend>::Module;
    type Shared = <Cpu as Backend>::Shared;

    fn kind(&self) -> BackendKind {
        self.cpu.kind()
    }
    fn device_name(&self) -> String {
        "recording CPU".into()
    }
    fn heap_granularity(&self) -> usize {
        self.cpu.heap_granularity()
    }
    fn create_heap(&self, bytes: usize) -> symmem::Result<Cell> {
        Ok(Cell(Mutex::new(Self::plain(self.cpu.create_heap(bytes)?))))
    }
    fn export_heap(&self, heap: &Cell) -> symmem::Result<Shareable> {
        let mut heap = heap.0.lock().expect("cell");
        let inner = self.cpu.export_heap(&heap.inner)?;
        Ok(self.export(&mut heap, inner))
    }
    fn import_heap(
        &self,
        handle: Shareable,
        bytes: usize,
        sender: Sender,
    ) -> symmem::Result<Logged> {
        self.import(handle, |h| self.cpu.import_heap(h, bytes, sender))
    }
    fn alloc_device(&self, bytes: usize) -> symmem::Result<Cell> {
        let mut memory = Self::plain(self.cpu.alloc_device(bytes)?);
        if self.frees_wait {
            memory.end = Some(Event::DeviceFree { rank: self.rank });
        }
        Ok(Cell(Mutex::new(memory)))
    }
    fn export_device_memory(&self, memory: &Cell) -> symmem::Result<Shareable> {
        let mut memory = memory.0.lock().expect("cell");
        let inner = self.cpu.export_device_memory(&memory.inner)?;
        Ok(self.export(&mut memory, inner))
    }
    fn import_device_memory(
        &self,
        handle: Shareable,
        bytes: usize,
        sender: Sender,
    ) -> symmem::Result<Logged> {
        self.import(handle, |h| self.cpu.import_device_memory(h, bytes, sender))
    }
    unsafe fn export_range(&self, ptr: u64, bytes: usize) -> symmem::Result<RangeExport> {
        // SAFETY: forwarded from the caller.
        unsafe { self.cpu.export_range(ptr, bytes) }
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
    fn heap_access(
        &self,
        heap: &Self::Heap,
    ) -> symmem::Result<Box<dyn symmem::backend::HeapAccess>> {
        self.cpu.heap_access(&heap.0.lock().expect("cell").inner)
    }
    fn heap_host_ptr(&self, heap: &Self::Heap) -> Option<*mut u8> {
        self.cpu.heap_host_ptr(&heap.0.lock().expect("cell").inner)
    }
    fn kernels_on_host(&self) -> bool {
        self.cpu.kernels_on_host()
    }
    fn syncs_wait_for_the_device(&self) -> bool {
        self.frees_wait
    }
    unsafe fn watch(
        &self,
        module: &mut Self::Module,
        control: &Self::Shared,
        transport: Option<&dyn symmem::backend::ModuleTransport>,
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
    fn collective_grid(&self) -> Grid {
        self.cpu.collective_grid()
    }
    fn drop_record(&self) -> Option<Arc<DropErrors>> {
        Some(Arc::clone(&self.errors))
    }
    fn grid_for_bytes(&self, bytes: usize) -> Grid {
        self.cpu.grid_for_bytes(bytes)
    }
    fn synchronize(&self) -> symmem::Result<()> {
        self.cpu.synchronize()
    }
    fn device_to_host_syncs(&self) -> u64 {
        self.cpu.device_to_host_syncs()
    }
    type Graph = <Cpu as Backend>::Graph;
    fn begin_capture(&self) -> symmem::Result<()> {
        self.cpu.begin_capture()
    }
    fn end_capture(&self) -> symmem::Result<Self::Graph> {
        self.cpu.end_capture()
    }
    unsafe fn replay(&self, graph: &Self::Graph) -> symmem::Result<()> {
        // SAFETY: forwarded.
        unsafe { self.cpu.replay(graph) }
    }
}

/// Every `Free` of a tag comes after every `Unmap` of it, and every export that was
/// mapped is freed by the end.
fn assert_no_free_under_a_mapping(events: &[Event], world: usize) {
    let frees: Vec<(usize, u64)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::Free { tag } => Some((i, *tag)),
            Event::Unmap { .. } | Event::DeviceFree { .. } => None,
        })
        .collect();
    let mut mapped = 0;
    for (i, e) in events.iter().enumerate() {
        if let Event::Unmap { tag, rank } = *e {
            mapped += 1;
            let freed = frees.iter().find(|(_, t)| *t == tag);
            let Some(&(at, _)) = freed else {
                panic!("export {tag} was never freed:\n{events:#?}");
            };
            assert!(
                at > i,
                "export {tag} freed (event {at}) before rank {rank} unmapped it (event {i}):\n{events:#?}"
            );
        }
    }
    assert!(mapped >= world * (world - 1), "{events:#?}");
}

#[test]
fn exported_memory_outlives_every_peer_mapping() {
    let world = 3;
    let config = Config {
        heap_bytes: 4 << 20,
        timeout: Duration::from_secs(20),
        ..Config::default()
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    LOG.lock().expect("log").clear();
    let results = symmem::spawn_ranks(
        world,
        &config,
        |rank| Ok(Recording::new(rank, false)),
        |w| {
            let me = w.rank();
            let user = w.alloc::<u8>(1 << 16)?;
            let rendezvous = Rendezvous::new(user)?;
            w.barrier()?;
            // Rank 0 lets go first and leaves at once; the last rank is late for
            // everything. Nothing of rank 0's may be freed while the others map it.
            if me == world - 1 {
                std::thread::sleep(Duration::from_millis(100));
            }
            drop(rendezvous);
            if me != 0 {
                w.barrier()?;
            }
            if me == world - 1 {
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(())
        },
    )
    .expect("launch");
    // Rank 0 left without the last barrier: the others see it leave.
    for (rank, r) in results.iter().enumerate().skip(1) {
        assert!(
            matches!(
                r,
                Ok(()) | Err(symmem::Error::PeerLost { rank: Some(0), .. })
            ),
            "rank {rank}: {r:?}"
        );
    }
    assert!(results[0].is_ok(), "{:?}", results[0]);
    let events = LOG.lock().expect("log").clone();
    assert_no_free_under_a_mapping(&events, world);
}

/// Ranks of one process that share a device whose frees wait for it (`cuMemFree` waits
/// for every kernel of the context) free their device buffers inside their next barrier or
/// at their departure, never while a peer's kernel may wait for them. Found on the H200
/// (`waits_leave`): a thread-rank that returned early froze in `cuMemFree` of its
/// buffers, waiting for its peers' collectives, which waited for its departure.
/// How many plain device frees rank `rank` has made (logged where frees wait for the
/// device).
fn freed(rank: usize) -> usize {
    let log = LOG.lock().unwrap_or_else(|p| p.into_inner());
    log.iter()
        .filter(|e| **e == Event::DeviceFree { rank })
        .count()
}

#[test]
fn ranks_sharing_a_device_free_their_buffers_at_a_barrier_or_their_departure() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    LOG.lock().expect("log").clear();
    let config = Config {
        heap_bytes: 4 << 20,
        ..Config::default()
    };
    let results = symmem::spawn_ranks(
        2,
        &config,
        |rank| Ok(Recording::frees_waiting(rank)),
        |w| {
            let me = w.rank();
            drop(w.device_zeros::<u8>(64)?);
            let dropped = freed(me);
            w.barrier()?;
            let past_the_barrier = freed(me);
            drop(w.device_zeros::<u8>(64)?);
            Ok((dropped, past_the_barrier, freed(me)))
        },
    )
    .expect("launch");
    for (rank, r) in results.into_iter().enumerate() {
        assert_eq!(
            r.expect("rank"),
            (0, 1, 1),
            "rank {rank}: frees (dropped, past the barrier, dropped again)"
        );
        // The second buffer, at the departure (with the world's own device memory).
        assert!(freed(rank) >= 2, "rank {rank}: {} frees", freed(rank));
    }
}

/// Where ranks share a device whose frees wait for it, what a barrier releases (a
/// registration's exported memory and table) is freed at the next point where no peer
/// waits for this rank (the next barrier, before its exchange), never past the exchange
/// of the releasing barrier, where a peer may already wait in a kernel for this rank:
/// the deadlock the H200 found (a collective launched right after the release).
#[test]
fn released_memory_of_ranks_sharing_a_device_is_freed_where_no_peer_waits() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    LOG.lock().expect("log").clear();
    let config = Config {
        heap_bytes: 4 << 20,
        ..Config::default()
    };
    let results = symmem::spawn_ranks(
        2,
        &config,
        |rank| Ok(Recording::frees_waiting(rank)),
        |w| {
            let me = w.rank();
            let registered = w.register(w.device_zeros::<u8>(64)?)?;
            w.barrier()?;
            drop(registered);
            let before = freed(me);
            w.barrier()?; // releases it
            let at_the_release = freed(me) - before;
            w.barrier()?; // frees it, before the exchange
            Ok((at_the_release, freed(me) - before))
        },
    )
    .expect("launch");
    for (rank, r) in results.into_iter().enumerate() {
        assert_eq!(
            r.expect("rank"),
            (0, 1),
            "rank {rank}: the table's frees (at the releasing barrier, by the next)"
        );
    }
}

/// A release that fails while a world is torn down is reported by `World::finalize`
/// (from the backend's own record), on every rank whose backend failed.
#[test]
fn finalize_reports_a_release_that_failed_during_teardown() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let config = Config {
        heap_bytes: 4 << 20,
        ..Config::default()
    };
    let results = symmem::spawn_ranks(
        2,
        &config,
        |rank| Ok(Recording::new(rank, rank == 1)),
        |w| w.finalize(),
    )
    .expect("launch");
    assert!(results[0].is_ok(), "{:?}", results[0]);
    match &results[1] {
        Err(
            e @ Error::Teardown {
                rank: 1,
                failures: 1,
                last,
            },
        ) => {
            assert!(last.contains("fails on purpose"), "{last}");
            assert!(e.to_string().starts_with("rank 1: "), "{e}");
        }
        other => panic!("{other:?}"),
    }
}
