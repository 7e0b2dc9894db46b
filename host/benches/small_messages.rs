//! Small messages on CUDA: every line graph-replayed on every rank's stream at once,
//! ranks as threads (one GPU each where there are enough, else sharing GPU 0:
//! [`Cuda::for_rank`]), at world sizes 2, 4 and 8, for 8 B to 1 MiB of f32 per rank.
//!
//! Lines, each as microseconds per call and as a ratio to the one-barrier floor measured
//! in the same run:
//! - `empty`: a kernel that does nothing (`symmem_empty`, one block): the graph-node floor;
//! - `barrier`: a kernel whose only work is one cross-rank flag barrier
//!   (`Collectives::barrier` with one block of 32 threads): the floor of any collective;
//! - `one_shot`, `two_shot`: the all-reduces with an entry and an exit barrier;
//! - `all_gather`: the all-gather of the same bytes per rank;
//! - `lamport`: the barrier-free all-reduce (a handle with a 1 MiB workspace slot, so
//!   every size runs it: the crossover against one-shot sets `LAMPORT_AUTO_BYTES`);
//! - `auto`: the all-reduce as an application calls it, `Algorithm::Auto` between two
//!   symmetric buffers (a handle with the default 64 KiB barrier-free slot);
//! - `plain_in_place`: the same handle's `all_reduce_in_place` on plain device memory (a
//!   `DeviceBuffer`, not symmetric: the application's own): barrier-free as it is up to
//!   64 KiB, staged through the handle's scratch above;
//! - `copy_in_out`: the workaround without it: the plain buffer copied into a symmetric
//!   one, `auto` into a second, and copied back.
//!
//! Method: each rank captures a graph of `CALLS` back-to-back calls, replays it `REPLAYS`
//! times after a warm-up replay, and synchronises; a rank's time per call is the wall time
//! over `CALLS * REPLAYS`. The line's time is the slowest rank's (every rank starts after
//! a barrier), median of `TRIALS` trials. Before the timing, each line's result is checked
//! once (all-reduces against the host sum).
//!
//! Also the host's time per collective call, checks and enqueue (no graph): the median over
//! 2000 plain `all_reduce` calls of 8 B (barrier-free) on rank 0 of world 2.
//!
//! Run: `cargo bench -p symmem --bench small_messages [-- --worlds 2,4,8]` (exits 0 with
//! "skipped" when no GPU answers). Prints CSV rows `world,line,bytes,us,floor_ratio`.

mod cli;
mod replay;

use clap::Parser;
use replay::{Rows, median, slowest_medians};
use std::process::ExitCode;
use std::time::Instant;
use symmem::backend::cuda::Cuda;
use symmem::backend::{Backend, Grid};
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, Result, World};

const SIZES: [usize; 9] = [
    8,
    64,
    512,
    4 << 10,
    16 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    1 << 20,
];
const MAX: usize = 1 << 20;
/// Calls per graph, replays per trial, trials per line.
const CALLS: usize = 50;
const REPLAYS: usize = 20;
const TRIALS: usize = 5;

/// This rank's microseconds per call of `call` graph-replayed, one value per trial.
fn replayed_us(world: &World<Cuda>, call: &dyn Fn() -> Result<()>) -> Result<Vec<f64>> {
    replay::replayed_us(world, CALLS, REPLAYS, TRIALS, call)
}

/// One timed line's call.
type Call<'a> = Box<dyn Fn() -> Result<()> + 'a>;

fn rank_rows(world: &World<Cuda>) -> Result<(Rows, Option<f64>)> {
    let (rank, n) = (world.rank(), world.world_size());
    let coll = &Collectives::with_lamport_capacity(world, Grid::new(8, 256), MAX)?;
    let floor = Collectives::with_grid(world, Grid::new(1, 32))?;
    let src = &world.full::<f32>(MAX / 4, rank as f32 + 0.5)?;
    let dst = &world.zeros::<f32>(MAX / 4)?;
    let gathered = &world.zeros::<f32>(n * MAX / 4)?;
    // As an application holds it: the default barrier-free slot, its own memory.
    let app = &Collectives::with_grid(world, Grid::new(8, 256))?;
    app.reserve_staging(MAX)?;
    let plain = &world.device_zeros::<f32>(MAX / 4)?;
    world.barrier()?;
    let kernels = world.kernels();
    let mut rows: Rows = Vec::new();
    rows.push((
        "empty",
        0,
        replayed_us(world, &|| {
            kernels.launch(symmem_kernels::symmem_empty, Grid::new(1, 32), ())
        })?,
    ));
    rows.push(("barrier", 0, replayed_us(world, &|| floor.barrier())?));
    let want: f32 = (0..n).map(|r| r as f32 + 0.5).sum();
    for &bytes in &SIZES {
        // The last size's `copy_in_out` replays left the plain buffer's data in `src`.
        world.write(src, 0, &vec![rank as f32 + 0.5; MAX / 4])?;
        let count = bytes / 4;
        let reduce = |algorithm| move || coll.all_reduce(dst, src, count, ReduceOp::Sum, algorithm);
        let local = src.slice(..count)?.local();
        let mut lines: Vec<(&'static str, Call<'_>)> = vec![
            ("one_shot", Box::new(reduce(Algorithm::OneShot))),
            ("two_shot", Box::new(reduce(Algorithm::TwoShot))),
            (
                "all_gather",
                Box::new(move || coll.all_gather(gathered, &local, count)),
            ),
        ];
        lines.push(("lamport", Box::new(reduce(Algorithm::Lamport))));
        let plain_view = plain.slice(..count)?;
        let (src_view, dst_view) = (src.slice(..count)?.local(), dst.slice(..count)?.local());
        lines.push((
            "auto",
            Box::new(move || app.all_reduce(dst, src, count, ReduceOp::Sum, Algorithm::Auto)),
        ));
        lines.push((
            "plain_in_place",
            Box::new(move || {
                app.all_reduce_in_place(&plain_view, count, ReduceOp::Sum, Algorithm::Auto)
            }),
        ));
        lines.push((
            "copy_in_out",
            Box::new(move || {
                world.copy(&src_view, &plain_view)?;
                app.all_reduce(dst, src, count, ReduceOp::Sum, Algorithm::Auto)?;
                world.copy(&plain_view, &dst_view)
            }),
        ));
        for (line, call) in lines {
            if line == "plain_in_place" || line == "copy_in_out" {
                world.write(&plain_view, 0, &vec![rank as f32 + 0.5; count])?;
                world.barrier()?;
                call()?;
                let got = world.read(&plain_view)?;
                assert!(
                    got.iter().all(|&x| x == want),
                    "rank {rank}: {line} of {bytes} B gave a wrong sum"
                );
            } else if line != "all_gather" {
                world.fill_zero(dst)?;
                call()?;
                let got = world.read(&dst.slice(..count)?.local())?;
                assert!(
                    got.iter().all(|&x| x == want),
                    "rank {rank}: {line} of {bytes} B gave a wrong sum"
                );
            }
            world.barrier()?;
            rows.push((line, bytes, replayed_us(world, &*call)?));
        }
    }
    // The host's time per call: checks, agreement bookkeeping and enqueue.
    let host = if n == 2 {
        let mut v = Vec::with_capacity(2000);
        for _ in 0..20 {
            for _ in 0..100 {
                let start = Instant::now();
                coll.all_reduce(dst, src, 2, ReduceOp::Sum, Algorithm::Lamport)?;
                v.push(start.elapsed().as_secs_f64() * 1e6);
            }
            world.backend().synchronize()?;
        }
        world.barrier()?;
        (rank == 0).then(|| median(v))
    } else {
        None
    };
    Ok((rows, host))
}

/// Small messages on CUDA, graph-replayed, at several world sizes (CSV on stdout).
#[derive(Parser, Debug)]
#[command(name = "small_messages")]
struct Options {
    /// World sizes to run, ranks as threads (one GPU each where there are enough).
    #[arg(long, value_delimiter = ',', default_value = "2,4,8",
          value_parser = clap::value_parser!(u32).range(1..))]
    worlds: Vec<u32>,
    #[command(flatten)]
    cargo: cli::CargoBench,
}

fn main() -> ExitCode {
    let options = Options::parse();
    cli::log();
    if let Err(why) = Cuda::new(0) {
        println!("skipped: no CUDA device ({why})");
        return ExitCode::SUCCESS;
    }
    let worlds = options.worlds.iter().map(|&n| n as usize);
    let config = Config {
        heap_bytes: 96 << 20,
        ..Config::default()
    };
    println!("world,line,bytes,us,floor_ratio");
    for n in worlds {
        let results = match symmem::spawn_ranks(n, &config, Cuda::for_rank, |w| rank_rows(&w)) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("world {n}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let (mut per_rank, mut host) = (Vec::new(), None);
        for (rank, r) in results.into_iter().enumerate() {
            match r {
                Ok((rows, rank_host)) => {
                    per_rank.push(rows);
                    host = host.or(rank_host);
                }
                Err(e) => {
                    eprintln!("world {n}, rank {rank}: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        let rows = slowest_medians(&per_rank, TRIALS);
        let floor = rows
            .iter()
            .find(|r| r.0 == "barrier")
            .map_or(f64::NAN, |r| r.2);
        for (line, bytes, us) in rows {
            println!("{n},{line},{bytes},{us:.3},{:.2}", us / floor);
        }
        if let Some(host) = host {
            println!("{n},host_call_us,8,{host:.3},");
        }
    }
    ExitCode::SUCCESS
}
