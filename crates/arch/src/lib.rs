//! The arch layer: what a kernel body needs to know about where it runs.
//!
//! Kernel bodies are written once, generic over [`Arch`]. Each target supplies one
//! implementation: [`amdgpu::Gpu`] (through `core::arch::amdgpu`), [`nvptx::Gpu`]
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

/// How far a fence or an atomic's ordering reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The threads of one block (workgroup / CTA).
    Block,
    /// Every thread on this device (agent / gpu).
    Device,
    /// Every device and the host (system / sys): what peers on other GPUs need.
    System,
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
    fn sync_block(&self);
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
