//! The CUDA backend's benchmark (issue 8, "Benchmarks"): `cargo bench -p symmem --bench cuda`.
//!
//! On GPU 0, for sizes 4 KiB to 2 GiB, each line the median of `SAMPLES` timed samples
//! after `WARMUP` untimed ones, timed with CUDA events ([`Timer`]), bytes read plus bytes
//! written counted for GB/s:
//!
//! - `put`: [`World::put`] (the `symmem_put` kernel) through a [`World`]'s symmetric
//!   buffer, 2 ranks as threads on GPU 0, rank 0 putting into rank 1's copy through the
//!   imported VMM mapping;
//! - `copy`: [`World::copy`] (`symmem_copy`) of the same bytes into rank 0's own copy (no
//!   translation);
//! - `memcpy_dtod`: `cuMemcpyDtoDAsync` of the same bytes to the same destination;
//! - `xproc_put` / `xproc_local_put`: ranks as 2 processes (UNIX-socket bootstrap, VMM
//!   file descriptors), rank 0 putting into rank 1's heap / into its own copy;
//! - `alloc_symmetric_us`, `alloc_free_pair_us`: median of 1000 `allocate_symmetric` of
//!   1 MiB (and the pair with its free), with the D2H-sync counter delta (`alloc_d2h_syncs`);
//! - `launch_enqueue_us`: the host's cost of one launch through the checked path,
//!   `world.kernels().launch(symmem_copy, Grid::new(1, 256), (&dst, &src, 16u64))`:
//!   wall-clock around each call, median (p10, p90) of `LAUNCHES` after `LAUNCH_WARMUP`,
//!   the stream synchronised (untimed) every `LAUNCH_SYNC_EVERY` launches to keep its
//!   queue short. Printed on its own as `launch_enqueue_us,<median>,<p10>,<p90>` (µs)
//!   and kept in `rust.csv` (bytes 16, median and spread).
//!
//! A sample is one launch for sizes of 64 MiB and more, each taking the next slot of a
//! rotation over the 2 GiB buffers. Below that a sample is a batch of
//! `clamp(64 MiB / size, 1, 100)` launches on consecutive slots, captured once per line
//! into a CUDA graph ([`Timer::capture`]) and replayed between two events (the time per
//! launch is the batch time over the batch), as `peers/iris_put.py` and `peers/copy.cu`
//! time theirs: what is timed is the device's work, not the host's launch rate. The
//! replayed slots repeat from sample to sample, alike for every tool.
//! Kernels run with the backend's default grid (one 16-byte vector per thread, 256
//! threads per block), from the same embedded PTX, on the backend's stream, launched
//! through the world's checked path as any program launches them; the timer's events
//! bracket them on that stream.
//!
//! Options: `--out DIR` (default `$SYMMEM_BENCH_OUT`, else `target/bench-cuda`): where
//! `rust.csv` goes; `--sizes 4K,1M,...` to run fewer sizes; `--no-xproc` to skip the
//! cross-process lines. Prints `skipped: <reason>` and exits 0 where no GPU answers.

mod cli;
mod common;

use clap::Parser;
use common::{
    GIB, KIB, MIB, Op, Sampling, Target, drop_errors_at_exit, fill_source, pattern, recorded,
    stats, sweep_size, sweep_sizes, verify,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use symmem::backend::Backend;
use symmem::backend::cuda::Cuda;
use symmem::backend::cuda::timing::Timer;
use symmem::bootstrap::unix;
use symmem::{Config, Error, Grid, Result, SymmetricBuffer, World};

/// The largest size, and the length of every rotation buffer.
const MAX: usize = 2 * GIB;
const SAMPLES: usize = 30;
const WARMUP: usize = 5;
/// The source holds this pattern, repeated.
const PATTERN: usize = 16 * MIB;
const ALLOC_BYTES: usize = MIB;
const ALLOC_PAIRS: usize = 1000;
const ALLOC_WARMUP: usize = 100;
/// Alloc/free pairs between two barriers (the heap has 64 MiB to spare).
const ALLOC_RELEASE_EVERY: usize = 32;
const TIMEOUT: Duration = Duration::from_secs(600);
const XPROC_ENV: &str = "SYMMEM_BENCH_XPROC_CSV";
/// Timed launches of the enqueue-cost line, after untimed ones.
const LAUNCHES: usize = 10_000;
const LAUNCH_WARMUP: usize = 1000;
/// The enqueue-cost loop synchronises the stream (untimed) after this many launches.
const LAUNCH_SYNC_EVERY: usize = 1000;
/// Bytes each launch of the enqueue-cost line copies.
const LAUNCH_BYTES: usize = 16;

/// One result line, as written to the CSV.
#[derive(Clone, Debug)]
struct Row {
    line: &'static str,
    bytes: usize,
    batch: usize,
    samples: usize,
    /// Median time of one operation (µs), or the value of a latency/count line.
    median_us: f64,
    /// Median bandwidth, bytes read plus written (NaN for latency lines).
    gbps: f64,
    /// (p90 - p10) / median of the bandwidth samples, in percent.
    spread_pct: f64,
}

impl Row {
    fn csv(&self) -> String {
        format!(
            "rust,{},{},{},{},{:.3},{:.2},{:.2}",
            self.line,
            self.bytes,
            self.batch,
            self.samples,
            self.median_us,
            self.gbps,
            self.spread_pct
        )
    }
}

const CSV_HEADER: &str = "tool,line,bytes,batch,samples,median_us,gbps,spread_pct";

/// Times `ops` at `size` over the MAX-byte rotation (see [`common::sweep_size`]); GB/s
/// counts bytes read plus written.
fn sweep_rows(timer: &Timer, size: usize, ops: &[(&'static str, Op<'_>)]) -> Result<Vec<Row>> {
    let sweeps = sweep_size(
        timer,
        size,
        MAX,
        Sampling {
            warmup: WARMUP,
            samples: SAMPLES,
            graphs: true,
        },
        ops,
    )?;
    Ok(ops
        .iter()
        .zip(sweeps)
        .map(|((line, _), sweep)| {
            let (med, p10, p90) = sweep.gbps(2 * size);
            Row {
                line,
                bytes: size,
                batch: sweep.batch,
                samples: SAMPLES,
                median_us: sweep.median_us(),
                gbps: med,
                spread_pct: (p90 - p10) / med * 100.0,
            }
        })
        .collect())
}

/// Rank 0's half of the in-process run: the put/copy/memcpy sweep and the checks.
fn in_process_rank0(
    world: &World<Cuda>,
    buffer: &SymmetricBuffer<u8, Cuda>,
    sizes: &[usize],
    pat: &[u8],
) -> Result<Vec<Row>> {
    let cuda = world.backend();
    let timer = cuda.timer()?;
    let src = world.alloc::<u8>(MAX)?;
    fill_source(world, &timer, &src, pat)?;
    let (local, s0) = (buffer.ptr(), src.ptr());
    println!(
        "rank 0: local copy {local:#x}, rank 1's copy mapped here at {:#x}, source {s0:#x}",
        buffer.as_slice().peer_ptr(1)?
    );
    let ops: Vec<(&'static str, Op<'_>)> = vec![
        (
            "put",
            Box::new(|_: &Timer, off, n| {
                world.put(&buffer.slice(off..off + n)?, &src.slice(off..off + n)?, 1)
            }),
        ),
        (
            "copy",
            Box::new(|_: &Timer, off, n| {
                world.copy(&buffer.slice(off..off + n)?, &src.slice(off..off + n)?)
            }),
        ),
        (
            "memcpy_dtod",
            Box::new(move |t: &Timer, off, n| {
                assert!(off + n <= MAX, "a slot past the buffers");
                // SAFETY: `off + n <= MAX`: both ranges lie in MAX-byte allocations of
                // this context (rank 0's copy of `buffer`, and `src`), which outlive the
                // timed work.
                unsafe { t.memcpy_dtod(local + off as u64, s0 + off as u64, n) }
            }),
        ),
    ];
    let mut rows = Vec::new();
    for &size in sizes {
        let r = sweep_rows(&timer, size, &ops)?;
        println!(
            "{:>10} B  put {:>8.1}  copy {:>8.1}  memcpy {:>8.1} GB/s  (batch {})",
            size, r[0].gbps, r[1].gbps, r[2].gbps, r[0].batch
        );
        rows.extend(r);
    }
    rows.push(launch_enqueue(world, &timer, pat)?);
    // Checks last; the put of 64 MiB last of all, which rank 1 then reads in its own copy.
    let (own, remote) = (
        Target::Local(buffer.as_slice().local()),
        Target::Peer(buffer.as_slice(), 1),
    );
    for size in [4 * KIB, MIB + 4096, 64 * MIB] {
        verify(world, &timer, "copy", own, size, pat, &ops[1].1)?;
        verify(world, &timer, "memcpy_dtod", own, size, pat, &ops[2].1)?;
        verify(world, &timer, "put", remote, size, pat, &ops[0].1)?;
    }
    Ok(rows)
}

/// The host's cost of enqueueing one small kernel through the checked launch path
/// (`Module::launch`: argument lowering, ownership checks, `cuLaunchKernel`): wall-clock
/// around each of `LAUNCHES` launches of `symmem_copy` of 16 bytes, the stream
/// synchronised (untimed) every `LAUNCH_SYNC_EVERY`. Prints the line
/// `launch_enqueue_us,<median>,<p10>,<p90>` and returns it as a row.
fn launch_enqueue(world: &World<Cuda>, timer: &Timer, pat: &[u8]) -> Result<Row> {
    let src = world.device_from_slice(&pat[..LAUNCH_BYTES])?;
    let dst = world.device_zeros::<u8>(LAUNCH_BYTES)?;
    let kernels = world.kernels();
    let grid = Grid::new(1, 256);
    timer.synchronize()?;
    for i in 0..LAUNCH_WARMUP {
        kernels.launch(symmem_kernels::symmem_copy, grid, (&dst, &src))?;
        if i % LAUNCH_SYNC_EVERY == LAUNCH_SYNC_EVERY - 1 {
            timer.synchronize()?;
        }
    }
    timer.synchronize()?;
    let mut us = Vec::with_capacity(LAUNCHES);
    for i in 0..LAUNCHES {
        let t = Instant::now();
        kernels.launch(symmem_kernels::symmem_copy, grid, (&dst, &src))?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
        if i % LAUNCH_SYNC_EVERY == LAUNCH_SYNC_EVERY - 1 {
            timer.synchronize()?;
        }
    }
    timer.synchronize()?;
    assert!(
        world.read(&dst)? == pat[..LAUNCH_BYTES],
        "launch_enqueue: the copies did not arrive"
    );
    let (med, p10, p90) = stats(&us);
    println!("launch_enqueue_us,{med:.3},{p10:.3},{p90:.3}");
    Ok(Row {
        line: "launch_enqueue_us",
        bytes: LAUNCH_BYTES,
        batch: 1,
        samples: LAUNCHES,
        median_us: med,
        gbps: f64::NAN,
        spread_pct: (p90 - p10) / med * 100.0,
    })
}

/// `allocate_symmetric` latency on every rank; rows from rank 0 only. Dropped buffers
/// come back at a barrier: one every `ALLOC_RELEASE_EVERY` pairs, untimed, its syncs
/// not counted.
fn alloc_latency(world: &World<Cuda>) -> Result<Vec<Row>> {
    for i in 0..ALLOC_WARMUP {
        drop(world.allocate_symmetric::<u8>(ALLOC_BYTES)?);
        if i % ALLOC_RELEASE_EVERY == ALLOC_RELEASE_EVERY - 1 {
            world.barrier()?;
        }
    }
    let mut syncs = 0;
    let mut alloc = Vec::with_capacity(ALLOC_PAIRS);
    let mut pair = Vec::with_capacity(ALLOC_PAIRS);
    for i in 0..ALLOC_PAIRS {
        if i % ALLOC_RELEASE_EVERY == 0 {
            world.barrier()?;
        }
        let before = world.backend().device_to_host_syncs();
        let t0 = Instant::now();
        let b = world.allocate_symmetric::<u8>(ALLOC_BYTES)?;
        let t1 = Instant::now();
        drop(b);
        let t2 = Instant::now();
        syncs += world.backend().device_to_host_syncs() - before;
        alloc.push((t1 - t0).as_secs_f64() * 1e6);
        pair.push((t2 - t0).as_secs_f64() * 1e6);
    }
    world.barrier()?;
    let row = |line, v: &[f64]| {
        let (med, p10, p90) = stats(v);
        Row {
            line,
            bytes: ALLOC_BYTES,
            batch: 1,
            samples: ALLOC_PAIRS,
            median_us: med,
            gbps: f64::NAN,
            spread_pct: (p90 - p10) / med * 100.0,
        }
    };
    Ok(vec![
        row("alloc_symmetric_us", &alloc),
        row("alloc_free_pair_us", &pair),
        Row {
            line: "alloc_d2h_syncs",
            bytes: ALLOC_BYTES,
            batch: 1,
            samples: ALLOC_PAIRS,
            median_us: syncs as f64,
            gbps: f64::NAN,
            spread_pct: 0.0,
        },
    ])
}

/// Rank 1 reads its own copy and checks what rank 0 put there last (64 MiB).
fn check_own_copy(
    world: &World<Cuda>,
    buffer: &SymmetricBuffer<u8, Cuda>,
    pat: &[u8],
) -> Result<()> {
    let got = world.read(&buffer.slice(..64 * MIB)?)?;
    if let Some(i) = (0..got.len()).find(|&i| got[i] != pat[i % PATTERN]) {
        panic!(
            "rank {}: byte {i} of its own copy differs from rank 0's put",
            world.rank()
        );
    }
    println!(
        "rank {}: its own copy holds the 64 MiB rank 0 put",
        world.rank()
    );
    Ok(())
}

fn config() -> Config {
    Config {
        heap_bytes: MAX + 64 * MIB,
        timeout: TIMEOUT,
        ..Config::default()
    }
}

fn in_process(sizes: &[usize]) -> Result<Vec<Row>> {
    let pat = pattern(PATTERN);
    let results = symmem::spawn_ranks(
        2,
        &config(),
        |_| recorded(Cuda::new(0)),
        |world| {
            let buffer = world.empty::<u8>(MAX)?;
            world.barrier()?;
            let mut rows = if world.rank() == 0 {
                println!("device: {:?}", world.backend());
                in_process_rank0(&world, &buffer, sizes, &pat)?
            } else {
                Vec::new()
            };
            world.barrier()?;
            if world.rank() == 1 {
                check_own_copy(&world, &buffer, &pat)?;
            }
            world.barrier()?;
            drop(buffer);
            let alloc = alloc_latency(&world)?;
            if world.rank() == 0 {
                rows.extend(alloc);
            }
            world.barrier()?;
            Ok(rows)
        },
    )?;
    let mut rows = Vec::new();
    for r in results {
        rows.extend(r?);
    }
    Ok(rows)
}

/// A rank process of the cross-process run (started by [`cross_process`]).
fn xproc_child(sizes: &[usize]) -> Result<()> {
    let bootstrap = unix::UnixBootstrap::from_env()?;
    let world = World::new(Box::new(bootstrap), recorded(Cuda::new(0))?, &config())?;
    let pat = pattern(PATTERN);
    let buffer = world.empty::<u8>(MAX)?;
    world.barrier()?;
    if world.rank() == 0 {
        let cuda = world.backend();
        let timer = cuda.timer()?;
        let src = world.alloc::<u8>(MAX)?;
        fill_source(&world, &timer, &src, &pat)?;
        println!(
            "process rank 0 (pid {}): rank 1's heap (another process) mapped at {:#x}",
            std::process::id(),
            buffer.as_slice().peer_ptr(1)?
        );
        let (world, buffer, src) = (&world, &buffer, &src);
        let put_to = |to: usize| -> Op<'_> {
            Box::new(move |_: &Timer, off, n| {
                world.put(&buffer.slice(off..off + n)?, &src.slice(off..off + n)?, to)
            })
        };
        let ops: Vec<(&'static str, Op<'_>)> =
            vec![("xproc_put", put_to(1)), ("xproc_local_put", put_to(0))];
        let mut rows = Vec::new();
        for &size in sizes {
            let r = sweep_rows(&timer, size, &ops)?;
            println!(
                "{:>10} B  cross-process put {:>8.1}  local put {:>8.1} GB/s",
                size, r[0].gbps, r[1].gbps
            );
            rows.extend(r);
        }
        verify(
            world,
            &timer,
            "xproc_local_put",
            Target::Local(buffer.as_slice().local()),
            64 * MIB,
            &pat,
            &ops[1].1,
        )?;
        verify(
            world,
            &timer,
            "xproc_put",
            Target::Peer(buffer.as_slice(), 1),
            64 * MIB,
            &pat,
            &ops[0].1,
        )?;
        let text: String = rows.iter().map(|r| r.csv() + "\n").collect();
        let path = std::env::var(XPROC_ENV)
            .unwrap_or_else(|_| panic!("{XPROC_ENV} is not set (the parent sets it)"));
        std::fs::write(&path, text).map_err(|source| Error::Os {
            what: "writing the cross-process CSV",
            source,
        })?;
    }
    world.barrier()?;
    if world.rank() == 1 {
        check_own_copy(&world, &buffer, &pat)?;
    }
    world.barrier()
}

/// Runs this binary as 2 rank processes and reads rank 0's rows.
fn cross_process(args: &[String]) -> Result<Vec<Row>> {
    let exe = std::env::current_exe().map_err(|source| Error::Os {
        what: "current_exe",
        source,
    })?;
    let csv = std::env::temp_dir().join(format!("symmem-xproc-{}.csv", std::process::id()));
    let mut command = std::process::Command::new(exe);
    command.args(args).env(XPROC_ENV, &csv);
    let os = |what| move |source| Error::Os { what, source };
    let statuses = unix::spawn(&mut command, 2, TIMEOUT)?.wait()?;
    assert!(
        statuses.iter().all(|s| s.success()),
        "a cross-process rank failed"
    );
    let text = std::fs::read_to_string(&csv).map_err(os("reading the cross-process CSV"))?;
    let _ = std::fs::remove_file(&csv);
    let mut rows = Vec::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split(',').collect();
        let num = |i: usize| {
            f.get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        let line = match f.get(1) {
            Some(&"xproc_put") => "xproc_put",
            Some(&"xproc_local_put") => "xproc_local_put",
            _ => continue,
        };
        rows.push(Row {
            line,
            bytes: num(2) as usize,
            batch: num(3) as usize,
            samples: num(4) as usize,
            median_us: num(5),
            gbps: num(6),
            spread_pct: num(7),
        });
    }
    Ok(rows)
}

fn find(rows: &[Row], line: &str, bytes: usize) -> Option<f64> {
    rows.iter()
        .find(|r| r.line == line && r.bytes == bytes)
        .map(|r| if r.gbps.is_nan() { r.median_us } else { r.gbps })
}

fn print_table(rows: &[Row], sizes: &[usize]) {
    println!();
    println!("symmem CUDA bench (GB/s = bytes read + written; ratios against the same run)");
    println!(
        "{:>10} {:>9} {:>9} {:>9} {:>10} {:>12} {:>9} {:>9} {:>11}",
        "bytes",
        "put",
        "copy",
        "memcpy",
        "put/copy",
        "copy/memcpy",
        "xproc",
        "local",
        "xproc/local"
    );
    let r = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let q = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.3}", a / b),
        _ => "-".into(),
    };
    for &s in sizes {
        let (p, c, m) = (
            find(rows, "put", s),
            find(rows, "copy", s),
            find(rows, "memcpy_dtod", s),
        );
        let (x, l) = (find(rows, "xproc_put", s), find(rows, "xproc_local_put", s));
        println!(
            "{:>10} {:>9} {:>9} {:>9} {:>10} {:>12} {:>9} {:>9} {:>11}",
            s,
            r(p),
            r(c),
            r(m),
            q(p, c),
            q(c, m),
            r(x),
            r(l),
            q(x, l)
        );
    }
    println!("goals: put/copy >= 0.99, copy/memcpy >= 0.97");
    for line in [
        "alloc_symmetric_us",
        "alloc_free_pair_us",
        "alloc_d2h_syncs",
    ] {
        if let Some(v) = find(rows, line, ALLOC_BYTES) {
            println!("{line:>20}: {v:.3}");
        }
    }
    if let Some(v) = find(rows, "launch_enqueue_us", LAUNCH_BYTES) {
        println!("{:>20}: {v:.3}", "launch_enqueue_us");
    }
}

/// The CUDA backend's benchmark on GPU 0: put, copy and cuMemcpyDtoD per size, the
/// cross-process lines, allocation and launch costs; `rust.csv` under `--out`.
#[derive(Parser, Debug)]
#[command(name = "cuda")]
struct Options {
    /// Where `rust.csv` goes [default: $SYMMEM_BENCH_OUT, else target/bench-cuda].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Sizes in bytes, each a number optionally with K, M or G, a positive multiple of 16
    /// up to 2G [default: 4K, then 4 times larger each step up to 2G].
    #[arg(long, value_delimiter = ',', value_parser = cli::sweep_bytes::<MAX>)]
    sizes: Vec<usize>,
    /// Skips the cross-process lines.
    #[arg(long)]
    no_xproc: bool,
    #[command(flatten)]
    cargo: cli::CargoBench,
}

fn main() -> ExitCode {
    let options = Options::parse();
    cli::log();
    // What the cross-process ranks are started with: this command line again.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = options.out.unwrap_or_else(|| {
        std::env::var_os("SYMMEM_BENCH_OUT")
            .map_or_else(|| PathBuf::from("target/bench-cuda"), PathBuf::from)
    });
    let sizes = if options.sizes.is_empty() {
        sweep_sizes(MAX)
    } else {
        options.sizes
    };
    let xproc = !options.no_xproc;
    if unix::UnixBootstrap::in_env() {
        return match xproc_child(&sizes) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cross-process rank: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match Cuda::new(0) {
        Ok(c) => println!(
            "CUDA device 0: {} ({}, driver {})",
            c.device_name(),
            c.arch(),
            c.driver_version()
        ),
        Err(e) => {
            println!("skipped: {e}");
            return ExitCode::SUCCESS;
        }
    }
    let mut rows = match in_process(&sizes) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("in-process bench failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    if xproc {
        match cross_process(&args) {
            Ok(r) => rows.extend(r),
            Err(e) => eprintln!("cross-process lines skipped: {e}"),
        }
    }
    let mut text = format!("{CSV_HEADER}\n");
    for r in &rows {
        text.push_str(&r.csv());
        text.push('\n');
    }
    let written =
        std::fs::create_dir_all(&out).and_then(|()| std::fs::write(out.join("rust.csv"), &text));
    match written {
        Ok(()) => println!("wrote {}", out.join("rust.csv").display()),
        Err(e) => eprintln!("writing {}: {e}", out.display()),
    }
    print_table(&rows, &sizes);
    if let Some(drop_errors) = drop_errors_at_exit() {
        eprintln!("drop errors: {drop_errors:?}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
