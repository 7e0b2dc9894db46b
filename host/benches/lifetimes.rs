//! What collective lifetimes cost: `World::barrier` (which waits for this rank's device
//! and agrees on the heap ledger and the dropped set) and `allocate_symmetric` (which
//! must stay free of communication and device syncs), on the CPU backend and, where a
//! GPU answers, the CUDA backend, ranks as threads.
//!
//! `cargo bench -p symmem --bench lifetimes` prints one line per backend and world size:
//! the median barrier (2000 per rank, all ranks at once, an idle device), the median
//! allocation of 1 MiB (in rounds of 64 allocations, each round dropped and followed by
//! a barrier, untimed) and the device-to-host syncs counted during the allocations. The
//! file builds against the API of older commits too, so the same source measures the
//! old build beside the new one.

mod cli;
use std::time::{Duration, Instant};
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::backend::cuda::Cuda;
use symmem::{Config, World};

const BARRIERS: usize = 2000;
const ROUNDS: usize = 16;
const PER_ROUND: usize = 64;
const ALLOC_BYTES: usize = 1 << 20;

struct Numbers {
    barrier_us: f64,
    alloc_us: f64,
    alloc_syncs: u64,
}

fn median_us(mut v: Vec<Duration>) -> f64 {
    v.sort_unstable();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn rank_body<B: Backend>(world: World<B>) -> symmem::Result<Numbers> {
    for _ in 0..100 {
        world.barrier()?;
    }
    let mut barriers = Vec::with_capacity(BARRIERS);
    for _ in 0..BARRIERS {
        let t = Instant::now();
        world.barrier()?;
        barriers.push(t.elapsed());
    }
    let mut allocs = Vec::with_capacity(ROUNDS * PER_ROUND);
    let mut syncs = 0;
    for round in 0..=ROUNDS {
        let mut live = Vec::with_capacity(PER_ROUND);
        let before = world.backend().device_to_host_syncs();
        for _ in 0..PER_ROUND {
            let t = Instant::now();
            let buffer = world.allocate_symmetric::<u8>(ALLOC_BYTES)?;
            let dt = t.elapsed();
            live.push(buffer);
            // Round 0 warms up (table chunks, allocator state).
            if round > 0 {
                allocs.push(dt);
            }
        }
        if round > 0 {
            syncs += world.backend().device_to_host_syncs() - before;
        }
        drop(live);
        world.barrier()?;
    }
    Ok(Numbers {
        barrier_us: median_us(barriers),
        alloc_us: median_us(allocs),
        alloc_syncs: syncs,
    })
}

fn report<B: Backend>(name: &str, ranks: usize, make: impl Fn(usize) -> symmem::Result<B> + Sync) {
    let config = Config {
        heap_bytes: (PER_ROUND + 4) * ALLOC_BYTES,
        timeout: Duration::from_secs(60),
        ..Config::default()
    };
    let results = symmem::spawn_ranks(ranks, &config, make, rank_body).expect("launch");
    let numbers: Vec<Numbers> = results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.unwrap_or_else(|e| panic!("{name} rank {rank}: {e}")))
        .collect();
    let worst = |f: fn(&Numbers) -> f64| numbers.iter().map(f).fold(0.0, f64::max);
    println!(
        "{name:>5} {ranks:>5}  {:>14.2}  {:>13.2}  {:>11}",
        worst(|n| n.barrier_us),
        worst(|n| n.alloc_us),
        numbers.iter().map(|n| n.alloc_syncs).sum::<u64>()
    );
}

fn main() {
    cli::log();
    println!(
        "worst rank's median; barrier: {BARRIERS} per rank; allocate: {ROUNDS} x {PER_ROUND} of 1 MiB"
    );
    println!(
        "{:>5} {:>5}  {:>14}  {:>13}  {:>11}",
        "kind", "ranks", "barrier µs", "allocate µs", "alloc syncs"
    );
    for ranks in [2, 4] {
        report("cpu", ranks, |_| Ok(Cpu::new()));
    }
    match Cuda::new(0) {
        Ok(_) => {
            for ranks in [2, 4] {
                report("cuda", ranks, Cuda::for_rank);
            }
        }
        Err(e) => println!("cuda: skipped ({e})"),
    }
}
