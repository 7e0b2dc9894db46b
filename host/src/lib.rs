//! symmem: symmetric memory for multi-GPU programs.
//!
//! Every rank owns memory that every other rank can address. [`World::allocate_symmetric`]
//! returns a buffer and its device-resident peer-base table (entry `r` is the buffer's
//! address on rank `r`, as mapped here; entry `rank` is the local pointer), so kernels
//! translate with `p - bases[cur] + bases[to]` (see `symmem-translate`). Any
//! [`PeerBaseProvider`] (the heap, a [`Rendezvous`] of existing allocations, an
//! [`ExternalTable`] that NVSHMEM, rocSHMEM or PyTorch symmetric memory built) drives the
//! same kernels.
//!
//!
#![doc = include_str!("first_program.md")]
//!
//! # A tour
//! - **A world**: [`World`] is one rank's membership, its heap and its device stream.
//!   Ranks as threads: [`spawn_ranks`]; as processes or under `mpirun`: [`World::new`]
//!   with a [`bootstrap`] ([`bootstrap::unix::UnixBootstrap`], `bootstrap::mpi::MpiBootstrap`
//!   with the `mpi` feature). [`Config`] sizes the heap and bounds the waits. Backends:
//!   [`backend::cpu::Cpu`] (kernels on host threads), [`backend::cuda::Cuda`], `Hip`
//!   (feature `hip`).
//! - **Memory**: [`SymmetricBuffer`] (the same offset on every rank, with its
//!   [`PeerBases`] table), [`DeviceBuffer`] (this rank's only), [`Rendezvous`]
//!   ([`World::register`]: memory the program already has, made symmetric),
//!   [`ExternalTable`] (a table another library built); host I/O with [`World::read`],
//!   [`World::write`], and one-sided [`World::put`] and [`World::get`].
//! - **Your kernel**: a `#[kernel]` function in a `no_std` crate built by your `build.rs`
//!   (`symmem-build`), written with `symmem-device`; loaded as a [`Module`] and launched
//!   with arguments checked against its signature ([`Module::launch`]; an `unsafe fn`
//!   kernel only through [`Module::launch_unchecked`]). Kernels take views: [`View`],
//!   [`ViewMut`], [`SymView`], [`SymViewMut`], [`PeerTable`].
//! - **Collectives**: [`collectives::Collectives`] (all-reduce, reduce-scatter,
//!   all-gather, all-to-all, broadcast, barrier; put, get, signals), deterministic by
//!   construction ([`collectives`], *Determinism*).
//! - **Graphs**: [`World::capture`] and [`Graph::replay`].
//! - **cudarc**: [`CudarcView`] lends symmem memory to cudarc; [`World::borrow_cudarc`]
//!   lends cudarc memory to symmem.
//! - **Errors**: one [`Error`] type; each variant says what happened and what to do
//!   (docs/troubleshooting.md has every one). [`Error::is_device_missing`] tells a
//!   machine without the device from a failure.
//! - **Guides**, one per way of running: [`guides`].
//!
//! # Features
//! | feature | what it adds | needs at build time |
//! |---------|--------------|---------------------|
//! | (none) | the CPU and CUDA backends (the CUDA driver is loaded at run time), ranks as threads and as processes | nothing |
//! | `mpi` | `bootstrap::mpi::MpiBootstrap` and the MPI off-node transport | a system MPI and libclang |
//! | `hip` | the HIP backend (`backend::hip`) | ROCm's libamdhip64, `HIP_PATH` |
//! | `nvshmem` | symmem's kernels built with NVSHMEM, for the NVSHMEM off-node transport | NVSHMEM 3.2+ (`SYMMEM_NVSHMEM_HOME`) |
//!
//! symmem-device has `std` (host waits yield the thread) and `nvshmem` (NVSHMEM's
//! device API in your kernels, with `KernelCrate::nvshmem` in your build script). The
//! host crates build on Rust 1.89 and later; the GPU code objects are built with a pinned
//! nightly, which `symmem-build` picks by itself.
//!
//! The crate stands on floors, each importing only from floors below it (checked by
//! `host/tests/layers.rs`): errors, the offset allocator and peer tables; the
//! [`backend`] contract (code objects, [`Grid`], the CPU thread runner, what the off-node
//! engine needs from a heap) and its CPU, CUDA and HIP implementations; off-node
//! [`transport`]s; [`bootstrap`], [`topology`] and liveness; the [`World`] (forming and
//! leaving, the heap, agreement, faults); typed memory, [`Module`] and checked launch,
//! host I/O, providers, [`graph`]s and memory lent to cudarc ([`CudarcView`]);
//! [`collectives`], built on launch as a user's code is.
#![deny(missing_docs)]
// docs.rs (`--cfg docsrs`): the generated docs mark what needs the `mpi` or `hip` feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
pub mod bootstrap;
pub mod collectives;
mod control;
mod cudarc_view;
mod error;
pub mod graph;
pub mod guides;
mod io;
mod launch;
mod ledger;
mod liveness;
mod memory;
pub mod offset_alloc;
mod provider;
mod table;
pub mod topology;
pub mod transport;
mod world;

pub use backend::{CodeObjects, Grid};
/// The bound on every element type of device memory (plain old data).
pub use bytemuck::Pod;
pub use cudarc_view::{CudarcBorrow, CudarcView};
pub use error::{Error, LamportRefusal, Result};
pub use graph::Graph;
pub use launch::{KernelArg, KernelArgs, Lowering, Module};
pub use memory::{
    AsDeviceSlice, AsSymSlice, DeviceBuffer, DeviceSlice, RawSymmetric, SymSlice, SymmetricBuffer,
};
pub use provider::{ExternalTable, RawRange, Registrable, Rendezvous};
pub use symmem_device::{
    Kernel, Params, PeerTable, SymView, SymViewMut, UnsafeKernel, View, ViewMut,
};
pub use table::{PeerBaseProvider, PeerBases};
pub use world::{Config, DEFAULT_WAIT_DEADLINE, World};

use backend::Backend;
use bootstrap::local::LocalBootstrap;

/// Runs `body` on `world_size` ranks as threads of this process, each with its own
/// backend from `make_backend(rank)` and its own [`World`], and returns each rank's
/// result, indexed by rank. World creation errors are returned as the rank's `Err`
/// result through `body` never being called for it; a rank's panic is re-raised here.
pub fn spawn_ranks<B, R, MakeBackend, Body>(
    world_size: usize,
    config: &Config,
    make_backend: MakeBackend,
    body: Body,
) -> Result<Vec<Result<R>>>
where
    B: Backend,
    R: Send,
    MakeBackend: Fn(usize) -> Result<B> + Sync,
    Body: Fn(World<B>) -> Result<R> + Sync,
{
    if world_size == 0 {
        return Err(Error::RankOutOfRange { rank: 0, world: 0 });
    }
    let group = LocalBootstrap::group(world_size, config.timeout);
    std::thread::scope(|s| {
        let handles: Vec<_> = group
            .into_iter()
            .enumerate()
            .map(|(rank, bootstrap)| {
                let (make_backend, body) = (&make_backend, &body);
                std::thread::Builder::new()
                    .name(format!("symmem-rank-{rank}"))
                    .spawn_scoped(s, move || {
                        let world = World::new(Box::new(bootstrap), make_backend(rank)?, config)?;
                        body(world)
                    })
                    .map_err(|source| Error::Os {
                        what: "spawning a rank thread",
                        source,
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.map(|h| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
            })
            .collect()
    })
}

/// Entry points of the cargo-fuzz targets in `fuzz/` (built with `--cfg fuzzing`, which
/// cargo-fuzz sets; see `fuzz/README.md`). Each is a thin call into the check its
/// decoder's property tests run: it feeds arbitrary input to a decoder of bytes that come
/// from another rank or a user, and panics only where the decoder breaks its contract
/// (a panic of its own, an error of another type, an allocation sized by an announced
/// length, a valid encoding that does not round-trip). Not an API.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// The UNIX-socket bootstrap's frames: `stream` is a peer's whole stream, read by a
    /// receiver that accepts payloads of at most `max` bytes.
    pub fn scm_stream(stream: &[u8], max: usize) {
        crate::bootstrap::check_stream(stream, max);
    }

    /// A handshake message from a connection to a group's socket (a challenge, an answer,
    /// a proof).
    pub fn handshake(bytes: &[u8]) {
        crate::bootstrap::auth::check_handshake(bytes);
    }

    /// A UNIX-socket hub's (or spoke's) verdict about a group of `world` ranks.
    pub fn unix_verdict(bytes: &[u8], world: usize) {
        crate::bootstrap::unix::check_verdict(bytes, world);
    }

    /// The layout of an MPI bootstrap gather from the lengths ranks announce, with the
    /// receiver's limit `limit`.
    pub fn gather_layout(announced: &[u64], limit: usize) {
        crate::bootstrap::check_gather_layout(announced, limit);
    }

    /// An agreement: every rank's contribution (a ledger proposal), by rank.
    pub fn agreement(contributions: &[Vec<u8>]) {
        crate::ledger::check_agreement(contributions);
    }

    /// A peer's identity, as the liveness watchdog exchanges them.
    pub fn identity(bytes: &[u8]) {
        crate::liveness::check_identity(bytes);
    }

    /// The off-node engine's wire: `message`, a request from rank `from` applied to a
    /// heap of `heap_len` bytes, and `reply`, a target's answer.
    pub fn engine_wire(message: &[u8], heap_len: usize, from: usize, reply: &[u8]) {
        crate::transport::check_wire(message, heap_len, from, reply);
    }

    /// A GPU backend's handle bytes (an IPC export that should cover `covering` bytes, a
    /// heap's size).
    pub fn handle_bytes(bytes: &[u8], covering: usize) {
        crate::backend::check_handle_bytes(bytes, covering);
    }

    /// [`ExternalTable::new`](crate::ExternalTable::new)'s contract check: rank `rank`
    /// of a world whose ranks on its node `on_node` says, the user's `local`, byte
    /// length (`None`: more than an allocation holds) and `entries`.
    pub fn external_table(
        rank: usize,
        on_node: &[bool],
        local: u64,
        bytes: Option<usize>,
        entries: &[u64],
    ) {
        crate::provider::check_external_table(rank, on_node, local, bytes, entries);
    }
}

/// Bad bytes for the decoders' property tests: anything, and mutations of valid
/// encodings (cut short, a bit flipped, a word overwritten by a huge length, bytes
/// appended). The `fuzz/` targets feed the same decoders through `fuzzing`-gated
/// entry points.
#[cfg(test)]
mod bad_bytes {
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Lengths no honest peer announces, and the boundaries of `u32` and `i64`.
    pub(crate) fn huge_u64() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(u64::MAX),
            Just(1 << 63),
            Just((1 << 63) - 1),
            Just(u64::from(u32::MAX)),
            Just(1 << 32),
            (1u64 << 32)..,
        ]
    }

    /// `valid` cut short, with one bit flipped, with the 8 bytes at some offset
    /// overwritten by a huge or arbitrary little-endian word, or with bytes appended.
    pub(crate) fn mutated(valid: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
        let n = valid.len();
        let (cut, flip, word) = (valid.clone(), valid.clone(), valid.clone());
        prop_oneof![
            (0..=n).prop_map(move |at| cut[..at].to_vec()),
            any::<usize>().prop_map(move |bit| {
                let mut v = flip.clone();
                if n > 0 {
                    v[bit / 8 % n] ^= 1 << (bit % 8);
                }
                v
            }),
            (0..=n, prop_oneof![huge_u64(), any::<u64>()]).prop_map(move |(at, w)| {
                let mut v = word.clone();
                v.resize(v.len().max(at + 8), 0);
                v[at..at + 8].copy_from_slice(&w.to_le_bytes());
                v
            }),
            vec(any::<u8>(), 1..16).prop_map(move |tail| [&valid[..], &tail[..]].concat()),
        ]
    }

    /// Arbitrary bytes, or a mutation of one of `valid`'s encodings.
    pub(crate) fn bytes_near(
        valid: impl Strategy<Value = Vec<u8>>,
    ) -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![vec(any::<u8>(), 0..256), valid.prop_flat_map(mutated)]
    }
}
