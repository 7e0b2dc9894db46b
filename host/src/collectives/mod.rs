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
//! ## Determinism
//! Reductions ([`Collectives::all_reduce`], [`Collectives::reduce_scatter`]) are
//! deterministic and batch-invariant by construction: every rank folds the ranks in
//! rank order `0, 1, .., world-1`, starting from the operator's identity (`+0.0` for
//! sums), and accumulates [`bf16`] and [`f16`](struct@f16) in `f32`, rounding once at the
//! end. So element `i` of the result
//!
//! * is the same bits on every rank, and equals a host fold of the ranks' element `i`
//!   in rank order, bit for bit;
//! * does not depend on the [`Algorithm`] (one-shot, two-shot, barrier-free, or the
//!   `Auto` choice among them), on the count of the call it rides in (a row's sum is the
//!   same alone or in a batch of a thousand), on the grid, on whether the call is in
//!   place, replayed from a [`crate::Graph`], or on how the ranks are split into nodes
//!   (the off-node engines fold in rank order too).
//!
//! This holds for `Sum`, `Min` and `Max` of every [`Element`] type (`f32`, `f64`,
//! `bf16`, `f16`, `i32`; integer sums wrap). What is *not* promised: the same bits for
//! another world size or another assignment of data to ranks (the fold has other
//! operands); the same bits as NCCL or any library that folds in another order; NaN
//! payloads (any NaN stays a NaN); and the output of a collective that failed
//! ([`Error::NotReached`], an aborted world), which is undefined. Every backend's test
//! suite checks the guarantee against a host fold, with data whose sums change with the
//! order, for every type, algorithm, several counts and grids, in place and out of
//! place; `tests/tests/determinism.rs` adds emulated nodes.
//!
//! ## Lifetime
//! Dropping a handle frees its signal array (a collective free) without waiting for the
//! device, like any symmetric buffer; [`Collectives::finalize`] waits for this rank's
//! enqueued work first.

use crate::backend::{Backend, Grid};
use crate::memory::DeviceBuffer;
use crate::memory::SymmetricBuffer;
use crate::world::World;

#[cfg(doc)]
use crate::error::Error;
#[cfg(doc)]
use crate::memory::AsDeviceSlice;

pub use route::{Algorithm, LAMPORT_AUTO_BYTES, ONE_SHOT_MAX_BYTES, STAGED_KERNEL_MAX_BYTES};
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

/// The barrier-free capacity of a handle made with [`Collectives::new`] or
/// [`Collectives::with_grid`] (bytes per rank): its workspace holds `3 * world` slots of
/// it (1.5 MiB at 8 ranks). [`Collectives::with_lamport_capacity`] sets another.
pub const LAMPORT_MAX_BYTES: usize = 64 << 10;

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
/// # Examples
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
/// collectives still stage it:
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

// The handle's calls, each kind in a module of its own, declared in the order the
// documentation lists them (rustdoc lists a child module's methods before the parent's own,
// so the constructors too live in a child): making the handle and what it holds,
mod handle;
// the collective calls that move data, and the barrier,
mod calls;
// the reductions,
mod reduce;
// the one-sided calls,
mod one_sided;
// the staging scratch,
mod staging;
// reaching arguments through their tables, or the addresses the two-shot exchanges,
mod exchange;
// what every call shares,
mod launching;
// and which all-reduce kernel serves a call.
mod route;
