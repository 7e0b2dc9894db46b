//! The device collectives and RMA kernels through the host API (`symmem::collectives`),
//! at world sizes 1, 2, 3, 4 and 8, ranks as threads on the backend under test
//! (`super::TestBackend`):
//!
//! * all-gather, all-to-all and broadcast (every root) of 0, 1, 15, 16, 17, 4095 and
//!   1 MiB + 3 bytes from unaligned local addresses, byte for byte against a host
//!   reference, with guard bytes after every destination;
//! * all-reduce (one-shot and two-shot) and reduce-scatter, sum/min/max on f32, bf16,
//!   i32, f16 and f64, at 0, 1, 15, 16, 17 and 4095 elements and about 1 MiB + 3 bytes:
//!   every result bit-exact to a host fold in rank order (the kernels' order; bf16 and
//!   f16 folded in f32 and rounded once by `half`), floats also within the bound of
//!   `rma_collectives.rs` against the f64 sum (`world * EPS * sum|x|` of the type summed
//!   in, plus 2^-8 relative for bf16 and 2^-11 for f16);
//! * the device barrier repeated, and ordering puts between rounds;
//! * put-with-signal then a device-side signal wait (every rank to every rank);
//! * atomics under contention: every rank x every thread x `iters` adds on every
//!   peer's counter give exactly `world * blocks * threads * iters` on each;
//! * the host checks (typed errors, nothing launched, so later collectives still work).
//!
//! The barrier, signal and atomics bodies live in `rma_ranks`, which the cross-process
//! test runs too. Every world gets two handles with different grids (the backend's
//! default, and a multi-block one) and alternates between them. On a GPU all ranks share one device, so the grids are small enough for every
//! rank's blocks to be resident at once (see `symmem::collectives`), and these tests
//! run one at a time.
#![allow(clippy::needless_range_loop)] // rank-indexed loops read best in tests

#[path = "rma_ranks.rs"]
mod rma_ranks;

use super::TestBackend;
use rma_ranks::{FILL, GUARD, assert_bytes, assert_guard, filled, handles, local, patterned};
use std::sync::{Mutex, MutexGuard};
use symmem::backend::{BackendKind, Grid};
use symmem::collectives::{Algorithm, Cmp, Collectives, Element, MAX_BLOCKS, ReduceOp, bf16, f16};
use symmem::{Config, Error, World};

/// Transfer sizes that hit every head/middle/tail path.
const SIZES: [usize; 7] = [0, 1, 15, 16, 17, 4095, BIG];
/// 1 MiB + 3 bytes.
const BIG: usize = (1 << 20) + 3;
/// Element counts of the reductions (the big one is per type: about `BIG` bytes).
const COUNTS: [usize; 6] = [0, 1, 15, 16, 17, 4095];
/// Heap per rank: the big all-to-all at eight ranks needs 8 x (1 MiB + 3) plus room.
const HEAP: usize = 32 << 20;

type W = World<TestBackend>;
type C<'w> = Collectives<TestBackend>;

fn gpu() -> bool {
    super::KIND != BackendKind::Cpu
}

/// On a GPU, one test at a time: every test's ranks spin on the device waiting for
/// each other, and two worlds' grids at once could crowd one out.
fn exclusive() -> Option<MutexGuard<'static, ()>> {
    static LOCK: Mutex<()> = Mutex::new(());
    gpu().then(|| LOCK.lock().unwrap_or_else(|p| p.into_inner()))
}

fn config() -> Config {
    Config {
        heap_bytes: HEAP,
        ..Config::default()
    }
}

/// Runs `body` on `n` thread-ranks, failing the test on any error.
fn run<R: Send>(n: usize, body: impl Fn(W) -> symmem::Result<R> + Sync) -> Vec<R> {
    let _one = exclusive();
    let results = symmem::spawn_ranks(n, &config(), super::make_backend, body).expect("launch");
    assert_eq!(results.len(), n);
    results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.unwrap_or_else(|e| panic!("world of {n}, rank {rank}: {e} ({e:?})")))
        .collect()
}

// ---- byte collectives ---------------------------------------------------------------

fn all_gather(n: usize) {
    run(n, |w| {
        let cs = handles(&w)?;
        let me = w.rank();
        let mut keep = Vec::new();
        for (k, &size) in SIZES.iter().enumerate() {
            let c = &cs[k % 2];
            let dst = filled(&w, n * size)?;
            let src = local(&w, &patterned(me, size), 3)?;
            w.barrier()?; // see `local`
            c.all_gather(&dst, &src.view(), size)?;
            keep.push(src);
            let got = w.read(&dst)?;
            for r in 0..n {
                let what = format!("all_gather world {n} size {size} rank {me} chunk {r}");
                assert_bytes(&got[r * size..(r + 1) * size], &patterned(r, size), &what);
            }
            assert_guard(
                &got[n * size..],
                &format!("all_gather world {n} size {size}"),
            );
        }
        Ok(())
    });
}

fn all_to_all(n: usize) {
    run(n, |w| {
        let cs = handles(&w)?;
        let me = w.rank();
        let mut keep = Vec::new();
        for (k, &size) in SIZES.iter().enumerate() {
            let c = &cs[k % 2];
            let dst = filled(&w, n * size)?;
            // Chunk j of rank i's source is tagged i * n + j.
            let data: Vec<u8> = (0..n).flat_map(|j| patterned(me * n + j, size)).collect();
            let src = local(&w, &data, 1)?;
            w.barrier()?; // see `local`
            c.all_to_all(&dst, &src.view(), size)?;
            keep.push(src);
            let got = w.read(&dst)?;
            for i in 0..n {
                let what = format!("all_to_all world {n} size {size} rank {me} from {i}");
                assert_bytes(
                    &got[i * size..(i + 1) * size],
                    &patterned(i * n + me, size),
                    &what,
                );
            }
            assert_guard(
                &got[n * size..],
                &format!("all_to_all world {n} size {size}"),
            );
        }
        Ok(())
    });
}

fn broadcast(n: usize) {
    run(n, |w| {
        let cs = handles(&w)?;
        let me = w.rank();
        let mut launches = 0;
        let mut keep = Vec::new();
        for &size in &SIZES {
            let roots: Vec<usize> = if size > 4095 {
                vec![n - 1]
            } else {
                (0..n).collect()
            };
            for root in roots {
                let c = &cs[launches % 2];
                launches += 1;
                let mut data = patterned(me + 10 * root, size);
                data.resize(size + 16, FILL);
                let src = w.from_slice(&data)?;
                let dst = local(&w, &vec![FILL; size], 5)?;
                w.barrier()?; // see `local`
                c.broadcast(&dst.view(), &src, size, root)?;
                let got = w.read(&dst.guarded())?;
                assert_eq!(got.len(), size + GUARD);
                let what = format!("broadcast world {n} size {size} root {root} rank {me}");
                assert_bytes(&got[..size], &patterned(root + 10 * root, size), &what);
                assert_guard(&got[size..], &what);
                keep.push(dst);
            }
        }
        Ok(())
    });
}

// ---- reductions -----------------------------------------------------------------------

/// An element type under test, with its host reference.
trait Judge: Element + PartialEq + std::fmt::Debug {
    /// Rank `r`'s element `i`.
    fn value(r: usize, i: usize) -> Self;
    /// The reduction of `xs` (one element of every rank, in rank order) folded in rank
    /// order as the kernels do.
    fn fold(op: ReduceOp, xs: &[Self]) -> Self;
    /// For floats: `got` within the stated bound of the exact result.
    fn within(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String>;
    /// What the unwritten part of a destination holds.
    fn sentinel() -> Self;
}

impl Judge for i32 {
    fn value(r: usize, i: usize) -> Self {
        ((i as i32).wrapping_mul(0x3b9a_ca07) ^ (r as i32 * 977)).wrapping_add(i as i32 >> 3)
    }
    fn fold(op: ReduceOp, xs: &[Self]) -> Self {
        xs[1..].iter().fold(xs[0], |a, &x| match op {
            ReduceOp::Sum => a.wrapping_add(x),
            ReduceOp::Min => a.min(x),
            ReduceOp::Max => a.max(x),
        })
    }
    fn within(_: ReduceOp, _: &[Self], _: Self) -> Result<(), String> {
        Ok(()) // integers are judged bit-exactly by `fold` alone
    }
    fn sentinel() -> Self {
        0x5a5a_5a5a
    }
}

fn fold_f32(op: ReduceOp, xs: impl Iterator<Item = f32>) -> f32 {
    xs.reduce(|a, x| match op {
        ReduceOp::Sum => a + x,
        ReduceOp::Min => a.min(x),
        ReduceOp::Max => a.max(x),
    })
    .expect("at least one rank")
}

fn fold_f64(op: ReduceOp, xs: impl Iterator<Item = f64>) -> f64 {
    xs.reduce(|a, x| match op {
        ReduceOp::Sum => a + x,
        ReduceOp::Min => a.min(x),
        ReduceOp::Max => a.max(x),
    })
    .expect("at least one rank")
}

/// `rma_collectives.rs`'s bound: the f64 sum within `world * eps * sum|x|` (plus
/// `rel * |sum|`), `eps` the machine epsilon of the type summed in; min and max exact.
fn float_within(
    op: ReduceOp,
    xs: impl Iterator<Item = f64> + Clone,
    got: f64,
    eps: f64,
    rel: f64,
) -> Result<(), String> {
    let world = xs.clone().count() as f64;
    let (want, tol) = match op {
        ReduceOp::Sum => {
            let abs: f64 = xs.clone().map(f64::abs).sum();
            let want: f64 = xs.sum();
            (want, world * eps * abs + rel * want.abs())
        }
        ReduceOp::Min => (xs.fold(f64::INFINITY, f64::min), 0.0),
        ReduceOp::Max => (xs.fold(f64::NEG_INFINITY, f64::max), 0.0),
    };
    ((got - want).abs() <= tol)
        .then_some(())
        .ok_or(format!("got {got}, want {want} +- {tol}"))
}

impl Judge for f32 {
    fn value(r: usize, i: usize) -> Self {
        ((i * 37 + r * 101) % 1999) as f32 / 7.0 - 140.0
    }
    fn fold(op: ReduceOp, xs: &[Self]) -> Self {
        fold_f32(op, xs.iter().copied())
    }
    fn within(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String> {
        float_within(op, xs.iter().map(|&x| x as f64), got as f64, EPS_F32, 0.0)
    }
    fn sentinel() -> Self {
        f32::from_bits(0x5a5a_5a5a)
    }
}

const EPS_F32: f64 = f32::EPSILON as f64;

impl Judge for bf16 {
    fn value(r: usize, i: usize) -> Self {
        bf16::from_f32(f32::value(r, i))
    }
    fn fold(op: ReduceOp, xs: &[Self]) -> Self {
        bf16::from_f32(fold_f32(op, xs.iter().map(|x| x.to_f32())))
    }
    fn within(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String> {
        let xs = xs.iter().map(|x| x.to_f64());
        float_within(op, xs, got.to_f64(), EPS_F32, 1.0 / 256.0)
    }
    fn sentinel() -> Self {
        bf16::from_bits(0x5a5a)
    }
}

impl Judge for f16 {
    fn value(r: usize, i: usize) -> Self {
        f16::from_f32(f32::value(r, i))
    }
    fn fold(op: ReduceOp, xs: &[Self]) -> Self {
        f16::from_f32(fold_f32(op, xs.iter().map(|x| x.to_f32())))
    }
    fn within(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String> {
        let xs = xs.iter().map(|x| x.to_f64());
        float_within(op, xs, got.to_f64(), EPS_F32, 1.0 / 2048.0)
    }
    fn sentinel() -> Self {
        f16::from_bits(0x5a5a)
    }
}

impl Judge for f64 {
    fn value(r: usize, i: usize) -> Self {
        ((i * 37 + r * 101) % 1999) as f64 / 7.0 - 140.0
    }
    fn fold(op: ReduceOp, xs: &[Self]) -> Self {
        fold_f64(op, xs.iter().copied())
    }
    fn within(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String> {
        float_within(op, xs.iter().copied(), got, f64::EPSILON, 0.0)
    }
    fn sentinel() -> Self {
        f64::from_bits(0x5a5a_5a5a_5a5a_5a5a)
    }
}

/// One-shot, two-shot and reduce-scatter of `count` elements under `op` on handle `c`;
/// checks this rank's three results.
fn reduce_once<T: Judge>(w: &W, c: &C<'_>, op: ReduceOp, count: usize) -> symmem::Result<()> {
    let (me, n) = (w.rank(), w.world_size());
    const GUARD: usize = 4;
    let what = |name: &str| {
        format!(
            "{name} {op:?} {} world {n} count {count} rank {me} grid {:?}",
            std::any::type_name::<T>(),
            c.grid()
        )
    };
    let mut mine: Vec<T> = (0..n * count).map(|i| T::value(me, i)).collect();
    mine.resize(n * count + GUARD, T::sentinel());
    let src = w.from_slice(&mine)?;
    let one = w.full(count + GUARD, T::sentinel())?;
    let two = w.full(count + GUARD, T::sentinel())?;
    let sz = size_of::<T>();
    // The local destination 4 bytes into its allocation (8 for f64: as far from 16-byte
    // alignment as an element allows), filled with FILL bytes.
    let fill: Vec<T> = rma_ranks::from_bytes(&vec![FILL; count * sz]);
    let scatter_mem = local(w, &fill, (4 / sz).max(1))?;
    let scatter = scatter_mem.view();
    w.barrier()?; // see `local`
    c.all_reduce(&one, &src, count, op, Algorithm::OneShot)?;
    c.all_reduce(&two, &src, count, op, Algorithm::TwoShot)?;
    c.reduce_scatter(&scatter, &src, count, op)?;
    let (one, two) = (w.read(&one)?, w.read(&two)?);
    let scat_elems = w.read(&scatter_mem.guarded())?;
    let scat_bytes: &[u8] = bytemuck::cast_slice(&scat_elems);
    assert!(scat_bytes.len() >= count * sz + GUARD);
    assert_guard(&scat_bytes[count * sz..], &what("reduce_scatter"));
    let scat: Vec<T> = scat_bytes[..count * sz]
        .chunks_exact(sz)
        .map(bytemuck::pod_read_unaligned)
        .collect();
    // Every rank's collectives are done (each downloaded its results) before anyone
    // frees, and every rank has freed before anyone launches again (see `local`).
    w.barrier()?;
    drop(scatter_mem);
    w.barrier()?;
    // Inputs of one element on every rank, without an allocation per element (this
    // loop is most of the time the big sizes take in a debug build).
    let mut xs = [T::sentinel(); 8];
    for i in 0..count {
        for r in 0..n {
            xs[r] = T::value(r, i);
        }
        let want = T::fold(op, &xs[..n]);
        assert_eq!(one[i], want, "{} element {i}", what("one-shot all_reduce"));
        assert_eq!(two[i], want, "{} element {i}", what("two-shot all_reduce"));
        T::within(op, &xs[..n], one[i])
            .unwrap_or_else(|e| panic!("{} element {i}: {e}", what("all_reduce")));
        for r in 0..n {
            xs[r] = T::value(r, me * count + i);
        }
        let want = T::fold(op, &xs[..n]);
        assert_eq!(scat[i], want, "{} element {i}", what("reduce_scatter"));
        T::within(op, &xs[..n], scat[i])
            .unwrap_or_else(|e| panic!("{} element {i}: {e}", what("reduce_scatter")));
    }
    for (name, got) in [("one-shot", &one), ("two-shot", &two)] {
        assert!(
            got[count..].iter().all(|&x| x == T::sentinel()),
            "{}: guard elements overwritten",
            what(name)
        );
    }
    Ok(())
}

fn reductions(n: usize) {
    run(n, |w| {
        let cs = handles(&w)?;
        let mut k = 0;
        for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
            for &count in &COUNTS {
                reduce_once::<i32>(&w, &cs[k % 2], op, count)?;
                reduce_once::<f32>(&w, &cs[(k + 1) % 2], op, count)?;
                reduce_once::<bf16>(&w, &cs[k % 2], op, count)?;
                reduce_once::<f16>(&w, &cs[(k + 1) % 2], op, count)?;
                reduce_once::<f64>(&w, &cs[k % 2], op, count)?;
                k += 1;
            }
        }
        Ok(())
    });
}

/// 1 MiB + 3 bytes of elements (rounded up to whole elements), with the default grid:
/// the big size for all three reductions: i32 sums everywhere; f32, bf16, f16 and f64
/// sums on GPUs only (on the CPU in debug they would double the run; the kernel bodies
/// get a big f32 reduction in `rma_collectives.rs`).
fn reductions_big(n: usize) {
    run(n, |w| {
        let c = Collectives::new(&w)?;
        reduce_once::<i32>(&w, &c, ReduceOp::Sum, BIG.div_ceil(4))?;
        if gpu() {
            reduce_once::<f32>(&w, &c, ReduceOp::Sum, BIG.div_ceil(4))?;
            reduce_once::<bf16>(&w, &c, ReduceOp::Sum, BIG.div_ceil(2))?;
            reduce_once::<f16>(&w, &c, ReduceOp::Sum, BIG.div_ceil(2))?;
            reduce_once::<f64>(&w, &c, ReduceOp::Sum, BIG.div_ceil(8))?;
        }
        c.finalize()
    });
}

/// Collectives enqueued back to back with no host wait between them, each reading what
/// the one before wrote: two-shot all-reduces ping-ponging between two buffers, with a
/// one-shot and a barrier in between.
fn chained(n: usize) {
    run(n, |w| {
        let cs = handles(&w)?;
        let me = w.rank();
        let len = 1000;
        let a = w.full::<i32>(len, me as i32 + 1)?;
        let b = w.full::<i32>(len, 0)?;
        for round in 0..6 {
            let c = &cs[round % 2];
            let (from, to) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
            let algorithm = if round == 3 {
                Algorithm::OneShot
            } else {
                Algorithm::TwoShot
            };
            c.all_reduce(to, from, len, ReduceOp::Sum, algorithm)?;
            c.barrier()?;
        }
        // S = n(n+1)/2 after round 0, then every round multiplies by n: round 5 leaves
        // S * n^5 in `a`, round 4 S * n^4 in `b`.
        let s = (n * (n + 1) / 2) as i32;
        let want = |p: u32| s.wrapping_mul((n as i32).pow(p));
        assert_eq!(w.read(&a)?, vec![want(5); len], "world {n} rank {me} a");
        assert_eq!(w.read(&b)?, vec![want(4); len], "world {n} rank {me} b");
        Ok(())
    });
}

// ---- barrier, signals, atomics --------------------------------------------------------

// ---- barrier, signals, atomics (bodies in `rma_ranks`) ---------------------------------

fn barrier(n: usize) {
    let repeats = if gpu() { 500 } else { 100 };
    run(n, |w| rma_ranks::barrier_rounds(&w, repeats));
}

fn put_with_signal(n: usize) {
    run(n, |w| rma_ranks::put_with_signal_rounds(&w, &SIZES));
}

fn atomics(n: usize) {
    run(n, |w| rma_ranks::atomic_rounds(&w));
}

// ---- host checks ----------------------------------------------------------------------

fn errors(n: usize) {
    run(n, |w| {
        let me = w.rank();
        for grid in [
            Grid {
                blocks: 0,
                threads: 1,
            },
            Grid {
                blocks: 1,
                threads: 0,
            },
            Grid {
                blocks: MAX_BLOCKS + 1,
                threads: 1,
            },
        ] {
            match Collectives::with_grid(&w, grid) {
                Err(e @ Error::EmptyGrid { .. }) => {
                    assert!(
                        e.to_string().contains("at least one block of one thread"),
                        "{e}"
                    );
                }
                Err(e @ Error::TooManyBlocks { rank, .. }) if rank == me => {
                    assert!(
                        e.to_string()
                            .contains("at most 1024 blocks to Collectives::with_grid"),
                        "{e}"
                    );
                }
                other => panic!("{grid:?}: {other:?}"),
            }
        }
        let c = Collectives::new(&w)?;
        let buf = w.full::<f32>(16, 1.0)?;
        let other = w.full::<f32>(16, 2.0)?;
        let signal = w.zeros::<u64>(2)?;
        let mem = local(&w, &[0f32; 16], 0)?;
        let (all, one, two) = (mem.view(), mem.view().slice(..1)?, mem.view().slice(..2)?);
        let rank_err = |r: symmem::Result<()>| {
            assert!(
                matches!(r, Err(Error::RankOutOfRange { rank, world }) if rank == n && world == n),
                "{r:?}"
            );
        };
        rank_err(c.broadcast(&all, &buf, 1, n));
        rank_err(c.put(&buf, 0, &one, n));
        rank_err(c.get(&one, &buf, 0, n));
        rank_err(c.put_with_signal(&buf, 0, &one, &signal, 0, 1, n).map(drop));
        let bounds = |r: symmem::Result<()>| {
            assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
        };
        bounds(c.all_gather(&buf, &all, 16 / n + 1));
        bounds(c.all_to_all(&buf, &all, 16 / n + 1));
        bounds(c.broadcast(&all, &buf, 17, 0));
        bounds(c.all_reduce(&buf, &other, 17, ReduceOp::Sum, Algorithm::TwoShot));
        bounds(c.reduce_scatter(&all, &buf, 16 / n + 1, ReduceOp::Min));
        bounds(c.put(&buf, 10, &all.slice(..7)?, 0));
        bounds(c.get(&two, &buf, usize::MAX, 0));
        bounds(c.put_with_signal(&buf, 0, &one, &signal, 2, 1, 0).map(drop));
        bounds(c.signal_wait_until(&signal, 2, Cmp::Ge, 0));
        bounds(c.atomic_add_all(&signal, 2, 1).map(drop));
        // Local views shorter than the count.
        bounds(c.all_gather(&buf, &one, 2));
        bounds(c.broadcast(&one, &buf, 2, 0));
        bounds(c.reduce_scatter(&one, &buf, 2, ReduceOp::Sum));
        // Partly overlapping (the same memory for both is in place, and allowed).
        let (front, back) = (buf.slice(0..4)?, buf.slice(2..6)?);
        match c.all_reduce(&front, &back, 4, ReduceOp::Sum, Algorithm::OneShot) {
            Err(
                e @ Error::OverlappingBuffers {
                    rank, bytes: 16, ..
                },
            ) if rank == me => {
                assert!(e.to_string().contains("reduce into a second buffer"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        // Nothing was launched: the signal counters are still in step.
        c.barrier()?;
        let out = w.full::<f32>(16, 0.0)?;
        c.all_reduce(&out, &other, 16, ReduceOp::Sum, Algorithm::TwoShot)?;
        assert_eq!(w.read(&out)?, vec![2.0 * n as f32; 16], "rank {me}");
        c.finalize()?;
        // Ranks that pick different block counts are told so (last: the world's heap
        // history differs from here on).
        if n > 1 {
            let grid = Grid {
                blocks: if me == 0 { 1 } else { 2 },
                threads: 1,
            };
            let r = Collectives::with_grid(&w, grid);
            assert!(
                matches!(r, Err(Error::CollectiveMismatch { .. })),
                "rank {me}: {r:?}"
            );
        }
        Ok(())
    });
}

per_world! {
    all_gather;
    all_to_all;
    broadcast;
    reductions;
    reductions_big;
    chained;
    barrier;
    put_with_signal;
    atomics;
    errors;
}
