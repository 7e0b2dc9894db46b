//! CPU threads standing in for GPU threads, so kernel bodies run in tests and in the
//! CPU backend. The launcher (in `host/`) creates one [`HostThread`] per thread of the
//! launch and supplies the block barrier.

use crate::{Arch, Scope};
use core::sync::atomic::{Ordering, fence};

/// A barrier shared by the threads of one block. The launcher implements it (with
/// `std::sync::Barrier`, for example); `no_std` code cannot block a thread.
pub trait BlockBarrier: Sync {
    /// Returns once every thread of the block has called `wait`.
    fn wait(&self);
}

/// One CPU thread's place in a launch.
pub struct HostThread<'a> {
    thread_id: u32,
    block_id: u32,
    block_dim: u32,
    grid_dim: u32,
    barrier: &'a dyn BlockBarrier,
}

impl<'a> HostThread<'a> {
    /// The thread `thread_id` of block `block_id` in a launch of `grid_dim` blocks of
    /// `block_dim` threads; `barrier` must be shared by exactly the block's threads.
    ///
    /// # Safety
    /// The launcher must create each (block, thread) pair exactly once per launch, with
    /// ids in range, and run all threads of a block concurrently (the barrier waits for
    /// all of them).
    pub unsafe fn new(
        thread_id: u32,
        block_id: u32,
        block_dim: u32,
        grid_dim: u32,
        barrier: &'a dyn BlockBarrier,
    ) -> Self {
        Self {
            thread_id,
            block_id,
            block_dim,
            grid_dim,
            barrier,
        }
    }
}

// SAFETY: ids come from the launcher, which `HostThread::new` obliges to be consistent;
// the barrier is the block's own.
unsafe impl Arch for HostThread<'_> {
    #[inline]
    fn thread_id(&self) -> u32 {
        self.thread_id
    }
    #[inline]
    fn block_id(&self) -> u32 {
        self.block_id
    }
    #[inline]
    fn block_dim(&self) -> u32 {
        self.block_dim
    }
    #[inline]
    fn grid_dim(&self) -> u32 {
        self.grid_dim
    }
    #[inline]
    fn sync_block(&self) {
        fence(Ordering::SeqCst);
        self.barrier.wait();
        fence(Ordering::SeqCst);
    }
    #[inline]
    fn sync_block_release(&self, _scope: Scope) {
        // The SeqCst fences around the barrier already order every thread's accesses
        // for the whole machine (one coherence domain).
        self.sync_block();
    }
    #[inline]
    fn fence(&self, _scope: Scope) {
        // A CPU has one coherence domain: every scope is the whole machine.
        fence(Ordering::SeqCst);
    }
}
