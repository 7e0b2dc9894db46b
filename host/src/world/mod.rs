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
//! every rank. Dropping the world's last handle (or [`World::finalize`]) is the last barrier: it
//! waits for this rank's device, unmaps its peers' memory, waits for every rank to do
//! the same, and frees, so nothing leaks and nothing is freed under a peer's mapping.

mod agree;
mod faults;
mod gate;

pub(crate) use agree::Call;
mod heap;
mod off_node;
pub(crate) use heap::Registration;

use crate::backend::code_objects::{KERNELS, KERNELS_ON_NODE, Loaded};
use crate::backend::{Backend, DeviceRegion, Sender, Shareable, SharedRegion};
use crate::bootstrap::Bootstrap;
use crate::control::{AbortWord, Causes, DepartedMask, Departures};
use crate::error::{Error, Result};
use crate::liveness::{Departure, Watchdog};
use crate::offset_alloc::MIN_ALIGN;
use crate::table::{DeviceTable, PeerBases};
use crate::topology::Topology;
use crate::transport::{EnginePath, Link, OffNode};
use faults::Fault;
use gate::LaunchGate;
use heap::HeapState;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use symmem_rma::watch::Control;

/// How a world is made.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use symmem::Config;
///
/// let config = Config {
///     heap_bytes: 256 << 20,                     // 256 MiB of symmetric heap per rank
///     wait_deadline: Duration::from_secs(30),    // a stall fails in 30 s, not 10 minutes
///     ..Config::default()
/// };
/// # let _ = config;
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    /// Bytes of symmetric heap per rank; the same on every rank. Default 64 MiB. Rounded
    /// up to the backend's allocation granularity (the driver's on CUDA: 2 MiB on current
    /// GPUs), and with the NVSHMEM
    /// off-node transport to NVSHMEM's heap granularity (512 MiB unless
    /// `NVSHMEM_CUMEM_GRANULARITY` says otherwise); the size chosen is logged.
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
    /// Which transport carries requests to peers on other nodes (see
    /// [`crate::transport`]); the same on every rank. `None` (the default): the
    /// environment variable [`ENV_OFF_NODE`](crate::transport::ENV_OFF_NODE) if set,
    /// else the bootstrap's own ([`OffNode::Bootstrap`](crate::transport::OffNode)).
    pub off_node: Option<crate::transport::OffNode>,
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
            off_node: None,
        }
    }
}

/// One rank's world.
///
/// # Examples
/// ```
/// use symmem::{Config, backend::cpu::Cpu};
/// let sizes = symmem::spawn_ranks(3, &Config::default(), |_| Ok(Cpu::new()), |world| {
///     let (buffer, bases) = world.allocate_symmetric::<u64>(16)?;
///     assert_eq!(bases.entries()[world.rank()], buffer.ptr()); // the table's invariant
///     world.barrier()?; // every rank has allocated: peers may now reach `buffer`
///     Ok(world.world_size())
/// })
/// .unwrap();
/// assert!(sizes.into_iter().all(|size| size.unwrap() == 3));
/// ```
///
/// A `World` is a handle: cloning it is cheap (a reference count), every clone is the
/// same rank's world, and every handle made from it (buffers, collectives, modules,
/// graphs, providers) holds one, so a model layer can keep them in a struct of its own.
/// The world leaves its group (a collective step: see [`World::finalize`]) when the
/// last of them is dropped. `Send` and `Sync` where the backend is.
pub struct World<B: Backend> {
    pub(crate) shared: Arc<Shared<B>>,
}

impl<B: Backend> Clone for World<B> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// What every handle of one rank's world shares.
pub(crate) struct Shared<B: Backend> {
    /// The off-node transport (see [`crate::transport`]), when the world spans several
    /// nodes; stopped when the world leaves, before the heap it reaches is freed.
    transport: Option<Box<dyn Link>>,
    /// Unique in this process: handles name their world by it.
    serial: u64,
    /// symmem's own kernels (`symmem-kernels`), loaded like any kernel crate.
    kernels: Arc<Loaded<B>>,
    /// Kernel crates loaded with [`World::load`], kept while the world lives.
    modules: Mutex<Vec<Arc<Loaded<B>>>>,
    /// Watches peer processes and departures on this machine (see [`crate::liveness`]),
    /// and tells the peers when this rank leaves; stopped when the world leaves, and
    /// declared before `control`, whose abort word and departed bitmask it writes.
    watchdog: Option<Watchdog>,
    /// The abort word of `control`.
    abort: AbortWord,
    /// The departed-peer bitmasks after `control`.
    departures: Departures,
    /// This rank's control block of bounded device waits (`symmem_rma::watch`).
    control: B::Shared,
    /// The first failed device wait, once seen: the world is poisoned by it.
    fault: Mutex<Option<Fault>>,
    rank: usize,
    world_size: usize,
    /// Which peers this rank reaches with loads and stores.
    topology: Topology,
    /// See [`World::shares_address_space`].
    shares_address_space: bool,
    /// Who each rank is, as the bootstrap verified it (see [`World::sender`]).
    senders: Vec<Sender>,
    /// The launch gate of ranks that share a device context (see [`World::collectively`]);
    /// `None` where they do not.
    gate: Option<LaunchGate>,
    /// Set when a capture records a [`World::collectively`] step: its graph's replays
    /// pass the gate.
    pub(crate) captured_collective: AtomicBool,
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
/// memory that was reused. And the frees a rank sharing its device with ranks of this
/// process defers (`deferred`, see [`World::barrier`]).
pub(crate) struct Pins<B: Backend> {
    pub(crate) graphs: usize,
    pub(crate) kept: Vec<B::DeviceMemory>,
    pub(crate) deferred: Vec<B::DeviceMemory>,
    /// The application's memory that registrations let go of, deferred as `deferred`
    /// (its owner's drop frees it).
    pub(crate) deferred_kept: Vec<Box<dyn std::any::Any + Send>>,
    /// Frees wait for the device and a peer is a rank of this process: freeing now
    /// could wait for a peer's kernel that waits for this rank.
    pub(crate) defer_frees: bool,
}

impl<B: Backend> World<B> {
    /// Forms a world collectively: every rank of `bootstrap` calls this with the same
    /// `config`. Creates this rank's heap, exchanges handles, maps every peer's heap at
    /// an address of its own and uploads the heap-base table.
    ///
    /// # Errors
    /// Every rank gets the same error where the cause is collective (a rank that differs
    /// is named):
    /// * [`Error::ZeroSize`]: `heap_bytes` is 0; [`Error::HeapSizeMismatch`]: ranks ask
    ///   for different heaps;
    /// * [`Error::BadEnv`], [`Error::BadConfig`], [`Error::NodeSplitMismatch`]: the node
    ///   split ([`Config::ranks_per_node`], `SYMMEM_RANKS_PER_NODE`) is unreadable or
    ///   differs between ranks; [`Error::OffNodeMismatch`]: ranks chose different
    ///   off-node transports;
    /// * [`Error::PeerLost`]: a rank did not take part within [`Config::timeout`];
    ///   [`Error::BadMessage`]: a rank sent something malformed;
    /// * [`Error::BadPeerMemory`]: a peer's heap export is not what it claims (its size,
    ///   its sender);
    /// * [`Error::NoCodeObject`]: symmem's kernels were built for none of this GPU's
    ///   processors ([`Error::LibraryMissing`], [`Error::Driver`]: the runtime's own);
    /// * across nodes: [`Error::NoEngine`] (the transport cannot serve this backend),
    ///   [`Error::NvshmemUnavailable`], [`Error::NvshmemFailed`] and
    ///   [`Error::NvshmemHeapGranularity`] (the NVSHMEM transport).
    ///
    /// The backend's own limits come when it is made (`Cuda::new`: a missing device,
    /// more ranks on one GPU than it has hardware queues).
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
        // Who each rank is, as the bootstrap verified it: an export that names this
        // process is believed only from a rank verified to be a thread of it.
        let verified = bootstrap.verified_pids()?;
        let senders: Vec<Sender> = verified.iter().map(|&pid| Sender::verified(pid)).collect();
        // Agreed before the heap exists: NVSHMEM's registration sizes it.
        let off_node = if topology.nodes() > 1 {
            Some(off_node::agree(&mut *bootstrap, config.off_node)?)
        } else {
            None
        };
        let granule = off_node::heap_granule(
            backend.heap_granularity().max(MIN_ALIGN),
            off_node,
            backend.kind(),
        );
        let heap_len = config.heap_bytes.div_ceil(granule) * granule;
        if heap_len != config.heap_bytes {
            tracing::info!(
                rank,
                asked = config.heap_bytes,
                heap_bytes = heap_len,
                granule,
                transport = off_node.map(OffNode::name),
                "the heap is rounded up to whole units of the backend's (and the off-node \
                 transport's) allocation granularity"
            );
        }
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
                let mapping = backend.import_heap(handle, heap_len, senders[peer])?;
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
        let heap_bases_memory = backend.alloc_device(DeviceTable::bytes(world_size))?;
        let table = DeviceTable::words(rank, &bases);
        // SAFETY: the allocation just made holds the header and `world_size` u64s.
        unsafe { backend.upload(heap_bases_memory.base(), bytemuck::cast_slice(&table))? };
        let serial = heap::next_serial();
        let entries_at = DeviceTable::entries_at(heap_bases_memory.base());
        let heap_bases = PeerBases::new(entries_at, bases.into(), serial, None);
        // The control block, then its departed-peer bitmask (read by the device), then
        // the host's bitmask of the peers that left healthy and its table of the causes
        // the peers that left failed named.
        let mask_bytes = DepartedMask::bytes(world_size);
        let control = backend
            .alloc_shared(size_of::<Control>() + 2 * mask_bytes + Causes::bytes(world_size))?;
        let deadline = u64::try_from(config.wait_deadline.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: a fresh zeroed block of `Control`'s size and the bitmask's, aligned
        // (page-locked or 64-aligned allocations), that no kernel reads yet.
        unsafe {
            let block = control.host_ptr().cast::<Control>();
            (*block).deadline_ns = deadline;
            (*block).departed = control.device_ptr() + size_of::<Control>() as u64;
            (*block).ranks = world_size as u64;
        }
        // SAFETY: the block's first word, 8-aligned; `control` outlives the watchdog (the
        // field order of `Shared`, and `leave` stops it first), and words are accessed
        // atomically.
        let abort =
            unsafe { AbortWord::new(&raw mut (*control.host_ptr().cast::<Control>()).abort) };
        // SAFETY: the two bitmasks and the table after the block, 8-aligned (`Control`
        // and the bitmasks are whole numbers of words), zeroed, living as long as
        // `control` (as the abort word), accessed atomically.
        let departures = unsafe {
            let masks = control.host_ptr().add(size_of::<Control>());
            Departures {
                all: DepartedMask::new(masks.cast(), world_size),
                healthy: DepartedMask::new(masks.add(mask_bytes).cast(), world_size),
                causes: Causes::new(masks.add(2 * mask_bytes).cast(), world_size),
            }
        };
        let watchdog = Watchdog::start(&mut *bootstrap, verified, abort, departures)?;
        let backend_defers_frees = backend.syncs_wait_for_the_device()
            && watchdog.as_ref().is_some_and(Watchdog::peer_in_process);
        let shares_address_space = agree_shared_address_space(
            &mut *bootstrap,
            backend.device_ordinal(),
            watchdog.as_ref().is_none_or(Watchdog::all_in_process),
        )?;
        let gate = join_gate(
            &mut *bootstrap,
            &backend,
            shares_address_space,
            serial,
            config,
        )?;
        let transport = if let Some(choice) = off_node {
            let link = off_node::start(&mut *bootstrap, &backend, &heap, abort, choice, &topology)?;
            // SAFETY: the live control block's word, before any launch.
            unsafe { (*control.host_ptr().cast::<Control>()).ring = link.device_handle() };
            Some(link)
        } else {
            None
        };
        // Loaded once the transport runs: its kernels get its ring or NVSHMEM's alias
        // (`Backend::watch`).
        let objects = match &transport {
            None => &KERNELS_ON_NODE,
            Some(link) if link.nvshmem_heap().is_some() => nvshmem_kernels()?,
            Some(_) => &KERNELS,
        };
        let kernels = Loaded::new(&backend, objects, &control, module_transport(&transport))?;
        // The driver's first compile of the kernels (PTX with a cold cache: tens of
        // seconds for the on-node build, in turn for ranks that share one GPU's context)
        // may keep a rank far longer than the bootstrap's timeout: peers wait for it as
        // for any slow rank, up to the world's wait deadline.
        bootstrap.barrier_within(config.wait_deadline)?;
        tracing::info!(
            rank,
            world_size,
            backend = backend.kind().name(),
            device = %backend.device_name(),
            arch = backend.device_arch().as_deref().unwrap_or("host"),
            nodes = topology.nodes(),
            node = topology.node_of(rank).unwrap_or(0),
            ranks_on_node = topology.node_ranks().len(),
            engine = ?transport.as_ref().map(|t| t.path()),
            heap_bytes = heap_len,
            "symmem world formed"
        );
        Ok(Self {
            shared: Arc::new(Shared {
                transport,
                serial,
                kernels,
                modules: Mutex::new(Vec::new()),
                watchdog,
                abort,
                departures,
                control,
                fault: Mutex::new(None),
                rank,
                world_size,
                topology,
                shares_address_space,
                senders,
                gate,
                captured_collective: AtomicBool::new(false),
                backend,
                bootstrap: Mutex::new(bootstrap),
                heap,
                peer_heaps,
                heap_bases,
                max_align,
                _heap_bases_memory: heap_bases_memory,
                state: Mutex::new(HeapState::new(heap_len)),
                left: false,
                capturing: AtomicBool::new(false),
                pins: Mutex::new(Pins {
                    graphs: 0,
                    kept: Vec::new(),
                    deferred: Vec::new(),
                    deferred_kept: Vec::new(),
                    defer_frees: backend_defers_frees,
                }),
            }),
        })
    }

    /// Whether every rank's kernels dereference every rank's device memory at the
    /// address its owner uses: the ranks are threads of this process (verified, not
    /// claimed) on one device (one GPU, whose primary context they share, or the CPU
    /// backend's one address space). Then the collectives reach the application's own
    /// memory on peers without staging it (a kernel exchanges the addresses), as
    /// registered memory is. The same on every rank.
    pub fn shares_address_space(&self) -> bool {
        self.shared.shares_address_space
    }

    /// Whether this world's collectives launch their kernels together (its ranks share
    /// a device context: threads of this process on one GPU; see
    /// [`World::collectively`]). The same on every rank.
    pub fn launches_together(&self) -> bool {
        self.shared.gate.is_some()
    }

    /// Who rank `rank` is, as the bootstrap verified it: what an import of its exports
    /// believes ([`Sender`]).
    pub(crate) fn sender(&self, rank: usize) -> Sender {
        self.shared
            .senders
            .get(rank)
            .copied()
            .unwrap_or(Sender::Elsewhere)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.shared.rank
    }

    /// Ranks in the world.
    pub fn world_size(&self) -> usize {
        self.shared.world_size
    }

    /// Which ranks share this rank's node (see [`crate::topology`]).
    pub fn topology(&self) -> &Topology {
        &self.shared.topology
    }

    /// How this rank's off-node engine moves data; `None` where the world runs no engine
    /// (it is on one node).
    pub fn engine_path(&self) -> Option<EnginePath> {
        self.shared.transport.as_ref().map(|t| t.path())
    }

    /// This rank's backend.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// Bytes of symmetric heap per rank.
    pub fn heap_len(&self) -> usize {
        self.shared.heap.len()
    }

    /// The device-resident heap-base table: entry `r` is rank `r`'s heap as mapped here.
    pub fn heap_bases(&self) -> &PeerBases {
        &self.shared.heap_bases
    }

    /// Free bytes left in this rank's heap.
    pub fn heap_free(&self) -> usize {
        self.lock_state().allocator.free_bytes()
    }

    /// Device address of this rank's heap.
    pub(crate) fn heap_base(&self) -> u64 {
        self.shared.heap.base()
    }
    /// The largest alignment every heap base has: what an allocation may ask for.
    pub(crate) fn max_align(&self) -> usize {
        self.shared.max_align
    }
    /// symmem's own kernels, as loaded for this world.
    pub(crate) fn own_kernels(&self) -> &Arc<Loaded<B>> {
        &self.shared.kernels
    }
    /// Kernel crates loaded with `World::load`.
    pub(crate) fn loaded_modules(&self) -> &Mutex<Vec<Arc<Loaded<B>>>> {
        &self.shared.modules
    }
    /// This rank's control block of bounded device waits.
    pub(crate) fn control(&self) -> &B::Shared {
        &self.shared.control
    }
    /// The off-node transport, as what loaded modules are set up for.
    pub(crate) fn module_transport(&self) -> Option<&dyn crate::backend::ModuleTransport> {
        module_transport(&self.shared.transport)
    }

    /// [`Error::RankOutOfRange`] unless `rank` is a rank of this world (kernels reach a
    /// peer on another node through the engine).
    pub(crate) fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.shared.world_size {
            Err(Error::RankOutOfRange {
                rank,
                world: self.shared.world_size,
            })
        } else {
            Ok(())
        }
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
        if self.shared.capturing.load(Ordering::Acquire) {
            Err(Error::Capturing { call })
        } else {
            Ok(())
        }
    }

    pub(crate) fn lock_pins(&self) -> MutexGuard<'_, Pins<B>> {
        self.shared.lock_pins()
    }

    /// Frees what [`World::free_device_memory`] deferred (see [`Shared::free_deferred`]).
    fn free_deferred(&self) {
        self.shared.free_deferred();
    }

    /// Frees `memory` of a dropped [`DeviceBuffer`], or keeps it while a graph lives.
    ///
    /// First, where an off-node transport may still hold a request naming it (a kernel
    /// whose wait gave up returns without waiting for its requests), the world's device
    /// waits are checked: a poisoned world's transport starts none of this rank's
    /// requests again ([`Link::disown`]). Where the transport reaches device memory and
    /// kernels run on the device, the device is synchronised first, so a kernel still
    /// running has ended (and recorded its wait) before the check.
    pub(crate) fn free_device_memory(&self, memory: B::DeviceMemory) {
        if let Some(transport) = &self.shared.transport {
            if transport.path() == EnginePath::Window && !self.shared.backend.kernels_on_host() {
                // Its error is the device's, reported by the next call that synchronises.
                let _ = self.shared.backend.synchronize();
            }
            // Its error is reported by the next call; here it only disowns.
            let _ = self.check_waits();
        }
        let mut pins = self.lock_pins();
        if pins.graphs > 0 {
            pins.kept.push(memory);
        } else if pins.defer_frees {
            // Found on the H200 (`waits_leave`): a thread-rank that returned early froze
            // in `cuMemFree` of its buffers, waiting for its peers' kernels, which waited
            // for its departure, announced only after.
            pins.deferred.push(memory);
        } else {
            drop(pins);
            drop(memory);
        }
    }

    /// Unique in this process: what handles name their world by.
    pub(crate) fn serial(&self) -> u64 {
        self.shared.serial
    }

    /// [`Error::ForeignHandle`] unless `owner` is this world (a handle of it).
    pub(crate) fn check_own(&self, owner: &World<B>) -> Result<()> {
        if Arc::ptr_eq(&owner.shared, &self.shared) {
            Ok(())
        } else {
            Err(Error::ForeignHandle)
        }
    }

    /// Collective: waits until this rank's enqueued work has completed (one counted
    /// synchronisation), then for every rank, checking that every rank made the same
    /// collective calls; then releases what every rank has dropped (see the module
    /// documentation). On return, everything every rank enqueued before is complete.
    ///
    /// Where ranks of this process share a GPU, the device buffers this rank dropped
    /// since the last barrier are freed here, once its own work is complete: freeing
    /// waits for every kernel on the device, a peer's waiting collective included, so it
    /// is deferred to where no peer waits for this rank (and to its departure).
    ///
    /// # Errors
    /// [`Error::CollectiveMismatch`] naming the ranks that differ from the
    /// majority (every rank gets it, and the world refuses symmetric operations from
    /// then on), [`Error::PeerFailed`] if another rank's device failed, [`Error::PeerLost`],
    /// and this rank's synchronisation error. Nothing is released on an error.
    pub fn barrier(&self) -> Result<()> {
        self.not_capturing("a barrier")?;
        let synced = self
            .shared
            .backend
            .synchronize()
            .and_then(|()| self.quiet_transport());
        if synced.is_ok() {
            // This rank's work is complete and no peer is past this barrier, so no peer's
            // kernel waits for this rank: a free that waits for the device ends.
            self.free_deferred();
        }
        // The agreement also checks the device waits, now that the device is done.
        let agreed = self.agree(Call::Barrier, &[], synced.is_err(), synced.is_ok());
        synced.and(agreed)
    }

    /// The last barrier, with its errors: waits for this rank's device, unmaps every
    /// peer's memory, leaves the group (a peer still waiting for this rank in a
    /// collective gets [`Error::PeerLost`] naming it) and waits until every rank has
    /// left, then frees this rank's memory, which no peer maps any more. Dropping the
    /// last handle of the world (this `World`, its clones, the buffers and other handles
    /// made from it) does the same and ignores the errors.
    ///
    /// # Errors
    /// [`Error::WorldInUse`] while other handles of the world are alive (nothing
    /// is done: the world leaves with the last of them); this rank's synchronisation
    /// error, [`Error::PeerLost`] if a rank did not
    /// leave in time (everything is freed anyway), [`Error::Teardown`] if runtime calls
    /// failed while this rank's memory, modules and backend were released (the backend's
    /// [`Backend::drop_record`]).
    pub fn finalize(self) -> Result<()> {
        let mut shared = Arc::try_unwrap(self.shared).map_err(|shared| Error::WorldInUse {
            rank: shared.rank,
            others: Arc::strong_count(&shared) - 1,
        })?;
        let rank = shared.rank;
        let record = shared.backend.drop_record();
        let before = record.as_ref().map_or(0, |r| r.count());
        let left = shared.leave();
        // Everything the world holds goes now, the backend included.
        drop(shared);
        let failed = record.map(|r| (r.count() - before, r.last()));
        left?;
        match failed {
            Some((failures @ 1.., last)) => Err(Error::Teardown {
                rank,
                failures,
                last: last.unwrap_or_default(),
            }),
            _ => Ok(()),
        }
    }

    /// All-gathers `mine` over the bootstrap (a host-side collective).
    pub fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut bootstrap = self
            .shared
            .bootstrap
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.noting_loss(bootstrap.all_gather(mine))
    }

    pub(crate) fn all_gather_shareable(&self, mine: Shareable) -> Result<Vec<Shareable>> {
        let mut bootstrap = self
            .shared
            .bootstrap
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.noting_loss(bootstrap.all_gather_shareable(mine))
    }

    /// Passes on the result of a bootstrap call; a peer it found lost also aborts this
    /// rank's device waits (their kernels finish instead of waiting for it).
    fn noting_loss<R>(&self, result: Result<R>) -> Result<R> {
        if let Err(Error::PeerLost { rank, waited }) = &result {
            tracing::error!(
                rank = self.shared.rank,
                lost = ?rank,
                waited_ms = waited.as_millis() as u64,
                "a peer was lost: this rank's device waits are aborted"
            );
            self.shared.abort.abort(*rank);
        }
        result
    }
}

impl<B: Backend> Drop for Shared<B> {
    fn drop(&mut self) {
        if !self.left {
            // Errors are ignored here: `finalize` returns them.
            let _ = self.leave();
        }
    }
}

impl<B: Backend> Shared<B> {
    pub(crate) fn lock_pins(&self) -> MutexGuard<'_, Pins<B>> {
        self.pins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Frees what [`World::free_device_memory`] deferred: at a point where no peer's
    /// kernel waits for this rank (inside a barrier, or after the departure).
    fn free_deferred(&self) {
        let (deferred, kept) = {
            let mut pins = self.lock_pins();
            (
                std::mem::take(&mut pins.deferred),
                std::mem::take(&mut pins.deferred_kept),
            )
        };
        if !deferred.is_empty() || !kept.is_empty() {
            tracing::debug!(
                rank = self.rank,
                count = deferred.len() + kept.len(),
                "freeing deferred device memory"
            );
        }
        drop(deferred);
        drop(kept);
    }

    fn leave(&mut self) -> Result<()> {
        self.left = true;
        let synced = self
            .backend
            .synchronize()
            .and_then(|()| self.quiet_transport());
        // This rank's device work is complete (or failed): its peers' waits on it end now
        // instead of at their deadline. A rank whose thread panicked is lost to them.
        let waits = self.check_waits();
        let panicking = std::thread::panicking();
        if let Some(watchdog) = &self.watchdog {
            let how = if panicking {
                Departure::Lost
            } else if synced.is_err() || waits.is_err() {
                // The rank found lost or gone, where that is what failed this one: the
                // peers that find this rank gone name it.
                let cause = [&waits, &synced].into_iter().find_map(|r| match r {
                    Err(Error::PeerLost { rank, .. }) => *rank,
                    _ => None,
                });
                Departure::Failed { cause }
            } else {
                Departure::Left
            };
            tracing::debug!(rank = self.rank, ?how, "leaving: telling the peers");
            watchdog.announce(how);
        }
        // The peers' waits on this rank end now.
        self.free_deferred();
        // A loss this rank learned from its device waits or its watchdog, not from the
        // bootstrap: the ranks that find this one gone name that rank, not this one. A
        // rank whose thread panicked is the loss itself: its group ends naming it (the
        // processes soak found a panicking UNIX-socket hub, still serving the group from
        // this `leave`, naming a survivor that had stopped because of it).
        let lost = match waits {
            _ if panicking => Some(self.rank),
            Err(Error::PeerLost {
                rank: Some(lost), ..
            }) => Some(lost),
            _ => None,
        };
        if let Some(lost) = lost {
            self.bootstrap
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .note_lost(lost);
        }
        if let Some(transport) = &mut self.transport {
            // Once every rank is quiet, no request reaches any peer's transport any more:
            // the transports stop and free what they share together.
            let quiet = self
                .bootstrap
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .barrier();
            transport.stop(synced.is_ok() && quiet.is_ok() && self.abort.read().is_none());
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
}

/// [`World::shares_address_space`], agreed: every rank's view (`in_process`: its peers
/// are all threads of its process; `ordinal`: its device) is gathered, so every rank
/// answers alike, yes only where all are in one process on one device.
///
/// # Errors
/// The bootstrap's.
fn agree_shared_address_space(
    bootstrap: &mut dyn Bootstrap,
    ordinal: Option<usize>,
    in_process: bool,
) -> Result<bool> {
    let mut mine = vec![u8::from(in_process)];
    mine.extend_from_slice(&ordinal.map_or(u64::MAX, |o| o as u64).to_le_bytes());
    let all = bootstrap.all_gather(&mine)?;
    let shared = all
        .iter()
        .all(|view| view.first() == Some(&1) && view[1..] == mine[1..]);
    tracing::debug!(
        rank = bootstrap.rank(),
        in_process,
        ?ordinal,
        shared,
        "ranks share one address space and device"
    );
    Ok(shared)
}

/// The launch gate ([`World::collectively`]) where the ranks share a device context
/// (`shares_address_space` on a backend whose synchronising calls wait for the device:
/// threads of this process on one GPU), joined under rank 0's `serial`; `None`
/// elsewhere. Says which, and why, in the log.
fn join_gate<B: Backend>(
    bootstrap: &mut dyn Bootstrap,
    backend: &B,
    shares_address_space: bool,
    serial: u64,
    config: &Config,
) -> Result<Option<LaunchGate>> {
    let (rank, world) = (bootstrap.rank(), bootstrap.world_size());
    if !(shares_address_space && world > 1 && backend.syncs_wait_for_the_device()) {
        return Ok(None);
    }
    let serials = bootstrap.all_gather(&serial.to_le_bytes())?;
    let key = serials[0]
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or(Error::BadMessage {
            from: Some(0),
            what: "world serial (not 8 bytes)",
        })?;
    tracing::info!(
        rank,
        world,
        lazy_loading = ?backend.loads_kernels_lazily(),
        "the ranks share one device context: every collective launches its kernels \
         together (no rank before every rank has reached the call, none returning before \
         every rank has launched), so a rank's synchronising driver call (a kernel's \
         first, lazy load; a context synchronisation; a free) never waits for a peer's \
         kernel that waits for it"
    );
    Ok(Some(LaunchGate::join(
        key,
        rank,
        world,
        config.wait_deadline,
    )))
}

/// `transport` as what each loaded module is set up for.
fn module_transport(
    transport: &Option<Box<dyn Link>>,
) -> Option<&dyn crate::backend::ModuleTransport> {
    transport
        .as_deref()
        .map(|t| t as &dyn crate::backend::ModuleTransport)
}

/// symmem's kernels built with NVSHMEM's device library, for a world whose transport is
/// NVSHMEM.
///
/// # Errors
/// [`Error::NoEngine`] where symmem was built without its `nvshmem` feature.
fn nvshmem_kernels() -> Result<&'static crate::backend::CodeObjects> {
    #[cfg(feature = "nvshmem")]
    let kernels = Ok(&crate::backend::code_objects::KERNELS_NVSHMEM);
    #[cfg(not(feature = "nvshmem"))]
    let kernels = Err(Error::NoEngine(
        "symmem was built without its `nvshmem` feature, so its kernels cannot call \
         NVSHMEM: build with --features nvshmem (and NVSHMEM_HOME set), or use the \
         bootstrap's transport (SYMMEM_OFF_NODE=bootstrap)",
    ));
    kernels
}
