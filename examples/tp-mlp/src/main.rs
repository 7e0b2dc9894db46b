//! A tensor-parallel MLP block as a Rust serving engine writes it, with symmem as its
//! all-reduce: `y = relu(x W1) W2`, `W1` split by columns (column-parallel) and `W2` by
//! rows (row-parallel) across the ranks, so each rank's `relu(x W1_r) W2_r` is a partial
//! sum of `y`, which an all-reduce completes. On CUDA the GEMMs are cuBLAS's (through
//! cudarc) on the application's own cudarc buffers, the ReLU the application's own PTX,
//! and the partial output is a cudarc `CudaSlice` **registered** with symmem
//! (`World::register`), all-reduced **in place** through its own peer table, with
//! nothing staged. A second variant fuses the all-reduce with a residual add and RMSNorm
//! (the fused-allreduce-rmsnorm example's kernel, reading the registered output through
//! its table). Both are checked against one rank computing the whole block (`relu(x W1)
//! W2` with the full weights; inputs are small integers, so every sum is exact in f32 and
//! the results must be equal, bit for bit) and the RMSNorm against a host reference in
//! f64. On the CPU backend the same block runs with host GEMMs at small sizes.
//!
//! `tp-mlp [--ranks N] [--backend auto|cpu|cuda] [--batch B] [--hidden H]`: N ranks as
//! threads (default 2); `auto` takes CUDA when a GPU answers, else the CPU backend.
//! `--bench`: on CUDA, times the block for batches 1 to 64 at the hidden sizes given
//! (`--hidden 4096 --hidden 8192`): symmem in place on registered memory, the
//! copy-in/copy-out workaround (the output copied into a symmetric buffer, all-reduced,
//! copied back), the fused variant, and the share of the block the all-reduce takes.
//! `--help` lists the options.

use clap::{Parser, ValueEnum};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys::cublasOperation_t};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
    PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;
use symmem::backend::{Backend, cpu::Cpu, cuda::Cuda};
use symmem::collectives::{Algorithm, Collectives, ReduceOp, signal_words};
use symmem::{AsDeviceSlice, Config, CudarcView, Grid, Rendezvous, World};

/// Why a rank failed: symmem's or cudarc's error, or an element that differs.
type Failed = Box<dyn std::error::Error + Send + Sync>;

use fused_allreduce_rmsnorm::{KERNELS, kernels};

/// The FFN's width is this many times the hidden size.
const FFN_MULT: usize = 4;
const EPS: f32 = 1e-6;
/// The fused kernel's grid: two blocks of 32 threads, one row per thread.
const FUSED_GRID: Grid = Grid::new(2, 32);
/// Batches the benchmark sweeps.
const BATCHES: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The application's ReLU, in place, one element per thread (PTX as a cudarc program
/// brings it; `nvcc --ptx` output works the same).
const RELU_PTX: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry relu(
    .param .u64 relu_p,
    .param .u32 relu_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [relu_p];
    ld.param.u32 %r1, [relu_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    max.f32 %f2, %f1, 0f00000000;
    st.global.f32 [%rd4], %f2;
DONE:
    ret;
}
"#;

/// The block's sizes: `batch` rows of `hidden`, an FFN of `ffn` split over `world` ranks.
#[derive(Clone, Copy, Debug)]
struct Shape {
    batch: usize,
    hidden: usize,
    ffn: usize,
    world: usize,
}

impl Shape {
    /// This rank's share of the FFN's width.
    fn shard(&self) -> usize {
        self.ffn / self.world
    }
}

// The inputs: small integers, about 64 non-zeros per row of `x`, so that every partial
// sum of the block is an integer below 2^24 (exact in f32, and in TF32's inputs).

/// -1, 0 or 1, mixed from `a` and `b` (so no row or column of a weight is constant).
fn trit(a: usize, b: usize) -> f32 {
    let h = (a as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (b as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    ((h ^ (h >> 29)) % 3) as f32 - 1.0
}

/// `x[b][k]`: -1, 0 or 1 at about 64 places per row, else 0.
fn x_at(hidden: usize, b: usize, k: usize) -> f32 {
    let stride = (hidden / 64).max(1);
    if !(k + 5 * b).is_multiple_of(stride) {
        0.0
    } else {
        trit(b, k + 1_000_003)
    }
}

/// `W1[k][f]` of the full weights.
fn w1_at(k: usize, f: usize) -> f32 {
    trit(k, f + 7)
}

/// `W2[f][j]` of the full weights.
fn w2_at(f: usize, j: usize) -> f32 {
    trit(f + 13, j)
}

/// The residual stream, the same on every rank.
fn residual_at(i: usize) -> f32 {
    ((i * 5) % 17) as f32 / 4.0 - 2.0
}

/// The RMSNorm weight.
fn norm_weight_at(j: usize) -> f32 {
    0.5 + (j % 9) as f32 / 8.0
}

/// Rank `rank`'s weights, row-major: `W1[:, rank*s..(rank+1)*s]` (`hidden x s`) and
/// `W2[rank*s..(rank+1)*s, :]` (`s x hidden`), `s` the shard.
fn shard_weights(shape: Shape, rank: usize) -> (Vec<f32>, Vec<f32>) {
    let (h, s) = (shape.hidden, shape.shard());
    let first = rank * s;
    let w1 = (0..h * s).map(|i| w1_at(i / s, first + i % s)).collect();
    let w2 = (0..s * h).map(|i| w2_at(first + i / h, i % h)).collect();
    (w1, w2)
}

fn inputs(shape: Shape) -> Vec<f32> {
    let h = shape.hidden;
    (0..shape.batch * h)
        .map(|i| x_at(h, i / h, i % h))
        .collect()
}

/// Row-major `c[m x n] = a[m x k] b[k x n]` on the host.
fn host_gemm(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    for (i, row) in c.chunks_mut(n).take(m).enumerate() {
        row.fill(0.0);
        for (p, &x) in a[i * k..(i + 1) * k].iter().enumerate() {
            if x != 0.0 {
                for (out, &w) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                    *out += x * w;
                }
            }
        }
    }
}

/// The reference of the fused variant, in f64: `(residual + y, rmsnorm(residual + y))`.
fn fused_reference(y: &[f32], hidden: usize) -> (Vec<f64>, Vec<f64>) {
    let res: Vec<f64> = y
        .iter()
        .enumerate()
        .map(|(i, &v)| f64::from(v) + f64::from(residual_at(i)))
        .collect();
    let mut out = vec![0.0; res.len()];
    for (row, line) in res.chunks(hidden).enumerate() {
        let mean = line.iter().map(|v| v * v).sum::<f64>() / hidden as f64;
        let scale = 1.0 / (mean + f64::from(EPS)).sqrt();
        for (j, &v) in line.iter().enumerate() {
            out[row * hidden + j] = v * scale * f64::from(norm_weight_at(j));
        }
    }
    (res, out)
}

/// Equal to the f64 reference within f32's rounding of the sums and the norm.
fn close(rank: usize, what: &str, got: &[f32], want: &[f64]) -> Result<(), Failed> {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if (f64::from(g) - w).abs() > 1e-5 * w.abs().max(1.0) {
            return Err(format!("rank {rank}: {what}[{i}] is {g}, the reference {w}").into());
        }
    }
    Ok(())
}

/// `got` equal to `want` element for element (`want`, the one-rank block, is not all
/// zeros: a check against zeros would prove nothing).
fn equal(rank: usize, what: &str, got: &[f32], want: &[f32]) -> Result<(), Failed> {
    if want.iter().all(|&v| v == 0.0) {
        return Err(format!("rank {rank}: {what}: the one-rank block is all zeros").into());
    }
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None if got.len() == want.len() => Ok(()),
        None => Err(format!(
            "rank {rank}: {what}: {} elements, not {}",
            got.len(),
            want.len()
        )
        .into()),
        Some(i) => Err(format!(
            "rank {rank}: {what}[{i}] is {}, the one-rank block's {}",
            got[i], want[i]
        )
        .into()),
    }
}

/// One rank's half of the block on some backend: its weights and activations, and the
/// GEMMs that leave its partial output in `y`.
trait Block<B: Backend> {
    /// `y[0..batch*hidden] = relu(x W1_r) W2_r` for the first `batch` rows of `x`.
    fn forward(
        &mut self,
        world: &World<B>,
        y: &impl AsDeviceSlice<f32, B>,
        batch: usize,
    ) -> Result<(), Failed>;
}

/// The block on the CPU backend: host GEMMs over the rank's memory (host memory there).
struct HostBlock {
    shape: Shape,
    x: Vec<f32>,
    w1: Vec<f32>,
    w2: Vec<f32>,
}

impl HostBlock {
    fn new(shape: Shape, rank: usize) -> Self {
        let (w1, w2) = shard_weights(shape, rank);
        Self {
            shape,
            x: inputs(shape),
            w1,
            w2,
        }
    }
}

impl Block<Cpu> for HostBlock {
    fn forward(
        &mut self,
        world: &World<Cpu>,
        y: &impl AsDeviceSlice<f32, Cpu>,
        batch: usize,
    ) -> Result<(), Failed> {
        let (h, s) = (self.shape.hidden, self.shape.shard());
        let mut act = vec![0.0; batch * s];
        host_gemm(&mut act, &self.x, &self.w1, batch, h, s);
        act.iter_mut().for_each(|v| *v = v.max(0.0));
        let mut out = vec![0.0; batch * h];
        host_gemm(&mut out, &act, &self.w2, batch, s, h);
        world.write(y, 0, &out)?;
        Ok(())
    }
}

/// The block on CUDA: the application's cudarc buffers, cuBLAS's GEMMs and its own
/// ReLU, all on the world's stream (the application's, adopted by the backend).
struct CudaBlock {
    shape: Shape,
    blas: CudaBlas,
    relu: CudaFunction,
    stream: Arc<CudaStream>,
    x: CudaSlice<f32>,
    w1: CudaSlice<f32>,
    w2: CudaSlice<f32>,
    act: CudaSlice<f32>,
}

impl CudaBlock {
    /// Rank `rank`'s block of `shape` (for up to `shape.batch` rows) on `stream`.
    fn new(stream: &Arc<CudaStream>, shape: Shape, rank: usize) -> Result<Self, Failed> {
        let (w1, w2) = shard_weights(shape, rank);
        let relu = stream
            .context()
            .load_module(Ptx::from_src(RELU_PTX))?
            .load_function("relu")?;
        Ok(Self {
            shape,
            blas: CudaBlas::new(Arc::clone(stream))?,
            relu,
            stream: Arc::clone(stream),
            x: stream.clone_htod(&inputs(shape))?,
            w1: stream.clone_htod(&w1)?,
            w2: stream.clone_htod(&w2)?,
            act: stream.alloc_zeros::<f32>(shape.batch * shape.shard())?,
        })
    }

    /// Row-major `c[m x n] = a[m x k] b[k x n]` by cuBLAS (column-major: `cᵀ = bᵀ aᵀ`).
    fn gemm(
        blas: &CudaBlas,
        c: &mut impl DevicePtrMut<f32>,
        a: &impl DevicePtr<f32>,
        b: &impl DevicePtr<f32>,
        (m, k, n): (usize, usize, usize),
    ) -> Result<(), Failed> {
        let cfg = GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha: 1.0f32,
            lda: n as i32,
            ldb: k as i32,
            beta: 0.0f32,
            ldc: n as i32,
        };
        // SAFETY: `a` holds m*k, `b` k*n and `c` m*n elements (the callers' shapes), on
        // the handle's stream.
        unsafe { blas.gemm(cfg, b, a, c) }?;
        Ok(())
    }

    /// The partial output into `y` (any cudarc memory: a registered rendezvous' view,
    /// an unregistered `CudaSlice`).
    fn forward_into(&mut self, y: &mut impl DevicePtrMut<f32>, batch: usize) -> Result<(), Failed> {
        let (h, s) = (self.shape.hidden, self.shape.shard());
        Self::gemm(&self.blas, &mut self.act, &self.x, &self.w1, (batch, h, s))?;
        let n = (batch * s) as u32;
        let mut launch = self.stream.launch_builder(&self.relu);
        launch.arg(&mut self.act).arg(&n);
        // SAFETY: `relu` takes (float*, u32); `act` holds at least `n` elements.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
        Self::gemm(&self.blas, y, &self.act, &self.w2, (batch, s, h))
    }
}

impl Block<Cuda> for CudaBlock {
    fn forward(
        &mut self,
        _world: &World<Cuda>,
        y: &impl AsDeviceSlice<f32, Cuda>,
        batch: usize,
    ) -> Result<(), Failed> {
        self.forward_into(&mut CudarcView::new(y), batch)
    }
}

/// The block's two all-reduce variants on `world`, checked against `reference` (the
/// one-rank block's output): in place on the registered output, then fused with the
/// residual add and RMSNorm. Returns the elements checked.
fn check_block<B: Backend>(
    world: &World<B>,
    block: &mut impl Block<B>,
    y: &Rendezvous<f32, B>,
    coll: &Collectives<B>,
    shape: Shape,
    reference: &[f32],
) -> Result<usize, Failed> {
    let rank = world.rank();
    let n = shape.batch * shape.hidden;
    block.forward(world, y, shape.batch)?;
    coll.all_reduce_in_place(y, n, ReduceOp::Sum, Algorithm::Auto)?;
    equal(
        rank,
        "y (in place)",
        &world.read(&y.slice(..n)?)?,
        reference,
    )?;
    // Fused: the partial outputs summed by the kernel itself, through the
    // registration's table, with the residual add and RMSNorm.
    let module = world.load(&KERNELS)?;
    let residual = world.device_from_slice(&(0..n).map(residual_at).collect::<Vec<_>>())?;
    let weight =
        world.device_from_slice(&(0..shape.hidden).map(norm_weight_at).collect::<Vec<_>>())?;
    let out = world.device_zeros::<f32>(n)?;
    let signals = world.zeros::<u64>(signal_words(shape.world, FUSED_GRID.blocks as usize))?;
    block.forward(world, y, shape.batch)?;
    world.barrier()?;
    // A collective step: the kernel waits for its peers' kernels (its barriers), so the
    // ranks launch it together where they share a device context.
    world.collectively(|| {
        // SAFETY: the fused kernel's contract (fused-allreduce-rmsnorm-kernels): `y` is
        // this rank's registered output of `batch * hidden` elements with its table,
        // `out` and `residual` hold as many, `weight` `hidden`, `signals` is a zeroed
        // symmetric array of `signal_words(world, FUSED_GRID.blocks)` words used by this
        // launch alone, and every rank launches the same grid and shape.
        unsafe {
            module.launch_unchecked(
                kernels::fused_ar_rmsnorm_f32,
                FUSED_GRID,
                (
                    &out,
                    &residual,
                    y,
                    &weight,
                    world.heap_bases(),
                    y.peer_bases(),
                    shape.world as u32,
                    rank as u32,
                    shape.batch as u32,
                    shape.hidden as u32,
                    EPS,
                    &signals,
                ),
            )
        }
    })?;
    let (want_res, want_out) = fused_reference(reference, shape.hidden);
    close(rank, "residual (fused)", &world.read(&residual)?, &want_res)?;
    close(rank, "out (fused)", &world.read(&out)?, &want_out)?;
    world.barrier()?;
    Ok(2 * n)
}

/// One rank on the CPU backend.
fn run_cpu(world: World<Cpu>, shape: Shape) -> Result<usize, Failed> {
    let coll = Collectives::new(&world)?;
    let mut block = HostBlock::new(shape, world.rank());
    let y = world.register(world.device_zeros::<f32>(shape.batch * shape.hidden)?)?;
    // One rank computing the whole block: the same code with the full weights.
    let whole = Shape { world: 1, ..shape };
    let mut full = HostBlock::new(whole, 0);
    let reference = world.device_zeros::<f32>(shape.batch * shape.hidden)?;
    full.forward(&world, &reference, shape.batch)?;
    let reference = world.read(&reference)?;
    let checked = check_block(&world, &mut block, &y, &coll, shape, &reference)?;
    coll.finalize()?;
    Ok(checked)
}

/// Microseconds per call of `step`, over `iters` calls after 3 warm-up calls, on this
/// rank's stream (every rank starts together).
fn time(
    world: &World<Cuda>,
    iters: usize,
    mut step: impl FnMut() -> Result<(), Failed>,
) -> Result<f64, Failed> {
    for _ in 0..3 {
        step()?;
    }
    world.barrier()?;
    let start = Instant::now();
    for _ in 0..iters {
        step()?;
    }
    world.backend().synchronize()?;
    let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
    world.barrier()?;
    Ok(us)
}

/// One rank on CUDA: the check at `shape`, or with `bench` the sweep at every hidden
/// size of `hiddens` (rank 0 prints a line per batch).
fn run_cuda(
    world: World<Cuda>,
    shape: Shape,
    bench: Option<(&[usize], usize)>,
) -> Result<usize, Failed> {
    let (rank, size) = (world.rank(), world.world_size());
    let stream = Arc::clone(world.backend().cudarc_stream());
    let coll = Collectives::new(&world)?;
    let hiddens: Vec<usize> = bench.map_or(vec![shape.hidden], |(h, _)| h.to_vec());
    let max_batch = if bench.is_some() { 64 } else { shape.batch };
    let mut checked = 0;
    for hidden in hiddens {
        let shape = Shape {
            batch: max_batch,
            hidden,
            ffn: FFN_MULT * hidden,
            world: size,
        };
        let mut block = CudaBlock::new(&stream, shape, rank)?;
        // The application's own output buffer, registered: symmetric from now on.
        let y = world.register(stream.alloc_zeros::<f32>(max_batch * hidden)?)?;
        // One rank computing the whole block (rank 0; the others wait at the barrier).
        let reference = if rank == 0 {
            let whole = Shape { world: 1, ..shape };
            let mut full = CudaBlock::new(&stream, whole, 0)?;
            let mut out = stream.alloc_zeros::<f32>(max_batch * hidden)?;
            full.forward_into(&mut out, max_batch)?;
            stream.clone_dtoh(&out)?
        } else {
            Vec::new()
        };
        let bytes: Vec<u8> = reference.iter().flat_map(|v| v.to_le_bytes()).collect();
        let reference = world.all_gather_bytes(&bytes)?.swap_remove(0);
        let reference: Vec<f32> = reference
            .as_chunks::<4>()
            .0
            .iter()
            .map(|b| f32::from_le_bytes(*b))
            .collect();
        for batch in bench.map_or(vec![shape.batch], |_| BATCHES.to_vec()) {
            let shape = Shape { batch, ..shape };
            let n = batch * hidden;
            checked += check_block(&world, &mut block, &y, &coll, shape, &reference[..n])?;
            let Some((_, iters)) = bench else { continue };
            // In place on the registered output.
            let in_place = time(&world, iters, || {
                block.forward(&world, &y, batch)?;
                coll.all_reduce_in_place(&y, n, ReduceOp::Sum, Algorithm::Auto)?;
                Ok(())
            })?;
            let all_reduce = time(&world, iters, || {
                coll.all_reduce_in_place(&y, n, ReduceOp::Sum, Algorithm::Auto)?;
                Ok(())
            })?;
            let gemms = time(&world, iters, || block.forward(&world, &y, batch))?;
            // The workaround: the output in plain cudarc memory, copied into a
            // symmetric buffer, all-reduced there, copied back.
            let mut plain = stream.alloc_zeros::<f32>(n)?;
            let sym_in = world.zeros::<f32>(n)?;
            let sym_out = world.zeros::<f32>(n)?;
            world.barrier()?;
            let workaround = time(&world, iters, || {
                block.forward_into(&mut plain, batch)?;
                let borrowed = world.borrow_cudarc(&mut plain)?;
                world.copy(&sym_in, &borrowed)?;
                coll.all_reduce(&sym_out, &sym_in, n, ReduceOp::Sum, Algorithm::Auto)?;
                world.copy(&borrowed, &sym_out)?;
                Ok(())
            })?;
            let check = world.read(&world.borrow_cudarc(&mut plain)?)?;
            equal(rank, "y (copy-in/copy-out)", &check, &reference[..n])?;
            if rank == 0 {
                println!(
                    "tp-mlp: world {size} hidden {hidden} batch {batch:>2}: block in place \
                     {in_place:9.1} us, copy-in/copy-out {workaround:9.1} us ({:.3}x), \
                     all-reduce {all_reduce:7.1} us ({:4.1}% of the block), GEMMs {gemms:9.1} us",
                    workaround / in_place,
                    100.0 * all_reduce / in_place,
                );
            }
        }
    }
    coll.finalize()?;
    Ok(checked)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendChoice {
    /// CUDA when a GPU answers, else the CPU backend.
    Auto,
    Cpu,
    Cuda,
}

/// A tensor-parallel MLP block with symmem's in-place all-reduce on registered memory,
/// checked against one rank computing the whole block.
#[derive(Parser, Debug)]
#[command(name = "tp-mlp")]
struct Options {
    /// Ranks, as threads of this process (the GPUs round-robin).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    ranks: u32,
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    /// Rows (tokens) of the block's input.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    batch: u32,
    /// Hidden size (the FFN is 4 times as wide); several with --bench. Default: 256 on
    /// the CPU, 4096 on a GPU.
    #[arg(long)]
    hidden: Vec<u32>,
    /// On CUDA: time the block for batches 1 to 64 at each --hidden.
    #[arg(long)]
    bench: bool,
    /// Timed iterations per line of --bench.
    #[arg(long, default_value_t = 50)]
    iters: u32,
}

fn main() -> ExitCode {
    let options = Options::parse();
    // What symmem chose and why, on stderr: `SYMMEM_LOG=info` (RUST_LOG syntax).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("SYMMEM_LOG"))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let ranks = options.ranks as usize;
    let devices = match options.backend {
        BackendChoice::Cpu => None,
        _ => Cuda::device_count().ok().filter(|&d| d > 0),
    };
    if options.backend == BackendChoice::Cuda && devices.is_none() {
        eprintln!("tp-mlp: --backend cuda: no CUDA device answers");
        return ExitCode::FAILURE;
    }
    let on_gpu = devices.is_some();
    let hiddens: Vec<usize> = if options.hidden.is_empty() {
        vec![if on_gpu { 4096 } else { 256 }]
    } else {
        options.hidden.iter().map(|&h| h as usize).collect()
    };
    // Every rank takes an equal share of the FFN's width.
    if let Some(&bad) = hiddens
        .iter()
        .find(|&&h| h < 64 || !(FFN_MULT * h).is_multiple_of(ranks))
    {
        eprintln!(
            "tp-mlp: --hidden {bad}: must be at least 64, and {FFN_MULT} times it a multiple \
             of --ranks"
        );
        return ExitCode::from(2);
    }
    if options.bench && !on_gpu {
        println!("tp-mlp: --bench skipped: no CUDA device (it times cuBLAS and the GPU)");
        return ExitCode::SUCCESS;
    }
    let shape = Shape {
        batch: options.batch as usize,
        hidden: hiddens[0],
        ffn: FFN_MULT * hiddens[0],
        world: ranks,
    };
    let config = Config {
        heap_bytes: 256 << 20,
        ..Config::default()
    };
    let checked: Result<Vec<usize>, Failed> = match devices {
        Some(devices) => {
            let bench = options
                .bench
                .then_some((hiddens.as_slice(), options.iters as usize));
            // Each rank's stream, made by the application with cudarc before any rank
            // runs (a context's first stream waits for the whole device once).
            let streams: Result<Vec<Arc<CudaStream>>, Failed> = (0..ranks)
                .map(|r| Ok(CudaContext::new(r % devices)?.new_stream()?))
                .collect();
            streams.and_then(|streams| {
                let backend = |r: usize| Cuda::from_cudarc_stream(Arc::clone(&streams[r]));
                symmem::spawn_ranks(ranks, &config, backend, |w| Ok(run_cuda(w, shape, bench)))?
                    .into_iter()
                    .map(|r| r.map_err(Failed::from).and_then(|c| c))
                    .collect()
            })
        }
        None => symmem::spawn_ranks(
            ranks,
            &config,
            |_| Ok(Cpu::new()),
            |w| Ok(run_cpu(w, shape)),
        )
        .map_err(Failed::from)
        .and_then(|rs| {
            rs.into_iter()
                .map(|r| r.map_err(Failed::from).and_then(|c| c))
                .collect()
        }),
    };
    match checked {
        Ok(elements) => {
            println!(
                "tp-mlp: {ranks} ranks on {}: the block's output, all-reduced in place on \
                 registered memory and fused with residual + RMSNorm, matches one rank \
                 computing the whole block: {} elements checked",
                if on_gpu {
                    "CUDA (cuBLAS)"
                } else {
                    "the CPU (host GEMMs)"
                },
                elements.iter().sum::<usize>()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tp-mlp: {e}");
            ExitCode::FAILURE
        }
    }
}
