//! The all-reduce on memory the application owns (issue 43), ranks as threads on CUDA,
//! 8 B to 64 MiB per rank, every line `Algorithm::Auto` on one handle with the default
//! barrier-free slot, measured in the same run:
//!
//! - `symmetric`: today's all-reduce between two symmetric buffers (out of place);
//! - `symmetric_ping_pong`: the same, the two buffers swapping roles on every call, so
//!   that each call reads what the one before wrote (as in place, and as an application
//!   whose input is new on every step), where `symmetric` reads the same source every
//!   time;
//! - `symmetric_in_place`: `all_reduce_in_place` on a symmetric buffer (the kernel the
//!   registered line runs, on the heap's table: splits "in place" from "registered");
//! - `registered_in_place`: `all_reduce_in_place` on a cudarc `CudaSlice` registered
//!   with `World::register` (reached through its own peer table: nothing staged);
//! - `registered_out_of_place`: from the symmetric source into that registered slice
//!   (the same kernel as `registered_in_place`, apart: splits "registered" from "in
//!   place");
//! - `unregistered_in_place`: `all_reduce_in_place` on a cudarc `CudaSlice` lent with
//!   `World::borrow_cudarc` (barrier-free as it is up to 64 KiB; above, the two-shot
//!   reaches it on peers through addresses its kernel exchanges, since the bench's ranks
//!   are threads of one process on one GPU: `World::shares_address_space`; ranks in
//!   processes of their own stage it, as `copy_in_out` does by hand);
//! - `copy_in_out`: the workaround without either: the cudarc slice copied into a
//!   symmetric buffer, `symmetric` into a second, and copied back.
//!
//! Method: each rank captures a graph of `CALLS` back-to-back calls, replays it (more
//! replays for small sizes) after a warm-up replay, and synchronises; a rank's time per
//! call is the wall time over all calls. A line's time is the slowest rank's (every rank
//! starts after a barrier), median of `TRIALS` trials. Each line's result is checked once
//! against the host sum first.
//!
//! Run: `cargo bench -p symmem --bench app_memory [-- --worlds 2,4,8]` (exits 0 with
//! "skipped" when no GPU answers). Prints CSV rows `world,line,bytes,us,ratio` (`ratio`:
//! the line's time over `symmetric`'s at that size).

mod cli;
mod replay;

use clap::Parser;
use replay::{Rows, slowest_medians};
use std::process::ExitCode;
use symmem::backend::Grid;
use symmem::backend::cuda::Cuda;
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, Result, World};

const SIZES: [usize; 11] = [
    8,
    64,
    512,
    4 << 10,
    32 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];
const MAX: usize = 64 << 20;
const CALLS: usize = 20;
const TRIALS: usize = 3;
const LINES: [&str; 7] = [
    "symmetric",
    "symmetric_ping_pong",
    "symmetric_in_place",
    "registered_in_place",
    "registered_out_of_place",
    "unregistered_in_place",
    "copy_in_out",
];

/// Replays per trial at `bytes`: about 64 MiB per rank moved in a trial, 2 to 50.
fn replays(bytes: usize) -> usize {
    (MAX / (bytes * CALLS)).clamp(2, 50)
}

/// This rank's microseconds per call of `call` graph-replayed, one value per trial.
fn replayed_us(
    world: &World<Cuda>,
    bytes: usize,
    call: &dyn Fn() -> Result<()>,
) -> Result<Vec<f64>> {
    replay::replayed_us(world, CALLS, replays(bytes), TRIALS, call)
}

/// Why a rank failed: symmem's error or cudarc's.
type Failed = Box<dyn std::error::Error + Send + Sync>;

fn rank_rows(world: &World<Cuda>) -> std::result::Result<Rows, Failed> {
    let (rank, n) = (world.rank(), world.world_size());
    let stream = std::sync::Arc::clone(world.backend().cudarc_stream());
    let app = &Collectives::with_grid(world, Grid::new(8, 256))?;
    app.reserve_staging(2 * MAX)?;
    let src = &world.zeros::<f32>(MAX / 4)?;
    let dst = &world.zeros::<f32>(MAX / 4)?;
    // The application's own memory, from cudarc: one slice registered, one lent.
    let registered = &world.register(stream.alloc_zeros::<f32>(MAX / 4)?)?;
    let mut plain = stream.alloc_zeros::<f32>(MAX / 4)?;
    // Lent outside the captures: the borrow's event record and wait stay out of them.
    let lent = &world.borrow_cudarc(&mut plain)?;
    world.barrier()?;
    let mut rows: Rows = Vec::new();
    let want: f32 = (0..n).map(|r| r as f32 + 0.5).sum();
    for &bytes in &SIZES {
        let count = bytes / 4;
        let lent_view = symmem::AsDeviceSlice::as_device_slice(lent).slice(..count)?;
        let reg_view = registered.slice(..count)?;
        let (src_view, dst_view) = (src.slice(..count)?.local(), dst.slice(..count)?.local());
        // The ping-pong line's direction: from `src` first (its check), then alternating.
        let back = std::cell::Cell::new(false);
        let calls: [Box<dyn Fn() -> Result<()> + '_>; 7] = [
            Box::new(move || app.all_reduce(dst, src, count, ReduceOp::Sum, Algorithm::Auto)),
            Box::new(move || {
                let (to, from) = if back.replace(!back.get()) {
                    (src, dst)
                } else {
                    (dst, src)
                };
                app.all_reduce(to, from, count, ReduceOp::Sum, Algorithm::Auto)
            }),
            Box::new(move || app.all_reduce_in_place(src, count, ReduceOp::Sum, Algorithm::Auto)),
            Box::new(move || {
                app.all_reduce_in_place(&reg_view, count, ReduceOp::Sum, Algorithm::Auto)
            }),
            Box::new(move || app.all_reduce(&reg_view, src, count, ReduceOp::Sum, Algorithm::Auto)),
            Box::new(move || {
                app.all_reduce_in_place(&lent_view, count, ReduceOp::Sum, Algorithm::Auto)
            }),
            Box::new(move || {
                world.copy(&src_view, &lent_view)?;
                app.all_reduce(dst, src, count, ReduceOp::Sum, Algorithm::Auto)?;
                world.copy(&lent_view, &dst_view)
            }),
        ];
        for (line, call) in LINES.into_iter().zip(calls) {
            // Checked once: every rank's (rank + 0.5) summed.
            let mine = vec![rank as f32 + 0.5; count];
            let out = match line {
                "symmetric" | "symmetric_ping_pong" => {
                    world.write(src, 0, &mine)?;
                    dst_view
                }
                "symmetric_in_place" => {
                    world.write(src, 0, &mine)?;
                    src_view
                }
                "registered_in_place" => {
                    world.write(&reg_view, 0, &mine)?;
                    reg_view.local()
                }
                "registered_out_of_place" => {
                    world.write(src, 0, &mine)?;
                    reg_view.local()
                }
                _ => {
                    world.write(&lent_view, 0, &mine)?;
                    lent_view
                }
            };
            world.barrier()?;
            call()?;
            let got = world.read(&out)?;
            assert!(
                got.iter().all(|&x| x == want),
                "rank {rank}: {line} of {bytes} B gave a wrong sum"
            );
            // Timed on data that sums to zero, so that in-place calls do not grow it.
            let zero_sum = vec![rank as f32 - (n as f32 - 1.0) / 2.0; count];
            world.write(src, 0, &zero_sum)?;
            world.write(&reg_view, 0, &zero_sum)?;
            world.write(&lent_view, 0, &zero_sum)?;
            world.barrier()?;
            rows.push((line, bytes, replayed_us(world, bytes, &*call)?));
        }
    }
    Ok(rows)
}

/// The all-reduce on the application's memory, graph-replayed, at several world sizes.
#[derive(Parser, Debug)]
#[command(name = "app_memory")]
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
    let config = Config {
        heap_bytes: 512 << 20,
        ..Config::default()
    };
    println!("world,line,bytes,us,ratio");
    for n in options.worlds.iter().map(|&n| n as usize) {
        let results = match symmem::spawn_ranks(n, &config, Cuda::for_rank, |w| Ok(rank_rows(&w))) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("world {n}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut per_rank = Vec::new();
        for (rank, r) in results.into_iter().enumerate() {
            match r.map_err(Failed::from).and_then(|r| r) {
                Ok(r) => per_rank.push(r),
                Err(e) => {
                    eprintln!("world {n}, rank {rank}: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        // The slowest rank of each trial, then the median over trials.
        let rows = slowest_medians(&per_rank, TRIALS);
        for &(line, bytes, us) in &rows {
            let symmetric = rows
                .iter()
                .find(|r| r.0 == "symmetric" && r.1 == bytes)
                .map_or(f64::NAN, |r| r.2);
            println!("{n},{line},{bytes},{us:.3},{:.3}", us / symmetric);
        }
    }
    ExitCode::SUCCESS
}
