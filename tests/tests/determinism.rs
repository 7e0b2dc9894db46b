//! Reductions are deterministic and batch-invariant by construction (issue 54): every
//! rank folds the ranks in rank order `0..world` from `+0.0`, accumulates `bf16`/`f16` in
//! `f32` and rounds once, so element `i` of a sum is the same bits whatever the
//! algorithm, the count it rides in, the grid, the rank and the topology, and equals a
//! host fold in rank order bit for bit.
//!
//! The data makes the order show: exponents spread widely, signs mixed, so a fold in
//! another order gives other bits for many elements (checked here, so the test could not
//! pass against an implementation that folds otherwise). Ranks as threads on the CPU
//! backend (the same kernels run on a GPU: the CUDA suite's `app_memory` and this file's
//! checks run there as the GPU test run records); worlds 2 to 8; one node and emulated
//! nodes of 2 ranks; `f32`, `bf16`, `f16`, `f64`; every algorithm that serves the call;
//! counts from 1 to past the barrier-free limit; two grids; in place and out of place.

use symmem::backend::cpu::Cpu;
use symmem::collectives::{
    Algorithm, Collectives, Element, LAMPORT_AUTO_BYTES, ReduceOp, bf16, f16,
};
use symmem::{Config, Error, Grid, World};

/// Counts per call: one element, odd ones, a vector's worth, and (for 4-byte types) past
/// the barrier-free limit of [`LAMPORT_AUTO_BYTES`].
const COUNTS: [usize; 5] = [1, 7, 64, 1025, LAMPORT_AUTO_BYTES / 4 + 13];

/// A 64-bit hash of the element's coordinates.
fn hash(rank: usize, i: usize, salt: u64) -> u64 {
    let mut h = (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (i as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        ^ salt.wrapping_mul(0x1656_67b1_9e37_79f9);
    h ^= h >> 31;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^ (h >> 29)
}

/// An element type of the test: its data, and the host's fold in a given order.
trait Data: Element + PartialEq + std::fmt::Debug {
    const NAME: &'static str;
    /// Rank `rank`'s element `i`: a sign, a mantissa and an exponent in `±spread`.
    fn value(rank: usize, i: usize) -> Self;
    /// The sum of `values` folded in the order given, from `+0.0`, as symmem folds.
    fn fold(values: impl Iterator<Item = Self>) -> Self;
    /// The bits, to compare.
    fn bits(self) -> u64;
}

/// From a hash: half the elements `±2^spread` exactly (so large ones of different ranks
/// cancel exactly), the rest `±(1 + m) * 2^e` with `e` in `-spread..=spread / 3`, which a
/// partial sum holding a large one loses: whether a small one survives depends on whether
/// it is added before or after the large ones cancel, so every order gives other bits.
fn spread_value(rank: usize, i: usize, spread: i32) -> f64 {
    let h = hash(rank, i, 7);
    let sign = if (h >> 40) & 1 == 0 { 1.0 } else { -1.0 };
    if h & 1 == 0 {
        return sign * 2f64.powi(spread);
    }
    let e = ((h >> 2) % (spread as u64 * 4 / 3 + 1)) as i32 - spread;
    let m = ((h >> 16) & 0xffff) as f64 / 65536.0;
    sign * (1.0 + m) * 2f64.powi(e)
}

impl Data for f32 {
    const NAME: &'static str = "f32";
    fn value(rank: usize, i: usize) -> Self {
        spread_value(rank, i, 40) as f32
    }
    fn fold(values: impl Iterator<Item = Self>) -> Self {
        values.fold(0.0f32, |acc, v| acc + v)
    }
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl Data for f64 {
    const NAME: &'static str = "f64";
    fn value(rank: usize, i: usize) -> Self {
        spread_value(rank, i, 200)
    }
    fn fold(values: impl Iterator<Item = Self>) -> Self {
        values.fold(0.0f64, |acc, v| acc + v)
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

impl Data for bf16 {
    const NAME: &'static str = "bf16";
    fn value(rank: usize, i: usize) -> Self {
        bf16::from_f64(spread_value(rank, i, 40))
    }
    fn fold(values: impl Iterator<Item = Self>) -> Self {
        bf16::from_f32(values.fold(0.0f32, |acc, v| acc + v.to_f32()))
    }
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl Data for f16 {
    const NAME: &'static str = "f16";
    fn value(rank: usize, i: usize) -> Self {
        f16::from_f64(spread_value(rank, i, 13))
    }
    fn fold(values: impl Iterator<Item = Self>) -> Self {
        f16::from_f32(values.fold(0.0f32, |acc, v| acc + v.to_f32()))
    }
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

/// Rank `rank`'s `count` elements.
fn data<T: Data>(rank: usize, count: usize) -> Vec<T> {
    (0..count).map(|i| T::value(rank, i)).collect()
}

/// Element `i` folded over `world` ranks in rank order (`reversed`: the other way).
fn folded<T: Data>(world: usize, i: usize, reversed: bool) -> T {
    let ranks: Vec<usize> = if reversed {
        (0..world).rev().collect()
    } else {
        (0..world).collect()
    };
    T::fold(ranks.into_iter().map(|r| T::value(r, i)))
}

/// Every all-reduce that serves `T` on `world`'s topology, of every count, both grids, in
/// place and out of place, against the host's fold in rank order, bit for bit. Returns
/// how many elements a fold in reverse rank order would have got wrong.
fn check<T: Data>(world: &World<Cpu>, grids: &[Collectives<Cpu>]) -> symmem::Result<usize> {
    let (rank, n) = (world.rank(), world.world_size());
    let mut order_shows = 0;
    for count in COUNTS {
        let want: Vec<T> = (0..count).map(|i| folded(n, i, false)).collect();
        order_shows += (0..count)
            .filter(|&i| folded::<T>(n, i, true).bits() != want[i].bits())
            .count();
        let mine = data::<T>(rank, count);
        for coll in grids {
            for algorithm in [
                Algorithm::Auto,
                Algorithm::OneShot,
                Algorithm::TwoShot,
                Algorithm::Lamport,
            ] {
                let what = format!(
                    "{} world {n} rank {rank} count {count} {:?} {algorithm:?}",
                    T::NAME,
                    coll.grid()
                );
                let src = world.device_from_slice(&mine)?;
                let dst = world.device_zeros::<T>(count)?;
                match coll.all_reduce(&dst, &src, count, ReduceOp::Sum, algorithm) {
                    Err(Error::LamportUnavailable { .. }) if algorithm == Algorithm::Lamport => {
                        continue;
                    }
                    result => result?,
                }
                let same = |got: Vec<T>, how: &str| {
                    let wrong = (0..count).find(|&i| got[i].bits() != want[i].bits());
                    assert!(
                        wrong.is_none(),
                        "{what} {how}: element {i} is {:?}, the fold in rank order {:?}",
                        got[wrong.unwrap_or(0)],
                        want[wrong.unwrap_or(0)],
                        i = wrong.unwrap_or(0)
                    );
                };
                same(world.read(&dst)?, "out of place");
                coll.all_reduce_in_place(&src, count, ReduceOp::Sum, algorithm)?;
                same(world.read(&src)?, "in place");
            }
        }
    }
    Ok(order_shows)
}

/// `world` ranks, nodes of `per_node` ranks (`None`: one node): every type.
fn run(world: usize, per_node: Option<usize>) {
    let config = Config {
        heap_bytes: 32 << 20,
        ranks_per_node: per_node,
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
            Ok([
                check::<f32>(&w, &grids)?,
                check::<bf16>(&w, &grids)?,
                check::<f16>(&w, &grids)?,
                check::<f64>(&w, &grids)?,
            ])
        },
    )
    .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        let shows = result.unwrap_or_else(|e| panic!("world {world}, rank {rank}: {e}"));
        // From three ranks on (two commute), the data must make the order show for every
        // type, or a fold in another order would pass too: many elements differ between
        // the fold in rank order and the one in reverse.
        for (name, count) in ["f32", "bf16", "f16", "f64"].into_iter().zip(shows) {
            assert!(
                world < 3 || count > 100,
                "{name}, world {world}: only {count} elements show the order"
            );
        }
    }
}

#[test]
fn sums_are_the_rank_order_fold_on_one_node() {
    for world in [2, 3, 5, 8] {
        run(world, None);
    }
}

#[test]
fn sums_are_the_rank_order_fold_across_emulated_nodes() {
    for world in [4, 6] {
        run(world, Some(2));
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
