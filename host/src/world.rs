//! A rank's world: its backend, its bootstrap, its symmetric heap and every peer's heap
//! mapped into this address space.
//!
//! ## Collective calls and what happens when ranks disagree
//! Allocation is collective: every rank makes the same calls in the same order, and
//! because the heap allocator is deterministic, the same call sequence gives the same
//! offset on every rank, so no message is needed to build a peer table (which keeps
//! allocation fast and free of device-to-host syncs). Each rank records every collective
//! object in its ledger (the `ledger` module: sizes, alignments, offsets), and ranks
//! compare ledgers at every [`World::barrier`], at the first collective that uses an
//! object created since, and when a provider is made. Ranks whose ledgers differ from
//! the majority's are named in [`Error::CollectiveMismatch`], which every rank gets
//! before any byte moves; the world then refuses every symmetric operation. A one-sided
//! operation (a put or get) on an allocation that no barrier or collective has confirmed
//! yet is [`Error::NotAgreed`]: call `barrier` after allocating, as NVSHMEM's and
//! OpenSHMEM's allocations do inside.
//!
//! ## When memory is reused
//! Dropping a symmetric buffer (or a [`crate::Rendezvous`], an [`crate::ExternalTable`],
//! or [`World::free_raw`]) never blocks and frees nothing yet: a peer may still be
//! writing into this rank's copy. The memory goes back to the heap (and a rendezvous'
//! memory to the device) at the first [`World::barrier`] at which every rank has dropped
//! it, after every rank's enqueued work has completed (`barrier` waits for this rank's
//! device first, as `shmem_barrier_all` does); exported memory is freed only after every
//! peer has unmapped it. Ranks may drop in any order: the barrier agrees on the *set* of
//! dropped objects and releases them in creation order, so the heap stays the same on
//! every rank. Dropping the `World` (or [`World::finalize`]) is the last barrier: it
//! waits for this rank's device, unmaps its peers' memory, waits for every rank to do
//! the same, and frees, so nothing leaks and nothing is freed under a peer's mapping.

use crate::backend::{Backend, DeviceRegion, Shareable, SharedRegion};
use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::launch::{CodeObjects, Loaded, Lowering, Module};
use crate::ledger::{self, Ledger, Proposal, Record};
use crate::liveness::{AbortWord, Watchdog};
use crate::memory::{AsDeviceSlice, AsSymSlice, DeviceBuffer, SymSlice};
use crate::offset_alloc::{AllocError, MIN_ALIGN, OffsetAllocator};
use crate::topology::Topology;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use symmem_rma::watch::Control;

/// How a world is made.
#[derive(Clone, Debug)]
pub struct Config {
    /// Bytes of symmetric heap per rank (rounded up to the backend's granularity); the
    /// same on every rank.
    pub heap_bytes: usize,
    /// How long a rank waits for peers before reporting them lost.
    pub timeout: Duration,
    /// How long one wait inside a kernel (a signal wait, a barrier, a collective's
    /// exchange) may spin before it gives up and the world fails with
    /// [`Error::WaitTimedOut`]: the bound that keeps a lost or absent peer from hanging a
    /// kernel. Default [`DEFAULT_WAIT_DEADLINE`]; `Duration::ZERO` for none.
    pub wait_deadline: Duration,
    /// Cuts every machine's ranks, in rank order, into nodes of this many ranks, so one
    /// machine emulates several nodes (see [`crate::topology`]); the same on every rank.
    /// `None` (the default): the environment variable
    /// [`ENV_RANKS_PER_NODE`](crate::topology::ENV_RANKS_PER_NODE) if set, else one node
    /// per machine.
    pub ranks_per_node: Option<usize>,
}

/// The default [`Config::wait_deadline`]: 10 minutes, as PyTorch's NCCL watchdog. It
/// must never fire in a healthy run, where one wait lasts as long as the slowest rank
/// takes to reach the same point (a straggler's compute, a checkpoint, a first-time
/// compile), which can be minutes; a lost peer is still reported, only late. Tests and
/// latency-critical services set it shorter.
pub const DEFAULT_WAIT_DEADLINE: Duration = Duration::from_secs(600);

impl Default for Config {
    fn default() -> Self {
        Self {
            heap_bytes: 64 << 20,
            timeout: crate::bootstrap::DEFAULT_TIMEOUT,
            wait_deadline: DEFAULT_WAIT_DEADLINE,
            ranks_per_node: None,
        }
    }
}

/// The device-resident peer-base table of one allocation: entry `r` is the allocation's
/// address on rank `r` as mapped in this address space. Entry `rank` is the local
/// pointer. The device copy lives as long as the buffer (or provider) it came from; a
/// kernel launch refuses a table whose owner has been dropped ([`Error::TableDropped`]).
#[derive(Clone, Debug)]
pub struct PeerBases {
    device: u64,
    entries: Arc<[u64]>,
    /// The world it belongs to ([`World`]'s serial number).
    world: u64,
    /// The collective object it is the table of; `None` for the heap's own table.
    object: Option<Arc<ObjectTag>>,
}

/// Which collective object a table belongs to, and whether it has been let go of.
#[derive(Debug)]
pub(crate) struct ObjectTag {
    id: u64,
    offset: usize,
    dropped: AtomicBool,
}

impl ObjectTag {
    pub(crate) fn new(id: u64, offset: usize) -> Arc<Self> {
        Arc::new(Self {
            id,
            offset,
            dropped: AtomicBool::new(false),
        })
    }
}

impl PartialEq for PeerBases {
    fn eq(&self, other: &Self) -> bool {
        self.device == other.device && self.entries == other.entries
    }
}

impl Eq for PeerBases {}

impl PeerBases {
    pub(crate) fn new(
        device: u64,
        entries: Arc<[u64]>,
        world: u64,
        object: Option<Arc<ObjectTag>>,
    ) -> Self {
        Self {
            device,
            entries,
            world,
            object,
        }
    }

    /// Marks the table's owner as let go of: kernels may no longer be launched with it.
    pub(crate) fn mark_dropped(&self) {
        if let Some(object) = &self.object {
            object.dropped.store(true, Ordering::Relaxed);
        }
    }

    /// Checks that a launch of `lowering`'s world may pass this table, and notes its
    /// object for the agreement check.
    pub(crate) fn check_usable<B: Backend>(&self, lowering: &mut Lowering<'_, B>) -> Result<()> {
        if self.world != lowering.world_serial() {
            return Err(Error::ForeignHandle);
        }
        if let Some(object) = &self.object {
            if object.dropped.load(Ordering::Relaxed) {
                return Err(Error::TableDropped);
            }
            lowering.through_table(object.id, object.offset);
        }
        Ok(())
    }
    /// Device address of the table (`len()` u64 entries): what kernels take.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }
    /// The table's entries, as uploaded.
    pub fn entries(&self) -> &[u64] {
        &self.entries
    }
    /// Entries in the table (the world size).
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True for an empty table (never, for a live world).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Anything that can produce a device-resident peer-base table: the whole provider
/// contract. `table().entries()[world.rank()]` is the provider's local pointer.
pub trait PeerBaseProvider {
    /// The device-resident table, indexed by rank.
    fn table(&self) -> &PeerBases;
    /// The local pointer (`table().entries()[rank]`).
    fn local_ptr(&self) -> u64;
    /// Bytes of the allocation on every rank.
    fn byte_len(&self) -> usize;
}

const TABLES_PER_CHUNK: usize = 1024;

/// Device-resident storage for peer tables: chunks of fixed-size slots.
struct TableArena<M> {
    chunks: Vec<M>,
    free: Vec<u64>,
}

/// A live allocation: the serial number its buffer carries, its ledger id and the bytes
/// asked for.
#[derive(Clone, Copy)]
struct Live {
    serial: u64,
    id: u64,
    bytes: usize,
}

/// A collective object this rank has let go of, kept until an agreement at which every
/// rank has let go of it.
struct Retired<B: Backend> {
    /// Its ledger id.
    id: u64,
    /// A heap range (offset, bytes) and its table slot, still allocated meanwhile.
    allocation: Option<(usize, usize, u64)>,
    /// Peers' memory mapped here; unmapped first.
    mappings: Vec<B::Mapping>,
    /// This rank's memory (tables, a rendezvous' exported allocation); freed last.
    memories: Vec<B::DeviceMemory>,
    /// True if peers mapped `memories`: then they are freed only after a further
    /// barrier, once every rank has unmapped.
    exported: bool,
}

/// Serial numbers of allocations and worlds, unique across every world of the process,
/// so a stale or foreign [`RawSymmetric`], buffer or table is recognised.
static SERIALS: AtomicU64 = AtomicU64::new(1);

struct HeapState<B: Backend> {
    allocator: OffsetAllocator,
    live: std::collections::HashMap<usize, Live>,
    tables: TableArena<B::DeviceMemory>,
    ledger: Ledger,
    retired: Vec<Retired<B>>,
}

impl<B: Backend> HeapState<B> {
    /// Bytes of heap held by retired allocations.
    fn pending_bytes(&self) -> usize {
        self.retired
            .iter()
            .filter_map(|r| r.allocation.map(|(_, bytes, _)| bytes))
            .sum()
    }
}

/// One rank's world.
pub struct World<B: Backend> {
    /// The off-node engine (see [`crate::engine`]), when the world spans several nodes;
    /// stopped when the world leaves, before the ring and heap it uses are freed.
    #[cfg(feature = "mpi")]
    engine: Option<crate::engine::Engine>,
    /// The engine's request ring and ticket counter.
    #[cfg(feature = "mpi")]
    _engine_memory: Option<EngineMemory<B>>,
    /// Unique in this process: handles name their world by it.
    serial: u64,
    /// symmem's own kernels (`symmem-kernels`), loaded like any kernel crate.
    kernels: Arc<Loaded<B>>,
    /// Kernel crates loaded with [`World::load`], kept while the world lives.
    modules: Mutex<Vec<Arc<Loaded<B>>>>,
    /// Watches peer processes on this machine (see [`crate::liveness`]); stopped when the
    /// world leaves, and declared before `control`, whose abort word it writes.
    watchdog: Option<Watchdog>,
    /// The abort word of `control`.
    abort: AbortWord,
    /// This rank's control block of bounded device waits (`symmem_rma::watch`).
    control: B::Shared,
    /// The first failed device wait, once seen: the world is poisoned by it.
    fault: Mutex<Option<Fault>>,
    rank: usize,
    world_size: usize,
    /// Which peers this rank reaches with loads and stores.
    topology: Topology,
    backend: B,
    bootstrap: Mutex<Box<dyn Bootstrap>>,
    heap: B::Heap,
    /// Peers' heaps mapped here; `None` at this rank's own index.
    peer_heaps: Vec<Option<B::Mapping>>,
    heap_bases: PeerBases,
    /// The largest alignment every heap base has (so offsets aligned to it give
    /// addresses aligned to it on every rank).
    max_align: usize,
    _heap_bases_memory: B::DeviceMemory,
    state: Mutex<HeapState<B>>,
    /// Set once the world has left (finalize or drop).
    left: bool,
    /// Set while [`World::capture`] records.
    pub(crate) capturing: AtomicBool,
    /// Live graphs, and what they keep allocated (see [`crate::graph`]).
    pub(crate) pins: Mutex<Pins<B>>,
}

/// What a world's live graphs keep: while `graphs > 0`, device memory its handles let go
/// of is held in `kept`, and no symmetric object is released, so a replay never touches
/// memory that was reused.
pub(crate) struct Pins<B: Backend> {
    pub(crate) graphs: usize,
    pub(crate) kept: Vec<B::DeviceMemory>,
}

fn alloc_error(e: AllocError, pending: usize) -> Error {
    match e {
        AllocError::ZeroSize => Error::ZeroSize,
        AllocError::BadAlignment { align } => Error::BadAlignment { align },
        AllocError::OutOfMemory {
            requested,
            available,
        } => Error::OutOfHeap {
            requested,
            available,
            pending,
        },
        AllocError::TooLarge {
            requested,
            capacity,
        } => Error::TooLarge {
            requested,
            capacity,
        },
        AllocError::NotAllocated { offset } => Error::NotAllocated { offset },
    }
}

impl<B: Backend> World<B> {
    /// Forms a world collectively: every rank of `bootstrap` calls this with the same
    /// `config`. Creates this rank's heap, exchanges handles, maps every peer's heap at
    /// an address of its own and uploads the heap-base table.
    ///
    /// Errors: `HeapSizeMismatch` if ranks ask for different sizes, `PeerLost` if a
    /// rank does not take part in time, and the backend's own errors.
    pub fn new(mut bootstrap: Box<dyn Bootstrap>, backend: B, config: &Config) -> Result<Self> {
        let (rank, world_size) = (bootstrap.rank(), bootstrap.world_size());
        let sizes = bootstrap.all_gather(&(config.heap_bytes as u64).to_le_bytes())?;
        for (peer, size) in sizes.iter().enumerate() {
            let size = size
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes);
            let first = sizes[0]
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes);
            if size != first {
                return Err(Error::HeapSizeMismatch {
                    rank: peer,
                    expected: first.unwrap_or(0) as usize,
                    found: size.unwrap_or(0) as usize,
                });
            }
        }
        if config.heap_bytes == 0 {
            return Err(Error::ZeroSize);
        }
        let topology = Topology::exchange(&mut *bootstrap, config.ranks_per_node)?;
        let granule = backend.heap_granularity().max(MIN_ALIGN);
        let heap_len = config.heap_bytes.div_ceil(granule) * granule;
        let heap = backend.create_heap(heap_len)?;
        let handles = bootstrap.all_gather_shareable(backend.export_heap(&heap)?)?;
        let mut peer_heaps = Vec::with_capacity(world_size);
        let mut bases = Vec::with_capacity(world_size);
        for (peer, handle) in handles.into_iter().enumerate() {
            if peer == rank {
                bases.push(heap.base());
                peer_heaps.push(None);
            } else if !topology.reaches(peer) {
                // Another node: not mapped, entry 0 (see `crate::topology`).
                bases.push(0);
                peer_heaps.push(None);
            } else {
                let mapping = backend.import_heap(handle, heap_len)?;
                bases.push(mapping.base());
                peer_heaps.push(Some(mapping));
            }
        }
        let max_align = bases
            .iter()
            .filter(|&&b| b != 0)
            .map(|b| 1usize << b.trailing_zeros().min(30))
            .min()
            .unwrap_or(MIN_ALIGN);
        let heap_bases_memory = backend.alloc_device(world_size * 8)?;
        // SAFETY: the allocation just made holds `world_size` u64s.
        unsafe { backend.upload(heap_bases_memory.base(), bytemuck::cast_slice(&bases))? };
        let serial = SERIALS.fetch_add(1, Ordering::Relaxed);
        let heap_bases = PeerBases::new(heap_bases_memory.base(), bases.into(), serial, None);
        let control = backend.alloc_shared(size_of::<Control>())?;
        let deadline = u64::try_from(config.wait_deadline.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: a fresh zeroed block of `Control`'s size, aligned (page-locked or
        // 64-aligned allocations), that no kernel reads yet.
        unsafe { (*control.host_ptr().cast::<Control>()).deadline_ns = deadline };
        let objects = if topology.nodes() > 1 {
            &crate::code_objects::KERNELS
        } else {
            &crate::code_objects::KERNELS_ON_NODE
        };
        let kernels = Loaded::new(&backend, objects, &control)?;
        // SAFETY: the block's first word, 8-aligned; `control` outlives the watchdog (the
        // field order of `World`, and `leave` stops it first), and words are accessed
        // atomically.
        let abort =
            unsafe { AbortWord::new(&raw mut (*control.host_ptr().cast::<Control>()).abort) };
        let watchdog = Watchdog::start(&mut *bootstrap, abort)?;
        #[cfg(feature = "mpi")]
        let (engine, ring_memory) = if topology.nodes() > 1 {
            let (engine, ring, memory) = start_engine(&*bootstrap, &backend, &heap, abort)?;
            // SAFETY: the live control block's word, before any launch.
            unsafe { (*control.host_ptr().cast::<Control>()).ring = ring };
            (Some(engine), Some(memory))
        } else {
            (None, None)
        };
        #[cfg(not(feature = "mpi"))]
        if topology.nodes() > 1 {
            return Err(Error::NoEngine(
                "symmem was built without the `mpi` feature, which the off-node engine needs",
            ));
        }
        bootstrap.barrier()?;
        Ok(Self {
            #[cfg(feature = "mpi")]
            engine,
            #[cfg(feature = "mpi")]
            _engine_memory: ring_memory,
            serial,
            kernels,
            modules: Mutex::new(Vec::new()),
            watchdog,
            abort,
            control,
            fault: Mutex::new(None),
            rank,
            world_size,
            topology,
            backend,
            bootstrap: Mutex::new(bootstrap),
            heap,
            peer_heaps,
            heap_bases,
            max_align,
            _heap_bases_memory: heap_bases_memory,
            state: Mutex::new(HeapState {
                allocator: OffsetAllocator::new(heap_len),
                live: std::collections::HashMap::new(),
                tables: TableArena {
                    chunks: Vec::new(),
                    free: Vec::new(),
                },
                ledger: Ledger::new(),
                retired: Vec::new(),
            }),
            left: false,
            capturing: AtomicBool::new(false),
            pins: Mutex::new(Pins {
                graphs: 0,
                kept: Vec::new(),
            }),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Ranks in the world.
    pub fn world_size(&self) -> usize {
        self.world_size
    }
    /// Which ranks share this rank's node (see [`crate::topology`]).
    pub fn topology(&self) -> &Topology {
        &self.topology
    }
    /// How this rank's off-node engine moves data; `None` where the world runs no engine
    /// (it is on one node).
    #[cfg(feature = "mpi")]
    pub fn engine_path(&self) -> Option<crate::engine::EnginePath> {
        self.engine.as_ref().map(crate::engine::Engine::path)
    }
    /// This rank's backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }
    /// Bytes of symmetric heap per rank.
    pub fn heap_len(&self) -> usize {
        self.heap.len()
    }
    /// The device-resident heap-base table: entry `r` is rank `r`'s heap as mapped here.
    pub fn heap_bases(&self) -> &PeerBases {
        &self.heap_bases
    }
    /// Free bytes left in this rank's heap.
    pub fn heap_free(&self) -> usize {
        self.lock_state().allocator.free_bytes()
    }

    fn lock_state(&self) -> MutexGuard<'_, HeapState<B>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Error::RankOutOfRange`] unless `rank` is a rank of this world (kernels reach a
    /// peer on another node through the engine).
    pub(crate) fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.world_size {
            Err(Error::RankOutOfRange {
                rank,
                world: self.world_size,
            })
        } else {
            Ok(())
        }
    }

    /// Waits until the engine has completed every request this rank's kernels posted
    /// (the device is idle): nothing without an engine.
    fn quiet_engine(&self) -> Result<()> {
        #[cfg(feature = "mpi")]
        if let Some(engine) = &self.engine {
            // SAFETY: the live control block's deadline word, written once at creation.
            let deadline = unsafe { (*self.control.host_ptr().cast::<Control>()).deadline_ns };
            let deadline = match deadline {
                0 => Duration::MAX,
                ns => Duration::from_nanos(ns),
            };
            return engine.quiet(deadline);
        }
        Ok(())
    }

    /// Allocates `len` elements of `T` in every rank's heap, collectively, without
    /// touching the memory; returns the buffer and its device-resident peer table.
    ///
    /// The table is computed from the heap bases and uploaded asynchronously: no
    /// device-to-host copy or synchronisation. Alignment is at least 256 bytes.
    pub fn allocate_symmetric<T: bytemuck::Pod>(
        &self,
        len: usize,
    ) -> Result<(SymmetricBuffer<'_, T, B>, PeerBases)> {
        self.allocate_aligned(len, MIN_ALIGN)
    }

    /// As [`World::allocate_symmetric`], with alignment `align` (a power of two; at
    /// least 256 is used).
    pub fn allocate_aligned<T: bytemuck::Pod>(
        &self,
        len: usize,
        align: usize,
    ) -> Result<(SymmetricBuffer<'_, T, B>, PeerBases)> {
        self.ready_for("an allocation")?;
        if !align.is_power_of_two() {
            return Err(Error::BadAlignment { align });
        }
        if align > self.max_align {
            return Err(Error::AlignmentTooLarge {
                align,
                max: self.max_align,
            });
        }
        let bytes = len.checked_mul(size_of::<T>()).ok_or(Error::TooLarge {
            requested: usize::MAX,
            capacity: self.heap.len(),
        })?;
        let mut state = self.lock_state();
        let offset = match state.allocator.alloc(bytes, align.max(align_of::<T>())) {
            Ok(offset) => offset,
            Err(e) => return Err(alloc_error(e, state.pending_bytes())),
        };
        let id = self.create(
            &mut state.ledger,
            Record::Allocation,
            &[bytes as u64, align as u64, offset as u64],
        );
        let entries: Arc<[u64]> = self
            .heap_bases
            .entries
            .iter()
            // An off-node peer's entry stays 0 (see `crate::topology`).
            .map(|&b| if b == 0 { 0 } else { b + offset as u64 })
            .collect();
        let slot = match self.table_slot(&mut state) {
            Ok(slot) => slot,
            Err(e) => {
                // Undo locally; the ledger keeps the attempt so all ranks stay in step.
                let _ = state.allocator.free(offset);
                return Err(e);
            }
        };
        let serial = SERIALS.fetch_add(1, Ordering::Relaxed);
        state.live.insert(offset, Live { serial, id, bytes });
        drop(state);
        // SAFETY: a table slot holds `world_size` u64s, and no launch uses it before this.
        unsafe { self.backend.upload(slot, bytemuck::cast_slice(&entries))? };
        let table = PeerBases::new(slot, entries, self.serial, Some(ObjectTag::new(id, offset)));
        let buffer = SymmetricBuffer {
            world: self,
            serial,
            id,
            offset,
            len,
            table: table.clone(),
            _t: PhantomData,
        };
        Ok((buffer, table))
    }

    fn table_slot(&self, state: &mut HeapState<B>) -> Result<u64> {
        if state.tables.free.is_empty() {
            let stride = (self.world_size * 8).next_multiple_of(64);
            let chunk = self.backend.alloc_device(stride * TABLES_PER_CHUNK)?;
            state.tables.free.extend(
                (0..TABLES_PER_CHUNK)
                    .rev()
                    .map(|i| chunk.base() + (i * stride) as u64),
            );
            state.tables.chunks.push(chunk);
        }
        Ok(state.tables.free.pop().expect("refilled above"))
    }

    /// Records a collective object in `ledger`; returns its id. In a world of one rank
    /// it is agreed at once (there is nobody to disagree with).
    fn create(&self, ledger: &mut Ledger, record: Record, words: &[u64]) -> u64 {
        let id = ledger.create(record, words);
        if self.world_size == 1 {
            ledger.agree_alone();
        }
        id
    }

    /// Records a collective object that is not a heap allocation (a provider); returns
    /// its id.
    pub(crate) fn create_object(&self, record: Record) -> u64 {
        self.create(&mut self.lock_state().ledger, record, &[])
    }

    /// Lets go of the allocation at `offset` if it is the one numbered `serial`: it is
    /// no longer symmetric here, and goes back to the heap at the first barrier at which
    /// every rank has let go of it.
    fn retire_allocation(&self, offset: usize, serial: u64, table: u64) -> Result<()> {
        let mut state = self.lock_state();
        let live = match state.live.get(&offset) {
            Some(live) if live.serial == serial => *live,
            _ => return Err(Error::NotAllocated { offset }),
        };
        state.live.remove(&offset);
        state.retired.push(Retired {
            id: live.id,
            allocation: Some((offset, live.bytes, table)),
            mappings: Vec::new(),
            memories: Vec::new(),
            exported: false,
        });
        Ok(())
    }

    /// Lets go of provider object `id` and what it holds: `mappings` of peers' memory,
    /// and this rank's `memories` (peers mapped them if `exported`). They are released at
    /// the first barrier at which every rank has let go of `id`.
    pub(crate) fn retire_object(
        &self,
        id: u64,
        mappings: Vec<B::Mapping>,
        memories: Vec<B::DeviceMemory>,
        exported: bool,
    ) {
        self.lock_state().retired.push(Retired {
            id,
            allocation: None,
            mappings,
            memories,
            exported,
        });
    }

    /// An agreement (see [`crate::ledger`]): every rank calls it at the same point of its
    /// program with the same `call` words. `failed` says this rank's part of the call
    /// failed. With `release`, objects every rank has let go of are released.
    ///
    /// A world poisoned by a failed device wait ([`World::check_waits`]) still takes
    /// part, as failed, so its peers are not left waiting for it, and returns that error.
    ///
    /// Errors: the failed wait's, the poisoning [`Error::CollectiveMismatch`] (at once,
    /// without an exchange, when an earlier agreement failed: every rank knows that), a
    /// call-parameter `CollectiveMismatch`, [`Error::PeerFailed`], and the bootstrap's.
    pub(crate) fn agree(&self, call: &[u64], failed: bool, release: bool) -> Result<()> {
        let waits = self.check_waits();
        // A live graph may replay launches on dropped objects: keep them all.
        let release = release && waits.is_ok() && self.lock_pins().graphs == 0;
        let agreed = self.exchange_agreement(call, failed || waits.is_err(), release);
        waits.and(agreed)
    }

    /// [`World::agree`]'s exchange.
    fn exchange_agreement(&self, call: &[u64], failed: bool, release: bool) -> Result<()> {
        let proposal = {
            let state = self.lock_state();
            state.ledger.check()?;
            let dropped: Vec<u64> = if release {
                state.retired.iter().map(|r| r.id).collect()
            } else {
                Vec::new()
            };
            state.ledger.propose(call, failed, &dropped)
        };
        let mut bootstrap = self.bootstrap.lock().unwrap_or_else(|p| p.into_inner());
        let all = self.noting_loss(bootstrap.all_gather(&proposal.encode()))?;
        let proposals = all
            .iter()
            .enumerate()
            .map(|(rank, bytes)| Proposal::decode(rank, bytes))
            .collect::<Result<Vec<_>>>()?;
        let verdict = ledger::decide(&proposals);
        let mut state = self.lock_state();
        let outcome = state.ledger.apply(&verdict, self.rank);
        if verdict.released.is_empty() {
            return outcome;
        }
        let (released, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut state.retired)
            .into_iter()
            .partition(|r| verdict.released.binary_search(&r.id).is_ok());
        state.retired = kept;
        let mut exported = Vec::new();
        for mut r in released {
            if let Some((offset, _, table)) = r.allocation {
                // Allocated since its creation and released once: cannot fail.
                let _ = state.allocator.free(offset);
                state.tables.free.push(table);
            }
            r.mappings.clear();
            if r.exported {
                exported.append(&mut r.memories);
            }
        }
        drop(state);
        if !exported.is_empty() {
            // Every rank released the same objects, so every rank takes this barrier:
            // after it, no peer maps this rank's exported memory any more.
            self.noting_loss(bootstrap.barrier())?;
        }
        drop(exported);
        outcome
    }

    /// Checks that every allocation in `ids` (id, heap offset) is agreed before a
    /// one-sided operation uses it. Errors: the poisoning `CollectiveMismatch`, or
    /// [`Error::NotAgreed`] naming the first allocation no agreement has confirmed.
    pub(crate) fn check_one_sided(&self, ids: &[(u64, usize)]) -> Result<()> {
        let state = self.lock_state();
        state.ledger.check()?;
        match ids.iter().find(|(id, _)| !state.ledger.is_agreed(*id)) {
            Some(&(_, offset)) => Err(Error::NotAgreed { offset }),
            None => Ok(()),
        }
    }

    /// The agreement of a collective call on parameters `call`, given this rank's own
    /// check of its part, `checked`: a rank whose check failed still takes part (the
    /// others get [`Error::PeerFailed`]) and returns its own error.
    pub(crate) fn agree_on<R>(&self, call: &[u64], checked: Result<R>) -> Result<R> {
        let agreed = self.agree(call, checked.is_err(), false);
        let value = checked?;
        agreed.map(|()| value)
    }

    /// Before a collective call that uses the objects `ids`, with this rank's own check
    /// of its arguments, `checked`: agrees as [`World::agree_on`] (every rank reaches
    /// this with the same objects, so every rank does) if any was created since the last
    /// agreement; otherwise only checks that the world is not poisoned.
    pub(crate) fn check_collective<R>(&self, ids: &[u64], checked: Result<R>) -> Result<R> {
        let fresh = {
            let state = self.lock_state();
            state.ledger.check()?;
            ids.iter().any(|&id| !state.ledger.is_agreed(id))
        };
        if fresh {
            self.agree_on(&[], checked)
        } else {
            checked
        }
    }

    /// `empty`: [`World::allocate_symmetric`] without its table in the result.
    pub fn empty<T: bytemuck::Pod>(&self, len: usize) -> Result<SymmetricBuffer<'_, T, B>> {
        self.allocate_symmetric(len).map(|(buffer, _)| buffer)
    }

    /// A symmetric buffer of `len` zeroed elements (zeroed on the device, asynchronously).
    pub fn zeros<T: bytemuck::Pod>(&self, len: usize) -> Result<SymmetricBuffer<'_, T, B>> {
        let buffer = self.empty(len)?;
        self.fill_zero(&buffer)?;
        Ok(buffer)
    }

    /// A symmetric buffer of `len` copies of `value`.
    pub fn full<T: bytemuck::Pod>(
        &self,
        len: usize,
        value: T,
    ) -> Result<SymmetricBuffer<'_, T, B>> {
        self.from_slice(&vec![value; len])
    }

    /// A symmetric buffer holding a copy of `data` on this rank (each rank passes its own).
    pub fn from_slice<T: bytemuck::Pod>(&self, data: &[T]) -> Result<SymmetricBuffer<'_, T, B>> {
        let buffer = self.empty(data.len())?;
        self.write(&buffer, 0, data)?;
        Ok(buffer)
    }

    /// True when `ptr` is inside a live symmetric allocation of this rank's heap.
    pub fn is_symmetric(&self, ptr: u64) -> bool {
        self.locate(ptr).is_ok()
    }

    /// The live allocation (heap offset, length) that holds `ptr`.
    fn locate(&self, ptr: u64) -> Result<(usize, usize)> {
        let base = self.heap.base();
        let offset = ptr
            .checked_sub(base)
            .filter(|&o| o < self.heap.len() as u64);
        let state = self.lock_state();
        offset
            .and_then(|o| {
                let (start, _) = state.allocator.allocation(o as usize)?;
                let live = state.live.get(&start)?;
                (o as usize - start < live.bytes).then_some((start, live.bytes))
            })
            .ok_or(Error::NotSymmetric { addr: ptr })
    }

    /// Translates the local `ptr` (inside a live symmetric allocation) to rank `to`'s
    /// copy, as mapped in this address space: the checked host-side form.
    ///
    /// Errors: [`Error::RankOutOfRange`], [`Error::OffNode`] for a rank on another node
    /// (not mapped here), [`Error::NotSymmetric`].
    pub fn translate(&self, ptr: u64, to: usize) -> Result<u64> {
        self.check_rank(to)?;
        if !self.topology.reaches(to) {
            return Err(Error::OffNode { rank: to });
        }
        self.locate(ptr)?;
        let bases = symmem_translate::PeerBases::new(&self.heap_bases.entries);
        let local = std::ptr::without_provenance_mut::<u8>(ptr as usize);
        bases
            .remote(local, self.heap.len(), self.world_size, self.rank, to)
            .map(|p| p.addr() as u64)
            .map_err(|_| Error::NotSymmetric { addr: ptr })
    }

    /// The peer table of `buffer`.
    pub fn peer_bases<T: bytemuck::Pod>(&self, buffer: &SymmetricBuffer<'_, T, B>) -> PeerBases {
        buffer.table.clone()
    }

    /// Allocates plain device memory for `len` elements of `T` on this rank (not
    /// collective, not symmetric; share it with [`crate::Rendezvous`]). Its contents are
    /// undefined. Errors: [`Error::ZeroSize`], the backend's out-of-memory error.
    pub fn alloc<T: bytemuck::Pod>(&self, len: usize) -> Result<DeviceBuffer<'_, T, B>> {
        self.not_capturing("an allocation")?;
        DeviceBuffer::new(self, len)
    }

    /// [`World::alloc`], zeroed (asynchronously).
    pub fn device_zeros<T: bytemuck::Pod>(&self, len: usize) -> Result<DeviceBuffer<'_, T, B>> {
        let buffer = self.alloc(len)?;
        self.fill_zero(&buffer)?;
        Ok(buffer)
    }

    /// [`World::alloc`] holding a copy of `data` (uploaded asynchronously).
    pub fn device_from_slice<T: bytemuck::Pod>(
        &self,
        data: &[T],
    ) -> Result<DeviceBuffer<'_, T, B>> {
        let buffer = self.alloc(data.len())?;
        self.write(&buffer, 0, data)?;
        Ok(buffer)
    }

    /// Loads the code objects of a kernel crate (made with [`crate::include_kernels!`])
    /// for this rank's device, once per world: the object built for its architecture.
    /// Every kernel is loaded now, so no launch waits for a load.
    ///
    /// Errors: the world's failed device wait ([`World::check_waits`]),
    /// [`Error::NoCodeObject`] naming the crate and the device's architecture when none
    /// of the objects runs here; the backend's load errors.
    pub fn load(&self, objects: &'static CodeObjects) -> Result<Module<'_, B>> {
        self.ready_for("a load")?;
        if std::ptr::eq(objects, self.kernels.objects) {
            return Ok(self.kernels());
        }
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        let loaded = match modules.iter().find(|m| std::ptr::eq(m.objects, objects)) {
            Some(loaded) => Arc::clone(loaded),
            None => {
                let loaded = Loaded::new(&self.backend, objects, &self.control)?;
                modules.push(Arc::clone(&loaded));
                loaded
            }
        };
        Ok(Module::new(self, loaded))
    }

    /// symmem's own kernels (`symmem-kernels`), launched through the same checked path
    /// as a user's.
    pub fn kernels(&self) -> Module<'_, B> {
        Module::new(self, Arc::clone(&self.kernels))
    }

    /// What every host call that touches the device checks first: the world's failed
    /// device wait ([`World::check_waits`]), then [`Error::Capturing`] naming `call`
    /// while [`World::capture`] records.
    pub(crate) fn ready_for(&self, call: &'static str) -> Result<()> {
        self.check_waits()?;
        self.not_capturing(call)
    }

    /// [`Error::Capturing`] naming `call` while [`World::capture`] records.
    pub(crate) fn not_capturing(&self, call: &'static str) -> Result<()> {
        if self.capturing.load(Ordering::Acquire) {
            Err(Error::Capturing { call })
        } else {
            Ok(())
        }
    }

    pub(crate) fn lock_pins(&self) -> MutexGuard<'_, Pins<B>> {
        self.pins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Frees `memory` of a dropped [`DeviceBuffer`], or keeps it while a graph lives.
    pub(crate) fn free_device_memory(&self, memory: B::DeviceMemory) {
        let mut pins = self.lock_pins();
        if pins.graphs > 0 {
            pins.kept.push(memory);
        } else {
            drop(pins);
            drop(memory);
        }
    }

    /// Checks this rank's device waits: a wait that gave up (its deadline passed, or the
    /// host aborted) poisons the world, and so does a peer process found lost (a
    /// watchdog thread polls a pidfd of every peer process on this machine); this and
    /// every later call get the error (launches, barriers, allocations, reads and writes
    /// check it first; a read checks again after it has waited for the device). Reads
    /// host memory only: no device synchronisation.
    ///
    /// Errors: [`Error::WaitTimedOut`], [`Error::PeerLost`] (an abort: a peer lost).
    pub fn check_waits(&self) -> Result<()> {
        let control = self.control.host_ptr().cast::<Control>();
        // SAFETY: the live control block; words are read atomically (the device writes
        // each with one system-scope store).
        let read = |p: *mut u64| unsafe { AtomicU64::from_ptr(p) }.load(Ordering::Acquire);
        // SAFETY: a field address of the live block.
        let status = read(unsafe { &raw mut (*control).status });
        let lost = self.abort.read();
        // Neither word ever goes back to 0: while both are 0 no wait has failed and no
        // peer is lost, and every launch pays two loads, no lock.
        if status == 0 && lost.is_none() {
            return Ok(());
        }
        #[cfg(feature = "mpi")]
        if let Some(e) = self
            .engine
            .as_ref()
            .and_then(crate::engine::Engine::failure)
        {
            return Err(e);
        }
        let mut fault = self.fault.lock().unwrap_or_else(|p| p.into_inner());
        // The first record seen stays the world's error, even if a later wait of the
        // same kernel overwrote the block.
        let fault = *fault.get_or_insert_with(|| {
            // SAFETY: as above.
            let (signal, value, seen) = unsafe {
                (
                    read(&raw mut (*control).signal),
                    read(&raw mut (*control).value),
                    read(&raw mut (*control).seen),
                )
            };
            Fault {
                status,
                lost,
                signal,
                value,
                seen,
            }
        });
        Err(fault.error())
    }

    /// Unique in this process: what handles name their world by.
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// Collective: waits until this rank's enqueued work has completed (one counted
    /// synchronisation), then for every rank, checking that every rank made the same
    /// collective calls; then releases what every rank has dropped (see the module
    /// documentation). On return, everything every rank enqueued before is complete.
    ///
    /// Errors: [`Error::CollectiveMismatch`] naming the ranks that differ from the
    /// majority (every rank gets it, and the world refuses symmetric operations from
    /// then on), [`Error::PeerFailed`] if another rank's device failed, [`Error::PeerLost`],
    /// and this rank's synchronisation error. Nothing is released on an error.
    pub fn barrier(&self) -> Result<()> {
        self.not_capturing("a barrier")?;
        let synced = self
            .backend
            .synchronize()
            .and_then(|()| self.quiet_engine());
        // The agreement also checks the device waits, now that the device is done.
        let agreed = self.agree(&[], synced.is_err(), synced.is_ok());
        synced.and(agreed)
    }

    /// The last barrier, with its errors: waits for this rank's device, unmaps every
    /// peer's memory, leaves the group (a peer still waiting for this rank in a
    /// collective gets [`Error::PeerLost`] naming it) and waits until every rank has
    /// left, then frees this rank's memory, which no peer maps any more. Dropping the
    /// world does the same and ignores the errors.
    ///
    /// Errors: this rank's synchronisation error, [`Error::PeerLost`] if a rank did not
    /// leave in time (everything is freed anyway).
    pub fn finalize(mut self) -> Result<()> {
        self.leave()
    }

    fn leave(&mut self) -> Result<()> {
        self.left = true;
        let synced = self
            .backend
            .synchronize()
            .and_then(|()| self.quiet_engine());
        #[cfg(feature = "mpi")]
        if let Some(engine) = &mut self.engine {
            // Once every rank is quiet, no request reaches any proxy any more: the
            // proxies stop and free their windows together.
            let quiet = self
                .bootstrap
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .barrier();
            engine.stop(synced.is_ok() && quiet.is_ok() && self.abort.read().is_none());
        }
        // No kernel of this rank waits any more, and a peer may end once the group has
        // ended: stop watching.
        self.watchdog = None;
        // This rank's work is complete, so it touches no peer's memory any more.
        self.peer_heaps.clear();
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        state.retired.iter_mut().for_each(|r| r.mappings.clear());
        // Every rank leaves only after the same two steps: once all have left, no work
        // of any rank reaches this rank's memory and no peer maps it.
        let left = self
            .bootstrap
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .leave();
        synced.and(left)
    }

    /// All-gathers `mine` over the bootstrap (a host-side collective).
    pub fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut bootstrap = self.bootstrap.lock().unwrap_or_else(|p| p.into_inner());
        self.noting_loss(bootstrap.all_gather(mine))
    }

    pub(crate) fn all_gather_shareable(&self, mine: Shareable) -> Result<Vec<Shareable>> {
        let mut bootstrap = self.bootstrap.lock().unwrap_or_else(|p| p.into_inner());
        self.noting_loss(bootstrap.all_gather_shareable(mine))
    }

    /// Passes on the result of a bootstrap call; a peer it found lost also aborts this
    /// rank's device waits (their kernels finish instead of waiting for it).
    fn noting_loss<R>(&self, result: Result<R>) -> Result<R> {
        if let Err(Error::PeerLost { rank, .. }) = &result {
            self.abort.abort(*rank);
        }
        result
    }

    /// Translated put: `src` (this rank's elements) into rank `to`'s copy of `dst`, with
    /// the backend's launch shape for the size (`symmem_put`; for a rank on another node
    /// `symmem_rma_put`, whose team reaches it through the engine). Nothing tells `to`
    /// that the data arrived: follow with a [`World::barrier`].
    ///
    /// Errors: [`Error::RankOutOfRange`], [`Error::LengthMismatch`] unless `src` and
    /// `dst` have the same length, [`Error::NotAgreed`] before a barrier has confirmed
    /// `dst`'s allocation, and the launch's errors.
    pub fn put<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsSymSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        to: usize,
    ) -> Result<()> {
        let (dst, src) = (dst.as_sym_slice(), src.as_device_slice());
        self.check_rank(to)?;
        same_length(dst.len(), src.len())?;
        let bytes = src.byte_len();
        let (bases, dst, src, grid) = (
            dst.peer_bases(),
            &dst.local().as_bytes(),
            &src.as_bytes(),
            self.backend.grid_for_bytes(bytes),
        );
        let (world, rank) = (self.world_size as u32, self.rank as u32);
        if !self.topology.reaches(to) {
            return self.kernels().launch(
                symmem_kernels::symmem_rma_put,
                grid,
                (dst, src, bases, world, rank, bytes as u64, to as u32),
            );
        }
        self.kernels().launch(
            symmem_kernels::symmem_put,
            grid,
            (dst, src, bytes as u64, bases, world, rank, to as u32),
        )
    }

    /// Translated get: rank `from`'s copy of `src` into `dst` (this rank's elements),
    /// as [`World::put`] (`symmem_get`, or `symmem_rma_get` for a rank on another node).
    /// Rank `from` must have finished writing them.
    ///
    /// Errors: as [`World::put`].
    pub fn get<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsSymSlice<T, B>,
        from: usize,
    ) -> Result<()> {
        let (dst, src) = (dst.as_device_slice(), src.as_sym_slice());
        self.check_rank(from)?;
        same_length(dst.len(), src.len())?;
        let bytes = dst.byte_len();
        let (bases, dst, src, grid) = (
            src.peer_bases(),
            &dst.as_bytes(),
            &src.local().as_bytes(),
            self.backend.grid_for_bytes(bytes),
        );
        let (world, rank) = (self.world_size as u32, self.rank as u32);
        if !self.topology.reaches(from) {
            return self.kernels().launch(
                symmem_kernels::symmem_rma_get,
                grid,
                (dst, src, bases, world, rank, bytes as u64, from as u32),
            );
        }
        self.kernels().launch(
            symmem_kernels::symmem_get,
            grid,
            (dst, src, bytes as u64, bases, world, rank, from as u32),
        )
    }

    /// A direct device copy of `src` into `dst` with no translation (`symmem_copy`, the
    /// baseline translated puts are measured against).
    ///
    /// Errors: [`Error::LengthMismatch`], the launch's errors.
    pub fn copy<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
    ) -> Result<()> {
        let (dst, src) = (dst.as_device_slice(), src.as_device_slice());
        same_length(dst.len(), src.len())?;
        let bytes = dst.byte_len();
        self.kernels().launch(
            symmem_kernels::symmem_copy,
            self.backend.grid_for_bytes(bytes),
            (&dst.as_bytes(), &src.as_bytes(), bytes as u64),
        )
    }

    /// Copies `view` (this rank's memory) to the host, after all work enqueued so far:
    /// one counted synchronisation.
    pub fn read<T: bytemuck::Pod>(&self, view: &impl AsDeviceSlice<T, B>) -> Result<Vec<T>> {
        let view = view.as_device_slice();
        self.check_own(view.world())?;
        self.ready_for("a read")?;
        let mut out = vec![T::zeroed(); view.len()];
        // SAFETY: a view of this world is live memory of this rank holding its elements.
        unsafe {
            self.backend
                .download(bytemuck::cast_slice_mut(&mut out), view.ptr())?
        };
        // The download waited for the device: a wait that gave up is known now.
        self.check_waits()?;
        Ok(out)
    }

    /// Copies rank `rank`'s copy of `view` to the host, read through its mapping in this
    /// address space (one counted synchronisation of this rank; the peer must have
    /// finished writing it, a barrier before).
    ///
    /// Errors: [`Error::RankOutOfRange`].
    pub fn read_peer<T: bytemuck::Pod>(
        &self,
        view: &impl AsSymSlice<T, B>,
        rank: usize,
    ) -> Result<Vec<T>> {
        let view = view.as_sym_slice();
        self.check_own(view.local().world())?;
        let ptr = view.peer_ptr(rank)?;
        let mut out = vec![T::zeroed(); view.len()];
        // SAFETY: every table entry is the object's memory on that rank, mapped in this
        // address space for the object's whole length (the provider contract), and the
        // view lies inside the object.
        unsafe {
            self.backend
                .download(bytemuck::cast_slice_mut(&mut out), ptr)?
        };
        Ok(out)
    }

    /// Copies the device copy of `table` to the host (one counted synchronisation): what
    /// kernels read, to compare with [`PeerBases::entries`].
    pub fn read_table(&self, table: &PeerBases) -> Result<Vec<u64>> {
        if table.world != self.serial {
            return Err(Error::ForeignHandle);
        }
        let mut out = vec![0u64; table.len()];
        // SAFETY: a table of this world is `len` u64s of live device memory.
        unsafe {
            self.backend
                .download(bytemuck::cast_slice_mut(&mut out), table.device)?
        };
        Ok(out)
    }

    /// Enqueues writing `data` into `view` (this rank's memory), from element `at`.
    ///
    /// Errors: [`Error::OutOfBounds`] when `at..at + data.len()` is not inside.
    pub fn write<T: bytemuck::Pod>(
        &self,
        view: &impl AsDeviceSlice<T, B>,
        at: usize,
        data: &[T],
    ) -> Result<()> {
        let view = view.as_device_slice();
        self.check_own(view.world())?;
        self.ready_for("a write")?;
        let range = view.slice(at..at.saturating_add(data.len()))?;
        // SAFETY: the range is inside a live view of this rank's memory.
        unsafe { self.backend.upload(range.ptr(), bytemuck::cast_slice(data)) }
    }

    /// Enqueues setting every byte of `view` (this rank's memory) to zero.
    pub fn fill_zero<T>(&self, view: &impl AsDeviceSlice<T, B>) -> Result<()> {
        let view = view.as_device_slice();
        self.check_own(view.world())?;
        self.ready_for("a fill")?;
        // SAFETY: a live view of this rank's memory.
        unsafe { self.backend.memset(view.ptr(), 0, view.byte_len()) }
    }

    /// [`Error::ForeignHandle`] unless `owner` is this world.
    pub(crate) fn check_own(&self, owner: &World<B>) -> Result<()> {
        if std::ptr::eq(owner, self) {
            Ok(())
        } else {
            Err(Error::ForeignHandle)
        }
    }

    /// Lets go of a buffer given up with [`SymmetricBuffer::into_raw`], as dropping it
    /// would (collective: its memory is reused only after a barrier at which every rank
    /// has let go of it). Errors: `NotAllocated` for a buffer freed already or not of
    /// this world.
    pub fn free_raw(&self, raw: RawSymmetric) -> Result<()> {
        self.retire_allocation(raw.offset, raw.serial, raw.table)
    }
}

impl<B: Backend> Drop for World<B> {
    fn drop(&mut self) {
        if !self.left {
            // Errors are ignored here: `finalize` returns them.
            let _ = self.leave();
        }
    }
}

/// A symmetric buffer given up by [`SymmetricBuffer::into_raw`]: a heap offset and its
/// table slot, to be freed with [`World::free_raw`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawSymmetric {
    serial: u64,
    offset: usize,
    table: u64,
}

/// `len` elements of `T` at the same heap offset on every rank. Dropping it lets go of
/// it; its memory is reused after a barrier at which every rank has (see the module
/// documentation).
pub struct SymmetricBuffer<'w, T, B: Backend> {
    world: &'w World<B>,
    serial: u64,
    id: u64,
    offset: usize,
    len: usize,
    table: PeerBases,
    _t: PhantomData<T>,
}

impl<'w, T, B: Backend> SymmetricBuffer<'w, T, B> {
    /// The world it belongs to.
    pub fn world(&self) -> &'w World<B> {
        self.world
    }
    /// Device address of this rank's copy.
    pub fn ptr(&self) -> u64 {
        self.world.heap.base() + self.offset as u64
    }
    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for zero elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes.
    pub fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }
    /// Offset in the heap, the same on every rank.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// The device-resident peer table.
    pub fn peer_bases(&self) -> &PeerBases {
        &self.table
    }
    /// Its ledger id, the same on every rank whose ledgers agree.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
    /// The whole buffer as a view (this rank's copy and the table).
    pub fn as_slice(&self) -> SymSlice<'_, T, B> {
        SymSlice::new(self.world, self.ptr(), self.len, &self.table)
    }

    /// Elements `range` of the buffer, on every rank. Errors: [`Error::OutOfBounds`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<SymSlice<'_, T, B>> {
        self.as_slice().slice(range)
    }

    /// Gives up ownership without freeing; see [`World::free_raw`].
    pub fn into_raw(self) -> RawSymmetric {
        let raw = RawSymmetric {
            serial: self.serial,
            offset: self.offset,
            table: self.table.device,
        };
        std::mem::forget(self);
        raw
    }
}

impl<T, B: Backend> AsSymSlice<T, B> for SymmetricBuffer<'_, T, B> {
    fn as_sym_slice(&self) -> SymSlice<'_, T, B> {
        self.as_slice()
    }
}

impl<T, B: Backend> PeerBaseProvider for SymmetricBuffer<'_, T, B> {
    fn table(&self) -> &PeerBases {
        &self.table
    }
    fn local_ptr(&self) -> u64 {
        self.ptr()
    }
    fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }
}

impl<T, B: Backend> Drop for SymmetricBuffer<'_, T, B> {
    fn drop(&mut self) {
        self.table.mark_dropped();
        // The offset came from this world's allocator and is let go of once: cannot fail.
        let _ = self
            .world
            .retire_allocation(self.offset, self.serial, self.table.device);
    }
}

/// [`Error::LengthMismatch`] unless `a == b`.
fn same_length(a: usize, b: usize) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(Error::LengthMismatch { dst: a, src: b })
    }
}

/// A device wait that gave up, as its control block recorded it.
#[derive(Clone, Copy, Debug)]
struct Fault {
    status: u64,
    /// The abort, if any, and the rank it names.
    lost: Option<Option<usize>>,
    signal: u64,
    value: u64,
    seen: u64,
}

impl Fault {
    fn error(self) -> Error {
        use symmem_rma::watch::status;
        let peer = status::peer(self.status).map(|p| p as usize);
        let waited = Duration::from_nanos(status::waited_ns(self.status));
        if status::reason(self.status) == symmem_rma::watch::REASON_UNREACHABLE {
            Error::Unreachable {
                peer,
                address: self.signal,
            }
        } else if let Some(lost) = self.lost {
            // The abort names the rank that was lost; the wait that saw it may have waited
            // for another (or no wait was running).
            // (A wait gives up on an abort only after the abort is set, so `lost` is
            // always there when the status says so.)
            Error::PeerLost { rank: lost, waited }
        } else {
            Error::WaitTimedOut {
                peer,
                waited,
                signal: self.signal,
                value: self.value,
                seen: self.seen,
            }
        }
    }
}

/// The memory an engine's ring lives in: its slots and staging bytes (host memory the
/// device reaches), and its ticket counter (a device word).
#[cfg(feature = "mpi")]
type EngineMemory<B> = (<B as Backend>::Shared, <B as Backend>::DeviceMemory);

/// Starts the off-node engine of a world that spans several nodes: its proxy, its ring
/// and the window over `heap`. Returns the engine, the ring's device address and the
/// ring's memory.
///
/// The proxy moves data between kernel memory and the window itself where it can reach
/// kernel memory: always on the CPU backend, and on CUDA when the MPI says it is
/// CUDA-aware ([`crate::engine::mpi_is_cuda_aware`]). Elsewhere data is staged through
/// the ring and applied by the target's proxy ([`Backend::engine_heap`]).
#[cfg(feature = "mpi")]
fn start_engine<B: Backend>(
    bootstrap: &dyn Bootstrap,
    backend: &B,
    heap: &B::Heap,
    abort: AbortWord,
) -> Result<(crate::engine::Engine, u64, EngineMemory<B>)> {
    use crate::backend::BackendKind;
    let mpi = bootstrap.mpi().ok_or(Error::NoEngine(
        "the off-node engine needs the MPI bootstrap (ranks started by mpirun)",
    ))?;
    if !mpi.thread_multiple {
        return Err(Error::MpiThreadLevel {
            required: "MPI_THREAD_MULTIPLE",
            provided: mpi.provided,
        });
    }
    let heap_access = backend.engine_heap(heap)?;
    let direct = match backend.kind() {
        BackendKind::Cpu => true,
        BackendKind::Cuda => crate::engine::mpi_is_cuda_aware(),
        _ => false,
    };
    let region = backend.alloc_shared(crate::engine::ring_bytes())?;
    let tickets = backend.alloc_device(size_of::<u64>())?;
    // SAFETY: the fresh 8-byte allocation; kernels launched later on this rank's stream
    // see the zero.
    unsafe { backend.memset(tickets.base(), 0, size_of::<u64>())? };
    let (engine, ring) = crate::engine::Engine::start(crate::engine::Start {
        comm: mpi.comm,
        region: &region,
        tickets: tickets.base(),
        heap_device: heap.base(),
        heap_len: heap.len(),
        heap: heap_access,
        // Where the window exposes the heap: the kernels' own address (host memory on
        // the CPU backend, device memory under a CUDA-aware MPI).
        direct: direct.then(|| std::ptr::with_exposed_provenance_mut(heap.base() as usize)),
        kernels_on_host: backend.kind() == BackendKind::Cpu,
        abort,
    })?;
    Ok((engine, ring, (region, tickets)))
}
