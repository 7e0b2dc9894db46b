//! What the graph-replayed CUDA benches share (`small_messages`, `app_memory`): a call's
//! time per call graph-replayed on one rank, and a line's time over ranks and trials.
//! A folder (`replay/mod.rs`, as `cli/`), so that cargo does not take it for a bench.

use std::time::Instant;
use symmem::backend::Backend;
use symmem::backend::cuda::Cuda;
use symmem::{Result, World};

/// One rank's rows: (line, bytes, microseconds per call, one value per trial).
pub type Rows = Vec<(&'static str, usize, Vec<f64>)>;

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// This rank's microseconds per call of `call`, one value per trial: a graph of `calls`
/// back-to-back calls, replayed once to warm up, then `replays` times per trial, every
/// trial starting after a barrier and ending with a synchronisation.
pub fn replayed_us(
    world: &World<Cuda>,
    calls: usize,
    replays: usize,
    trials: usize,
    call: &dyn Fn() -> Result<()>,
) -> Result<Vec<f64>> {
    let graph = world.capture(|| (0..calls).try_for_each(|_| call()))?;
    graph.replay()?;
    world.barrier()?;
    let mut times = Vec::with_capacity(trials);
    for _ in 0..trials {
        world.barrier()?;
        let start = Instant::now();
        for _ in 0..replays {
            graph.replay()?;
        }
        world.backend().synchronize()?;
        times.push(start.elapsed().as_secs_f64() * 1e6 / (calls * replays) as f64);
    }
    drop(graph);
    world.barrier()?;
    Ok(times)
}

/// Each line's time: the slowest rank of each of `trials` trials, then the median over
/// the trials (every rank's rows in the same order).
pub fn slowest_medians(per_rank: &[Rows], trials: usize) -> Vec<(&'static str, usize, f64)> {
    (0..per_rank[0].len())
        .map(|i| {
            let (line, bytes, _) = &per_rank[0][i];
            let slowest: Vec<f64> = (0..trials)
                .map(|t| per_rank.iter().map(|r| r[i].2[t]).fold(0.0, f64::max))
                .collect();
            (*line, *bytes, median(slowest))
        })
        .collect()
}
