//! Small messages on the backend under test (`super::TestBackend`), ranks as threads: the
//! barrier-free (Lamport) all-reduce gives the one-shot all-reduce's bits (f32, bf16,
//! f16; refused for f64, whose small sums run one-shot), call after call (its buffers
//! rotate on the device), and every collective recorded once in a graph gives correct
//! results at every replay, with new inputs written before each.

use super::TestBackend;
use std::sync::{Mutex, MutexGuard};
use symmem::backend::{BackendKind, Grid};
use symmem::collectives::{Algorithm, Collectives, LAMPORT_MAX_BYTES, ReduceOp, bf16, f16};
use symmem::{Config, Error, LamportRefusal, World};

type W = World<TestBackend>;

fn gpu() -> bool {
    super::KIND != BackendKind::Cpu
}

/// On a GPU, one test at a time (every test's ranks spin waiting for each other).
fn exclusive() -> Option<MutexGuard<'static, ()>> {
    static LOCK: Mutex<()> = Mutex::new(());
    gpu().then(|| LOCK.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Runs `body` on `n` thread-ranks, failing the test on any error.
fn run<R: Send>(n: usize, body: impl Fn(W) -> symmem::Result<R> + Sync) -> Vec<R> {
    let _one = exclusive();
    let config = Config {
        heap_bytes: 32 << 20,
        ..Config::default()
    };
    let results = symmem::spawn_ranks(n, &config, super::make_backend, body).expect("launch");
    results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.unwrap_or_else(|e| panic!("world of {n}, rank {rank}: {e} ({e:?})")))
        .collect()
}

/// Element `i` of rank `r`'s input in round `k`: ordinary values, `+0.0`, `-0.0` (the
/// barrier-free all-reduce's sentinel) on some ranks, and every 13th element `-0.0` on
/// every rank (a sum of negative zeros).
fn input(r: usize, i: usize, k: usize) -> f32 {
    if i % 13 == 5 {
        return -0.0;
    }
    match (i * 7 + r * 3 + k) % 11 {
        0 => -0.0,
        1 => 0.0,
        _ => ((i * 37 + r * 101 + k * 13) % 1999) as f32 / 7.0 - 140.0,
    }
}

/// The element types under test, as f32 inputs converted.
trait Elem: symmem::collectives::Element + PartialEq + std::fmt::Debug {
    /// Whether the barrier-free all-reduce serves the type (else it is refused).
    const LAMPORT: bool = true;
    fn from(x: f32) -> Self;
    fn bits(self) -> u64;
    /// The sum over ranks in rank order from `+0.0`, as the device folds it.
    fn sum(xs: impl Iterator<Item = Self>) -> Self;
}

impl Elem for f32 {
    fn from(x: f32) -> Self {
        x
    }
    fn bits(self) -> u64 {
        self.to_bits().into()
    }
    fn sum(xs: impl Iterator<Item = Self>) -> Self {
        xs.fold(0.0, |a, x| a + x)
    }
}

impl Elem for bf16 {
    fn from(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn bits(self) -> u64 {
        self.to_bits().into()
    }
    fn sum(xs: impl Iterator<Item = Self>) -> Self {
        bf16::from_f32(xs.fold(0.0, |a, x| a + x.to_f32()))
    }
}

impl Elem for f16 {
    fn from(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn bits(self) -> u64 {
        self.to_bits().into()
    }
    fn sum(xs: impl Iterator<Item = Self>) -> Self {
        f16::from_f32(xs.fold(0.0, |a, x| a + x.to_f32()))
    }
}

impl Elem for f64 {
    const LAMPORT: bool = false;
    /// `x` a little off, so the sums round in f64 (`-0.0` stays `-0.0`).
    fn from(x: f32) -> Self {
        let x: f64 = x.into();
        x * (1.0 + 2f64.powi(-40))
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn sum(xs: impl Iterator<Item = Self>) -> Self {
        xs.fold(0.0, |a, x| a + x)
    }
}

/// Counts that hit every path: one element, tails of 1-3 words, odd counts of 16-bit
/// types, a few blocks, and the largest the barrier-free path takes.
fn counts<T>() -> Vec<usize> {
    let max = LAMPORT_MAX_BYTES / size_of::<T>();
    vec![1, 2, 3, 4, 5, 7, 8, 9, 17, 255, 1000, 4099, max - 1, max]
}

/// One all-reduce of `count` elements in round `k`, one-shot, barrier-free and chosen by
/// size (`Algorithm::Auto`); returns the three results' bits and the host reference's.
/// Where the barrier-free all-reduce is refused (`!T::LAMPORT`: checked here), its
/// result is the one-shot's.
fn both<T: Elem>(
    w: &W,
    c: &Collectives<TestBackend>,
    count: usize,
    k: usize,
) -> symmem::Result<[Vec<u64>; 4]> {
    let (me, n) = (w.rank(), w.world_size());
    let mine: Vec<T> = (0..count).map(|i| T::from(input(me, i, k))).collect();
    let src = w.from_slice(&mine)?;
    let one = w.zeros::<T>(count)?;
    let lamport = w.zeros::<T>(count)?;
    let auto = w.zeros::<T>(count)?;
    w.barrier()?;
    c.all_reduce(&one, &src, count, ReduceOp::Sum, Algorithm::OneShot)?;
    let barrier_free = c.all_reduce(&lamport, &src, count, ReduceOp::Sum, Algorithm::Lamport);
    if T::LAMPORT {
        barrier_free?;
    } else {
        assert!(
            matches!(
                barrier_free,
                Err(Error::LamportUnavailable {
                    why: LamportRefusal::NoKernel,
                    ..
                })
            ),
            "{}: {barrier_free:?}",
            std::any::type_name::<T>()
        );
    }
    c.all_reduce(&auto, &src, count, ReduceOp::Sum, Algorithm::Auto)?;
    let bits = |v: Vec<T>| v.into_iter().map(T::bits).collect::<Vec<_>>();
    let want = (0..count)
        .map(|i| T::sum((0..n).map(|r| T::from(input(r, i, k)))).bits())
        .collect();
    let one = bits(w.read(&one)?);
    let lamport = if T::LAMPORT {
        bits(w.read(&lamport)?)
    } else {
        one.clone()
    };
    Ok([one, lamport, bits(w.read(&auto)?), want])
}

fn bit_for_bit<T: Elem>(n: usize) {
    run(n, |w| {
        let c = Collectives::new(&w)?;
        for (k, count) in counts::<T>().into_iter().enumerate() {
            let [one, lamport, auto, want] = both::<T>(&w, &c, count, k)?;
            let what = format!(
                "{} world {n} count {count} rank {}",
                std::any::type_name::<T>(),
                w.rank()
            );
            assert_eq!(one, want, "one-shot against the host, {what}");
            assert_eq!(lamport, one, "barrier-free against one-shot, {what}");
            assert_eq!(auto, one, "chosen by size against one-shot, {what}");
        }
        Ok(())
    });
}

#[test]
fn lamport_equals_one_shot_bit_for_bit_f32() {
    if super::skip() {
        return;
    }
    for n in [2, 3, 4, 8] {
        bit_for_bit::<f32>(n);
    }
}

#[test]
fn lamport_equals_one_shot_bit_for_bit_bf16() {
    if super::skip() {
        return;
    }
    for n in [2, 3, 4, 8] {
        bit_for_bit::<bf16>(n);
    }
}

#[test]
fn lamport_equals_one_shot_bit_for_bit_f16() {
    if super::skip() {
        return;
    }
    for n in [2, 3, 4, 8] {
        bit_for_bit::<f16>(n);
    }
}

/// f64: the barrier-free all-reduce refused at every count, and the small all-reduce
/// chosen by size the one-shot's bits, equal to the host's sum in rank order.
#[test]
fn small_f64_sums_refuse_lamport_and_run_one_shot_bit_for_bit() {
    if super::skip() {
        return;
    }
    for n in [2, 3, 4, 8] {
        bit_for_bit::<f64>(n);
    }
}

/// 1000 calls back to back, each with new inputs and a size of its own (so each call
/// clears a different length of the buffer the call before used, and runs as one block
/// or as several: on the CPU a grid of 3 blocks of 2 threads), every result checked.
#[test]
fn a_thousand_lamport_calls_rotate_their_buffers() {
    if super::skip() {
        return;
    }
    let sizes = [1, 4099, 3, 16384, 17, 2, 9000, 5];
    run(3, |w| {
        let c = if gpu() {
            Collectives::new(&w)?
        } else {
            Collectives::with_grid(&w, Grid::new(3, 2))?
        };
        let max = sizes.iter().max().copied().unwrap_or(1);
        let src = w.zeros::<f32>(max)?;
        let dst = w.zeros::<f32>(max)?;
        w.barrier()?;
        for k in 0..1000 {
            let count = sizes[k % sizes.len()];
            let mine: Vec<f32> = (0..count).map(|i| input(w.rank(), i, k)).collect();
            w.write(&src, 0, &mine)?;
            c.all_reduce(&dst, &src, count, ReduceOp::Sum, Algorithm::Lamport)?;
            let got = w.read(&dst)?;
            for (i, g) in got[..count].iter().enumerate() {
                let want = f32::sum((0..3).map(|r| input(r, i, k)));
                assert_eq!(
                    g.to_bits(),
                    want.to_bits(),
                    "call {k}, count {count}, element {i}, rank {}",
                    w.rank()
                );
            }
        }
        Ok(())
    });
}

#[test]
fn lamport_refuses_what_it_cannot_do() {
    if super::skip() {
        return;
    }
    run(2, |w| {
        let c = Collectives::new(&w)?;
        let big = LAMPORT_MAX_BYTES / 4 + 1;
        let (src, dst) = (w.zeros::<f32>(big)?, w.zeros::<f32>(big)?);
        // Separate buffers: an all-reduce in place is refused for that alone.
        let ints = (w.zeros::<i32>(4)?, w.zeros::<i32>(4)?);
        let doubles = (w.zeros::<f64>(4)?, w.zeros::<f64>(4)?);
        let halves = (w.zeros::<f16>(4)?, w.zeros::<f16>(4)?);
        let huge = Collectives::with_lamport_capacity(&w, Grid::new(1, 1), usize::MAX);
        assert!(
            matches!(huge, Err(Error::TooLarge { .. })),
            "{huge:?} (rank {})",
            w.rank()
        );
        w.barrier()?;
        for (what, r) in [
            (
                "too large",
                c.all_reduce(&dst, &src, big, ReduceOp::Sum, Algorithm::Lamport),
            ),
            (
                "max",
                c.all_reduce(&dst, &src, 4, ReduceOp::Max, Algorithm::Lamport),
            ),
            (
                "i32",
                c.all_reduce(&ints.0, &ints.1, 4, ReduceOp::Sum, Algorithm::Lamport),
            ),
            (
                "f64",
                c.all_reduce(&doubles.0, &doubles.1, 4, ReduceOp::Sum, Algorithm::Lamport),
            ),
            (
                "f16 max",
                c.all_reduce(&halves.0, &halves.1, 4, ReduceOp::Max, Algorithm::Lamport),
            ),
        ] {
            // Each refusal says why, and names what to do instead.
            let fix = match &r {
                Err(Error::LamportUnavailable {
                    why: LamportRefusal::OverCapacity { capacity },
                    ..
                }) if what == "too large" && *capacity == LAMPORT_MAX_BYTES => {
                    "Collectives::with_lamport_capacity"
                }
                Err(Error::LamportUnavailable {
                    why: LamportRefusal::NoKernel,
                    ..
                }) if what != "too large" => "use Algorithm::Auto",
                other => panic!("{what}: {other:?} (rank {})", w.rank()),
            };
            let message = r.unwrap_err().to_string();
            assert!(message.contains(fix), "{what}: {message}");
            assert!(
                message.starts_with(&format!("rank {}: ", w.rank())),
                "{message}"
            );
        }
        Ok(())
    });
}

/// Every collective recorded once in a graph, replayed many times (1000 on a GPU) with
/// new inputs written before each replay; results checked after the first replays, at
/// every 100th and at the last.
#[test]
fn every_collective_captured_once_and_replayed() {
    if super::skip() {
        return;
    }
    let replays = if gpu() { 1000 } else { 60 };
    let count = 1000;
    run(4, |w| {
        let (me, n) = (w.rank(), w.world_size());
        let c = Collectives::new(&w)?;
        let src = w.zeros::<f32>(n * count)?;
        let (one, two, lamport) = (
            w.zeros::<f32>(count)?,
            w.zeros::<f32>(count)?,
            w.zeros::<f32>(count)?,
        );
        let scattered = w.zeros::<f32>(count)?;
        let gathered = w.zeros::<f32>(n * count)?;
        let exchanged = w.zeros::<f32>(n * count)?;
        let broadcast = w.zeros::<f32>(count)?;
        let put = w.zeros::<f32>(n)?;
        w.barrier()?;
        let graph = w.capture(|| {
            c.barrier()?;
            c.all_reduce(&one, &src, count, ReduceOp::Sum, Algorithm::OneShot)?;
            c.all_reduce(&two, &src, count, ReduceOp::Sum, Algorithm::TwoShot)?;
            c.all_reduce(&lamport, &src, count, ReduceOp::Sum, Algorithm::Lamport)?;
            c.reduce_scatter(&scattered, &src, count, ReduceOp::Sum)?;
            c.all_gather(&gathered, &src.slice(..count)?.local(), count)?;
            c.all_to_all(&exchanged, &src.slice(..)?.local(), count)?;
            c.broadcast(&broadcast, &src, count, 1)?;
            for to in 0..n {
                c.put(&put, me, &src.slice(..1)?.local(), to)?;
            }
            c.barrier()
        })?;
        // Only launches are recorded.
        let refused = w.capture(|| w.barrier());
        assert!(
            matches!(refused, Err(Error::Capturing { .. })),
            "{refused:?}"
        );
        let value = |r: usize, i: usize, k: usize| input(r, i, k);
        for k in 0..replays {
            let mine: Vec<f32> = (0..n * count).map(|i| value(me, i, k)).collect();
            w.write(&src, 0, &mine)?;
            graph.replay()?;
            if !(k < 3 || k % 100 == 0 || k + 1 == replays) {
                continue;
            }
            let what = format!("replay {k}, rank {me}");
            let sum = |i: usize| f32::sum((0..n).map(|r| value(r, i, k))).to_bits();
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            let want: Vec<u32> = (0..count).map(sum).collect();
            assert_eq!(bits(w.read(&one)?), want, "one-shot, {what}");
            assert_eq!(bits(w.read(&two)?), want, "two-shot, {what}");
            assert_eq!(bits(w.read(&lamport)?), want, "barrier-free, {what}");
            let want: Vec<u32> = (0..count).map(|i| sum(me * count + i)).collect();
            assert_eq!(bits(w.read(&scattered)?), want, "reduce-scatter, {what}");
            let want: Vec<u32> = (0..n * count)
                .map(|j| value(j / count, j % count, k).to_bits())
                .collect();
            assert_eq!(bits(w.read(&gathered)?), want, "all-gather, {what}");
            let want: Vec<u32> = (0..n * count)
                .map(|j| value(j / count, me * count + j % count, k).to_bits())
                .collect();
            assert_eq!(bits(w.read(&exchanged)?), want, "all-to-all, {what}");
            let want: Vec<u32> = (0..count).map(|i| value(1, i, k).to_bits()).collect();
            assert_eq!(bits(w.read(&broadcast)?), want, "broadcast, {what}");
            let want: Vec<u32> = (0..n).map(|r| value(r, 0, k).to_bits()).collect();
            assert_eq!(bits(w.read(&put)?), want, "put, {what}");
        }
        drop(graph);
        w.barrier()
    });
}
