//! A cudarc application on one GPU, written the way one is (issue 52), not the way
//! symmem sees itself: each rank makes its own context and stream first, as
//! `spawn_ranks`' backend maker; a model layer (a `World` clone, a `Collectives`, the
//! world's stream, a second stream for reading results, a cuBLAS handle on the world's
//! stream) is built, returned, and moved into a thread of its own, which runs every shape:
//!
//! 1. the shape's **first cuBLAS GEMM** into a fresh cudarc `CudaSlice`, at once lent to
//!    symmem (`World::borrow_cudarc`) and all-reduced in place (`Algorithm::Auto`);
//! 2. the same into a registered `CudaSlice` (`World::register`, the GEMM through a
//!    `CudarcView`);
//! 3. out of place, from a lent GEMM output into the registered buffer;
//! 4. a bf16 GEMM's output, lent and all-reduced in place.
//!
//! Every result is read on the **second stream** right after the collective, with no
//! synchronisation (cudarc's events, or the view's ordering, must order it), and every
//! element is checked against the host's exact sum. Worlds 2, 4 and 8, all ranks on GPU 0.
//! The inputs are -1, 0 and 1, so every product, partial sum and total is an integer that
//! f32 (and, per rank, bf16) holds exactly, in any order.

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys::cublasOperation_t};
use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};
use std::sync::Arc;
use std::time::Duration;
use symmem::backend::cuda::Cuda;
use symmem::collectives::{Algorithm, Collectives, ReduceOp, bf16};
use symmem::{Config, CudarcView, World};

/// Inner dimension of each rank's GEMM (its shard of the reduction).
const K: usize = 64;

/// (batch, out) of each step, in the order a server meets them: one token and a tiny
/// output first (8 bytes: barrier-free), then wider and longer ones (up to 8 MiB:
/// two-shot).
const SHAPES: [(usize, usize); 6] = [
    (1, 2),
    (1, 4096),
    (8, 512),
    (2, 3000),
    (64, 1024),
    (512, 4096),
];

type Failed = Box<dyn std::error::Error + Send + Sync>;

/// A small integer in -1..=1 from an index tuple (a hash, so no period hides a shift).
fn unit(a: usize, b: usize, c: usize) -> i64 {
    let mut h = (a as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (b as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        ^ (c as u64).wrapping_mul(0x1656_67b1_9e37_79f9);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 32;
    (h % 3) as i64 - 1
}

/// Rank `rank`'s activations, `batch x K`, row-major.
fn x(rank: usize, batch: usize) -> Vec<i64> {
    (0..batch * K).map(|i| unit(rank, i / K, i % K)).collect()
}

/// Rank `rank`'s weights, `K x out`, row-major.
fn w(rank: usize, out: usize) -> Vec<i64> {
    (0..K * out)
        .map(|i| unit(rank + 1000, i / out, i % out))
        .collect()
}

/// `x (batch x K) * w (K x out)`, exactly.
fn gemm_host(x: &[i64], w: &[i64], batch: usize, out: usize) -> Vec<i64> {
    let mut y = vec![0; batch * out];
    for b in 0..batch {
        for k in 0..K {
            let a = x[b * K + k];
            if a != 0 {
                for (o, y) in y[b * out..(b + 1) * out].iter_mut().enumerate() {
                    *y += a * w[k * out + o];
                }
            }
        }
    }
    y
}

/// The all-reduced GEMM output of every shape: the exact sum over `world` ranks.
fn expected(world: usize) -> Vec<Vec<i64>> {
    SHAPES
        .iter()
        .map(|&(batch, out)| {
            let mut sum = vec![0; batch * out];
            for rank in 0..world {
                for (s, y) in
                    sum.iter_mut()
                        .zip(gemm_host(&x(rank, batch), &w(rank, out), batch, out))
                {
                    *s += y;
                }
            }
            sum
        })
        .collect()
}

/// The model layer an application keeps: it owns what its steps need.
struct Layer {
    world: World<Cuda>,
    coll: Collectives<Cuda>,
    stream: Arc<CudaStream>,
    reader: Arc<CudaStream>,
    blas: CudaBlas,
}

/// Built in a function that returns it, from the rank's `World` (which the caller then
/// drops), as an application's constructor does.
fn layer(world: &World<Cuda>) -> Result<Layer, Failed> {
    let stream = Arc::clone(world.backend().cudarc_stream());
    let reader = stream.context().new_stream()?;
    let blas = CudaBlas::new(Arc::clone(&stream))?;
    Ok(Layer {
        world: world.clone(),
        coll: Collectives::new(world)?,
        stream,
        reader,
        blas,
    })
}

/// `c (batch x out) = a (batch x K) * b (K x out)`, row-major, on the handle's stream.
fn gemm<T>(
    blas: &CudaBlas,
    c: &mut impl DevicePtrMut<T>,
    a: &impl DevicePtr<T>,
    b: &impl DevicePtr<T>,
    (batch, out): (usize, usize),
    one: T,
    zero: T,
) -> Result<(), Failed>
where
    CudaBlas: Gemm<T>,
{
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: out as i32,
        n: batch as i32,
        k: K as i32,
        alpha: one,
        lda: out as i32,
        ldb: K as i32,
        beta: zero,
        ldc: out as i32,
    };
    // SAFETY: `a` holds batch*K, `b` K*out and `c` batch*out elements, on the handle's
    // stream's device.
    unsafe { blas.gemm(cfg, b, a, c) }?;
    Ok(())
}

/// The elements of `got` that differ from `want`.
fn differ<T: PartialEq>(got: &[T], want: &[T]) -> Vec<usize> {
    (0..want.len()).filter(|&i| got[i] != want[i]).collect()
}

impl Layer {
    /// `got` (read on the second stream) against `want`, every element: where they
    /// differ, a line naming the step, the first wrong elements, and how many are still
    /// wrong once both streams are synchronised and `memory` is read again (which tells
    /// a read that overtook the collective from a wrong sum).
    fn compare<T: PartialEq + std::fmt::Debug + cudarc::driver::DeviceRepr>(
        &self,
        what: &str,
        got: &[T],
        want: &[T],
        memory: &impl DevicePtr<T>,
    ) -> Option<String> {
        let wrong = differ(got, want);
        if wrong.is_empty() {
            return None;
        }
        let first = wrong
            .iter()
            .take(4)
            .map(|&i| format!("[{i}] = {:?}, the sum is {:?}", got[i], want[i]));
        let again = (|| -> Result<usize, Failed> {
            self.stream.synchronize()?;
            self.reader.synchronize()?;
            Ok(differ(&self.reader.clone_dtoh(memory)?, want).len())
        })();
        Some(format!(
            "{what}: {} of {} elements wrong: {}; read again after synchronising: {}",
            wrong.len(),
            want.len(),
            first.collect::<Vec<_>>().join("; "),
            match again {
                Ok(n) => format!("{n} wrong"),
                Err(e) => format!("failed: {e}"),
            }
        ))
    }

    /// Every shape's four steps; the lines of every wrong result.
    fn run(self, want: &[Vec<i64>]) -> Result<Vec<String>, Failed> {
        let (rank, size) = (self.world.rank(), self.world.world_size());
        let mut wrong = Vec::new();
        for (&(batch, out), want) in SHAPES.iter().zip(want) {
            let n = batch * out;
            let at = format!("world {size} rank {rank} shape {batch}x{out}");
            let want_f32: Vec<f32> = want.iter().map(|&v| v as f32).collect();
            let to_f32 = |v: &[i64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
            let xs = self.stream.clone_htod(&to_f32(&x(rank, batch)))?;
            let ws = self.stream.clone_htod(&to_f32(&w(rank, out)))?;

            // 1. The shape's first GEMM, at once lent and all-reduced in place.
            let mut y = self.stream.alloc_zeros::<f32>(n)?;
            gemm(&self.blas, &mut y, &xs, &ws, (batch, out), 1.0, 0.0)?;
            {
                let lent = self.world.borrow_cudarc(&mut y)?;
                self.coll
                    .all_reduce_in_place(&lent, n, ReduceOp::Sum, Algorithm::Auto)?;
            }
            let got = self.reader.clone_dtoh(&y)?;
            wrong.extend(self.compare(&format!("{at}: lent, in place"), &got, &want_f32, &y));

            // 2. Into a registered slice, through a view.
            let reg = self.world.register(self.stream.alloc_zeros::<f32>(n)?)?;
            gemm(
                &self.blas,
                &mut CudarcView::new(&reg),
                &xs,
                &ws,
                (batch, out),
                1.0,
                0.0,
            )?;
            self.coll
                .all_reduce_in_place(&reg, n, ReduceOp::Sum, Algorithm::Auto)?;
            let got = self.reader.clone_dtoh(&CudarcView::new(&reg))?;
            let what = format!("{at}: registered, in place");
            wrong.extend(self.compare(&what, &got, &want_f32, &CudarcView::new(&reg)));

            // 3. Out of place: a lent GEMM output into the registered slice, poisoned first.
            self.world.write(&reg, 0, &vec![f32::NAN; n])?;
            let mut src = self.stream.alloc_zeros::<f32>(n)?;
            gemm(&self.blas, &mut src, &xs, &ws, (batch, out), 1.0, 0.0)?;
            {
                let lent = self.world.borrow_cudarc(&mut src)?;
                self.coll
                    .all_reduce(&reg, &lent, n, ReduceOp::Sum, Algorithm::Auto)?;
            }
            let got = self.reader.clone_dtoh(&CudarcView::new(&reg))?;
            let what = format!("{at}: lent into registered");
            wrong.extend(self.compare(&what, &got, &want_f32, &CudarcView::new(&reg)));

            // 4. bf16: each rank's GEMM output is exact (|v| <= K); the sum is rounded once.
            let to_bf16 = |v: &[i64]| {
                v.iter()
                    .map(|&v| bf16::from_f32(v as f32))
                    .collect::<Vec<_>>()
            };
            let xb = self.stream.clone_htod(&to_bf16(&x(rank, batch)))?;
            let wb = self.stream.clone_htod(&to_bf16(&w(rank, out)))?;
            let mut yb = self.stream.alloc_zeros::<bf16>(n)?;
            gemm(
                &self.blas,
                &mut yb,
                &xb,
                &wb,
                (batch, out),
                bf16::ONE,
                bf16::ZERO,
            )?;
            {
                let lent = self.world.borrow_cudarc(&mut yb)?;
                self.coll
                    .all_reduce_in_place(&lent, n, ReduceOp::Sum, Algorithm::Auto)?;
            }
            let got = self.reader.clone_dtoh(&yb)?;
            let what = format!("{at}: bf16 lent, in place");
            wrong.extend(self.compare(&what, &got, &to_bf16(want), &yb));
        }
        Ok(wrong)
    }
}

fn application(n: usize) {
    let _one = super::app_memory::exclusive();
    let want = expected(n);
    let config = Config {
        // Bounded, so a stall fails the test instead of holding it for the default's ten
        // minutes (a healthy step takes milliseconds).
        wait_deadline: Duration::from_secs(30),
        ..Config::default()
    };
    // The application's own context and stream first, made on each rank's thread.
    let backend = |_| Cuda::from_cudarc_stream(CudaContext::new(0)?.new_stream()?);
    let results = symmem::spawn_ranks(n, &config, backend, |world| {
        let layer = layer(&world).map_err(|e| symmem::Error::Os {
            what: "building the layer",
            source: std::io::Error::other(e.to_string()),
        })?;
        drop(world);
        let want = &want;
        Ok(std::thread::scope(|s| {
            s.spawn(move || layer.run(want).map_err(|e| e.to_string()))
                .join()
        }))
    })
    .expect("spawn_ranks");
    let mut failures = Vec::new();
    for (rank, result) in results.into_iter().enumerate() {
        match result {
            Ok(Ok(Ok(wrong))) => failures.extend(wrong),
            Ok(Ok(Err(e))) => failures.push(format!("world {n} rank {rank}: failed: {e}")),
            Ok(Err(_)) => {
                failures.push(format!("world {n} rank {rank}: its layer thread panicked"))
            }
            Err(e) => failures.push(format!("world {n} rank {rank}: failed: {e} ({e:?})")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

mod cudarc_application {
    #[test]
    fn world_2() {
        if super::super::skip() {
            return;
        }
        super::application(2)
    }
    #[test]
    fn world_4() {
        if super::super::skip() {
            return;
        }
        super::application(4)
    }
    #[test]
    fn world_8() {
        if super::super::skip() {
            return;
        }
        super::application(8)
    }
}
