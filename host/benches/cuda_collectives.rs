//! Collectives on one GPU: world sizes 2 and 4, every rank a thread with its own `Cuda`
//! backend (own stream, every peer's VMM heap mapped at its own address), against
//! copy-engine equivalents measured in the same run.
//!
//! Every world runs twice, with 32 blocks per rank and with its share of 256 blocks
//! (`grids`). Lines (median of `SAMPLES` after `WARMUP`, CUDA events on each rank's
//! stream; rank 0's time is reported, every rank runs the same loop concurrently):
//! - `all_gather`: `Collectives::all_gather` of `n` bytes per rank; reference
//!   `memcpy_all_gather`: the same data movement as `world` `cuMemcpyDtoDAsync`s per rank
//!   (this rank's `src` into every rank's slot, through the peer mappings), no sync;
//! - `all_reduce_1shot`, `all_reduce_2shot`: f32 sum of `n` bytes; reference
//!   `memcpy_pull`: `world - 1` `cuMemcpyDtoDAsync`s pulling every peer's `src` (the bytes
//!   a one-shot all-reduce must read), no arithmetic: a floor, not an equivalent;
//! - `all_reduce_{1,2}shot_{f16,f64}`: the same all-reduces of `n` bytes of `f16` (summed
//!   in f32, rounded once) and of `f64`, in a second table beside the f32 ones.
//!
//! GB/s is `n * world` (all-gather: bytes landing in each rank's `dst`) or `n`
//! (all-reduce: bytes of result) over the time.
//!
//! Run: `cargo bench -p symmem --bench cuda_collectives` (exits 0 with "skipped" when
//! no GPU answers). Keep `CUDA_DEVICE_MAX_CONNECTIONS` >= 8: each rank's stream needs a
//! hardware queue of its own, or a rank waiting on a peer can block it.

mod cli;
use std::process::ExitCode;
use symmem::backend::cuda::Cuda;
use symmem::backend::cuda::timing::Timer;
use symmem::backend::{Backend, Grid};
use symmem::collectives::{Algorithm, Collectives, Element, ReduceOp, f16};
use symmem::{Config, Result, SymmetricBuffer, World};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const SIZES: [usize; 8] = [
    4 * KIB,
    16 * KIB,
    64 * KIB,
    256 * KIB,
    MIB,
    4 * MIB,
    16 * MIB,
    64 * MIB,
];
const MAX: usize = 64 * MIB;
const SAMPLES: usize = 20;
const WARMUP: usize = 3;
/// Threads per block.
const THREADS: u32 = 256;
/// Blocks of all ranks together in the larger grid: two 256-thread blocks per SM of the
/// H200's 132 fit whatever the kernels' register use (all ranks' blocks must be resident
/// at once: device barriers).
const ALL_RANKS_BLOCKS: u32 = 256;

/// The grids per rank each world runs with: 32 blocks, and its share of
/// [`ALL_RANKS_BLOCKS`].
fn grids(world: usize) -> [Grid; 2] {
    let share = ALL_RANKS_BLOCKS / world as u32;
    [32, share].map(|blocks| Grid {
        blocks,
        threads: THREADS,
    })
}

/// `4K`, `1M`: a table's size column.
fn size_label(n: usize) -> String {
    if n >= MIB {
        format!("{}M", n / MIB)
    } else {
        format!("{}K", n / KIB)
    }
}

/// A line's microseconds in `table` (rank 0's rows of every world), NaN where it is missing.
fn time_of(
    table: &[(usize, u32, &str, usize, f64)],
    world: usize,
    blocks: u32,
    line: &str,
    bytes: usize,
) -> f64 {
    table
        .iter()
        .find(|r| r.0 == world && r.1 == blocks && r.2 == line && r.3 == bytes)
        .map_or(f64::NAN, |r| r.4)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median microseconds of `op` on this rank's stream.
fn time_us(timer: &Timer<'_>, op: &dyn Fn() -> Result<()>) -> Result<f64> {
    for _ in 0..WARMUP {
        timer.time_ms(|_| op())?;
    }
    let mut v = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        v.push(f64::from(timer.time_ms(|_| op())?) * 1e3);
    }
    Ok(median(v))
}

/// An all-reduce of `n` bytes of `T` from `src` into `dst` (sum), as one line's op.
fn all_reduce_bytes<T: Element>(
    coll: &Collectives<Cuda>,
    dst: &SymmetricBuffer<T, Cuda>,
    src: &SymmetricBuffer<T, Cuda>,
    n: usize,
    algorithm: Algorithm,
) -> Result<()> {
    coll.all_reduce(dst, src, n / size_of::<T>(), ReduceOp::Sum, algorithm)
}

/// Asserts that the first `n` bytes of `dst` hold `want` in every element.
fn check_sum<T: Element + PartialEq + std::fmt::Debug>(
    world: &World<Cuda>,
    dst: &SymmetricBuffer<T, Cuda>,
    n: usize,
    want: T,
) -> Result<()> {
    let got = world.read(dst)?;
    let bad = got[..n / size_of::<T>()].iter().position(|&x| x != want);
    assert!(
        bad.is_none(),
        "rank {}: {} all-reduce result wrong at element {bad:?}: want {want:?}",
        world.rank(),
        std::any::type_name::<T>()
    );
    Ok(())
}

/// One rank's rows: (line, bytes, microseconds).
fn rank_rows(world: &World<Cuda>, grid: Grid) -> Result<Vec<(&'static str, usize, f64)>> {
    let (rank, n_ranks) = (world.rank(), world.world_size());
    let coll = Collectives::with_grid(world, grid)?;
    let gathered = world.zeros::<u8>(MAX * n_ranks)?;
    let src_local = world.device_from_slice(&vec![rank as u8 + 1; MAX])?;
    let reduce_src = world.full::<f32>(MAX / 4, rank as f32 + 0.5)?;
    let reduce_dst = world.zeros::<f32>(MAX / 4)?;
    let half_src = world.full::<f16>(MAX / 2, f16::from_f32(rank as f32 + 0.5))?;
    let half_dst = world.zeros::<f16>(MAX / 2)?;
    let double_src = world.full::<f64>(MAX / 8, rank as f64 + 0.5)?;
    let double_dst = world.zeros::<f64>(MAX / 8)?;
    let pulled = world.alloc::<u8>(MAX * n_ranks)?;
    world.backend().synchronize()?;
    world.barrier()?;
    let timer = world.backend().timer()?;
    let mut rows = Vec::new();
    for &n in &SIZES {
        // The driver's copies take raw addresses: this rank's slot of every rank's
        // `gathered`, and every peer's `reduce_src`, as mapped here.
        let slot = gathered.slice(rank * n..(rank + 1) * n)?;
        let slots: Vec<u64> = (0..n_ranks)
            .map(|p| slot.peer_ptr(p))
            .collect::<Result<_>>()?;
        let peers_src: Vec<u64> = (0..n_ranks)
            .filter(|&p| p != rank)
            .map(|p| reduce_src.as_slice().peer_ptr(p))
            .collect::<Result<_>>()?;
        let (src_ptr, pulled_ptr) = (src_local.ptr(), pulled.ptr());
        let count = n / 4;
        let lines: [(&'static str, &dyn Fn() -> Result<()>); 9] = [
            ("all_gather", &|| coll.all_gather(&gathered, &src_local, n)),
            ("memcpy_all_gather", &|| {
                for &slot in &slots {
                    // SAFETY: `slot..slot+n` is this rank's slot of a peer's `gathered`
                    // (mapped here), `src_local` holds MAX >= n bytes.
                    unsafe { timer.memcpy_dtod(slot, src_ptr, n)? };
                }
                Ok(())
            }),
            ("all_reduce_1shot", &|| {
                coll.all_reduce(
                    &reduce_dst,
                    &reduce_src,
                    count,
                    ReduceOp::Sum,
                    Algorithm::OneShot,
                )
            }),
            ("all_reduce_2shot", &|| {
                coll.all_reduce(
                    &reduce_dst,
                    &reduce_src,
                    count,
                    ReduceOp::Sum,
                    Algorithm::TwoShot,
                )
            }),
            ("memcpy_pull", &|| {
                for (i, &peer) in peers_src.iter().enumerate() {
                    // SAFETY: `peer..peer+n` is a peer's `reduce_src` mapped here; `pulled`
                    // holds world * MAX bytes.
                    unsafe { timer.memcpy_dtod(pulled_ptr + (i * n) as u64, peer, n)? };
                }
                Ok(())
            }),
            ("all_reduce_1shot_f16", &|| {
                all_reduce_bytes(&coll, &half_dst, &half_src, n, Algorithm::OneShot)
            }),
            ("all_reduce_2shot_f16", &|| {
                all_reduce_bytes(&coll, &half_dst, &half_src, n, Algorithm::TwoShot)
            }),
            ("all_reduce_1shot_f64", &|| {
                all_reduce_bytes(&coll, &double_dst, &double_src, n, Algorithm::OneShot)
            }),
            ("all_reduce_2shot_f64", &|| {
                all_reduce_bytes(&coll, &double_dst, &double_src, n, Algorithm::TwoShot)
            }),
        ];
        for (line, op) in lines {
            // Every rank runs the same line at the same time: collectives wait for peers.
            world.barrier()?;
            rows.push((line, n, time_us(&timer, op)?));
        }
    }
    timer.synchronize()?;
    // Check the last all-reduce of each type: the sum over ranks of (r + 0.5), exact in
    // every type at these worlds.
    let want: f64 = (0..n_ranks).map(|r| r as f64 + 0.5).sum();
    let last = SIZES[SIZES.len() - 1];
    check_sum(world, &reduce_dst, last, want as f32)?;
    check_sum(world, &half_dst, last, f16::from_f64(want))?;
    check_sum(world, &double_dst, last, want)?;
    let all = world.read(&gathered)?;
    for (p, chunk) in all.as_chunks::<MAX>().0.iter().enumerate() {
        let n = SIZES[SIZES.len() - 1];
        assert!(
            chunk[..n].iter().all(|&b| b == p as u8 + 1),
            "rank {rank}: all-gather slot {p} wrong"
        );
    }
    world.barrier()?;
    coll.finalize()?;
    Ok(rows)
}

fn main() -> ExitCode {
    cli::log();
    if let Err(why) = Cuda::new(0) {
        println!("skipped: no CUDA device ({why})");
        return ExitCode::SUCCESS;
    }
    let config = Config {
        // At world 4: the all-gather's 4 * MAX, and a source and a result of MAX for
        // each of f32, f16 and f64.
        heap_bytes: MAX * 12,
        ..Config::default()
    };
    println!(
        "collectives on one GPU, ranks as threads, {THREADS} threads per block, median of {SAMPLES}"
    );
    println!("world,blocks,line,bytes,us,gbps");
    let mut table = Vec::new();
    for n_ranks in [2usize, 4] {
        for grid in grids(n_ranks) {
            let results = match symmem::spawn_ranks(
                n_ranks,
                &config,
                |_| Cuda::new(0),
                |w| rank_rows(&w, grid),
            ) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("world {n_ranks}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let mut rank0 = None;
            for (rank, r) in results.into_iter().enumerate() {
                match r {
                    Ok(rows) if rank == 0 => rank0 = Some(rows),
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("world {n_ranks} rank {rank}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            for (line, bytes, us) in rank0.expect("rank 0 ran") {
                let moved = if line.contains("gather") {
                    bytes * n_ranks
                } else {
                    bytes
                };
                let gbps = moved as f64 / us / 1e3;
                println!("{n_ranks},{},{line},{bytes},{us:.2},{gbps:.1}", grid.blocks);
                table.push((n_ranks, grid.blocks, line, bytes, us));
            }
        }
    }
    println!();
    println!(
        "world blocks     size  all_gather us  memcpy us  ratio | 1shot us  2shot us  pull us  1shot/pull 2shot/pull"
    );
    for n_ranks in [2usize, 4] {
        for grid in grids(n_ranks) {
            for &n in &SIZES {
                let t = |line: &str| time_of(&table, n_ranks, grid.blocks, line, n);
                let (ag, mg, o, w, p) = (
                    t("all_gather"),
                    t("memcpy_all_gather"),
                    t("all_reduce_1shot"),
                    t("all_reduce_2shot"),
                    t("memcpy_pull"),
                );
                println!(
                    "{n_ranks:>5} {:>6} {:>8}  {ag:>13.2}  {mg:>9.2}  {:>5.2} | {o:>8.2}  {w:>8.2}  {p:>7.2}  {:>10.2} {:>10.2}",
                    grid.blocks,
                    size_label(n),
                    mg / ag,
                    p / o,
                    p / w
                );
            }
        }
    }
    println!("(ratio = reference time / ours: above 1 means the symmem kernel is faster)");
    println!();
    println!(
        "world blocks     size | f32 1shot  f16 1shot  f64 1shot | f32 2shot  f16 2shot  f64 2shot   (us, n bytes of each type)"
    );
    for n_ranks in [2usize, 4] {
        for grid in grids(n_ranks) {
            for &n in &SIZES {
                let t = |line: &str| time_of(&table, n_ranks, grid.blocks, line, n);
                println!(
                    "{n_ranks:>5} {:>6} {:>8} | {:>9.2}  {:>9.2}  {:>9.2} | {:>9.2}  {:>9.2}  {:>9.2}",
                    grid.blocks,
                    size_label(n),
                    t("all_reduce_1shot"),
                    t("all_reduce_1shot_f16"),
                    t("all_reduce_1shot_f64"),
                    t("all_reduce_2shot"),
                    t("all_reduce_2shot_f16"),
                    t("all_reduce_2shot_f64"),
                );
            }
        }
    }
    ExitCode::SUCCESS
}
