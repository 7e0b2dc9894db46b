//! Runs kernel bodies on CPU threads: the CPU backend's launch.
//!
//! Every thread of the launch is a real OS thread (scoped, so the body may borrow), each
//! with a [`HostThread`] arch handle; the threads of a block share a barrier. All threads
//! run concurrently, as on a GPU, so bodies that wait on each other make progress.

use std::sync::Barrier;
use symmem_arch::host::{BlockBarrier, HostThread};

/// A one-dimensional launch shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    /// Blocks in the grid (at least 1).
    pub blocks: u32,
    /// Threads per block (at least 1).
    pub threads: u32,
}

struct StdBarrier(Barrier);

impl BlockBarrier for StdBarrier {
    fn wait(&self) {
        self.0.wait();
    }
}

/// Runs `body` once for every thread of `grid`, each on its own OS thread, and returns
/// when all have finished. A panic in any thread is re-raised here.
///
/// # Panics
/// If `grid` has zero blocks or zero threads.
pub fn launch<F>(grid: Grid, body: F)
where
    F: Fn(&HostThread<'_>) + Sync,
{
    assert!(
        grid.blocks > 0 && grid.threads > 0,
        "empty launch shape {grid:?}"
    );
    let barriers: Vec<StdBarrier> = (0..grid.blocks)
        .map(|_| StdBarrier(Barrier::new(grid.threads as usize)))
        .collect();
    std::thread::scope(|s| {
        for (block, barrier) in barriers.iter().enumerate() {
            for thread in 0..grid.threads {
                let body = &body;
                s.spawn(move || {
                    // SAFETY: each (block, thread) pair is created once, ids are in range,
                    // and every thread of the block runs concurrently on its own OS thread.
                    let arch = unsafe {
                        HostThread::new(thread, block as u32, grid.threads, grid.blocks, barrier)
                    };
                    body(&arch);
                });
            }
        }
    });
}
