//! The CPU thread runner: runs a kernel body once per thread of a grid, each thread an
//! OS thread (what the CPU backend does for a launch).
//!
//! Every thread of the launch is a real OS thread (scoped, so the body may borrow), each
//! with a [`HostThread`] arch handle; the threads of a block share a barrier. All threads
//! run concurrently, as on a GPU, so bodies that wait on each other make progress.
//!
//! A launch is all or nothing. Every thread is started first and waits at a gate; only
//! when all exist do they run the body. If the OS refuses a thread (a thread limit, no
//! memory for its stack), the threads already started leave at the gate without running
//! the body and [`run`] returns the error: no thread is left waiting at a block barrier
//! for a sibling that was never started, and no peer sees half a launch. A thread whose
//! body panics breaks every barrier of the launch, so threads waiting there leave too,
//! and `run` re-raises that panic.

use crate::backend::Grid;
use crate::error::{Error, Result};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Condvar, Mutex, MutexGuard};
use symmem_arch::host::{BlockBarrier, HostThread};

/// Locks `mutex`; every update under these locks is a single assignment, so a poisoned
/// lock still holds consistent state.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The unwind payload that takes a thread out of a broken barrier (no panic message:
/// the panic that broke it is the one reported).
struct Broken;

/// A block barrier that a panicking thread can break: threads waiting at it, and any
/// that arrive later, unwind with [`Broken`] instead of waiting for ever.
struct BreakableBarrier {
    threads: u32,
    state: Mutex<BarrierState>,
    changed: Condvar,
}

#[derive(Default)]
struct BarrierState {
    arrived: u32,
    generation: u64,
    broken: bool,
}

impl BreakableBarrier {
    fn new(threads: u32) -> Self {
        Self {
            threads,
            state: Mutex::default(),
            changed: Condvar::new(),
        }
    }

    fn break_it(&self) {
        lock(&self.state).broken = true;
        self.changed.notify_all();
    }
}

impl BlockBarrier for BreakableBarrier {
    fn wait(&self) {
        let mut state = lock(&self.state);
        let generation = state.generation;
        if !state.broken {
            state.arrived += 1;
            if state.arrived == self.threads {
                state.arrived = 0;
                state.generation += 1;
                self.changed.notify_all();
                return;
            }
            while state.generation == generation && !state.broken {
                state = self
                    .changed
                    .wait(state)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
        }
        if state.generation == generation {
            // Unwinding with the guard held would poison the lock: release it first.
            drop(state);
            resume_unwind(Box::new(Broken));
        }
    }
}

/// Where the threads of a launch wait until every one of them has been started:
/// `Some(true)` lets them run the body, `Some(false)` sends them home.
#[derive(Default)]
struct Gate {
    state: Mutex<Option<bool>>,
    opened: Condvar,
}

impl Gate {
    fn open(&self, run: bool) {
        *lock(&self.state) = Some(run);
        self.opened.notify_all();
    }

    /// Waits until the gate opens; true when the body is to run.
    fn pass(&self) -> bool {
        let mut state = lock(&self.state);
        loop {
            if let Some(run) = *state {
                return run;
            }
            state = self
                .opened
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// The most threads one launch may have on the CPU backend. Every thread of a launch is
/// an OS thread; far more than this exhausts memory before the OS refuses a thread (and
/// a thread that cannot set up its stack aborts the process), so larger grids are
/// refused up front. GPU launch shapes (thousands of blocks) belong to GPU backends: a
/// grid-stride kernel runs with any shape, see [`crate::backend::Backend::grid_for_bytes`].
pub const MAX_THREADS: u64 = 1024;

/// Runs `body` once for every thread of `grid`, each on its own OS thread, and returns
/// when all have finished. A panic in any thread is re-raised here (after every thread
/// has left; the first panic's payload).
///
/// # Errors
/// `EmptyGrid` for a grid with zero blocks or threads, `TooManyThreads` for
/// more than [`MAX_THREADS`] threads; `Os` when the OS refuses to start a thread, in which case no
/// thread has run the body.
pub fn run<F>(grid: Grid, body: F) -> Result<()>
where
    F: Fn(&HostThread<'_>) + Sync,
{
    if grid.blocks == 0 || grid.threads == 0 {
        return Err(Error::EmptyGrid {
            blocks: grid.blocks,
            threads: grid.threads,
        });
    }
    let threads = u64::from(grid.blocks) * u64::from(grid.threads);
    if threads > MAX_THREADS {
        return Err(Error::TooManyThreads {
            threads,
            max: MAX_THREADS,
        });
    }
    let barriers: Vec<BreakableBarrier> = (0..grid.blocks)
        .map(|_| BreakableBarrier::new(grid.threads))
        .collect();
    let gate = Gate::default();
    let panicked: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);
    let started = std::thread::scope(|s| {
        let mut started = Ok(());
        'spawn: for (block, barrier) in barriers.iter().enumerate() {
            for thread in 0..grid.threads {
                let (body, gate, barriers, panicked) = (&body, &gate, &barriers, &panicked);
                let spawned = std::thread::Builder::new().spawn_scoped(s, move || {
                    if !gate.pass() {
                        return;
                    }
                    // SAFETY: each (block, thread) pair is created once, ids are in range,
                    // and every thread of the block runs concurrently on its own OS thread
                    // (the gate opens only once all of them exist).
                    let arch = unsafe {
                        HostThread::new(thread, block as u32, grid.threads, grid.blocks, barrier)
                    };
                    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| body(&arch))) {
                        barriers.iter().for_each(BreakableBarrier::break_it);
                        if !payload.is::<Broken>() {
                            lock(panicked).get_or_insert(payload);
                        }
                    }
                });
                if let Err(e) = spawned {
                    started = Err(e);
                    break 'spawn;
                }
            }
        }
        gate.open(started.is_ok());
        started
    });
    if let Some(payload) = panicked.into_inner().unwrap_or_else(|p| p.into_inner()) {
        resume_unwind(payload);
    }
    started.map_err(|source| Error::Os {
        what: "starting a kernel thread",
        source,
    })
}
