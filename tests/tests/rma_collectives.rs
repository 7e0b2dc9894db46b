//! Collectives at every world size: all-gather, all-to-all, broadcast (every root),
//! all-reduce one-shot and two-shot, reduce-scatter; sum/min/max on f32, bf16, i32, f16
//! and f64.
//!
//! Integers are compared bit-exactly with a host reference. Floats are compared with
//! the sum computed in f64 (exact for the narrower types) within the
//! recursive-summation bound `world * EPS * sum(|x|)` of the type they are summed in
//! (`f32` for bf16 and f16, `f64` for f64), plus half an ulp of the element type (2^-8
//! relative for bf16, 2^-11 for f16) for the rounding at the end; min/max are exact. All ranks must agree bit for bit, and two-shot must equal
//! one-shot.
#![allow(clippy::needless_range_loop)] // rank-indexed loops read best in tests

mod rma_common;
use rma_common::*;
use symmem::Grid;
use symmem_rma::collectives::{self, ReduceOp, Reducible, signal_words};
use symmem_rma::{bf16, f16};

const GRID: Grid = Grid {
    blocks: 2,
    threads: 4,
};

/// Byte offsets of the signal array, the source and the destination in every heap,
/// for buffers of `src_len` and `dst_len` bytes, with extra misalignment `dmis`/`smis`.
struct Layout {
    sig: usize,
    src: usize,
    dst: usize,
    heap: usize,
}

fn layout(world: usize, src_len: usize, dst_len: usize, smis: usize, dmis: usize) -> Layout {
    let sig = 0;
    let src = (signal_words(world, GRID.blocks as usize) * 8).next_multiple_of(64) + smis;
    let dst = (src + src_len + 64).next_multiple_of(64) + dmis;
    Layout {
        sig,
        src,
        dst,
        heap: dst + dst_len + 64,
    }
}

fn zero_signals(w: &World, l: &Layout) {
    for r in 0..w.ranks {
        w.bytes_mut(r)[l.sig..l.src].fill(0);
    }
}

/// Sizes for the byte collectives: the big one only at the smaller world sizes' cost.
fn byte_sizes() -> [usize; 7] {
    SIZES
}

fn all_gather(world: usize) {
    for n in byte_sizes() {
        for (smis, dmis) in [(0, 0), (3, 5)] {
            let l = layout(world, n, world * n, smis, dmis);
            let w = World::new(world, l.heap);
            zero_signals(&w, &l);
            let pats: Vec<Vec<u8>> = (0..world)
                .map(|r| (0..n).map(|i| pattern(r, i)).collect())
                .collect();
            for r in 0..world {
                w.bytes_mut(r)[l.src..l.src + n].copy_from_slice(&pats[r]);
            }
            w.run(GRID, |arch, team, r| {
                let h = w.heap_ptr(r);
                // SAFETY: layout in range; signal array zeroed; same grid everywhere.
                unsafe {
                    collectives::all_gather(
                        arch,
                        team,
                        h.add(l.dst),
                        h.add(l.src),
                        n,
                        h.add(l.sig).cast(),
                    )
                };
            });
            for t in 0..world {
                for r in 0..world {
                    let at = l.dst + r * n;
                    assert_bytes(
                        &w.bytes(t)[at..at + n],
                        &pats[r],
                        &format!("all_gather world {world} n {n} rank {t} chunk {r}"),
                    );
                }
                assert_eq!(w.bytes(t)[l.dst + world * n], FILL);
            }
        }
    }
}

fn all_to_all(world: usize) {
    for n in byte_sizes() {
        if n > 1 << 16 && world > 4 {
            continue; // 8 x 8 MiB of byte checks in debug: the 4-rank run covers it
        }
        let l = layout(world, world * n, world * n, 1, 0);
        let w = World::new(world, l.heap);
        zero_signals(&w, &l);
        // Source chunk j of rank i: pattern(i * world + j).
        for i in 0..world {
            for j in 0..world {
                let chunk: Vec<u8> = (0..n).map(|k| pattern(i * world + j, k)).collect();
                w.bytes_mut(i)[l.src + j * n..l.src + (j + 1) * n].copy_from_slice(&chunk);
            }
        }
        w.run(GRID, |arch, team, r| {
            let h = w.heap_ptr(r);
            // SAFETY: as in all_gather.
            unsafe {
                collectives::all_to_all(
                    arch,
                    team,
                    h.add(l.dst),
                    h.add(l.src),
                    n,
                    h.add(l.sig).cast(),
                )
            };
        });
        for j in 0..world {
            for i in 0..world {
                let want: Vec<u8> = (0..n).map(|k| pattern(i * world + j, k)).collect();
                let at = l.dst + i * n;
                assert_bytes(
                    &w.bytes(j)[at..at + n],
                    &want,
                    &format!("all_to_all world {world} n {n} rank {j} from {i}"),
                );
            }
        }
    }
}

fn broadcast(world: usize) {
    for n in byte_sizes() {
        let l = layout(world, n, n, 0, 3);
        let w = World::new(world, l.heap);
        zero_signals(&w, &l);
        let roots: Vec<usize> = if n > 1 << 16 {
            vec![world - 1]
        } else {
            (0..world).collect()
        };
        for root in roots {
            let pats: Vec<Vec<u8>> = (0..world)
                .map(|r| (0..n).map(|i| pattern(r + 10 * root, i)).collect())
                .collect();
            for r in 0..world {
                w.bytes_mut(r)[l.src..l.src + n].copy_from_slice(&pats[r]);
            }
            // The signal array is reused across roots: its counters keep growing.
            w.run(GRID, |arch, team, r| {
                let h = w.heap_ptr(r);
                // SAFETY: as in all_gather.
                unsafe {
                    collectives::broadcast(
                        arch,
                        team,
                        h.add(l.dst),
                        h.add(l.src),
                        n,
                        root,
                        h.add(l.sig).cast(),
                    )
                };
            });
            for t in 0..world {
                assert_bytes(
                    &w.bytes(t)[l.dst..l.dst + n],
                    &pats[root],
                    &format!("broadcast world {world} n {n} root {root} rank {t}"),
                );
                assert_eq!(w.bytes(t)[l.dst + n], FILL);
            }
        }
    }
}

/// How a reduction result is judged.
trait Judge: Reducible + bytemuck::Pod + PartialEq + std::fmt::Debug {
    fn value(r: usize, i: usize) -> Self;
    /// Checks `got` for element inputs `xs` under `op`.
    fn check(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String>;
}

impl Judge for i32 {
    fn value(r: usize, i: usize) -> Self {
        ((i as i32).wrapping_mul(0x3b9a_ca07) ^ (r as i32 * 977)).wrapping_add(i as i32 >> 3)
    }
    fn check(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String> {
        let want = match op {
            ReduceOp::Sum => xs.iter().fold(0i32, |a, &x| a.wrapping_add(x)),
            ReduceOp::Min => *xs.iter().min().unwrap(),
            ReduceOp::Max => *xs.iter().max().unwrap(),
        };
        (got == want)
            .then_some(())
            .ok_or(format!("got {got}, want {want}"))
    }
}

/// `got` against the f64 sum (or min, max) of `xs`, for a sum accumulated with machine
/// epsilon `eps` and rounded at the end to within `rel` relative.
fn float_check(op: ReduceOp, xs: &[f64], got: f64, eps: f64, rel: f64) -> Result<(), String> {
    let world = xs.len() as f64;
    let (want, tol) = match op {
        ReduceOp::Sum => {
            let abs: f64 = xs.iter().map(|x| x.abs()).sum();
            let want: f64 = xs.iter().sum();
            (want, world * eps * abs + rel * want.abs())
        }
        ReduceOp::Min => (xs.iter().copied().fold(f64::INFINITY, f64::min), 0.0),
        ReduceOp::Max => (xs.iter().copied().fold(f64::NEG_INFINITY, f64::max), 0.0),
    };
    ((got - want).abs() <= tol)
        .then_some(())
        .ok_or(format!("got {got}, want {want} +- {tol}"))
}

impl Judge for f32 {
    fn value(r: usize, i: usize) -> Self {
        ((i * 37 + r * 101) % 1999) as f32 / 7.0 - 140.0
    }
    fn check(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String> {
        let xs: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        float_check(op, &xs, got as f64, f32::EPSILON as f64, 0.0)
    }
}

impl Judge for bf16 {
    fn value(r: usize, i: usize) -> Self {
        bf16::from_f32(f32::value(r, i))
    }
    fn check(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String> {
        let xs: Vec<f64> = xs.iter().map(|x| x.to_f32() as f64).collect();
        float_check(
            op,
            &xs,
            got.to_f32() as f64,
            f32::EPSILON as f64,
            1.0 / 256.0,
        )
    }
}

impl Judge for f16 {
    fn value(r: usize, i: usize) -> Self {
        f16::from_f32(f32::value(r, i))
    }
    fn check(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String> {
        let xs: Vec<f64> = xs.iter().map(|x| x.to_f64()).collect();
        float_check(op, &xs, got.to_f64(), f32::EPSILON as f64, 1.0 / 2048.0)
    }
}

impl Judge for f64 {
    fn value(r: usize, i: usize) -> Self {
        ((i * 37 + r * 101) % 1999) as f64 / 7.0 - 140.0
    }
    fn check(op: ReduceOp, xs: &[Self], got: Self) -> Result<(), String> {
        float_check(op, xs, got, f64::EPSILON, 0.0)
    }
}

fn reduce<T: Judge>(world: usize, op: ReduceOp, counts: &[usize]) {
    let sz = size_of::<T>();
    for &count in counts {
        // src: world * count elements (reduce-scatter's input; all-reduce uses the
        // first `count`); dst: one-shot | two-shot | reduce-scatter results.
        let l = layout(world, world * count * sz, 3 * count * sz + 32, 0, 0);
        let two = l.dst + (count * sz).next_multiple_of(16);
        let rs = two + (count * sz).next_multiple_of(16);
        let w = World::new(world, l.heap);
        zero_signals(&w, &l);
        let inputs: Vec<Vec<T>> = (0..world)
            .map(|r| (0..world * count).map(|i| T::value(r, i)).collect())
            .collect();
        for r in 0..world {
            w.write(r, l.src, &inputs[r]);
        }
        w.run(GRID, |arch, team, r| {
            let h = w.heap_ptr(r);
            let (src, sig) = (
                h.wrapping_add(l.src).cast::<T>(),
                h.wrapping_add(l.sig).cast(),
            );
            // SAFETY: layout in range and aligned; signal array zeroed; same grid.
            unsafe {
                collectives::all_reduce_one_shot(
                    arch,
                    team,
                    op,
                    h.add(l.dst).cast::<T>(),
                    src,
                    count,
                    sig,
                );
                collectives::all_reduce_two_shot(
                    arch,
                    team,
                    op,
                    h.add(two).cast::<T>(),
                    src,
                    count,
                    sig,
                );
                collectives::reduce_scatter(arch, team, op, h.add(rs).cast::<T>(), src, count, sig);
            }
        });
        let first: Vec<T> = w.read(0, l.dst, count);
        for t in 0..world {
            let one: Vec<T> = w.read(t, l.dst, count);
            let two: Vec<T> = w.read(t, two, count);
            let scat: Vec<T> = w.read(t, rs, count);
            assert_eq!(
                one, first,
                "one-shot results differ between ranks 0 and {t}"
            );
            assert_eq!(two, one, "two-shot != one-shot on rank {t}");
            for i in 0..count {
                let xs: Vec<T> = (0..world).map(|r| inputs[r][i]).collect();
                T::check(op, &xs, one[i]).unwrap_or_else(|e| {
                    panic!("all_reduce {op:?} world {world} count {count} element {i}: {e}")
                });
                let xs: Vec<T> = (0..world).map(|r| inputs[r][t * count + i]).collect();
                T::check(op, &xs, scat[i]).unwrap_or_else(|e| panic!("reduce_scatter {op:?} world {world} count {count} rank {t} element {i}: {e}"));
            }
        }
    }
}

const SMALL: [usize; 6] = [0, 1, 15, 16, 17, 4095];
/// (1 MiB + 3 bytes) of i32, rounded up.
const BIG: usize = ((1 << 20) + 3usize).div_ceil(4);

fn reductions(world: usize) {
    for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
        reduce::<i32>(world, op, &SMALL);
        reduce::<f32>(world, op, &SMALL);
        reduce::<bf16>(world, op, &SMALL);
        reduce::<f16>(world, op, &SMALL);
        reduce::<f64>(world, op, &SMALL);
    }
}

fn reductions_big(world: usize) {
    reduce::<i32>(world, ReduceOp::Sum, &[BIG]);
    reduce::<f32>(world, ReduceOp::Max, &[BIG / 4]);
}

/// Several collectives back to back on one signal array (the counters keep growing).
fn sequence(world: usize) {
    let n = 100;
    let l = layout(world, 4 * n, 4 * n, 0, 0);
    let w = World::new(world, l.heap);
    zero_signals(&w, &l);
    for r in 0..world {
        w.write::<i32>(r, l.src, &vec![r as i32 + 1; n]);
    }
    w.run(GRID, |arch, team, r| {
        let h = w.heap_ptr(r);
        let (src, dst, sig) = (
            h.wrapping_add(l.src).cast::<i32>(),
            h.wrapping_add(l.dst).cast::<i32>(),
            h.wrapping_add(l.sig).cast(),
        );
        for round in 0..5 {
            // SAFETY: as above. Each round reads what the previous one wrote.
            unsafe {
                let (from, to) = if round % 2 == 0 {
                    (src, dst)
                } else {
                    (dst, src)
                };
                collectives::all_reduce_two_shot(arch, team, ReduceOp::Sum, to, from, n, sig);
                assert!(collectives::barrier(arch, team, sig));
            }
        }
    });
    // Round k multiplies by `world` after the first sum: S * world^4, S = w(w+1)/2.
    let s = (world * (world + 1) / 2) as i32;
    let want = s.wrapping_mul((world as i32).pow(4));
    for t in 0..world {
        assert_eq!(w.read::<i32>(t, l.dst, n), vec![want; n], "rank {t}");
    }
}

per_world! {
    all_gather => super::all_gather;
    all_to_all => super::all_to_all;
    broadcast => super::broadcast;
    reductions => super::reductions;
    reductions_big => super::reductions_big;
    sequence => super::sequence;
}
