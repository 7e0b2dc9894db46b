//! Host calls of the device collectives and RMA kernels: each enqueues one kernel of
//! `symmem_rma` on this rank's device.
//!
//! A [`Collectives`] handle is made collectively from a [`World`]: it allocates a
//! symmetric signal array of [`signal_words`]`(world, blocks)` `u64`s for its launch
//! shape ([`Collectives::grid`]), which every collective it launches reuses (the
//! counters only grow). Then, as with NCCL:
//!
//! * **collective calls** ([`Collectives::barrier`], [`Collectives::all_gather`],
//!   [`Collectives::all_to_all`], [`Collectives::broadcast`],
//!   [`Collectives::all_reduce`], [`Collectives::reduce_scatter`]) must be made by every
//!   rank, in the same order, with the same counts (and root, operator, algorithm).
//!   The kernels synchronise with each other through the signal array (a device-side
//!   barrier on entry and on exit), so no [`World::barrier`] is needed around them: on
//!   a GPU each call returns once enqueued, and the result is complete when this rank's
//!   stream reaches the end of the kernel;
//! * **one-sided calls** ([`Collectives::put`], [`Collectives::get`],
//!   [`Collectives::put_with_signal`], [`Collectives::signal_wait_until`],
//!   [`Collectives::atomic_add_all`]) involve only the calling rank's launch.
//!
//! ## Which buffers must be symmetric
//! The kernels translate symmetric addresses through the world's heap-base table, so a
//! "symmetric" argument is a [`SymmetricBuffer`] of this world's heap (checked: one
//! outside it is [`Error::NotSymmetric`]). A "local" argument is any typed view of this
//! rank's memory ([`AsDeviceSlice`]: a [`crate::DeviceBuffer`], a symmetric buffer, a
//! slice of either); its length is checked too.
//!
//! | call              | symmetric              | local            |
//! |-------------------|------------------------|------------------|
//! | `all_gather`      | `dst` (`world*count`)  | `src` (`count`)  |
//! | `all_to_all`      | `dst` (`world*count`)  | `src` (`world*count`) |
//! | `broadcast`       | `src` (`count`, read on `root`) | `dst` (`count`) |
//! | `all_reduce`      | `src` and `dst` (`count`; two-shot writes peers' `dst`, one-shot reads peers' `src`) | |
//! | `reduce_scatter`  | `src` (`world*count`)  | `dst` (`count`)  |
//! | `put`, `put_with_signal` | `dst`, the signal | `src`      |
//! | `get`             | `src`                  | `dst`            |
//!
//! Sources and destinations must not overlap. A rank's source must stay unchanged,
//! and its destination untouched by anyone else, until its kernel has finished.
//!
//! ## Launch shape and residency
//! Every kernel runs with the handle's grid ([`Collectives::grid`], the same on every
//! rank: ranks that disagree on the block count allocate signal arrays of different
//! sizes, which the handle's creation reports as [`Error::CollectiveMismatch`]). A
//! block of one rank waits for the same block of every other rank, so **all ranks'
//! blocks must be resident on their devices at once**. With several ranks on one GPU
//! that means `world * blocks` blocks at the same time: keep `blocks` small (the GPU
//! default is 8 blocks of 256 threads), give each rank's stream its own hardware queue
//! (`CUDA_DEVICE_MAX_CONNECTIONS` at least the number of live streams: symmem sets it when
//! it is unset, and refuses more ranks than queues with
//! [`Error::HardwareQueues`]), and do not run
//! several worlds' collectives on one GPU concurrently. Otherwise a waiting block can
//! hold back the peer it waits for, and the kernels never finish. (Lazy kernel loading
//! is the same trap: a load may wait for running kernels, so every kernel of a module
//! is loaded when the module is.)
//! Driver calls that wait for the whole device are the same trap again: with ranks as
//! threads on one GPU, allocate and free plain device memory only between host
//! barriers, never while a peer may be waiting in a collective (see the CUDA backend's
//! documentation; symmetric buffers are safe, their frees make no driver call).
//! Ranks as *processes* sharing a GPU are correct but slow: each process has its own
//! context, the GPU time-slices between contexts, and a kernel waiting for a peer in
//! another context waits out a slice (about 4.5 ms per collective, measured on an H200).
//! Put ranks that share a GPU in one process (threads), or give each process its own GPU.
//!
//! ## Lifetime
//! Dropping a handle frees its signal array (a collective free) without waiting for the
//! device, like any symmetric buffer; [`Collectives::finalize`] waits for this rank's
//! enqueued work first.

use crate::backend::{Backend, Grid};
use crate::error::{Error, LamportRefusal, Result};
use crate::memory::SymmetricBuffer;
use crate::memory::{AsDeviceSlice, DeviceBuffer, DeviceSlice};
use crate::world::World;
use symmem_device::Kernel;
use symmem_rma::lamport;

pub use symmem_rma::collectives::{ReduceOp, signal_words};
pub use symmem_rma::{Cmp, bf16, f16};

/// The kind of a collective call, the first word of what the world's ledger records of it.
#[derive(Clone, Copy)]
enum Call {
    Barrier = 1,
    AllGather = 2,
    AllToAll = 3,
    Broadcast = 4,
    AllReduce = 5,
    ReduceScatter = 6,
}

/// A word naming element type `T` (its name hashed), so calls over different element
/// types of one size differ in the ledger.
fn element<T>() -> u64 {
    crate::ledger::name_word(std::any::type_name::<T>())
}

/// The most blocks a [`Collectives`] grid may have (the signal array holds `world` words
/// per block: 64 KiB at 8 ranks). Enough for several blocks per SM of any current GPU
/// when each rank has its own; ranks sharing a GPU must also keep all their blocks
/// resident at once (see the module documentation).
pub const MAX_BLOCKS: u32 = 1024;

/// Which all-reduce kernel to run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Chosen by size, op and type: [`Algorithm::Lamport`] for sums of `f32`, [`bf16`] or
    /// [`f16`](struct@f16) of
    /// at most [`LAMPORT_AUTO_BYTES`] (and the handle's capacity), [`Algorithm::OneShot`]
    /// up to [`ONE_SHOT_MAX_BYTES`], [`Algorithm::TwoShot`] above (thresholds measured on
    /// the H200: `BENCHMARKS.md`, issue 16).
    #[default]
    Auto,
    /// Every rank reads every rank's whole `src` (`world²` reads in all): the
    /// latency choice for small counts.
    OneShot,
    /// Reduce-scatter then all-gather, fused: each rank reduces `1/world` of the data and
    /// writes it into every rank's `dst` (`world` reads and writes of each element in
    /// all): the bandwidth choice for large counts.
    TwoShot,
    /// Barrier-free (`symmem_rma::lamport`): every rank writes its `src` into every
    /// rank's slot of a rotating workspace and reads spin on the data; no barrier on
    /// entry or exit. Sums of `f32`, [`bf16`] and [`f16`](struct@f16) only, of at most the handle's
    /// [`Collectives::lamport_capacity`]; the same bits as [`Algorithm::OneShot`]. (Not
    /// `f64`: its data can hold every 32-bit word, so no word can mark "not yet arrived";
    /// `symmem_rma::lamport` says more.)
    Lamport,
}

/// The barrier-free capacity of a handle made with [`Collectives::new`] or
/// [`Collectives::with_grid`] (bytes per rank): its workspace holds `3 * world` slots of
/// it (1.5 MiB at 8 ranks). [`Collectives::with_lamport_capacity`] sets another.
pub const LAMPORT_MAX_BYTES: usize = 64 << 10;

/// The largest all-reduce (bytes per rank) [`Algorithm::Auto`] runs barrier-free: up to
/// it the barrier-free all-reduce was faster than the one-shot on the H200
/// (graph-replayed, ranks sharing the GPU) at 2, 4 and 8 ranks; the crossover lies
/// between 64 and 128 KiB at 2 and 8 ranks, and between 128 and 256 KiB at 4
/// (`BENCHMARKS.md`, issue 16).
pub const LAMPORT_AUTO_BYTES: usize = 64 << 10;

/// The largest all-reduce (bytes per rank) [`Algorithm::Auto`] runs one-shot: from
/// 128 KiB the two-shot was faster at every world size on the H200 (and within 4% at
/// 64 KiB).
pub const ONE_SHOT_MAX_BYTES: usize = 64 << 10;

/// The largest two-shot all-reduce (bytes per rank) on memory peers cannot reach that
/// stages inside its kernel (`symmem_all_reduce_staged_*`); above it the source is
/// copied into the scratch and the result out with the backend's copies, which use the
/// whole GPU where the kernel's copies use the handle's few blocks. On an H100 (ranks
/// sharing it) the kernel staged 256 KiB in 0.89-0.92 of the copies' time at 2, 4 and 8
/// ranks, and 1-4 MiB in 0.85-1.36 of it, the most at 2 ranks, where each rank's copies
/// have the GPU to themselves (`BENCHMARKS.md`, issue 43).
pub const STAGED_KERNEL_MAX_BYTES: usize = 256 << 10;

pub use symmem_kernels::{
    GatheredParams, LamportParams, ReductionParams, StagedParams, TablesParams,
};

/// An element type of the reductions: `f32`, `f64`, [`bf16`], [`f16`](struct@f16), `i32`. Its
/// kernels, one per (algorithm, operator, type), come from
/// [`symmem_kernels::ReductionKernels`], which `symmem-kernels` implements for every type
/// in its one list of element types.
///
/// Sealed: implemented for exactly the types `ReductionKernels` is.
pub trait Element: bytemuck::Pod + symmem_kernels::ReductionKernels {}

impl<T: bytemuck::Pod + symmem_kernels::ReductionKernels> Element for T {}

/// A rank's handle for launching collectives and RMA kernels over its [`World`]: the
/// world, a launch shape, and the symmetric signal array the collectives synchronise on.
///
/// ```
/// use symmem::collectives::{Algorithm, Collectives, ReduceOp};
/// use symmem::{Config, backend::cpu::Cpu};
/// let sums = symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |world| {
///     let coll = Collectives::new(&world)?; // collective: every rank makes one
///     let x = world.full(4, world.rank() as f32 + 1.0)?; // 1.0 on rank 0, 2.0 on rank 1
///     let y = world.zeros::<f32>(4)?;
///     coll.all_reduce(&y, &x, 4, ReduceOp::Sum, Algorithm::Auto)?;
///     world.read(&y)
/// })
/// .unwrap();
/// assert!(sums.iter().all(|sum| sum.as_ref().unwrap() == &[3.0; 4]));
/// ```
///
/// # Memory the application owns
///
/// Every collective takes any device memory of this rank ([`AsDeviceSlice`]: symmetric
/// buffers, plain [`DeviceBuffer`]s, views of either), and an all-reduce may run in place
/// ([`Collectives::all_reduce_in_place`]). Where an algorithm must reach a buffer on
/// every peer (a source peers read, a destination peers write) and the buffer is not
/// symmetric memory of this world's heap, the handle stages it through a symmetric
/// scratch of its own, as vLLM's and TensorRT-LLM's custom all-reduces do: the source is
/// copied in before the kernel, the destination copied out after, on this rank's stream.
/// The two-shot all-reduce of up to [`STAGED_KERNEL_MAX_BYTES`] does both inside its
/// kernel (`symmem_all_reduce_staged_*`: each block copies its share of the source into
/// the scratch, the two-shot runs there in place, and each block copies its share of the
/// result out), so staging adds no launch and no barrier.
/// Where the world's ranks share one address space ([`World::shares_address_space`]:
/// threads of one process on one GPU, or on the CPU), the two-shot all-reduce stages
/// nothing at all: its kernel exchanges the buffers' addresses through a few symmetric
/// words of this handle on every call (each block stores its own into every peer's slots
/// before its opening barrier), so plain memory costs about what registered memory does
/// (1.03-1.10x at 256 KiB-1 MiB on an H100, 2 to 8 ranks: `BENCHMARKS.md`, issue 43), and
/// a call may pass other buffers than the last.
/// The barrier-free all-reduce reads and writes only this rank's memory and stages
/// nothing; symmetric buffers are never staged. The scratch is made by the first call
/// that needs it and grows with the largest (twice its bytes at most, rounded up to a
/// power of two): it takes heap, and growing it cannot be captured in a graph
/// ([`Collectives::reserve_staging`] sizes it beforehand). Every rank must pass the same
/// kind of memory (symmetric, registered or neither) for each argument of a call.
///
/// Memory the application registered ([`World::register`]) is reached through its own
/// peer table, as symmetric memory through the heap's, and the all-reduce stages none of
/// it: the one-shot reads a registered source through its table, and the two-shot reads
/// and writes registered (or symmetric) buffers through theirs, in place included (each
/// element is read, on every rank, only by the thread that then writes it). A one-shot
/// in place, a registered buffer paired with plain memory in a two-shot, and the other
/// collectives still stage it.
///
/// ```
/// use symmem::collectives::{Algorithm, Collectives, ReduceOp};
/// use symmem::{Config, backend::cpu::Cpu};
/// let sums = symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |world| {
///     let coll = Collectives::new(&world)?;
///     // Plain device memory of this rank (not symmetric), reduced where it is.
///     let x = world.device_from_slice(&[world.rank() as f32 + 1.0; 4])?;
///     coll.all_reduce_in_place(&x, 4, ReduceOp::Sum, Algorithm::OneShot)?; // staged
///     coll.all_reduce_in_place(&x, 4, ReduceOp::Sum, Algorithm::Auto)?; // barrier-free
///     world.read(&x)
/// })
/// .unwrap();
/// assert!(sums.iter().all(|sum| sum.as_ref().unwrap() == &[6.0; 4]));
/// ```
pub struct Collectives<B: Backend> {
    world: World<B>,
    grid: Grid,
    signals: SymmetricBuffer<u64, B>,
    /// The barrier-free all-reduce's workspace
    /// (`symmem_rma::lamport::workspace_bytes(world, lamport_capacity)` bytes).
    lamport: SymmetricBuffer<u8, B>,
    lamport_capacity: usize,
    /// The all-reduce across nodes' local copies of off-node ranks' data, and the table
    /// its kernel reads them through; made by the first such all-reduce, grown as needed.
    gathered: std::sync::Mutex<Gathered<B>>,
    /// The two-shot all-reduce's address-exchange slots
    /// (`symmem_rma::collectives::exchange_words(world, grid.blocks)` `u64`s), through
    /// which its kernel reaches plain memory where the ranks share one address space.
    exchange: SymmetricBuffer<u64, B>,
    /// Symmetric scratch through which a collective stages memory that is not symmetric
    /// (the application's own, or an in-place all-reduce's): made by the first call that
    /// needs it, grown as needed, collectively (every rank is in the same call).
    staging: std::sync::Mutex<Option<SymmetricBuffer<u8, B>>>,
}

/// See [`Collectives::all_reduce`] across nodes.
struct Gathered<B: Backend> {
    copies: Option<DeviceBuffer<u8, B>>,
    table: Option<DeviceBuffer<u64, B>>,
}

impl<B: Backend> std::fmt::Debug for Collectives<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collectives")
            .field("rank", &self.world.rank())
            .field("world", &self.world.world_size())
            .field("grid", &self.grid)
            .field("signals", &self.signals.ptr())
            .finish()
    }
}

impl<B: Backend> Collectives<B> {
    /// A handle with the backend's launch shape for collectives
    /// ([`Backend::collective_grid`]: one thread per rank on a CPU, where threads of one
    /// rank would share cache lines; 8 blocks of 256 threads on a GPU, few enough that
    /// several ranks' grids fit on one GPU at once). Collective: every rank calls it.
    pub fn new(world: &World<B>) -> Result<Self> {
        Self::with_grid(world, world.backend().collective_grid())
    }

    /// A handle whose kernels all run with `grid` (`1..=`[`MAX_BLOCKS`] blocks, at least
    /// one thread; the same block count on every rank). Collective: every rank calls it.
    ///
    /// Allocates and zeroes the signal array, then takes a [`World::barrier`] (which
    /// waits for this rank's device first, one counted synchronisation), so no peer's
    /// first signal can be overwritten by a late zeroing.
    ///
    /// Errors: [`Error::EmptyGrid`] for an empty grid, [`Error::TooManyBlocks`] for more
    /// than [`MAX_BLOCKS`] blocks, [`Error::CollectiveMismatch`] if ranks chose different
    /// block counts (or made different heap calls before), and the allocation's errors.
    pub fn with_grid(world: &World<B>, grid: Grid) -> Result<Self> {
        Self::with_lamport_capacity(world, grid, LAMPORT_MAX_BYTES)
    }

    /// [`Collectives::with_grid`], with a barrier-free workspace for all-reduces of up to
    /// `capacity` bytes per rank (rounded up to 16; it takes `3 * world * capacity`
    /// bytes of the heap). Collective: every rank passes the same `capacity`.
    ///
    /// Errors: as [`Collectives::with_grid`], and [`Error::TooLarge`] for a workspace
    /// whose size overflows.
    pub fn with_lamport_capacity(world: &World<B>, grid: Grid, capacity: usize) -> Result<Self> {
        let too_large = || Error::TooLarge {
            requested: capacity,
            capacity: world.heap_len(),
        };
        let capacity = capacity
            .max(1)
            .checked_next_multiple_of(16)
            .ok_or_else(too_large)?;
        let bytes = lamport::workspace_bytes(world.world_size(), capacity).ok_or_else(too_large)?;
        if grid.blocks == 0 || grid.threads == 0 {
            return Err(Error::EmptyGrid {
                blocks: grid.blocks,
                threads: grid.threads,
            });
        }
        if grid.blocks > MAX_BLOCKS {
            return Err(Error::TooManyBlocks {
                rank: world.rank(),
                blocks: grid.blocks,
                max: MAX_BLOCKS,
            });
        }
        let words = signal_words(world.world_size(), grid.blocks as usize);
        let signals = world.zeros::<u64>(words)?;
        let exchange = world.zeros::<u64>(symmem_rma::collectives::exchange_words(
            world.world_size(),
            grid.blocks as usize,
        ))?;
        let (lamport, _) = world.allocate_symmetric::<u8>(bytes)?;
        world.kernels().launch(
            symmem_kernels::symmem_lamport_reset,
            world.backend().grid_for_bytes(bytes),
            (&lamport, bytes as u64),
        )?;
        // No peer writes into the workspace before every rank has reset its own.
        world.barrier()?;
        Ok(Self {
            world: world.clone(),
            grid,
            signals,
            exchange,
            lamport,
            lamport_capacity: capacity,
            gathered: std::sync::Mutex::new(Gathered {
                copies: None,
                table: None,
            }),
            staging: std::sync::Mutex::new(None),
        })
    }

    /// The world this handle launches on.
    pub fn world(&self) -> &World<B> {
        &self.world
    }

    /// The launch shape of every kernel of this handle.
    pub fn grid(&self) -> Grid {
        self.grid
    }

    /// The largest all-reduce (bytes per rank) this handle runs barrier-free.
    pub fn lamport_capacity(&self) -> usize {
        self.lamport_capacity
    }

    /// Waits for this rank's enqueued work (one counted synchronisation), then frees the
    /// signal array and the barrier-free workspace (collective, like every free).
    pub fn finalize(self) -> Result<()> {
        self.world.backend().synchronize()
    }

    // ---- collective calls ----------------------------------------------------------

    /// A barrier across all ranks, on the device: every block of every rank waits for
    /// the same block of every other rank. Everything each rank's kernels did before is
    /// complete and visible to every rank's later kernels. Collective.
    pub fn barrier(&self) -> Result<()> {
        self.world.collectively(|| {
            self.agreed(&[Call::Barrier as u64], &[], Ok(()))?;
            self.launch(
                symmem_kernels::symmem_barrier_all,
                (
                    self.bases(),
                    self.world_u32(),
                    self.rank_u32(),
                    &self.signals,
                ),
            )
        })
    }

    /// All-gather: this rank's `src[0..count]` lands in every rank's `dst`, at elements
    /// `rank*count..(rank+1)*count`. Both are any device memory of this rank; where `dst`
    /// is not symmetric memory of this world's heap, the ranks write into this handle's
    /// staging scratch and each copies its result out ([`Collectives` staging](Collectives#memory-the-application-owns)).
    /// Collective.
    ///
    /// Errors: `dst` shorter than `world * count` or `src` shorter than `count`
    /// ([`Error::OutOfBounds`]), and the staging scratch's allocation errors.
    pub fn all_gather<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        count: usize,
    ) -> Result<()> {
        self.world.collectively(|| {
            let total = self.times_world(count);
            let checked = local(dst, total).and_then(|d| Ok((d, local(src, count)?)));
            let objects = self.objects(dst, src);
            let call = [Call::AllGather as u64, count as u64, element::<T>()];
            self.staged(&call, objects, checked, false, &[Need::Dst], |d, s| {
                self.launch(
                    symmem_kernels::symmem_all_gather,
                    self.moving(d, s, bytes_of::<T>(count)),
                )
            })
        })
    }

    /// All-to-all: chunk `j` (elements `j*count..(j+1)*count`) of this rank's `src` lands
    /// in chunk `rank` of rank `j`'s `dst`. Both hold `world * count` elements, any device
    /// memory of this rank (a `dst` that is not symmetric is staged, as for
    /// [`Collectives::all_gather`]). Collective.
    ///
    /// Errors: as [`Collectives::all_gather`].
    pub fn all_to_all<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        count: usize,
    ) -> Result<()> {
        self.world.collectively(|| {
            let total = self.times_world(count);
            let checked = local(dst, total).and_then(|d| Ok((d, local(src, total)?)));
            let objects = self.objects(dst, src);
            let call = [Call::AllToAll as u64, count as u64, element::<T>()];
            self.staged(&call, objects, checked, false, &[Need::Dst], |d, s| {
                self.launch(
                    symmem_kernels::symmem_all_to_all,
                    self.moving(d, s, bytes_of::<T>(count)),
                )
            })
        })
    }

    /// Broadcast: rank `root`'s `src[0..count]` lands in every rank's `dst` (the root's
    /// included; every rank pulls from the root). Both are any device memory of this rank;
    /// where `src` is not symmetric memory of this world's heap, the root copies it into
    /// this handle's staging scratch first. Collective.
    ///
    /// Errors: `root` out of range ([`Error::RankOutOfRange`]), `src` or `dst` shorter
    /// than `count`, and the staging scratch's allocation errors.
    pub fn broadcast<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        count: usize,
        root: usize,
    ) -> Result<()> {
        self.world.collectively(|| {
            let checked = self
                .check_rank(root)
                .and_then(|()| Ok((local(dst, count)?, local(src, count)?)));
            let objects = self.objects(dst, src);
            let call = [
                Call::Broadcast as u64,
                count as u64,
                element::<T>(),
                root as u64,
            ];
            let need = Need::Src {
                copy: self.world.rank() == root,
            };
            self.staged(&call, objects, checked, false, &[need], |d, s| {
                let (d, s, bases, world, rank, n, sig) = self.moving(d, s, bytes_of::<T>(count));
                self.launch(
                    symmem_kernels::symmem_broadcast,
                    (d, s, bases, world, rank, n, sig, root as u32),
                )
            })
        })
    }

    /// All-reduce: every rank's `dst[0..count]` gets `op` folded over every rank's
    /// `src[0..count]`, in rank order (so all ranks get bit-identical results; integer
    /// sums wrap; `bf16` and `f16` are accumulated in `f32` and rounded once). Both are any
    /// device memory of this rank, and may be the same memory (in place:
    /// [`Collectives::all_reduce_in_place`]). The barrier-free path reads and writes this
    /// rank's memory only and copies nothing; the one-shot, two-shot and across-nodes
    /// paths read peers' `src` (and the two-shot writes peers' `dst`), so a `src` that is
    /// not symmetric memory of this world's heap, or is `dst`, is first copied into this
    /// handle's staging scratch; a two-shot where either is neither symmetric nor
    /// registered copies `src` into the scratch, reduces there and copies the result out
    /// (in its one kernel up to [`STAGED_KERNEL_MAX_BYTES`]), unless the ranks share one
    /// address space, where its kernel exchanges the addresses instead (see [memory the application owns](Collectives#memory-the-application-owns)).
    /// Collective.
    ///
    /// Errors: either view shorter than `count`, [`Error::OverlappingBuffers`] for `dst`
    /// and `src` that partly overlap, [`Error::LamportUnavailable`] for
    /// [`Algorithm::Lamport`] where its kernel cannot serve the call,
    /// [`Error::Capturing`] inside [`World::capture`] across nodes (the hierarchical path
    /// uploads its table of copies on every call) or where the staging scratch must grow,
    /// and the scratch's allocation errors.
    pub fn all_reduce<T: Element>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        count: usize,
        op: ReduceOp,
        algorithm: Algorithm,
    ) -> Result<()> {
        self.world.collectively(|| {
            let bytes = count * size_of::<T>();
            let checked = (|| {
                let (d, s) = (local(dst, count)?, local(src, count)?);
                let (dp, sp, len) = (d.ptr(), s.ptr(), bytes as u64);
                if count > 0 && dp != sp && dp < sp + len && sp < dp + len {
                    return Err(Error::OverlappingBuffers {
                        rank: self.world.rank(),
                        dst: dp,
                        src: sp,
                        bytes,
                    });
                }
                Ok((d, s))
            })();
            // Where each lies, looked up once: the heap's ids the agreement names, and the
            // registrations the unstaged paths reach.
            let places = [self.place(dst), self.place(src)];
            let objects = (places[0].heap_id(), places[1].heap_id());
            let call = [
                Call::AllReduce as u64,
                count as u64,
                element::<T>(),
                op as u64,
                algorithm as u64,
            ];
            let chosen = |chose: &str| {
                tracing::debug!(
                    rank = self.world.rank(),
                    world_size = self.world.world_size(),
                    bytes,
                    op = ?op,
                    asked = ?algorithm,
                    algorithm = chose,
                    "all_reduce"
                );
            };
            let route = match self.reduce_route::<T>(algorithm, op, bytes) {
                Ok(route) => route,
                Err(e) => {
                    let ids: Vec<u64> = objects.0.into_iter().chain(objects.1).collect();
                    return self.agreed(&call, &ids, checked.and(Err(e)));
                }
            };
            let in_place = dst.as_device_slice().ptr() == src.as_device_slice().ptr();
            let registered = places.iter().any(|p| matches!(p, Place::Registered(..)));
            match route {
                Route::OneShot(_) if !in_place && matches!(places[1], Place::Registered(..)) => {
                    chosen("one-shot (registered source, nothing staged)");
                    let sources = self.table_of(&places[1]).unwrap_or(self.bases());
                    self.unstaged(&call, [&places[0], &places[1]], checked, |d, s| {
                        self.launch(
                            T::all_reduce_gathered(op),
                            (
                                d,
                                s,
                                self.bases(),
                                sources,
                                self.world_u32(),
                                self.rank_u32(),
                                count as u64,
                                &self.signals,
                            ),
                        )
                    })
                }
                Route::TwoShot(kernel) => {
                    let tables = (self.table_of(&places[0]), self.table_of(&places[1]));
                    // Where every rank's kernels dereference every rank's memory as it is,
                    // the kernel exchanges plain memory's addresses (bit 0 `dst`, bit 1 `src`)
                    // instead of staging it.
                    let exchanged = if self.world.shares_address_space() {
                        u32::from(tables.0.is_none()) | u32::from(tables.1.is_none()) << 1
                    } else {
                        0
                    };
                    let through_tables = |checked, exchanged: u32| {
                        self.unstaged(&call, [&places[0], &places[1]], checked, |d, s| {
                            self.launch(
                                T::all_reduce_tables(op),
                                (
                                    d,
                                    s,
                                    self.bases(),
                                    // An exchanged argument's table is not read.
                                    tables.0.unwrap_or(self.bases()),
                                    tables.1.unwrap_or(self.bases()),
                                    &self.exchange,
                                    exchanged,
                                    self.world_u32(),
                                    self.rank_u32(),
                                    count as u64,
                                    &self.signals,
                                ),
                            )
                        })
                    };
                    match tables {
                        (Some(_), Some(_)) if registered || in_place => {
                            chosen("two-shot (through each buffer's table, nothing staged)");
                            through_tables(checked, 0)
                        }
                        (Some(_), Some(_)) => {
                            chosen("two-shot");
                            // Both symmetric, apart: nothing to stage.
                            self.staged(&call, objects, checked, true, &[], |d, s| {
                                self.launch(kernel, self.reducing(d, s, count))
                            })
                        }
                        _ if exchanged != 0 => {
                            chosen(
                                "two-shot (plain memory's addresses exchanged in the kernel: the \
                                 ranks share one address space; nothing staged)",
                            );
                            through_tables(checked, exchanged)
                        }
                        _ if bytes > STAGED_KERNEL_MAX_BYTES => {
                            chosen("two-shot (staged: copied in and out around the kernel)");
                            let needs = [Need::Src { copy: true }, Need::Dst];
                            self.staged(&call, objects, checked, true, &needs, |d, s| {
                                self.launch(kernel, self.reducing(d, s, count))
                            })
                        }
                        _ => {
                            chosen("two-shot (through scratch, copied in and out by the kernel)");
                            self.through_scratch(&call, objects, checked, |d, s, stage| {
                                self.launch(
                                    T::all_reduce_staged(op),
                                    (
                                        d,
                                        s,
                                        self.bases(),
                                        stage,
                                        self.world_u32(),
                                        self.rank_u32(),
                                        count as u64,
                                        &self.signals,
                                    ),
                                )
                            })
                        }
                    }
                }
                Route::Lamport(kernel) => {
                    chosen("lamport");
                    // Local memory only: nothing is staged, and in place is safe (every word
                    // is read before the same thread writes it).
                    self.staged(&call, objects, checked, true, &[], |d, s| {
                        self.all_reduce_lamport(kernel, d, s, count)
                    })
                }
                Route::AcrossNodes => {
                    chosen("hierarchical (across nodes)");
                    let needs = [Need::Src { copy: true }];
                    self.staged(&call, objects, checked, true, &needs, |d, s| {
                        self.all_reduce_across_nodes(d, s, count, op)
                    })
                }
                Route::OneShot(kernel) => {
                    chosen("one-shot");
                    let needs = [Need::Src { copy: true }];
                    self.staged(&call, objects, checked, true, &needs, |d, s| {
                        self.launch(kernel, self.reducing(d, s, count))
                    })
                }
            }
        })
    }

    /// [`Collectives::all_reduce`] with `buffer` as both source and destination, like
    /// cudarc's `Comm::all_reduce_in_place`: the barrier-free path reduces it where it is;
    /// the others stage the source first. Collective.
    ///
    /// Errors: as [`Collectives::all_reduce`].
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buffer: &impl AsDeviceSlice<T, B>,
        count: usize,
        op: ReduceOp,
        algorithm: Algorithm,
    ) -> Result<()> {
        self.all_reduce(buffer, buffer, count, op, algorithm)
    }

    /// Which all-reduce serves `bytes` of `T` under `op` for `algorithm` (the same on every
    /// rank: it depends on the call and the world alone).
    ///
    /// Errors: [`Error::LamportUnavailable`].
    fn reduce_route<T: Element>(
        &self,
        algorithm: Algorithm,
        op: ReduceOp,
        bytes: usize,
    ) -> Result<Route<T>> {
        let nodes = self.world.topology().nodes();
        if nodes > 1 && algorithm != Algorithm::Lamport {
            return Ok(Route::AcrossNodes);
        }
        // The barrier-free kernel stores into every peer's workspace directly: on one
        // node only.
        let lamport =
            T::all_reduce_lamport(op).filter(|_| bytes <= self.lamport_capacity && nodes == 1);
        Ok(match (algorithm, lamport) {
            (Algorithm::Lamport, Some(kernel)) => Route::Lamport(kernel),
            (Algorithm::Auto, Some(kernel)) if bytes <= LAMPORT_AUTO_BYTES => {
                Route::Lamport(kernel)
            }
            (Algorithm::Lamport, None) => {
                let why = if T::all_reduce_lamport(op).is_none() {
                    LamportRefusal::NoKernel
                } else if nodes > 1 {
                    LamportRefusal::SeveralNodes { nodes }
                } else {
                    LamportRefusal::OverCapacity {
                        capacity: self.lamport_capacity,
                    }
                };
                return Err(Error::LamportUnavailable {
                    rank: self.world.rank(),
                    element: element_name::<T>(),
                    op,
                    bytes,
                    why,
                });
            }
            (Algorithm::OneShot, _) => Route::OneShot(T::all_reduce_one_shot(op)),
            (Algorithm::Auto, _) if bytes <= ONE_SHOT_MAX_BYTES => {
                Route::OneShot(T::all_reduce_one_shot(op))
            }
            (Algorithm::TwoShot | Algorithm::Auto, _) => Route::TwoShot(T::all_reduce_two_shot(op)),
        })
    }

    /// The all-reduce of a world that spans nodes, hierarchical: every rank fetches each
    /// off-node rank's whole `src` in bulk through the engine (one get per rank, after a
    /// device barrier that says every `src` is final), then reduces in one pass, reading
    /// the on-node ranks' `src` with loads and the off-node ones from its local copies
    /// (`symmem_all_reduce_gathered_*`, whose second table points at them). Also the
    /// reduce-scatter across nodes, with `src` this rank's chunk.
    fn all_reduce_across_nodes<T: Element>(
        &self,
        dst: &DeviceSlice<'_, T, B>,
        src: &DeviceSlice<'_, T, B>,
        count: usize,
        op: ReduceOp,
    ) -> Result<()> {
        let w = &self.world;
        // It allocates its copies on first use and uploads their table on every call,
        // neither of which a graph can record: refused as such, not as the allocation or
        // the write a user did not make (the soak's graphs across emulated nodes).
        w.not_capturing("an all-reduce or reduce-scatter across nodes")?;
        let (me, n) = (w.rank(), w.world_size());
        let bytes = count * size_of::<T>();
        let far: Vec<usize> = (0..n).filter(|&r| !w.topology().reaches(r)).collect();
        // Copies start where `src` does modulo 16, so they align as it does.
        let skew = (src.ptr() % 16) as usize;
        let slot = bytes.next_multiple_of(16);
        let mut g = self.gathered.lock().unwrap_or_else(|p| p.into_inner());
        let need = skew + far.len() * slot;
        if g.copies.as_ref().is_none_or(|c| c.len() < need) {
            g.copies = None;
            g.copies = Some(w.device_zeros::<u8>(need.max(16))?);
        }
        if g.table.is_none() {
            g.table = Some(w.device_zeros::<u64>(n)?);
        }
        let (Some(copies), Some(table_memory)) = (&g.copies, &g.table) else {
            unreachable!("both made above");
        };
        self.barrier()?;
        let heap = self.bases();
        let src_offset = src.ptr() - heap.entries()[me];
        let mut table = heap.entries().to_vec();
        for (k, &r) in far.iter().enumerate() {
            let copy = copies.slice(skew + k * slot..skew + k * slot + bytes)?;
            // The handle's grid, not one sized by the bytes: every request goes through
            // the engine, and a get kernel that filled the GPU would leave no room for the
            // one-thread kernel with which a target's proxy applies a peer's signal, while
            // that target's copies queue behind it (a 1 MiB all-reduce at 2 nodes x 2 on
            // one H200 hung so: four ranks' 256-block gets spinning on replies).
            w.kernels().launch(
                symmem_kernels::symmem_rma_get,
                self.grid,
                (
                    &copy,
                    &src.as_bytes(),
                    heap,
                    self.world_u32(),
                    self.rank_u32(),
                    bytes as u64,
                    r as u32,
                ),
            )?;
            // Rank r's `src + i` translates to `copy + i`.
            table[r] = copy.ptr().wrapping_sub(src_offset);
        }
        w.write(table_memory, 0, &table)?;
        let sources =
            crate::table::PeerBases::new(table_memory.ptr(), table.into(), w.serial(), None);
        self.launch(
            T::all_reduce_gathered(op),
            (
                dst,
                src,
                heap,
                &sources,
                self.world_u32(),
                self.rank_u32(),
                count as u64,
                &self.signals,
            ),
        )
    }

    /// Launches the barrier-free all-reduce `kernel` of `dst[0..count]` from
    /// `src[0..count]` (both this rank's, checked and agreed), with as much of the
    /// handle's grid as the data fills (at least one block).
    fn all_reduce_lamport<T: Element>(
        &self,
        kernel: Kernel<LamportParams<T>>,
        dst: &DeviceSlice<'_, T, B>,
        src: &DeviceSlice<'_, T, B>,
        count: usize,
    ) -> Result<()> {
        // As many warps as there are vectors, up to the handle's grid: a small message
        // runs as one block of one warp, which needs no cross-block count.
        let vectors = lamport::words::<T>(count).div_ceil(4);
        let threads = vectors
            .next_multiple_of(32)
            .clamp(1, self.grid.threads as usize);
        let blocks = vectors
            .div_ceil(threads)
            .clamp(1, self.grid.blocks as usize);
        self.world.kernels().launch(
            kernel,
            Grid::new(blocks as u32, threads as u32),
            (
                dst,
                src,
                self.bases(),
                self.world_u32(),
                self.rank_u32(),
                count as u64,
                &self.lamport,
                self.lamport_capacity as u64,
            ),
        )
    }

    /// Reduce-scatter: this rank's `dst[0..count]` gets `op` folded, in rank order, over
    /// chunk `rank` (elements `rank*count..(rank+1)*count`) of every rank's `src`. Both are
    /// any device memory of this rank; a `src` that is not symmetric memory of this
    /// world's heap is first copied into this handle's staging scratch. Collective.
    ///
    /// Errors: `src` shorter than `world * count`, `dst` shorter than `count`,
    /// [`Error::Capturing`] inside [`World::capture`] across nodes (as
    /// [`Collectives::all_reduce`]) or where the staging scratch must grow, and the
    /// scratch's allocation errors.
    pub fn reduce_scatter<T: Element>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        count: usize,
        op: ReduceOp,
    ) -> Result<()> {
        self.world.collectively(|| {
            let total = self.times_world(count);
            let checked = local(src, total).and_then(|s| Ok((local(dst, count)?, s)));
            let objects = self.objects(dst, src);
            let call = [
                Call::ReduceScatter as u64,
                count as u64,
                element::<T>(),
                op as u64,
            ];
            let needs = [Need::Src { copy: true }];
            self.staged(&call, objects, checked, false, &needs, |d, s| {
                if self.world.topology().nodes() > 1 {
                    // This rank's chunk, reduced over every rank: the all-reduce of that chunk.
                    let me = self.world.rank();
                    let chunk = s.slice(me * count..(me + 1) * count)?;
                    return self.all_reduce_across_nodes(d, &chunk, count, op);
                }
                self.launch(T::reduce_scatter(op), self.reducing(d, s, count))
            })
        })
    }

    // ---- one-sided calls -----------------------------------------------------------

    /// Put: this rank's local `src` into rank `to`'s copy of `dst`, from element `at`,
    /// every block of the grid moving its share. Nothing tells `to` that the data
    /// arrived: follow with [`Collectives::barrier`] (every rank) or use
    /// [`Collectives::put_with_signal`].
    ///
    /// Errors: `to` out of range, `at..at+src.len()` outside `dst`, `dst` not in the
    /// heap or not agreed yet ([`Error::NotAgreed`]).
    pub fn put<T: bytemuck::Pod + 'static>(
        &self,
        dst: &SymmetricBuffer<T, B>,
        at: usize,
        src: &impl AsDeviceSlice<T, B>,
        to: usize,
    ) -> Result<()> {
        let src = src.as_device_slice();
        self.check_rank(to)?;
        let dst = self.one_sided(dst, at, src.len())?;
        let (d, s, bases, world, rank) = self.point(&dst, &src);
        self.launch(
            symmem_kernels::symmem_rma_put,
            (d, s, bases, world, rank, src.byte_len() as u64, to as u32),
        )
    }

    /// Get: rank `from`'s copy of `src`, from element `at`, into this rank's local
    /// `dst` (all of it). The peer must have finished writing them (a barrier or a
    /// signal before).
    ///
    /// Errors: as [`Collectives::put`].
    pub fn get<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &SymmetricBuffer<T, B>,
        at: usize,
        from: usize,
    ) -> Result<()> {
        let dst = dst.as_device_slice();
        self.check_rank(from)?;
        let src = self.one_sided(src, at, dst.len())?;
        let (d, s, bases, world, rank) = self.point(&dst, &src);
        self.launch(
            symmem_kernels::symmem_rma_get,
            (d, s, bases, world, rank, dst.byte_len() as u64, from as u32),
        )
    }

    /// Put with signal: as [`Collectives::put`], then every block adds `value` to
    /// element `index` of `signal` on rank `to`, with release semantics after its share
    /// of the data. Returns what the signal grows by in all,
    /// [`Collectives::signal_total`]`(value)`: once rank `to` sees it grown by that
    /// much (with [`Collectives::signal_wait_until`]), all the elements are there.
    ///
    /// Errors: as [`Collectives::put`], and for `index` outside `signal`.
    #[allow(clippy::too_many_arguments)]
    pub fn put_with_signal<T: bytemuck::Pod + 'static>(
        &self,
        dst: &SymmetricBuffer<T, B>,
        at: usize,
        src: &impl AsDeviceSlice<T, B>,
        signal: &SymmetricBuffer<u64, B>,
        index: usize,
        value: u64,
        to: usize,
    ) -> Result<u64> {
        let src = src.as_device_slice();
        self.check_rank(to)?;
        let dst = self.one_sided(dst, at, src.len())?;
        let sig = self.one_sided(signal, index, 1)?;
        let (d, s, bases, world, rank) = self.point(&dst, &src);
        self.launch(
            symmem_kernels::symmem_rma_put_signal_add,
            (
                d,
                s,
                bases,
                world,
                rank,
                src.byte_len() as u64,
                &sig,
                to as u32,
                value,
            ),
        )?;
        Ok(self.signal_total(value))
    }

    /// What one [`Collectives::put_with_signal`] of `value` adds to its signal in all:
    /// `value` per block of the grid (wrapping).
    pub fn signal_total(&self, value: u64) -> u64 {
        value.wrapping_mul(u64::from(self.grid.blocks))
    }

    /// Enqueues a wait, on this rank's device, until element `index` of this rank's
    /// copy of `signal` satisfies `cmp` against `value` (an acquire load at system
    /// scope): this rank's later work sees what the signalling ranks did before their
    /// release updates. On a GPU it returns at once and holds back the stream; on the
    /// CPU backend it returns when the condition holds. If no rank satisfies the
    /// condition, the wait gives up after the world's
    /// [`Config::wait_deadline`](crate::Config::wait_deadline), or as soon as a peer
    /// process is found lost, and poisons the world ([`World::check_waits`]).
    ///
    /// The wait names no peer, so a peer's departure does not end it (only a lost peer,
    /// the world's abort and the deadline do): where one rank satisfies the condition,
    /// [`Collectives::signal_wait_until_from`] ends promptly when that rank leaves.
    ///
    /// Errors: `index` outside `signal`, `signal` not in the heap.
    pub fn signal_wait_until(
        &self,
        signal: &SymmetricBuffer<u64, B>,
        index: usize,
        cmp: Cmp,
        value: u64,
    ) -> Result<()> {
        self.wait_until(signal, index, cmp, value, symmem_rma::watch::NO_PEER)
    }

    /// [`Collectives::signal_wait_until`] for a signal that rank `from` satisfies: if
    /// `from` leaves the world (or is lost) before it does, the wait gives up within two
    /// of its looks at the control block, instead of at the deadline, and the world
    /// reports [`Error::PeerLost`] naming `from`. A signal `from`
    /// sent before it left still satisfies the wait.
    ///
    /// Errors: as [`Collectives::signal_wait_until`], and `from` outside the world.
    pub fn signal_wait_until_from(
        &self,
        signal: &SymmetricBuffer<u64, B>,
        index: usize,
        from: usize,
        cmp: Cmp,
        value: u64,
    ) -> Result<()> {
        self.check_rank(from)?;
        self.wait_until(signal, index, cmp, value, from as u64)
    }

    fn wait_until(
        &self,
        signal: &SymmetricBuffer<u64, B>,
        index: usize,
        cmp: Cmp,
        value: u64,
        from: u64,
    ) -> Result<()> {
        let sig = self.one_sided(signal, index, 1)?;
        self.world.kernels().launch(
            symmem_kernels::symmem_rma_signal_wait_until,
            Grid::new(1, 1),
            (
                self.bases(),
                self.world_u32(),
                self.rank_u32(),
                &sig,
                cmp,
                value,
                from,
            ),
        )
    }

    /// Atomics under contention: every thread of the grid adds 1 to element `index` of
    /// `counter` on every rank (its own first), `iters` times, each add `AcqRel` at
    /// system scope. Returns what it adds to each rank's counter:
    /// `blocks * threads * iters`. When every rank calls it, each counter grows by
    /// `world` times that; wait for the adds with a [`Collectives::barrier`].
    ///
    /// Errors: `index` outside `counter`, `counter` not in the heap.
    pub fn atomic_add_all(
        &self,
        counter: &SymmetricBuffer<u64, B>,
        index: usize,
        iters: u32,
    ) -> Result<u64> {
        let counter = self.one_sided(counter, index, 1)?;
        self.launch(
            symmem_kernels::symmem_rma_atomic_add_all,
            (
                &counter,
                self.bases(),
                self.world_u32(),
                self.rank_u32(),
                iters,
            ),
        )?;
        Ok(u64::from(self.grid.blocks) * u64::from(self.grid.threads) * u64::from(iters))
    }

    /// Where `view` lies: in a symmetric allocation of the heap, in a registration
    /// ([`World::register`]), or neither.
    fn place<T>(&self, view: &impl AsDeviceSlice<T, B>) -> Place {
        let v = view.as_device_slice();
        if let Some(id) = self.world.heap_object(v.ptr(), v.byte_len()) {
            return Place::Heap(id);
        }
        match self.world.registration_of(v.ptr(), v.byte_len()) {
            Some((id, table)) => Place::Registered(id, table),
            None => Place::Local,
        }
    }

    /// The table each of `places` is reached through on peers, if it needs no staging:
    /// the heap's or its registration's.
    fn table_of<'p>(&'p self, place: &'p Place) -> Option<&'p crate::table::PeerBases> {
        match place {
            Place::Heap(_) => Some(self.bases()),
            Place::Registered(_, table) => Some(table),
            Place::Local => None,
        }
    }

    /// Runs `run` on `(dst, src)` after the agreement of `call` over `places`, staging
    /// nothing: each argument is reached on peers through its own table. The ledger
    /// records the places' kinds, so a rank that passed other kinds of memory is named
    /// at the next agreement.
    fn unstaged<T: bytemuck::Pod + 'static>(
        &self,
        call: &[u64],
        places: [&Place; 2],
        checked: Result<(DeviceSlice<'_, T, B>, DeviceSlice<'_, T, B>)>,
        run: impl FnOnce(&DeviceSlice<'_, T, B>, &DeviceSlice<'_, T, B>) -> Result<()>,
    ) -> Result<()> {
        let ids: Vec<u64> = places.iter().filter_map(|p| p.id()).collect();
        let mut words = call.to_vec();
        // Above the staged path's bits: 4 and 8 say each argument is registered.
        words.push(places.iter().enumerate().fold(0, |acc, (i, p)| {
            acc | u64::from(matches!(p, Place::Registered(..))) << (2 + i)
        }));
        let (d, s) = self.agreed(&words, &ids, checked)?;
        run(&d, &s)
    }

    /// Runs `run` on `(dst, src, stage)` after the agreement of `call`, `stage` this
    /// handle's staging scratch as `src.len()` elements of `T`, for a kernel that copies
    /// through it itself (the staged two-shot). The ledger records the path, so a rank
    /// that passed other kinds of memory is named at the next agreement.
    fn through_scratch<T: bytemuck::Pod + 'static>(
        &self,
        call: &[u64],
        (d_id, s_id): (Option<u64>, Option<u64>),
        checked: Result<(DeviceSlice<'_, T, B>, DeviceSlice<'_, T, B>)>,
        run: impl FnOnce(
            &DeviceSlice<'_, T, B>,
            &DeviceSlice<'_, T, B>,
            &DeviceSlice<'_, T, B>,
        ) -> Result<()>,
    ) -> Result<()> {
        let mut ids: Vec<u64> = d_id.into_iter().chain(s_id).collect();
        let (d, s) = match checked {
            Ok(views) => views,
            Err(e) => return self.agreed(call, &ids, Err(e)),
        };
        let mut words = call.to_vec();
        // Above the staged and unstaged paths' bits.
        words.push(1 << 4);
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        let scratch = self.staging_of(&mut staging, s.byte_len())?;
        ids.push(scratch.id());
        self.agreed(&words, &ids, Ok(()))?;
        let stage = scratch.as_slice().local().reinterpret::<T>(s.len())?;
        run(&d, &s, &stage)
    }

    /// The ledger ids of the symmetric heap allocations that hold `dst` and `src` (each
    /// `None` where it is not symmetric memory of this world's heap).
    fn objects<T>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
    ) -> (Option<u64>, Option<u64>) {
        let object = |v: DeviceSlice<'_, T, B>| self.world.heap_object(v.ptr(), v.byte_len());
        (object(dst.as_device_slice()), object(src.as_device_slice()))
    }

    /// Makes this handle's staging scratch at least `bytes` long now (collective: every
    /// rank passes the same `bytes`), so that a collective on memory that is not
    /// symmetric can be captured into a graph ([`World::capture`] cannot record the
    /// scratch's growth). A call stages at most its source's and destination's bytes.
    ///
    /// Errors: the allocation's ([`Error::OutOfHeap`]: raise
    /// [`Config::heap_bytes`](crate::Config::heap_bytes)), [`Error::Capturing`].
    pub fn reserve_staging(&self, bytes: usize) -> Result<()> {
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        self.staging_of(&mut staging, bytes).map(drop)
    }

    /// Bytes of staging scratch this handle holds: 0 until a call stages memory that
    /// is not symmetric (see [memory the application owns](Collectives#memory-the-application-owns)).
    pub fn staging_bytes(&self) -> usize {
        let staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        staging.as_ref().map_or(0, |s| s.len())
    }

    // ---- helpers -------------------------------------------------------------------

    /// Runs `run` on `(dst, src)` after the agreement of `call`, first staging through this
    /// handle's scratch what `needs` must reach on peers and is not symmetric memory of
    /// this world's heap (or, for a source, is the destination too): a staged source is
    /// copied in before `run` (where `copy`), a staged destination copied out after.
    /// `checked` is this rank's check of its arguments; with `agree_both`, both arguments,
    /// where symmetric, take part in the agreement (else those in `needs`).
    #[allow(clippy::too_many_arguments)]
    fn staged<T: bytemuck::Pod + 'static>(
        &self,
        call: &[u64],
        (d_id, s_id): (Option<u64>, Option<u64>),
        checked: Result<(DeviceSlice<'_, T, B>, DeviceSlice<'_, T, B>)>,
        agree_both: bool,
        needs: &[Need],
        run: impl FnOnce(&DeviceSlice<'_, T, B>, &DeviceSlice<'_, T, B>) -> Result<()>,
    ) -> Result<()> {
        // The symmetric arguments a peer reaches take part in the agreement (a
        // collective's first use of an object agrees it, also when this rank's check of
        // the call failed), and with `agree_both` both do, whether or not a peer reaches
        // them (an all-reduce's, whatever its path).
        let mut ids: Vec<u64> = Vec::new();
        for need in needs.iter().filter(|_| !agree_both) {
            ids.extend(match need {
                Need::Src { .. } => s_id,
                Need::Dst => d_id,
            });
        }
        if agree_both {
            ids.extend(d_id.into_iter().chain(s_id));
        }
        let (d, s) = match checked {
            Ok(views) => views,
            Err(e) => return self.agreed(call, &ids, Err(e)),
        };
        let in_place = d.ptr() == s.ptr();
        let (mut stage_src, mut copy_src, mut stage_dst) = (false, false, false);
        for need in needs {
            match *need {
                Need::Src { copy } if s_id.is_none() || in_place => {
                    (stage_src, copy_src) = (true, copy);
                }
                Need::Dst if d_id.is_none() => stage_dst = true,
                Need::Src { .. } | Need::Dst => {}
            }
        }
        // Every rank must stage alike (peers reach the same heap offsets): the ledger
        // records which, so a rank that differs is named at the next agreement.
        let mut words = call.to_vec();
        words.push(u64::from(stage_src) | u64::from(stage_dst) << 1);
        if !stage_src && !stage_dst {
            self.agreed(&words, &ids, Ok(()))?;
            return run(&d, &s);
        }
        let src_room = if stage_src {
            s.byte_len().next_multiple_of(16)
        } else {
            0
        };
        let bytes = src_room + if stage_dst { d.byte_len() } else { 0 };
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        let scratch = self.staging_of(&mut staging, bytes)?;
        ids.push(scratch.id());
        self.agreed(&words, &ids, Ok(()))?;
        let area = scratch.as_slice().local();
        let s_used = if stage_src {
            area.reinterpret::<T>(s.len())?
        } else {
            s
        };
        let d_used = if stage_dst {
            area.slice(src_room..)?.reinterpret::<T>(d.len())?
        } else {
            d
        };
        if copy_src {
            self.world.copy(&s_used, &s)?;
        }
        run(&d_used, &s_used)?;
        if stage_dst {
            self.world.copy(&d, &d_used)?;
        }
        Ok(())
    }

    /// The staging scratch in `slot`, made or grown (collectively) to at least `bytes`.
    fn staging_of<'g>(
        &self,
        slot: &'g mut Option<SymmetricBuffer<u8, B>>,
        bytes: usize,
    ) -> Result<&'g SymmetricBuffer<u8, B>> {
        if slot.as_ref().is_none_or(|b| b.len() < bytes) {
            self.world.not_capturing(
                "growing a collective's staging scratch (for memory that is not symmetric): \
                 make the same call once before capturing, or Collectives::reserve_staging",
            )?;
            let size = bytes.max(4096).next_power_of_two();
            tracing::debug!(
                rank = self.world.rank(),
                bytes = size,
                "a collective's staging scratch, for memory that is not symmetric"
            );
            // The old one goes back to the heap at the next barrier.
            *slot = None;
            *slot = Some(self.world.allocate_symmetric::<u8>(size)?.0);
        }
        slot.as_ref().ok_or(Error::ZeroSize)
    }

    fn launch<P: symmem_device::Params, A: crate::KernelArgs<B, P>>(
        &self,
        kernel: Kernel<P>,
        args: A,
    ) -> Result<()> {
        self.world.kernels().launch(kernel, self.grid, args)
    }

    fn bases(&self) -> &crate::table::PeerBases {
        self.world.heap_bases()
    }

    fn world_u32(&self) -> u32 {
        self.world.world_size() as u32
    }

    fn rank_u32(&self) -> u32 {
        self.world.rank() as u32
    }

    /// The arguments of a data-moving collective: `dst`, `src`, the heap table, `world`,
    /// `rank`, `bytes`, the signal array.
    #[allow(clippy::type_complexity)]
    fn moving<'a, T>(
        &'a self,
        dst: &'a DeviceSlice<'a, T, B>,
        src: &'a DeviceSlice<'a, T, B>,
        bytes: u64,
    ) -> (
        DeviceSlice<'a, u8, B>,
        DeviceSlice<'a, u8, B>,
        &'a crate::table::PeerBases,
        u32,
        u32,
        u64,
        &'a SymmetricBuffer<u64, B>,
    ) {
        (
            dst.as_bytes(),
            src.as_bytes(),
            self.bases(),
            self.world_u32(),
            self.rank_u32(),
            bytes,
            &self.signals,
        )
    }

    /// The arguments of a reduction ([`ReductionParams`]).
    #[allow(clippy::type_complexity)]
    fn reducing<'a, T>(
        &'a self,
        dst: &'a DeviceSlice<'a, T, B>,
        src: &'a DeviceSlice<'a, T, B>,
        count: usize,
    ) -> (
        &'a DeviceSlice<'a, T, B>,
        &'a DeviceSlice<'a, T, B>,
        &'a crate::table::PeerBases,
        u32,
        u32,
        u64,
        &'a SymmetricBuffer<u64, B>,
    ) {
        (
            dst,
            src,
            self.bases(),
            self.world_u32(),
            self.rank_u32(),
            count as u64,
            &self.signals,
        )
    }

    /// The leading arguments of a point-to-point kernel: `dst`, `src` (as bytes), the
    /// heap table, `world`, `rank`.
    #[allow(clippy::type_complexity)]
    fn point<'a, T>(
        &'a self,
        dst: &DeviceSlice<'a, T, B>,
        src: &DeviceSlice<'a, T, B>,
    ) -> (
        DeviceSlice<'a, u8, B>,
        DeviceSlice<'a, u8, B>,
        &'a crate::table::PeerBases,
        u32,
        u32,
    ) {
        (
            dst.as_bytes(),
            src.as_bytes(),
            self.bases(),
            self.world_u32(),
            self.rank_u32(),
        )
    }

    fn check_rank(&self, rank: usize) -> Result<()> {
        self.world.check_rank(rank)
    }

    /// Before a collective call `call` (its kind and parameters, words every rank passes
    /// alike) over the buffers `ids` (the signal array included): `checked` is this rank's
    /// own check of its arguments. If any buffer is new since the last agreement, every
    /// rank agrees first (a rank whose check failed still takes part, and the others get
    /// [`Error::PeerFailed`]); a poisoned world refuses. A call this rank goes on to make
    /// is recorded in the world's ledger (with its buffers), so the next agreement finds
    /// a rank that skipped a call or made a different one.
    fn agreed<R>(&self, call: &[u64], ids: &[u64], checked: Result<R>) -> Result<R> {
        let mut all = ids.to_vec();
        all.push(self.signals.id());
        let value = self.world.check_collective(&all, checked)?;
        self.world.note_collective_call(call, &all);
        Ok(value)
    }

    /// As [`Collectives::symmetric`], for a one-sided call: the buffer must be agreed.
    fn one_sided<'a, T>(
        &self,
        buffer: &'a SymmetricBuffer<T, B>,
        at: usize,
        len: usize,
    ) -> Result<DeviceSlice<'a, T, B>> {
        let view = self.symmetric(buffer, at, len)?;
        self.world
            .check_one_sided(&[(buffer.id(), buffer.offset())])?;
        Ok(view)
    }

    /// `world * count`, saturating (an overflow then fails the bounds check).
    fn times_world(&self, count: usize) -> usize {
        count.saturating_mul(self.world.world_size())
    }

    /// Elements `at..at+len` of this rank's copy of `buffer`, checking that they lie in
    /// it and that it lies in this world's heap (so the heap-base table translates it).
    fn symmetric<'a, T>(
        &self,
        buffer: &'a SymmetricBuffer<T, B>,
        at: usize,
        len: usize,
    ) -> Result<DeviceSlice<'a, T, B>> {
        let view = buffer
            .slice(at..at.saturating_add(len))
            .map_err(|_| Error::OutOfBounds {
                start: at,
                len,
                capacity: buffer.len(),
            })?
            .local();
        self.world.check_own(buffer.world())?;
        let ptr = buffer.ptr();
        let heap = self.world.heap_bases().entries()[self.world.rank()];
        let in_heap = ptr >= heap
            && (ptr - heap)
                .checked_add(buffer.byte_len() as u64)
                .is_some_and(|end| end <= self.world.heap_len() as u64);
        if !in_heap {
            return Err(Error::NotSymmetric { addr: ptr });
        }
        Ok(view)
    }
}

/// What a collective must reach on every peer through the heap table, and so stages
/// where it is not symmetric memory of the heap (see [`Collectives::staged`]).
#[derive(Clone, Copy)]
enum Need {
    /// The source (peers read it); `copy`: this rank's data goes into the scratch (not so
    /// for a broadcast's other ranks, whose source no peer reads).
    Src { copy: bool },
    /// The destination (peers write it); a staged one is copied out after the kernel.
    Dst,
}

/// Where an argument of a collective lies, which decides how peers reach it.
enum Place {
    /// In the symmetric allocation of the heap with this ledger id.
    Heap(u64),
    /// In the registration with this ledger id and table ([`World::register`]).
    Registered(u64, crate::table::PeerBases),
    /// Anywhere else: staged where peers must reach it.
    Local,
}

impl Place {
    /// Its ledger id where it is symmetric memory of the heap.
    fn heap_id(&self) -> Option<u64> {
        match self {
            Place::Heap(id) => Some(*id),
            Place::Registered(..) | Place::Local => None,
        }
    }

    /// Its ledger id, unless it is `Local`.
    fn id(&self) -> Option<u64> {
        match self {
            Place::Heap(id) | Place::Registered(id, _) => Some(*id),
            Place::Local => None,
        }
    }
}

/// The all-reduce kernel that serves a call ([`Collectives::all_reduce`]).
enum Route<T: Element> {
    Lamport(Kernel<LamportParams<T>>),
    OneShot(Kernel<ReductionParams<T>>),
    TwoShot(Kernel<ReductionParams<T>>),
    AcrossNodes,
}

/// The first `count` elements of the local view `view`. Errors: [`Error::OutOfBounds`].
fn local<T, B: Backend>(
    view: &impl AsDeviceSlice<T, B>,
    count: usize,
) -> Result<DeviceSlice<'_, T, B>> {
    view.as_device_slice().slice(..count)
}

/// The element type's name without its path (`f32`, `bf16`), for errors.
fn element_name<T>() -> &'static str {
    let name = std::any::type_name::<T>();
    name.rsplit("::").next().unwrap_or(name)
}

fn bytes_of<T>(count: usize) -> u64 {
    (count * size_of::<T>()) as u64
}
