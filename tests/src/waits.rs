//! The device waits a survivor is caught in when a peer leaves or dies (`waits_leave`
//! with ranks as threads, `waits_processes` with ranks as processes): each rank builds
//! [`DeviceWaits`] on its world, takes a barrier, and the survivors wait in one of them.

use fused_allreduce_rmsnorm_kernels::fused_ar_rmsnorm_f32;
use symmem::backend::{Backend, Grid};
use symmem::collectives::{Algorithm, Cmp, Collectives, ReduceOp, signal_words};
use symmem::{DeviceBuffer, Module, SymmetricBuffer, World};

/// The fused kernel's shape: one row per thread.
const GRID: Grid = Grid::new(2, 32);
const ROWS: usize = 64;
const HIDDEN: usize = 32;

/// What each wait needs, allocated on every rank alike (symmetric allocations are
/// collective).
pub struct DeviceWaits<'w, B: Backend> {
    world: &'w World<B>,
    coll: Collectives<B>,
    src: SymmetricBuffer<f32, B>,
    dst: SymmetricBuffer<f32, B>,
    signal: SymmetricBuffer<u64, B>,
    fused_signals: SymmetricBuffer<u64, B>,
    residual: DeviceBuffer<f32, B>,
    weight: DeviceBuffer<f32, B>,
    out: DeviceBuffer<f32, B>,
    module: Module<B>,
}

impl<'w, B: Backend> DeviceWaits<'w, B> {
    /// The buffers and the fused example's module on `world` (collective).
    pub fn new(world: &'w World<B>) -> symmem::Result<Self> {
        let count = ROWS * HIDDEN;
        Ok(Self {
            world,
            coll: Collectives::new(world)?,
            src: world.zeros::<f32>(count)?,
            dst: world.zeros::<f32>(count)?,
            signal: world.zeros::<u64>(1)?,
            fused_signals: world
                .zeros::<u64>(signal_words(world.world_size(), GRID.blocks as usize))?,
            residual: world.device_zeros::<f32>(count)?,
            weight: world.device_zeros::<f32>(HIDDEN)?,
            out: world.alloc::<f32>(count)?,
            module: world.load(crate::objects::of("fused_allreduce_rmsnorm_kernels"))?,
        })
    }

    /// Waits in `wait`: `barrier` (a device barrier), `all-reduce` (a one-shot
    /// all-reduce), `signal-wait` (`signal_wait_until` of a word no one sets; with `from`,
    /// `signal_wait_until_from` that rank), or `user-kernel` (the fused all-reduce +
    /// RMSNorm example, waiting in its barrier). On a GPU a launch returns at once: the
    /// caller then waits for the device (a read of [`DeviceWaits::dst`], a barrier).
    pub fn wait(&self, wait: &str, from: Option<usize>) -> symmem::Result<()> {
        let (rank, size) = (self.world.rank(), self.world.world_size());
        match (wait, from) {
            ("barrier", _) => self.coll.barrier(),
            ("all-reduce", _) => self.coll.all_reduce(
                &self.dst,
                &self.src,
                ROWS * HIDDEN,
                ReduceOp::Sum,
                Algorithm::OneShot,
            ),
            ("signal-wait", Some(from)) => {
                self.coll
                    .signal_wait_until_from(&self.signal, 0, from, Cmp::Ge, 1)
            }
            ("signal-wait", None) => self.coll.signal_wait_until(&self.signal, 0, Cmp::Ge, 1),
            // SAFETY: the fused kernel's contract: `src` is this rank's copy of a symmetric
            // buffer of ROWS * HIDDEN with its table, `out` and `residual` hold as many,
            // `weight` HIDDEN, the signal array is this grid's own and zeroed, and every
            // rank launches the same grid and shape.
            ("user-kernel", _) => unsafe {
                self.module.launch_unchecked(
                    fused_ar_rmsnorm_f32,
                    GRID,
                    (
                        &self.out,
                        &self.residual,
                        &self.src,
                        &self.weight,
                        self.src.world().heap_bases(),
                        self.src.peer_bases(),
                        size as u32,
                        rank as u32,
                        ROWS as u32,
                        HIDDEN as u32,
                        1e-6f32,
                        &self.fused_signals,
                    ),
                )
            },
            _ => panic!("bad wait {wait}"),
        }
    }

    /// The all-reduce's destination: a read of it waits for the device.
    pub fn dst(&self) -> &SymmetricBuffer<f32, B> {
        &self.dst
    }
}
