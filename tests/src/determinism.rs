//! Reductions are deterministic and batch-invariant by construction (issue 54): every
//! rank folds the ranks in rank order `0..world` from `+0.0`, accumulates `bf16`/`f16` in
//! `f32` and rounds once, so element `i` of a sum is the same bits whatever the
//! algorithm, the count it rides in, the grid, the rank and the topology, and equals a
//! host fold in rank order bit for bit. The checks every backend's suite and
//! `tests/determinism.rs` run.
//!
//! The data makes the order show: a fold in another order gives other bits for many
//! elements ([`check`] counts them, so a test can fail an implementation that folds
//! otherwise).

use symmem::backend::Backend;
use symmem::collectives::{
    Algorithm, Collectives, Element, LAMPORT_AUTO_BYTES, ReduceOp, bf16, f16,
};
use symmem::{Error, World};

/// Counts per call: one element, odd ones, a vector's worth, and (for 4-byte types) past
/// the barrier-free limit of [`LAMPORT_AUTO_BYTES`].
pub const COUNTS: [usize; 5] = [1, 7, 64, 1025, LAMPORT_AUTO_BYTES / 4 + 13];

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
pub trait Data: Element + PartialEq + std::fmt::Debug {
    /// The type's name, for messages.
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
pub fn data<T: Data>(rank: usize, count: usize) -> Vec<T> {
    (0..count).map(|i| T::value(rank, i)).collect()
}

/// Element `i` folded over `world` ranks in rank order (`reversed`: the other way).
pub fn folded<T: Data>(world: usize, i: usize, reversed: bool) -> T {
    let ranks: Vec<usize> = if reversed {
        (0..world).rev().collect()
    } else {
        (0..world).collect()
    };
    T::fold(ranks.into_iter().map(|r| T::value(r, i)))
}

/// Every all-reduce that serves `T` on `world`'s topology, of every count, both grids, in
/// place and out of place, then a reduce-scatter and (on one node) an all-reduce replayed
/// from a graph, against the host's fold in rank order, bit for bit. Returns
/// how many elements a fold in reverse rank order would have got wrong.
pub fn check<B: Backend, T: Data>(
    world: &World<B>,
    grids: &[Collectives<B>],
) -> symmem::Result<usize> {
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
                same_bits(&world.read(&dst)?, &want, &what, "out of place");
                coll.all_reduce_in_place(&src, count, ReduceOp::Sum, algorithm)?;
                same_bits(&world.read(&src)?, &want, &what, "in place");
            }
            let what = format!(
                "{} world {n} rank {rank} count {count} {:?}",
                T::NAME,
                coll.grid()
            );
            // Reduce-scatter: this rank's chunk of every rank's `world * count` elements.
            let chunk: Vec<T> = (0..count)
                .map(|i| folded(n, rank * count + i, false))
                .collect();
            let src = world.device_from_slice(&data::<T>(rank, n * count))?;
            let dst = world.device_zeros::<T>(count)?;
            coll.reduce_scatter(&dst, &src, count, ReduceOp::Sum)?;
            same_bits(&world.read(&dst)?, &chunk, &what, "reduce-scatter");
            // Replayed from a graph (on one node: a capture across nodes is refused).
            if world.topology().nodes() == 1 {
                let src = world.device_from_slice(&mine)?;
                let dst = world.device_zeros::<T>(count)?;
                let graph = world.capture(|| {
                    coll.all_reduce(&dst, &src, count, ReduceOp::Sum, Algorithm::Auto)
                })?;
                graph.replay()?;
                same_bits(&world.read(&dst)?, &want, &what, "replayed from a graph");
            }
        }
    }
    Ok(order_shows)
}

/// Panics, naming the first element whose bits differ, unless `got` is `want` bit for bit.
fn same_bits<T: Data>(got: &[T], want: &[T], what: &str, how: &str) {
    if let Some(i) = (0..want.len()).find(|&i| got[i].bits() != want[i].bits()) {
        panic!(
            "{what} {how}: element {i} is {:?}, the fold in rank order {:?}",
            got[i], want[i]
        );
    }
}

/// Every type's [`check`]: how many elements of each (`f32`, `bf16`, `f16`, `f64`) a fold
/// in reverse rank order would have got wrong.
pub fn check_all<B: Backend>(
    world: &World<B>,
    grids: &[Collectives<B>],
) -> symmem::Result<[usize; 4]> {
    Ok([
        check::<B, f32>(world, grids)?,
        check::<B, bf16>(world, grids)?,
        check::<B, f16>(world, grids)?,
        check::<B, f64>(world, grids)?,
    ])
}

/// Panics unless, from three ranks on (two commute), `shows` (from [`check_all`]) says
/// that the data makes the order show for every type.
pub fn assert_order_shows(world: usize, shows: [usize; 4]) {
    for (name, count) in ["f32", "bf16", "f16", "f64"].into_iter().zip(shows) {
        assert!(
            world < 3 || count > 100,
            "{name}, world {world}: only {count} elements show the order"
        );
    }
}
