//! Reductions are deterministic and batch-invariant by construction (issue 54): every
//! rank folds the ranks in rank order `0..world` from `+0.0`, accumulates `bf16`/`f16` in
//! `f32` and rounds once, so element `i` of a sum is the same bits whatever the
//! algorithm, the count it rides in, the grid, the rank and the topology, and equals a
//! host fold in rank order bit for bit.
//!
//! The checks are `symmem_tests::determinism`'s (whose data makes the order show, and
//! which counts the elements a fold in reverse order would get wrong, so the test could
//! not pass against an implementation that folds otherwise). Here: ranks as threads on
//! the CPU backend, worlds of 4 and 6 in emulated nodes of 2 ranks; and the fused
//! all-reduce + RMSNorm kernel's batch invariance. Every backend's suite runs the same
//! checks on one node (`suite/determinism.rs`: `suite_cuda` on a GPU).

use symmem::backend::cpu::Cpu;
use symmem::collectives::{Collectives, bf16};
use symmem::{Config, Grid, World};
use symmem_tests::determinism::{Data, assert_order_shows, check_all};

/// `world` ranks in nodes of `per_node` ranks: every type (one node: the suites').
fn run(world: usize, per_node: usize) {
    let config = Config {
        heap_bytes: 32 << 20,
        ranks_per_node: Some(per_node),
        ..Config::default()
    };
    let results = symmem::spawn_ranks(
        world,
        &config,
        |_| Ok(Cpu::new()),
        |w| {
            let grids = [
                Collectives::new(&w)?,
                Collectives::with_grid(&w, Grid::new(3, 2))?,
            ];
            check_all(&w, &grids)
        },
    )
    .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        let shows = result.unwrap_or_else(|e| panic!("world {world}, rank {rank}: {e}"));
        assert_order_shows(world, shows);
    }
}

#[test]
fn sums_are_the_rank_order_fold_across_emulated_nodes() {
    for world in [4, 6] {
        run(world, 2);
    }
}

/// The fused kernel's parameters for element type `T`: out, residual, x, weight, the
/// heap's table, x's table, world, rank, rows, hidden, eps, the signal array.
type Fused<T> = (
    *mut T,
    *mut T,
    *const T,
    *const T,
    symmem::PeerTable,
    symmem::PeerTable,
    u32,
    u32,
    u32,
    u32,
    f32,
    *mut u64,
);

/// Row length and launch shape of the fused test.
const HIDDEN: usize = 512;
const FUSED_GRID: Grid = Grid::new(2, 4);

/// The rows `rows` of the fused test's data (row indices), reduced as one batch by
/// `kernel`: every row's output and residual, as bits.
fn fused_batch<T: Data>(
    w: &World<Cpu>,
    rows: &[usize],
    kernel: symmem::UnsafeKernel<Fused<T>>,
    from: fn(f32) -> T,
) -> symmem::Result<Vec<u64>> {
    let (rank, n) = (w.rank(), w.world_size());
    let module = w.load(symmem_tests::objects::of("fused_allreduce_rmsnorm_kernels"))?;
    // Row `row`'s element `j` on rank `rank` (`rank = n`: the residual).
    let flat = |of: usize| -> Vec<T> {
        rows.iter()
            .flat_map(|&row| (0..HIDDEN).map(move |j| row * HIDDEN + j))
            .map(|i| from(f32::value(of, i)))
            .collect()
    };
    let xs = w.zeros::<T>(rows.len() * HIDDEN)?;
    w.write(&xs, 0, &flat(rank))?;
    let res = w.device_from_slice(&flat(n))?;
    let weights: Vec<T> = (0..HIDDEN)
        .map(|j| from(1.0 + (j % 7) as f32 / 8.0))
        .collect();
    let weights = w.device_from_slice(&weights)?;
    let out = w.device_zeros::<T>(rows.len() * HIDDEN)?;
    let signals = w.zeros::<u64>(symmem::collectives::signal_words(n, 2))?;
    w.barrier()?;
    w.collectively(|| {
        // SAFETY: the kernel's contract: `xs` is this rank's copy of a symmetric buffer
        // of `rows * HIDDEN` elements with its table, `out` and `res` hold as many, the
        // weights HIDDEN, the signal array is this launch's own and zeroed, and every rank
        // launches the same grid and shape.
        unsafe {
            module.launch_unchecked(
                kernel,
                FUSED_GRID,
                (
                    &out,
                    &res,
                    &xs,
                    &weights,
                    w.heap_bases(),
                    xs.peer_bases(),
                    n as u32,
                    rank as u32,
                    rows.len() as u32,
                    HIDDEN as u32,
                    1e-6f32,
                    &signals,
                ),
            )
        }
    })?;
    let (out, res) = (w.read(&out)?, w.read(&res)?);
    w.barrier()?;
    Ok(out.into_iter().chain(res).map(T::bits).collect())
}

/// Whether row 2 of the data comes out the same bits alone, in a batch of 3 and in a
/// shuffled batch of 8.
fn fused_row_invariant<T: Data>(
    w: &World<Cpu>,
    kernel: symmem::UnsafeKernel<Fused<T>>,
    from: fn(f32) -> T,
) -> symmem::Result<bool> {
    let batches: [&[usize]; 3] = [&[2], &[0, 1, 2], &[5, 4, 7, 2, 0, 1, 6, 3]];
    let mut rows = Vec::new();
    for batch in batches {
        let bits = fused_batch(w, batch, kernel, from)?;
        let at = batch
            .iter()
            .position(|&r| r == 2)
            .expect("row 2 in every batch");
        let (out, res) = bits.split_at(batch.len() * HIDDEN);
        rows.push([&out[at * HIDDEN..][..HIDDEN], &res[at * HIDDEN..][..HIDDEN]].concat());
    }
    Ok(rows.windows(2).all(|pair| pair[0] == pair[1]))
}

/// The fused all-reduce + residual + RMSNorm example's row is the same bits whatever the
/// batch it rides in (alone, or row 2 of 3, or of a shuffled 8), as batch-invariant
/// inference needs: each row's sum folds the ranks in rank order and its norm reduces
/// the row alone. World 3, `f32` and `bf16` rows of 512.
#[test]
fn the_fused_rmsnorm_row_is_the_same_in_any_batch() {
    use fused_allreduce_rmsnorm_kernels::{fused_ar_rmsnorm_bf16, fused_ar_rmsnorm_f32};
    let results = symmem::spawn_ranks(
        3,
        &Config::default(),
        |_| Ok(Cpu::new()),
        |w| {
            let f32_rows = fused_row_invariant::<f32>(&w, fused_ar_rmsnorm_f32, |v| v)?;
            let bf16_rows = fused_row_invariant::<bf16>(&w, fused_ar_rmsnorm_bf16, bf16::from_f32)?;
            Ok((f32_rows, bf16_rows))
        },
    )
    .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        let same = result.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(
            same,
            (true, true),
            "rank {rank}: (f32, bf16) rows the same in every batch"
        );
    }
}
