//! The arch layer: what a kernel body needs to know about where it runs.
//!
//! Kernel bodies are written once, generic over [`Arch`]. Each target supplies one
//! implementation: `amdgpu::Gpu` (through `core::arch::amdgpu`), `nvptx::Gpu`
//! (through `core::arch::nvptx`) and [`host::HostThread`], which lets the same body run
//! on CPU threads in tests and in the CPU backend. Launches are one-dimensional.
#![no_std]
#![cfg_attr(target_arch = "amdgpu", feature(stdarch_amdgpu))]
#![cfg_attr(target_arch = "nvptx64", feature(stdarch_nvptx, asm_experimental_arch))]

#[cfg(target_arch = "amdgpu")]
pub mod amdgpu;
pub mod host;
#[cfg(target_arch = "nvptx64")]
pub mod nvptx;
pub mod warp;

pub use warp::LaneGroup;

/// How far a fence or an atomic's ordering reaches, and which threads an atomic is
/// atomic with.
///
/// Choose it by every thread that may touch the location or rely on the ordering,
/// including the threads of the GPU whose memory it is:
///
/// * [`Scope::Block`]: only threads of this block.
/// * [`Scope::Device`]: only threads on this GPU. On another GPU's memory (a peer
///   address from a peer-base table, when that rank runs on a GPU of its own) a
///   device-scope atomic is not atomic with that GPU's own atomics, and a device-scope
///   fence or release orders nothing for that GPU's threads. On a peer address it is
///   correct only when the peer rank shares this GPU.
/// * [`Scope::System`]: threads on any GPU and the host. Any access to a peer that may
///   run on another GPU needs it; it is what symmem picks wherever it chooses a scope
///   for a peer address (signals, barriers, the atomic shorthands of `symmem-rma`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The threads of one block (workgroup / CTA).
    Block,
    /// Every thread on this device (agent / gpu): not enough for a peer on another GPU.
    Device,
    /// Every device and the host (system / sys): what peers on other GPUs need.
    System,
}

/// A function run by [`call_outlined`]: six words in (in registers), one word out.
pub type Outlined = unsafe extern "C" fn(u64, u64, u64, u64, u64, u64) -> u64;

/// Calls `f(args)` as a call that stays a call, on every target.
///
/// For a rarely taken path whose code would otherwise join the caller's (its registers,
/// its memory instructions, its releases): the caller keeps only the call. The arguments
/// travel in registers, so the caller needs no stack for them. On amdgcn, where rustc
/// ignores `#[inline(never)]`, the call goes through the IR library with `noinline` on
/// the call site; elsewhere `f`'s own `#[inline(never)]` keeps it out of line.
///
/// # Safety
/// Those of `f`, which must be `#[inline(never)]`.
#[inline(always)]
pub unsafe fn call_outlined(f: Outlined, [a, b, c, d, e, g]: [u64; 6]) -> u64 {
    #[cfg(target_arch = "amdgpu")]
    // SAFETY: forwarded from the caller.
    let r = unsafe { amdgpu::call_outlined(f, a, b, c, d, e, g) };
    #[cfg(not(target_arch = "amdgpu"))]
    // SAFETY: forwarded from the caller.
    let r = unsafe { f(a, b, c, d, e, g) };
    r
}

/// Where a thread of a one-dimensional launch is, and how it synchronises.
///
/// # Safety
/// Implementations must return ids consistent with the launch (`thread_id < block_dim`,
/// `block_id < grid_dim`, each (block, thread) pair exactly once per launch), and
/// [`Arch::sync_block`] must be a barrier for every thread of the block. Kernel bodies
/// rely on this to partition memory between threads without data races.
pub unsafe trait Arch {
    /// This thread's index in its block, `0..block_dim()`.
    fn thread_id(&self) -> u32;
    /// This block's index in the grid, `0..grid_dim()`.
    fn block_id(&self) -> u32;
    /// Threads per block.
    fn block_dim(&self) -> u32;
    /// Blocks in the grid.
    fn grid_dim(&self) -> u32;
    /// Waits until every thread of the block arrives; orders their block-scope memory.
    ///
    /// It publishes nothing beyond the block: after it, a release at a wider scope by
    /// one thread (a signal, a flag store) is only guaranteed to cover that thread's own
    /// accesses (on AMD GPUs, its own wave's). To publish the whole block's work, use
    /// [`Arch::sync_block_release`].
    fn sync_block(&self);
    /// A block barrier that first releases every thread's own accesses at `scope`: when
    /// any thread returns, each thread's loads and stores from before its call have
    /// completed as far as `scope` reaches, so a release at `scope` by any one thread
    /// after it (thread 0 setting a signal or arriving at a cross-rank barrier for the
    /// block) covers the whole block's earlier work, as if every thread had released
    /// its own. Use it instead of [`Arch::sync_block`] whenever one thread publishes for
    /// the block.
    ///
    /// Per target: on AMD GPUs every wave runs a release fence at `scope` before
    /// `s_barrier` (at device or system scope, `buffer_wbl2` then
    /// `s_waitcnt vmcnt(0)`: a wave's counters see only its own accesses), as the
    /// block-level quiet of RCCL and rocSHMEM does. On NVIDIA GPUs it is exactly
    /// [`Arch::sync_block`] (`bar.sync`): a PTX release or `fence.sc` after the barrier
    /// is cumulative over what the barrier ordered before it, so nothing is added. On
    /// the host it is [`Arch::sync_block`] (one coherence domain, `SeqCst` fences).
    ///
    /// Block-cooperative: every thread of the block calls it, with the same `scope`,
    /// from converged control flow.
    fn sync_block_release(&self, scope: Scope);
    /// A sequentially consistent fence at `scope`.
    fn fence(&self, scope: Scope);

    /// This thread's index in the whole grid.
    #[inline(always)]
    fn global_id(&self) -> usize {
        self.block_id() as usize * self.block_dim() as usize + self.thread_id() as usize
    }
    /// Threads in the whole grid.
    #[inline(always)]
    fn global_threads(&self) -> usize {
        self.grid_dim() as usize * self.block_dim() as usize
    }
}
