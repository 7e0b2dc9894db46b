//! Handles own what they need (issue 43): a model layer keeps a world's collectives,
//! symmetric buffers and modules in a struct of its own, returns it from the function
//! that made it, moves it to another thread, and drops it in any order; the world leaves
//! its group with its last handle, and `finalize` says when other handles still hold it.
//! CPU backend, ranks as threads.

use std::time::Duration;
use symmem::backend::cpu::Cpu;
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, Error, Module, Result, SymmetricBuffer, World};

/// What a tensor-parallel layer keeps between calls: no borrow of the world.
struct Layer {
    collectives: Collectives<Cpu>,
    activations: SymmetricBuffer<f32, Cpu>,
    out: SymmetricBuffer<f32, Cpu>,
    kernels: Module<Cpu>,
}

impl Layer {
    /// Made in a function of its own: the `World` it was given goes out of scope here.
    fn new(world: World<Cpu>, n: usize) -> Result<Self> {
        let layer = Self {
            collectives: Collectives::new(&world)?,
            activations: world.full::<f32>(n, world.rank() as f32 + 1.0)?,
            out: world.zeros::<f32>(n)?,
            kernels: world.kernels(),
        };
        world.barrier()?;
        Ok(layer)
    }

    /// One step: the activations all-reduced into `out`, then copied back by symmem's own
    /// copy kernel; returns what `out` holds.
    fn step(&self) -> Result<Vec<f32>> {
        let n = self.out.len();
        self.collectives.all_reduce(
            &self.out,
            &self.activations,
            n,
            ReduceOp::Sum,
            Algorithm::Auto,
        )?;
        self.kernels.launch(
            symmem_kernels::symmem_copy,
            symmem::Grid::new(1, 1),
            (
                &self.activations.as_slice().local().as_bytes(),
                &self.out.as_slice().local().as_bytes(),
                (n * 4) as u64,
            ),
        )?;
        self.collectives.world().read(&self.activations)
    }
}

#[test]
fn a_layer_outlives_the_world_variable_and_moves_to_another_thread() {
    let ranks = 3;
    let sums = symmem::spawn_ranks(
        ranks,
        &Config::default(),
        |_| Ok(Cpu::new()),
        |world| {
            let layer = Layer::new(world, 64)?;
            // The layer goes to a thread of its own ('static: it borrows nothing) and back.
            let layer = std::thread::spawn(move || -> Result<(Layer, Vec<f32>)> {
                let first = layer.step()?;
                Ok((layer, first))
            })
            .join()
            .expect("the layer's thread panicked")?;
            let (layer, first) = layer;
            let second = layer.step()?;
            Ok((first, second))
        },
    )
    .unwrap();
    // 1 + 2 + 3 after one step; every rank then holds 6, so 18 after the second.
    for (rank, result) in sums.into_iter().enumerate() {
        let (first, second) = result.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(first, vec![6.0; 64], "rank {rank}");
        assert_eq!(second, vec![18.0; 64], "rank {rank}");
    }
}

#[test]
fn finalize_while_a_buffer_holds_the_world_is_refused_and_the_last_handle_leaves() {
    let config = Config {
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let results = symmem::spawn_ranks(
        2,
        &config,
        |_| Ok(Cpu::new()),
        |world| {
            let buffer = world.zeros::<u64>(8)?;
            let clone = world.clone();
            // Two other handles: the clone and the buffer.
            let refused = world.finalize();
            assert!(
                matches!(refused, Err(Error::WorldInUse { others: 2, .. })),
                "{refused:?}"
            );
            // The clone is the same world: the buffer is one of its objects.
            clone.barrier()?;
            clone.write(&buffer, 0, &[clone.rank() as u64; 8])?;
            assert_eq!(clone.read(&buffer)?, vec![clone.rank() as u64; 8]);
            drop(clone);
            // The buffer is the last handle: dropping it leaves the group (every rank
            // does, so none waits for a peer that stayed).
            drop(buffer);
            Ok(())
        },
    )
    .unwrap();
    for (rank, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

#[test]
fn a_world_with_no_other_handle_finalizes() {
    let results = symmem::spawn_ranks(
        2,
        &Config::default(),
        |_| Ok(Cpu::new()),
        |world| {
            {
                let buffer = world.zeros::<u8>(16)?;
                world.barrier()?;
                drop(buffer);
            }
            world.finalize()
        },
    )
    .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// Handles are `Send` and `Sync` on the CPU and CUDA backends: a layer can sit behind an
/// `Arc` that several threads read.
#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<World<Cpu>>();
    send_sync::<SymmetricBuffer<f32, Cpu>>();
    send_sync::<Collectives<Cpu>>();
    send_sync::<Module<Cpu>>();
    use symmem::backend::cuda::Cuda;
    send_sync::<World<Cuda>>();
    send_sync::<SymmetricBuffer<f32, Cuda>>();
    send_sync::<Collectives<Cuda>>();
    send_sync::<Module<Cuda>>();
}
