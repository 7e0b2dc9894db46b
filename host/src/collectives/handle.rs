//! Making a [`Collectives`] handle (its signal array, its barrier-free workspace, its
//! address-exchange slots) and what it holds.

use super::{Collectives, Gathered, LAMPORT_MAX_BYTES, MAX_BLOCKS, signal_words};
use crate::backend::{Backend, Grid};
use crate::error::{Error, Result};
use crate::world::World;
use symmem_rma::lamport;

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
    /// # Errors
    /// [`Error::EmptyGrid`] for an empty grid, [`Error::TooManyBlocks`] for more
    /// than [`MAX_BLOCKS`] blocks, [`Error::CollectiveMismatch`] if ranks chose different
    /// block counts (or made different heap calls before), and the allocation's errors.
    pub fn with_grid(world: &World<B>, grid: Grid) -> Result<Self> {
        Self::with_lamport_capacity(world, grid, LAMPORT_MAX_BYTES)
    }

    /// [`Collectives::with_grid`], with a barrier-free workspace for all-reduces of up to
    /// `capacity` bytes per rank (rounded up to 16; it takes `3 * world * capacity`
    /// bytes of the heap). Collective: every rank passes the same `capacity`.
    ///
    /// # Errors
    /// As [`Collectives::with_grid`], and [`Error::TooLarge`] for a workspace
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
        // SAFETY: the workspace was just allocated with `bytes` bytes, 16-aligned (the
        // heap's alignment), and no kernel uses it yet.
        unsafe {
            world.kernels().launch_unchecked(
                symmem_kernels::symmem_lamport_reset,
                world.backend().grid_for_bytes(bytes),
                (&lamport, bytes as u64),
            )
        }?;
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
}
