//! CPU-backend numbers (a plain harness; `cargo bench -p symmem --bench cpu`):
//!
//! * `allocate_symmetric` latency on 4 thread-ranks: median over >= 1000 alloc/free
//!   pairs per rank, with the device-to-host synchronisations the backend counted during
//!   the allocations (must be 0). Goal: under 20 µs.
//! * Translated put (`World::put`, the `symmem_put` kernel) against a direct copy
//!   (`World::copy`, the `symmem_copy` kernel, to the already translated address: a view
//!   of rank 1's copy as mapped here) over the same shared mapping, rank 0 into rank 1's
//!   copy while the other ranks wait, for 1, 16 and 64 MiB: medians of >= 10
//!   repetitions each, interleaved, and their ratio from the same run.

mod cli;
use std::time::{Duration, Instant};
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::{Config, Grid, World};

const RANKS: usize = 4;
/// Alloc/free pairs timed per rank (after `WARMUP` untimed ones).
const PAIRS: usize = 5000;
const WARMUP: usize = 200;
/// Alloc/free pairs between two (untimed) barriers, which release the dropped buffers.
const RELEASE_EVERY: usize = 64;
/// Bytes per timed allocation.
const ALLOC_BYTES: usize = 4096;
const MIB: usize = 1 << 20;
const SIZES: [usize; 3] = [MIB, 16 * MIB, 64 * MIB];
const REPS: usize = 21;

/// What one rank measured.
struct Numbers {
    rank: usize,
    alloc: Vec<Duration>,
    free: Vec<Duration>,
    alloc_syncs: u64,
    /// Rank 0 only: the default launch shape.
    bandwidth: Samples,
    /// The same, both kernels launched on a single host thread.
    one_thread: Samples,
}

/// Per size: (bytes, put samples, copy samples).
type Samples = Vec<(usize, Vec<Duration>, Vec<Duration>)>;

fn median(samples: &[Duration]) -> Duration {
    let mut s = samples.to_vec();
    s.sort_unstable();
    s[s.len() / 2]
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut s = samples.to_vec();
    s.sort_unstable();
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn rank_body(world: World<Cpu>) -> symmem::Result<Numbers> {
    let (rank, n) = (world.rank(), world.world_size());
    let backend = world.backend();

    // Allocation latency: every rank at once, as a real program would.
    // Dropped buffers come back at a barrier: one, untimed, every `RELEASE_EVERY` pairs.
    world.barrier()?;
    for i in 0..WARMUP {
        drop(world.allocate_symmetric::<u8>(ALLOC_BYTES)?);
        if i % RELEASE_EVERY == RELEASE_EVERY - 1 {
            world.barrier()?;
        }
    }
    let (mut alloc, mut free) = (Vec::with_capacity(PAIRS), Vec::with_capacity(PAIRS));
    let mut alloc_syncs = 0;
    for i in 0..PAIRS {
        if i % RELEASE_EVERY == 0 {
            world.barrier()?;
        }
        let syncs = backend.device_to_host_syncs();
        let t = Instant::now();
        let (buffer, bases) = world.allocate_symmetric::<u8>(ALLOC_BYTES)?;
        let dt = t.elapsed();
        alloc_syncs += backend.device_to_host_syncs() - syncs;
        alloc.push(dt);
        std::hint::black_box(bases.device_ptr());
        let t = Instant::now();
        drop(buffer);
        free.push(t.elapsed());
    }
    world.barrier()?;

    // Bandwidth: rank 0 into rank 1's copy (rank 0 into itself in a world of one).
    let largest = *SIZES.iter().max().expect("sizes");
    let buffer = world.empty::<u8>(largest)?;
    let data: Vec<u8> = (0..largest).map(|i| (i % 251) as u8).collect();
    let source = world.device_from_slice(&data)?;
    let to = 1 % n;
    let (mut bandwidth, mut one_thread) = (Vec::new(), Vec::new());
    world.barrier()?;
    if rank == 0 {
        let remote = buffer.as_slice().peer(to)?;
        let kernels = world.kernels();
        for &bytes in &SIZES {
            let (dst, src, copy_dst) = (
                buffer.slice(..bytes)?,
                source.slice(..bytes)?,
                remote.slice(..bytes)?,
            );
            // Warm up both paths (first touch of the pages).
            world.put(&dst, &src, to)?;
            world.copy(&copy_dst, &src)?;
            // The same two kernels on one host thread (no interleaving of the threads'
            // 16-byte vectors within cache lines): for comparison only.
            let one = Grid::new(1, 1);
            let (mut puts1, mut copies1) = (Vec::new(), Vec::new());
            for rep in 0..REPS {
                // Alternate which goes first, so neither always finds a warm cache.
                for which in [rep % 2, 1 - rep % 2] {
                    let t = Instant::now();
                    if which == 0 {
                        kernels.launch(symmem_kernels::symmem_put, one, (&dst, &src, to as u32))?;
                        puts1.push(t.elapsed());
                    } else {
                        kernels.launch(symmem_kernels::symmem_copy, one, (&copy_dst, &src))?;
                        copies1.push(t.elapsed());
                    }
                }
            }
            one_thread.push((bytes, puts1, copies1));
            let (mut puts, mut copies) = (Vec::new(), Vec::new());
            for rep in 0..REPS {
                for which in [rep % 2, 1 - rep % 2] {
                    let t = Instant::now();
                    if which == 0 {
                        world.put(&dst, &src, to)?;
                        backend.synchronize()?;
                        puts.push(t.elapsed());
                    } else {
                        world.copy(&copy_dst, &src)?;
                        backend.synchronize()?;
                        copies.push(t.elapsed());
                    }
                }
            }
            bandwidth.push((bytes, puts, copies));
        }
    }
    world.barrier()?;
    // The data really arrived: rank 1 checks its copy.
    if rank == to {
        let got = world.read(&buffer)?;
        assert!(got == data, "put/copy destination does not hold the source");
    }
    world.barrier()?;
    Ok(Numbers {
        rank,
        alloc,
        free,
        alloc_syncs,
        bandwidth,
        one_thread,
    })
}

fn main() {
    cli::log();
    let config = Config {
        heap_bytes: 64 * MIB + 4 * MIB,
        timeout: Duration::from_secs(120),
        ..Config::default()
    };
    let results =
        symmem::spawn_ranks(RANKS, &config, |_| Ok(Cpu::new()), rank_body).expect("launch");
    let numbers: Vec<Numbers> = results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.unwrap_or_else(|e| panic!("rank {rank}: {e}")))
        .collect();

    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("symmem CPU backend, {RANKS} ranks as threads, {threads} hardware threads");
    println!();
    println!(
        "allocate_symmetric::<u8>({ALLOC_BYTES}): {PAIRS} alloc/free pairs per rank \
         (+{WARMUP} warm-up), all ranks at once"
    );
    println!(
        "{:>4}  {:>10}  {:>8}  {:>8}  {:>12}  {:>9}",
        "rank", "median µs", "p90 µs", "min µs", "free med µs", "D2H syncs"
    );
    let mut worst = Duration::ZERO;
    let mut syncs = 0;
    for r in &numbers {
        let m = median(&r.alloc);
        worst = worst.max(m);
        syncs += r.alloc_syncs;
        println!(
            "{:>4}  {:>10.2}  {:>8.2}  {:>8.2}  {:>12.2}  {:>9}",
            r.rank,
            micros(m),
            micros(percentile(&r.alloc, 0.9)),
            micros(*r.alloc.iter().min().expect("samples")),
            micros(median(&r.free)),
            r.alloc_syncs
        );
    }
    println!(
        "worst median {:.2} µs (goal < 20 µs: {}); D2H syncs during allocation: {syncs} (must be 0: {})",
        micros(worst),
        if worst < Duration::from_micros(20) {
            "met"
        } else {
            "MISSED"
        },
        if syncs == 0 { "ok" } else { "FAILED" }
    );
    println!();
    println!(
        "translated put vs direct copy, rank 0 -> rank 1 over the shared mapping, \
         median of {REPS} (GB/s = bytes moved / time)"
    );
    print_bandwidth(&numbers[0].bandwidth);
    println!();
    println!(
        "the same kernels on one host thread (Grid {{ blocks: 1, threads: 1 }}), for comparison"
    );
    print_bandwidth(&numbers[0].one_thread);
    if syncs != 0 {
        std::process::exit(1);
    }
}

fn print_bandwidth(samples: &Samples) {
    println!(
        "{:>8}  {:>9}  {:>10}  {:>9}  {:>9}  {:>8}",
        "size", "put GB/s", "copy GB/s", "put ms", "copy ms", "put/copy"
    );
    for (bytes, puts, copies) in samples {
        let (p, c) = (median(puts), median(copies));
        println!(
            "{:>5} MiB  {:>9.2}  {:>10.2}  {:>9.3}  {:>9.3}  {:>8.3}",
            bytes / MIB,
            gbps(*bytes, p),
            gbps(*bytes, c),
            p.as_secs_f64() * 1e3,
            c.as_secs_f64() * 1e3,
            gbps(*bytes, p) / gbps(*bytes, c)
        );
    }
}
