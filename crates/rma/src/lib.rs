//! Device-side RMA over symmetric memory, written once for CPU threads, AMD GPUs
//! (`amdgcn-amd-amdhsa`) and NVIDIA GPUs (`nvptx64-nvidia-cuda`).
//!
//! A kernel holds a [`Team`]: a peer-base table ([`PeerBases`]) and its own rank. Every
//! remote address is the caller's *local* pointer translated through that table by
//! [`PeerBases::remote_unchecked`] (a pointer offset, so provenance and the global
//! address space survive), so this crate never learns which provider built the table.
//!
//! On a team a kernel has:
//!
//! * point operations: [`Team::load`], [`Team::store`] of any `Copy` element, including
//!   the 16-byte [`U32x4`];
//! * block-cooperative ranges: [`Team::put_block`], [`Team::get_block`],
//!   [`Team::copy_block`] and their non-blocking `_nbi_` forms, with [`Team::fence`] and
//!   [`Team::quiet_block`] (see [`copy`] for the vector/head/tail scheme);
//! * atomics on a remote element ([`atomic`]): add, sub, xchg, cas, and, or, xor, min,
//!   max on `u32`/`i32`/`u64`/`i64`, fetch and non-fetch, each with an [`Order`] and a
//!   [`Scope`] that reach the instruction;
//! * signals ([`signal`]): [`Team::put_with_signal_block`], [`Team::signal_wait_until`]
//!   and a cross-rank [`Team::barrier_block`] over a signal array in the heap;
//! * [`collectives`]: all-gather, all-reduce (one-shot and two-shot), reduce-scatter,
//!   all-to-all and broadcast as kernel bodies built on the above; [`lamport`]: a
//!   barrier-free one-shot all-reduce for small messages.
//!
//! Block-cooperative functions must be called by every thread of the block from
//! converged control flow (they contain block barriers).
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(asm_experimental_arch))]
// core's own `f16`, for one-instruction conversions of `half::f16` on GPUs (the device
// build is always nightly; host builds use `half`'s).
#![cfg_attr(any(target_arch = "amdgpu", target_arch = "nvptx64"), feature(f16))]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

pub mod atomic;
pub mod collectives;
pub mod copy;
pub mod engine;
pub mod lamport;
#[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
pub mod nvshmem;
pub mod signal;
mod team;
pub mod watch;

pub use atomic::{AtomicInt, AtomicOp};
pub use half::{bf16, f16};
pub use signal::{Cmp, SignalOp};
pub use symmem_arch::Scope;
pub use symmem_translate::{PeerBases, U32x2, U32x4};
pub use team::Team;

/// The memory order of an atomic operation (C++/Rust semantics).
///
/// On GPUs the order is applied at the operation's [`Scope`]. Each target maps an order
/// its instructions lack onto a stronger sequence (documented in [`atomic`]); a load
/// keeps the acquire half of an order and a store the release half.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    /// Atomicity only; no ordering of other memory.
    Relaxed,
    /// Later memory operations stay after this one.
    Acquire,
    /// Earlier memory operations stay before this one.
    Release,
    /// Both acquire and release: the default for read-modify-writes.
    #[default]
    AcqRel,
    /// Acquire-release plus a single total order of all `SeqCst` operations.
    SeqCst,
}

/// Whether this build's one-node collective kernels have their bodies: the `on-node` GPU
/// build (what a world on one node loads) and every host build (whose kernels the CPU
/// backend runs in any world). A GPU build for worlds across nodes leaves them out: the
/// host routes every all-reduce and reduce-scatter across nodes through the gathered
/// kernel, so their code would only make the object bigger and the driver's first
/// compile of it longer. A kernel left out records [`watch::REASON_ONE_NODE_KERNEL`] if
/// launched ([`one_node_kernel_left_out`]).
pub const ONE_NODE_KERNELS: bool =
    cfg!(feature = "on-node") || !cfg!(any(target_arch = "amdgpu", target_arch = "nvptx64"));

/// What a one-node collective kernel asks first: true, having recorded the launch
/// ([`watch::REASON_ONE_NODE_KERNEL`]), where this build leaves its body out
/// ([`ONE_NODE_KERNELS`] false), so it returns at once; false (a constant) elsewhere.
#[inline(always)]
pub fn one_node_kernel_left_out() -> bool {
    if ONE_NODE_KERNELS {
        return false;
    }
    watch::one_node_kernel_launched();
    true
}

/// Host waits give the OS thread up every this many spins (see [`spin`]).
const YIELD_EVERY: u32 = 64;

/// Spins once in a wait loop: a CPU pause hint, and with the `std` feature on a host
/// target (ranks, and the off-node engine's proxies, run as threads there) every
/// [`YIELD_EVERY`]th spin yields the OS thread, and once a wait has lasted
/// `SLEEP_AFTER_SPINS` spins it sleeps instead: a long wait leaves the core to the
/// threads it waits for.
#[inline(always)]
pub(crate) fn spin(count: &mut u32) {
    *count = count.wrapping_add(1);
    core::hint::spin_loop();
    #[cfg(feature = "std")]
    if count.is_multiple_of(YIELD_EVERY) {
        /// Spins before a host wait starts sleeping (tens of microseconds of spinning).
        const SLEEP_AFTER_SPINS: u32 = 1 << 14;
        if *count >= SLEEP_AFTER_SPINS {
            std::thread::sleep(std::time::Duration::from_micros(20));
        } else {
            std::thread::yield_now();
        }
    }
}

/// Whether [`spin`]'s `count`-th spin gave the OS thread up: never on a GPU. A host wait
/// looks at its control block then too ([`watch`]): a look costs far less than the yield
/// or sleep, and a count of spins is no clock where threads outnumber cores (a loaded
/// machine took seconds for [`watch::POLL_EVERY`] of them, so a lost peer's abort and the
/// deadline were seen seconds late).
#[inline(always)]
pub(crate) const fn gave_thread_up(count: u32) -> bool {
    cfg!(feature = "std") && count.is_multiple_of(YIELD_EVERY)
}
