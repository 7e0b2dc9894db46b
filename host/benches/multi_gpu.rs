//! The multi-GPU benchmark (issue 7): `cargo bench -p symmem --bench multi_gpu`.
//!
//! Rank `r` runs on GPU `r % count` ([`Cuda::for_rank`]) and maps every peer's VMM heap
//! (over NVLink between H200s). Two parts, written to `p2p.csv` and `collectives.csv`
//! with the header `tool,op,world,bytes,batch,median_us,algbw_gbs,busbw_gbs` that
//! `peers/nccl_collectives.py` writes too (`peers/plot_multi_gpu.py` joins them):
//!
//! - **Point to point**, ranks 0 and 1 as two threads of this process (so that
//!   `cuMemcpyPeerAsync` can name both GPUs' own allocations): `put` (rank 0's kernel
//!   writes rank 1's copy of a symmetric buffer through the translated address), `get`
//!   (rank 0's kernel reads rank 1's copy into local memory), against `cuMemcpyPeerAsync`
//!   of the same bytes in each direction (`memcpy_peer_put`, `memcpy_peer_get`, tool
//!   `cuda`), median of 20 after 3. A sample is one operation from 64 MiB up (each on the
//!   next slot of a rotation), below that a batch of `clamp(64 MiB / size, 1, 100)` on
//!   consecutive slots, graph-replayed as in `benches/cuda.rs` where the driver can
//!   capture every line (probed first, the answer printed; `cuMemcpyPeerAsync` may not
//!   be), else enqueued back to back, so that below about 1 MiB every line includes the
//!   host's enqueue rate. GB/s counts each byte once (what crosses the link); `world` is 2
//!   in these rows.
//! - **Collectives** at the whole world, one process per rank as NCCL and PyTorch run
//!   (`--launcher threads` for threads of this process, which is what ranks sharing a GPU
//!   need: processes on one GPU are time-sliced, and a collective then waits a whole
//!   slice, about 4.5 ms on the H200, for its peer): `all_gather`, `all_reduce_1shot`,
//!   `all_reduce_2shot` (f32 sum) and `reduce_scatter` (f32 sum), sizes in nccl-tests'
//!   convention (all-gather: output bytes; reduce-scatter: input bytes; all-reduce: buffer
//!   bytes). A sample is `clamp(64 MiB / size, 1, 20)` back-to-back calls between two
//!   CUDA events on rank 0's stream (every rank runs the same loop; the Python peers time
//!   theirs the same way), median of 20 after 3. Bus bandwidth is nccl-tests': algbw
//!   times `(n-1)/n` (all-gather, reduce-scatter) or `2(n-1)/n` (all-reduce); 1 at n = 1.
//!   Every grid of `--blocks` runs; the CSV keeps the fastest per operation and size,
//!   stdout shows them all. Each result is checked after its timing.
//!
//! Options: `--world N` (default: the GPU count; with fewer GPUs than ranks, ranks share
//! GPUs round-robin: a smoke test of the code path, not a measurement of links),
//! `--sizes 4K,1M,...` (default 4 KiB to 1 GiB), `--blocks 32,132,264` (per rank),
//! `--launcher processes|threads` (the collectives' ranks; default processes), `--out DIR`
//! (default `target/bench-multi-gpu`). Prints `skipped: <reason>` and exits 0
//! where fewer than 2 GPUs answer and no `--world` was given.

mod cli;
mod common;

use clap::{Parser, ValueEnum};
use common::{
    GIB, KIB, MIB, Op, Sampling, Sweep, Target, drop_errors_at_exit, fill_source, pattern,
    recorded, stats, sweep_size, sweep_sizes, verify,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use symmem::backend::cuda::Cuda;
use symmem::backend::cuda::timing::Timer;
use symmem::backend::{Backend, Grid};
use symmem::bootstrap::{Bootstrap, unix};
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, DeviceBuffer, Error, Result, SymmetricBuffer, World};

const WARMUP: usize = 3;
const SAMPLES: usize = 20;
/// The most back-to-back collectives in one sample.
const MAX_COLLECTIVE_BATCH: usize = 20;
const THREADS: u32 = 256;
/// How long a rank waits for its peers at a host barrier.
const TIMEOUT: Duration = Duration::from_secs(600);
const CSV_HEADER: &str = "tool,op,world,bytes,batch,median_us,algbw_gbs,busbw_gbs";
/// The source pattern's period.
const PATTERN: usize = 16 * MIB;

/// One CSV row.
#[derive(Clone, Debug)]
struct Row {
    tool: &'static str,
    op: &'static str,
    world: usize,
    bytes: usize,
    batch: usize,
    median_us: f64,
    algbw: f64,
    busbw: f64,
    /// The grid's blocks per rank (0 in point-to-point rows; not in the CSV).
    blocks: u32,
}

impl Row {
    fn csv(&self) -> String {
        format!(
            "{},{},{},{},{},{:.3},{:.2},{:.2}",
            self.tool,
            self.op,
            self.world,
            self.bytes,
            self.batch,
            self.median_us,
            self.algbw,
            self.busbw
        )
    }
}

/// Rank 1's buffer and its device, as rank 0 needs them for the driver's peer copies.
struct PeerView {
    native: u64,
    ordinal: usize,
}

/// Exchanges every rank's local address of `ptr` and device ordinal; returns rank 1's.
fn rank1_view(world: &World<Cuda>, ptr: u64) -> Result<PeerView> {
    let mine = [ptr, world.backend().ordinal() as u64];
    let all = world.all_gather_bytes(bytemuck::cast_slice(&mine))?;
    let theirs: [u64; 2] = bytemuck::pod_read_unaligned(&all[1]);
    Ok(PeerView {
        native: theirs[0],
        ordinal: theirs[1] as usize,
    })
}

/// Part 1 on rank 0: put/get through the symmetric buffer against `cuMemcpyPeerAsync`.
fn point_to_point_rank0(
    world: &World<Cuda>,
    buffer: &SymmetricBuffer<u8, Cuda>,
    peer: &PeerView,
    sizes: &[usize],
    max: usize,
) -> Result<Vec<Row>> {
    let cuda = world.backend();
    let timer = cuda.timer()?;
    let (ctx0, ctx1) = (cuda.context(), Cuda::device_context(peer.ordinal)?);
    let pat = pattern(PATTERN.min(max));
    let src = world.alloc::<u8>(max)?;
    let dst = world.alloc::<u8>(max + 4096)?;
    let (s0, d0) = (src.ptr(), dst.ptr());
    fill_source(world, &timer, &src, &pat)?;
    let remote = buffer.as_slice().peer_ptr(1)?;
    println!(
        "p2p: rank 0 on GPU {}, rank 1 on GPU {}; rank 1's buffer {:#x} (its address), mapped on rank 0 at {remote:#x}",
        cuda.ordinal(),
        peer.ordinal,
        peer.native
    );
    let native1 = peer.native;
    let ops: Vec<(&'static str, Op<'_>)> = vec![
        (
            "put",
            Box::new(|_: &Timer, off: usize, n: usize| {
                world.put(&buffer.slice(off..off + n)?, &src.slice(off..off + n)?, 1)
            }),
        ),
        (
            "get",
            Box::new(|_: &Timer, off: usize, n: usize| {
                world.get(&dst.slice(off..off + n)?, &buffer.slice(off..off + n)?, 1)
            }),
        ),
        (
            "memcpy_peer_put",
            Box::new(|t: &Timer, off: usize, n: usize| {
                assert!(off + n <= max, "a slot past the buffers");
                // SAFETY: `off + n <= max`: the source lies in `src`, the destination in
                // rank 1's copy of the symmetric buffer (`max` + 4 KiB bytes) on its
                // device; both outlive the timed work.
                unsafe { t.memcpy_peer(native1 + off as u64, &ctx1, s0 + off as u64, &ctx0, n) }
            }),
        ),
        (
            "memcpy_peer_get",
            Box::new(|t: &Timer, off: usize, n: usize| {
                assert!(off + n <= max, "a slot past the buffers");
                // SAFETY: as above, the other way round, into `dst` (max + 4 KiB bytes).
                unsafe { t.memcpy_peer(d0 + off as u64, &ctx0, native1 + off as u64, &ctx1, n) }
            }),
        ),
    ];
    // Graph-replayed batches (as `benches/cuda.rs` times) only if every line can be
    // captured (the driver's peer copy may not be); otherwise all are enqueued batches.
    let mut graphs = true;
    for (name, op) in &ops {
        if let Err(e) = timer.capture(|t| op(t, 0, 4 * KIB)) {
            println!(
                "p2p: {name} cannot be captured into a graph ({e}): batches are enqueued op by op"
            );
            graphs = false;
        }
    }
    let mut rows = Vec::new();
    for &size in sizes.iter().filter(|&&s| s <= max) {
        let sweeps = sweep_size(
            &timer,
            size,
            max,
            Sampling {
                warmup: WARMUP,
                samples: SAMPLES,
                graphs,
            },
            &ops,
        )?;
        let row = |(name, sweep): (&'static str, &Sweep)| {
            let gbps = sweep.gbps(size).0;
            Row {
                tool: if name.starts_with("memcpy") {
                    "cuda"
                } else {
                    "symmem"
                },
                op: name,
                world: 2,
                bytes: size,
                batch: sweep.batch,
                median_us: sweep.median_us(),
                algbw: gbps,
                busbw: gbps,
                blocks: 0,
            }
        };
        let r: Vec<Row> = ops.iter().map(|o| o.0).zip(&sweeps).map(row).collect();
        println!(
            "{size:>10} B  put {:>7.1}  memcpy_peer {:>7.1} ({:.3})   get {:>7.1}  memcpy_peer {:>7.1} ({:.3}) GB/s",
            r[0].algbw,
            r[2].algbw,
            r[0].algbw / r[2].algbw,
            r[1].algbw,
            r[3].algbw,
            r[1].algbw / r[3].algbw
        );
        rows.extend(r);
    }
    // Checks: put into rank 1's copy, then get it back; the driver's copies likewise.
    let (remote, local) = (
        Target::Peer(buffer.as_slice(), 1),
        Target::Local(dst.as_slice()),
    );
    for size in [4 * KIB + 16, MIB + 4096, 64 * MIB].map(|s| s.min(max)) {
        verify(world, &timer, "put", remote, size, &pat, &ops[0].1)?;
        verify(world, &timer, "get", local, size, &pat, &ops[1].1)?;
        verify(
            world,
            &timer,
            "memcpy_peer_put",
            remote,
            size,
            &pat,
            &ops[2].1,
        )?;
        verify(
            world,
            &timer,
            "memcpy_peer_get",
            local,
            size,
            &pat,
            &ops[3].1,
        )?;
    }
    Ok(rows)
}

/// Part 1 on every rank: ranks 0 and 1 take part, the others wait.
fn point_to_point(world: &World<Cuda>, sizes: &[usize], max: usize) -> Result<Vec<Row>> {
    // 4 KiB past `max`: the checks' guard.
    let buffer = world.empty::<u8>(max + 4096)?;
    let peer = rank1_view(world, buffer.ptr())?;
    world.barrier()?;
    let rows = if world.rank() == 0 {
        point_to_point_rank0(world, &buffer, &peer, sizes, max)?
    } else {
        Vec::new()
    };
    world.barrier()?;
    Ok(rows)
}

/// Bus-bandwidth factor of `op` at `n` ranks (nccl-tests' convention; 1 for one rank).
fn bus_factor(op: &str, n: usize) -> f64 {
    if n == 1 {
        return 1.0;
    }
    let base = (n - 1) as f64 / n as f64;
    if op.starts_with("all_reduce") {
        2.0 * base
    } else {
        base
    }
}

/// Median microseconds per call of `op`: events around `batch` back-to-back calls.
fn time_collective(timer: &Timer, batch: usize, op: &dyn Fn() -> Result<()>) -> Result<f64> {
    let mut ms = Vec::with_capacity(SAMPLES);
    for sample in 0..WARMUP + SAMPLES {
        let t = timer.time_ms(|_| (0..batch).try_for_each(|_| op()))?;
        if sample >= WARMUP {
            ms.push(f64::from(t));
        }
    }
    Ok(stats(&ms).0 * 1e3 / batch as f64)
}

/// The collectives' buffers of one rank, sized for the largest size.
struct CollectiveBuffers {
    gathered: symmem::SymmetricBuffer<u8, Cuda>,
    reduce_src: symmem::SymmetricBuffer<f32, Cuda>,
    reduce_dst: symmem::SymmetricBuffer<f32, Cuda>,
    gather_src: DeviceBuffer<u8, Cuda>,
    scatter_dst: DeviceBuffer<f32, Cuda>,
}

/// Checks this rank's results of `op` at `size` (inputs are constant per rank).
fn check(world: &World<Cuda>, b: &CollectiveBuffers, op: &str, size: usize) -> Result<()> {
    let n = world.world_size();
    let sum: f32 = (0..n).map(|r| r as f32 + 0.5).sum();
    let bad = match op {
        "all_gather" => {
            let got = world.read(&b.gathered.slice(..size)?)?;
            got.chunks_exact(size / n)
                .enumerate()
                .any(|(p, c)| c.iter().any(|&x| x != p as u8 + 1))
        }
        "reduce_scatter" => {
            let got = world.read(&b.scatter_dst.slice(..size / 4 / n)?)?;
            got.iter().any(|&x| x != sum)
        }
        _ => {
            let got = world.read(&b.reduce_dst.slice(..size / 4)?)?;
            got.iter().any(|&x| x != sum)
        }
    };
    assert!(
        !bad,
        "rank {}: {op} of {size} bytes gave a wrong result",
        world.rank()
    );
    Ok(())
}

/// Part 2 on every rank: every collective at every size with every grid; rank 0's rows.
fn collectives(world: &World<Cuda>, sizes: &[usize], grids: &[Grid]) -> Result<Vec<Row>> {
    let (rank, n) = (world.rank(), world.world_size());
    let sizes: Vec<usize> = sizes.iter().copied().filter(|s| s % (4 * n) == 0).collect();
    let max = sizes.iter().copied().max().unwrap_or(0);
    let backend = world.backend();
    let b = CollectiveBuffers {
        gathered: world.zeros::<u8>(max)?,
        reduce_src: world.full::<f32>(max / 4, rank as f32 + 0.5)?,
        reduce_dst: world.zeros::<f32>(max / 4)?,
        gather_src: world.device_from_slice(&vec![rank as u8 + 1; max / n])?,
        scatter_dst: world.alloc::<f32>(max / n / 4)?,
    };
    backend.synchronize()?;
    let timer = backend.timer()?;
    let mut rows = Vec::new();
    for &grid in grids {
        let coll = Collectives::with_grid(world, grid)?;
        for &size in &sizes {
            let batch = (common::BATCH_BYTES / size).clamp(1, MAX_COLLECTIVE_BATCH);
            let count = size / 4;
            let ops: [(&'static str, &dyn Fn() -> Result<()>); 4] = [
                ("all_gather", &|| {
                    coll.all_gather(&b.gathered, &b.gather_src, size / n)
                }),
                ("all_reduce_1shot", &|| {
                    coll.all_reduce(
                        &b.reduce_dst,
                        &b.reduce_src,
                        count,
                        ReduceOp::Sum,
                        Algorithm::OneShot,
                    )
                }),
                ("all_reduce_2shot", &|| {
                    coll.all_reduce(
                        &b.reduce_dst,
                        &b.reduce_src,
                        count,
                        ReduceOp::Sum,
                        Algorithm::TwoShot,
                    )
                }),
                ("reduce_scatter", &|| {
                    coll.reduce_scatter(&b.scatter_dst, &b.reduce_src, count / n, ReduceOp::Sum)
                }),
            ];
            for (op, f) in ops {
                // Every rank runs the same line at the same time: collectives wait for peers.
                world.barrier()?;
                let us = time_collective(&timer, batch, f)?;
                timer.synchronize()?;
                check(world, &b, op, size)?;
                let algbw = size as f64 / us / 1e3;
                rows.push(Row {
                    tool: "symmem",
                    op,
                    world: n,
                    bytes: size,
                    batch,
                    median_us: us,
                    algbw,
                    busbw: algbw * bus_factor(op, n),
                    blocks: grid.blocks,
                });
            }
        }
        world.barrier()?;
        coll.finalize()?;
    }
    Ok(if rank == 0 { rows } else { Vec::new() })
}

/// The fastest row of each (tool, op, bytes).
fn best(rows: &[Row]) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    for r in rows {
        match out
            .iter_mut()
            .find(|o| o.tool == r.tool && o.op == r.op && o.bytes == r.bytes)
        {
            Some(o) if o.median_us > r.median_us => *o = r.clone(),
            Some(_) => {}
            None => out.push(r.clone()),
        }
    }
    out
}

/// The multi-GPU benchmark: point to point between GPUs 0 and 1, then the collectives at
/// the whole world; CSVs under `--out`.
#[derive(Parser, Debug)]
#[command(name = "multi_gpu")]
struct Options {
    /// Ranks (default: the GPU count); with fewer GPUs than ranks, ranks share GPUs
    /// round-robin (a smoke test of the code path, not a measurement of links).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    world: Option<u32>,
    /// Sizes in bytes, each a number optionally with K, M or G, a positive multiple of 16
    /// up to 4G [default: 4K, then 4 times larger each step up to 1G].
    #[arg(long, value_delimiter = ',', value_parser = cli::sweep_bytes::<{ 4 * GIB }>)]
    sizes: Vec<usize>,
    /// Blocks per rank of the collectives' grids, each tried [default: 32,132,264; ranks
    /// sharing a GPU: 32 and their share of 256].
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    blocks: Option<Vec<u32>>,
    /// How the collectives' ranks are started.
    #[arg(long, value_enum, default_value_t = Launcher::Processes)]
    launcher: Launcher,
    /// Where `p2p.csv` and `collectives.csv` go.
    #[arg(long, default_value = "target/bench-multi-gpu")]
    out: PathBuf,
    #[command(flatten)]
    cargo: cli::CargoBench,
}

/// `--launcher`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Launcher {
    /// One process per rank, as NCCL and PyTorch run.
    Processes,
    /// Threads of this process (what ranks sharing a GPU need: processes on one GPU are
    /// time-sliced).
    Threads,
}

impl Options {
    /// The command line, its default sizes filled in.
    fn parse_all() -> Self {
        cli::log();
        let mut o = Self::parse();
        if o.sizes.is_empty() {
            o.sizes = sweep_sizes(GIB);
        }
        o
    }

    /// Whether the collectives' ranks are processes.
    fn processes(&self) -> bool {
        self.launcher == Launcher::Processes
    }
}

/// The collectives' grids, the worlds' configuration and the largest size.
fn plan(o: &Options, n: usize, gpus: usize) -> (Vec<Grid>, Config, usize) {
    let max = o.sizes.iter().copied().max().unwrap_or(MIB);
    // Ranks sharing a GPU must keep all their blocks resident together (collectives'
    // device barriers): their share of two 256-thread blocks per SM of a 132-SM H200.
    let per_gpu = n.div_ceil(gpus);
    let blocks = o.blocks.clone().unwrap_or_else(|| {
        if per_gpu > 1 {
            vec![32, 256 / per_gpu as u32]
        } else {
            vec![32, 132, 264]
        }
    });
    let grids = blocks
        .iter()
        .map(|&blocks| Grid {
            blocks,
            threads: THREADS,
        })
        .collect();
    let config = Config {
        heap_bytes: 4 * max + 64 * MIB,
        timeout: TIMEOUT,
        ..Config::default()
    };
    (grids, config, max)
}

/// Rank 0's rows of `body` run by `n` ranks as threads of this process.
fn on_threads(
    n: usize,
    config: &Config,
    body: impl Fn(&World<Cuda>) -> Result<Vec<Row>> + Sync,
) -> Result<Vec<Row>> {
    let results = symmem::spawn_ranks(
        n,
        config,
        |r| recorded(Cuda::for_rank(r)),
        |world| {
            if world.rank() == 0 {
                println!("rank 0: {:?}", world.backend());
            }
            body(&world)
        },
    )?;
    let mut rows = Vec::new();
    for (rank, r) in results.into_iter().enumerate() {
        rows.extend(r.inspect_err(|e| eprintln!("rank {rank}: {e}"))?);
    }
    Ok(rows)
}

/// A rank process of the collectives (started by [`run_processes`]); rank 0 reports.
fn process_rank(o: &Options) -> Result<()> {
    let bootstrap = unix::UnixBootstrap::from_env()?;
    let (rank, n) = (bootstrap.rank(), bootstrap.world_size());
    let (grids, config, _) = plan(o, n, Cuda::device_count()?);
    let world = World::new(
        Box::new(bootstrap),
        recorded(Cuda::for_rank(rank))?,
        &config,
    )?;
    if rank == 0 {
        println!("rank 0 (pid {}): {:?}", std::process::id(), world.backend());
    }
    let rows = collectives(&world, &o.sizes, &grids)?;
    if rank == 0 {
        print_collectives(&rows, n);
        write_csv(&o.out.join("collectives.csv"), &best(&rows))?;
    }
    Ok(())
}

/// Runs this binary as `n` rank processes (UNIX-socket bootstrap, VMM file descriptors
/// exchanged) and waits for them.
fn run_processes(n: usize) -> Result<()> {
    let os = |what| move |source| Error::Os { what, source };
    let exe = std::env::current_exe().map_err(os("current_exe"))?;
    let mut command = std::process::Command::new(exe);
    command.args(std::env::args().skip(1));
    let statuses = unix::spawn(&mut command, n, TIMEOUT)?.wait()?;
    let failed: Vec<usize> = (0..n).filter(|&r| !statuses[r].success()).collect();
    assert!(failed.is_empty(), "rank processes {failed:?} failed");
    Ok(())
}

/// Writes `rows` under the CSV header to `path` (creating its folder).
fn write_csv(path: &std::path::Path, rows: &[Row]) -> Result<()> {
    let mut text = format!("{CSV_HEADER}\n");
    for r in rows {
        text.push_str(&r.csv());
        text.push('\n');
    }
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, &text));
    written.map_err(|source| Error::Os {
        what: "writing a CSV",
        source,
    })?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Part 1 (ranks 0 and 1 as threads, on GPUs 0 and 1) and part 2 (`n` ranks as processes
/// or threads), each written to its CSV as it ends.
fn run(o: &Options, n: usize, gpus: usize) -> Result<()> {
    let (grids, config, max) = plan(o, n, gpus);
    if n >= 2 {
        let p2p = on_threads(2, &config, |world| point_to_point(world, &o.sizes, max))?;
        write_csv(&o.out.join("p2p.csv"), &p2p)?;
    }
    if o.processes() {
        run_processes(n)
    } else {
        let rows = on_threads(n, &config, |world| collectives(world, &o.sizes, &grids))?;
        print_collectives(&rows, n);
        write_csv(&o.out.join("collectives.csv"), &best(&rows))
    }
}

fn print_collectives(rows: &[Row], n: usize) {
    println!();
    println!("collectives, world {n} (us; bus GB/s), every grid:");
    println!(
        "{:>16} {:>6} {:>10} {:>10} {:>9}",
        "op", "blocks", "bytes", "us", "busbw"
    );
    for r in rows {
        println!(
            "{:>16} {:>6} {:>10} {:>10.2} {:>9.1}",
            r.op, r.blocks, r.bytes, r.median_us, r.busbw
        );
    }
}

fn main() -> ExitCode {
    let o = Options::parse_all();
    if unix::UnixBootstrap::in_env() {
        return match process_rank(&o) {
            Ok(()) => match drop_errors_at_exit() {
                None => ExitCode::SUCCESS,
                Some(drop_errors) => {
                    eprintln!("drop errors: {drop_errors:?}");
                    ExitCode::FAILURE
                }
            },
            Err(e) => {
                eprintln!("rank process: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let gpus = match Cuda::device_count() {
        Ok(n) if n > 0 => n,
        Ok(_) => {
            println!("skipped: no CUDA device");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            println!("skipped: {e}");
            return ExitCode::SUCCESS;
        }
    };
    let n = match o.world {
        Some(n) => n as usize,
        None if gpus >= 2 => gpus,
        None => {
            println!("skipped: {gpus} GPU, this benchmark needs 2 (or --world N to share one)");
            return ExitCode::SUCCESS;
        }
    };
    println!(
        "multi-GPU bench: world {n} on {gpus} GPU(s){}, collectives' ranks as {}, median of {SAMPLES} after {WARMUP}",
        if n > gpus { " (ranks share GPUs)" } else { "" },
        if o.processes() {
            "processes"
        } else {
            "threads"
        }
    );
    if let Err(e) = run(&o, n, gpus) {
        eprintln!("multi-GPU bench failed: {e}");
        return ExitCode::FAILURE;
    }
    if let Some(drop_errors) = drop_errors_at_exit() {
        eprintln!("drop errors: {drop_errors:?}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
