//! Graphs: a rank's launches recorded once and replayed any number of times (CUDA
//! graphs on CUDA, HIP graphs on HIP, a recorded list of launches on the CPU backend).
//!
//! [`World::capture`] runs a closure that makes launches (a user's kernels, collectives,
//! RMA calls): they are recorded, not run. [`Graph::replay`] enqueues all of them again,
//! in order, with the same arguments. symmem's collectives keep their counters on the
//! device (barrier arrivals, the barrier-free all-reduce's call counter and buffer
//! rotation), so every replay is a correct new call. Each rank captures its own graph of
//! the same collective calls, and every rank replays its graph the same number of times.
//!
//! While recording, only launches are allowed: allocations, reads, writes, fills, loads
//! and barriers return [`Error::Capturing`]. The host-side checks and agreements of a
//! collective call happen once, at capture.
//!
//! While a graph of a world lives, nothing a replay could touch is reused: device
//! memory whose handle is dropped is kept, and barriers release no symmetric object,
//! until the world's last graph is dropped.

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::world::World;
use std::sync::atomic::Ordering;

/// A rank's recorded launches ([`World::capture`]), replayable with [`Graph::replay`].
///
/// # Examples
/// ```
/// use symmem::collectives::{Algorithm, Collectives, ReduceOp};
/// use symmem::{Config, backend::cpu::Cpu};
///
/// symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |world| {
///     let coll = Collectives::new(&world)?;
///     let (x, y) = (world.zeros::<f32>(64)?, world.zeros::<f32>(64)?);
///     world.barrier()?;
///     let graph = world.capture(|| coll.all_reduce(&y, &x, 64, ReduceOp::Sum, Algorithm::Auto))?;
///     world.write(&x, 0, &[1.0; 64])?;
///     graph.replay()?; // every replay is a new all-reduce of `x`'s contents now
///     assert_eq!(world.read(&y)?, [2.0; 64]);
///     Ok(())
/// })?;
/// # Ok::<(), symmem::Error>(())
/// ```
/// More: [`crate::guides::graphs`].
pub struct Graph<B: Backend> {
    world: World<B>,
    /// Whether the capture recorded a [`World::collectively`] step (a collective): then
    /// every rank replays its graph together, through the world's launch gate.
    collective: bool,
    /// Dropped (before the world unpins) only by `drop`.
    graph: std::mem::ManuallyDrop<B::Graph>,
}

impl<B: Backend> std::fmt::Debug for Graph<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("rank", &self.world.rank())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> World<B> {
    /// Records the launches `record` makes on this rank into a [`Graph`] instead of
    /// running them. Collective exactly when `record`'s calls are: every rank captures
    /// the same collective calls.
    ///
    /// # Errors
    /// The world's failed device wait, [`Error::Capturing`] for a capture inside
    /// a capture (and whatever `record` returns, for instance `Capturing` for a call that
    /// cannot be recorded), and the backend's capture errors.
    pub fn capture(&self, record: impl FnOnce() -> Result<()>) -> Result<Graph<B>> {
        self.check_waits()?;
        if self.shared.capturing.swap(true, Ordering::AcqRel) {
            return Err(Error::Capturing { call: "a capture" });
        }
        self.lock_pins().graphs += 1;
        self.shared
            .captured_collective
            .store(false, Ordering::Release);
        let captured = self.backend().begin_capture().and_then(|()| {
            let recorded = record();
            // End the capture whatever `record` did, so the stream runs work again.
            let graph = self.backend().end_capture();
            recorded.and(graph)
        });
        self.shared.capturing.store(false, Ordering::Release);
        match captured {
            Ok(graph) => Ok(Graph {
                world: self.clone(),
                collective: self.shared.captured_collective.load(Ordering::Acquire),
                graph: std::mem::ManuallyDrop::new(graph),
            }),
            Err(e) => {
                self.unpin();
                Err(e)
            }
        }
    }

    /// One graph fewer: when none is left, frees the memory the graphs kept.
    fn unpin(&self) {
        let kept = {
            let mut pins = self.lock_pins();
            pins.graphs -= 1;
            if pins.graphs > 0 {
                return;
            }
            let kept = std::mem::take(&mut pins.kept);
            if pins.defer_frees {
                pins.deferred.extend(kept);
                return;
            }
            kept
        };
        drop(kept);
    }
}

impl<B: Backend> Graph<B> {
    /// Enqueues every recorded launch again, in order, on this rank's stream (the CPU
    /// backend runs them and returns when they are done). Wait for the results as after
    /// the launches themselves (a read, a [`World::barrier`]).
    ///
    /// A graph that recorded a collective is replayed as a collective step
    /// ([`World::collectively`]): every rank replays it, in the same order as its other
    /// collective calls.
    ///
    /// # Errors
    /// The world's failed device wait (it is poisoned), [`Error::Capturing`]
    /// while the world records another graph, the launch gate's errors (for a graph that
    /// recorded a collective), and the backend's launch errors.
    pub fn replay(&self) -> Result<()> {
        self.world.ready_for("a replay")?;
        // SAFETY: every address the recorded launches use was checked at capture and is
        // still allocated: while this graph lives, its world frees no device memory and
        // releases no symmetric object (`Pins`).
        let replay = || unsafe { self.world.backend().replay(&self.graph) };
        if self.collective {
            self.world.collectively(replay)
        } else {
            replay()
        }
    }
}

impl<B: Backend> Drop for Graph<B> {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, and not used after.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.graph) };
        self.world.unpin();
    }
}
