//! A cudarc program and symmem on one stream: each rank's own stream, made with cudarc,
//! runs the program's PTX kernel (launched with cudarc's `launch_builder`), which writes
//! into a symmem symmetric buffer lent to cudarc as a [`CudarcView`]; a symmem all-reduce
//! then consumes that buffer on the same stream, and the sum is checked on the host. No
//! synchronisation between cudarc's launch and symmem's: the stream orders them.
//!
//! `cudarc-interop [--ranks N] [--count N]`: N ranks as threads (default 2, at least 2),
//! on the GPUs round-robin, each on a stream of its own; `--count` elements per rank.
//! Where no CUDA device answers it prints why and exits 0 (there is no CPU fallback:
//! cudarc is CUDA). `--help` lists the options.

use clap::Parser;
use cudarc::driver::{CudaContext, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use std::process::ExitCode;
use std::sync::Arc;
use symmem::backend::cuda::Cuda;
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, CudarcView, World};

/// Why a rank failed: symmem's or cudarc's error, or an element that is not the sum.
type Failed = Box<dyn std::error::Error + Send + Sync>;

/// The program's own kernel, as a program using cudarc brings it (here PTX written by
/// hand; `nvcc --ptx` or NVRTC output works the same): `fill(out, rank, n)` stores
/// `(rank + 1) * i` into `out[i]` for `i < n`, one element per thread.
const FILL_PTX: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry fill(
    .param .u64 fill_out,
    .param .u32 fill_rank,
    .param .u32 fill_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [fill_out];
    ld.param.u32 %r1, [fill_rank];
    ld.param.u32 %r2, [fill_n];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r6, %r2;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    add.u32 %r7, %r1, 1;
    cvt.rn.f32.u32 %f1, %r7;
    cvt.rn.f32.u32 %f2, %r6;
    mul.rn.f32 %f3, %f1, %f2;
    mul.wide.u32 %rd3, %r6, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.f32 [%rd4], %f3;
DONE:
    ret;
}
"#;

/// One rank: cudarc's kernel fills `src` on the rank's stream, symmem sums `src` over
/// the ranks into `dst` on the same stream; returns the bytes checked.
fn run(world: World<Cuda>, count: usize) -> Result<usize, Failed> {
    let (rank, size) = (world.rank(), world.world_size());
    // The stream this rank's backend adopted: the program's own, made in `main`.
    let stream = world.backend().cudarc_stream();
    let fill = stream
        .context()
        .load_module(Ptx::from_src(FILL_PTX))?
        .load_function("fill")?;
    let coll = Collectives::new(&world)?;
    let src = world.empty::<f32>(count)?;
    let dst = world.empty::<f32>(count)?;

    // cudarc's launch, writing into symmem's buffer through the view.
    let out = CudarcView::new(&src);
    let (rank_arg, n) = (rank as u32, count as u32);
    let mut launch = stream.launch_builder(&fill);
    launch.arg(&out).arg(&rank_arg).arg(&n);
    // SAFETY: `fill` takes (float*, u32, u32) as pushed; `out` holds `n` f32s of this
    // rank's memory, alive until the all-reduce that reads it has finished (`world.read`
    // below waits for the stream).
    unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;

    // symmem's all-reduce on the same stream: it starts once the fill has finished.
    coll.all_reduce(&dst, &src, count, ReduceOp::Sum, Algorithm::Auto)?;
    let got = world.read(&dst)?;

    // Every rank r stored (r + 1) * i: the sum is i * size * (size + 1) / 2, exact in f32
    // while it stays below 2^24.
    let ranks_sum = (size * (size + 1) / 2) as f32;
    for (i, &v) in got.iter().enumerate() {
        let want = i as f32 * ranks_sum;
        if v != want {
            return Err(format!("rank {rank}: element {i} is {v}, expected {want}").into());
        }
    }
    coll.finalize()?;
    Ok(std::mem::size_of_val(got.as_slice()))
}

/// A cudarc kernel writes each rank's symmem buffer, a symmem all-reduce sums them on
/// the same stream; every element is checked.
#[derive(Parser, Debug)]
#[command(name = "cudarc-interop")]
struct Options {
    /// Ranks, as threads of this process, on the GPUs round-robin (at least 2).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..))]
    ranks: u32,
    /// Elements of f32 per rank (the sums stay exact in f32 up to 2^24 / (ranks²)).
    #[arg(long, default_value_t = 1 << 16, value_parser = clap::value_parser!(u32).range(1..=1 << 18))]
    count: u32,
}

/// Each rank's stream, made by the program with cudarc on the GPUs round-robin, before
/// any rank runs (a context's first cudarc stream waits for the whole device once).
fn streams(ranks: usize, devices: usize) -> Result<Vec<Arc<CudaStream>>, Failed> {
    (0..ranks)
        .map(|rank| Ok(CudaContext::new(rank % devices)?.new_stream()?))
        .collect()
}

fn main() -> ExitCode {
    let options = Options::parse();
    // What symmem chose and why, on stderr: `SYMMEM_LOG=info` (RUST_LOG syntax).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("SYMMEM_LOG"))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let (ranks, count) = (options.ranks as usize, options.count as usize);
    // Asked through symmem first: cudarc's loader panics where there is no libcuda.
    let devices = match Cuda::device_count() {
        Ok(devices) => devices,
        Err(why) => {
            println!(
                "cudarc-interop: skipped: no CUDA device ({why}); it runs on NVIDIA GPUs only"
            );
            return ExitCode::SUCCESS;
        }
    };
    let results = streams(ranks, devices).and_then(|streams| {
        let config = Config::default();
        let backend = |rank: usize| Cuda::from_cudarc_stream(Arc::clone(&streams[rank]));
        let results = symmem::spawn_ranks(ranks, &config, backend, |w| Ok(run(w, count)))?;
        results
            .into_iter()
            .map(|rank| rank.map_err(Failed::from).and_then(|checked| checked))
            .collect::<Result<Vec<_>, _>>()
    });
    match results {
        Ok(bytes) => {
            println!(
                "cudarc-interop: {ranks} ranks on {devices} GPU(s): a cudarc kernel filled each \
                 rank's symmetric buffer and a symmem all-reduce summed them on the same stream; \
                 {} bytes verified",
                bytes.iter().sum::<usize>()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cudarc-interop: {e}");
            ExitCode::FAILURE
        }
    }
}
