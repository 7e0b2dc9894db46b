//! Handles own what they need (issue 43), on the backend under test, ranks as threads: a
//! model layer keeps a world's collectives, symmetric buffers and modules in a struct of
//! its own, returns it from the function that made it, moves it to another thread and
//! back; the world leaves its group with its last handle, and `finalize` says when other
//! handles still hold it. Handles are `Send + Sync`.

use super::TestBackend;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use symmem::backend::BackendKind;
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, Error, Module, Result, SymmetricBuffer, World};

type B = TestBackend;

/// On a GPU, one test at a time (see `rma.rs`).
fn exclusive() -> Option<MutexGuard<'static, ()>> {
    static LOCK: Mutex<()> = Mutex::new(());
    (super::KIND != BackendKind::Cpu).then(|| LOCK.lock().unwrap_or_else(|p| p.into_inner()))
}

fn run<R: Send>(n: usize, config: &Config, body: impl Fn(World<B>) -> Result<R> + Sync) -> Vec<R> {
    let _one = exclusive();
    let results = symmem::spawn_ranks(n, config, super::make_backend, body).expect("launch");
    results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.unwrap_or_else(|e| panic!("world of {n}, rank {rank}: {e} ({e:?})")))
        .collect()
}

/// What a tensor-parallel layer keeps between calls: no borrow of the world.
struct Layer {
    collectives: Collectives<B>,
    activations: SymmetricBuffer<f32, B>,
    out: SymmetricBuffer<f32, B>,
    kernels: Module<B>,
}

impl Layer {
    /// Made in a function of its own: the `World` it was given goes out of scope here.
    fn new(world: World<B>, n: usize) -> Result<Self> {
        let layer = Self {
            collectives: Collectives::new(&world)?,
            activations: world.full::<f32>(n, world.rank() as f32 + 1.0)?,
            out: world.zeros::<f32>(n)?,
            kernels: world.kernels(),
        };
        world.barrier()?;
        Ok(layer)
    }

    /// One step: the activations all-reduced into `out`, copied back by symmem's own copy
    /// kernel through the stored module; returns what the activations hold.
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
            ),
        )?;
        self.collectives.world().read(&self.activations)
    }
}

fn a_layer_outlives_the_world_variable_and_moves_to_another_thread(n: usize) {
    let steps = run(n, &Config::default(), |world| {
        let layer = Layer::new(world, 64)?;
        // The layer goes to a thread of its own ('static: it borrows nothing) and back.
        let (layer, first) = std::thread::spawn(move || -> Result<(Layer, Vec<f32>)> {
            let first = layer.step()?;
            Ok((layer, first))
        })
        .join()
        .expect("the layer's thread panicked")?;
        let second = layer.step()?;
        Ok((first, second))
    });
    // 1 + 2 + ... + n after one step; every rank then holds that, so n times it after two.
    let once = (n * (n + 1) / 2) as f32;
    for (rank, (first, second)) in steps.into_iter().enumerate() {
        assert_eq!(first, vec![once; 64], "rank {rank}");
        assert_eq!(second, vec![once * n as f32; 64], "rank {rank}");
    }
}

fn finalize_while_a_buffer_holds_the_world_is_refused_and_the_last_handle_leaves(n: usize) {
    let config = Config {
        timeout: Duration::from_secs(5),
        ..Config::default()
    };
    run(n, &config, |world| {
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
        // The buffer is the last handle: dropping it leaves the group (every rank does,
        // so none waits for a peer that stayed).
        drop(buffer);
        Ok(())
    });
    run(n, &Config::default(), |world| {
        let buffer = world.zeros::<u8>(16)?;
        world.barrier()?;
        drop(buffer);
        // No other handle: the world finalizes.
        world.finalize()
    });
}

/// Handles are `Send` and `Sync`: a layer can sit behind an `Arc` that several threads
/// read.
#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<World<B>>();
    send_sync::<SymmetricBuffer<f32, B>>();
    send_sync::<Collectives<B>>();
    send_sync::<Module<B>>();
    send_sync::<Layer>();
}

per_world! {
    a_layer_outlives_the_world_variable_and_moves_to_another_thread;
    finalize_while_a_buffer_holds_the_world_is_refused_and_the_last_handle_leaves;
}
