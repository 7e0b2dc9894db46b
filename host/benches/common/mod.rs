//! What the CUDA benchmarks share: sizes, statistics, the source pattern and the sweep
//! that times several operations at one size with CUDA events (graph-replayed batches
//! below [`BATCH_BYTES`], single launches on a rotation of slots above).
//!
//! Operations go through the world (`World::put`, `World::copy`, `Module::launch`,
//! collectives) on the rank's stream, which the [`Timer`]'s events bracket; only the
//! driver's reference copies take raw addresses (in `unsafe` blocks).

use std::sync::{Arc, Mutex};
use symmem::backend::DropErrors;
use symmem::backend::cuda::Cuda;
use symmem::backend::cuda::timing::Timer;
use symmem::{DeviceBuffer, DeviceSlice, Result, SymSlice, World};

/// The drop-error records of every backend this benchmark opened ([`recorded`]).
static DROP_ERRORS: Mutex<Vec<Arc<DropErrors>>> = Mutex::new(Vec::new());

/// `opened` (a `Cuda::new` or `Cuda::for_rank`), its drop-error record kept for
/// [`drop_errors_at_exit`].
pub fn recorded(opened: Result<Cuda>) -> Result<Cuda> {
    let cuda = opened?;
    if let Ok(mut records) = DROP_ERRORS.lock() {
        records.push(cuda.drop_errors());
    }
    Ok(cuda)
}

/// How many driver calls failed while dropping what the benchmark's backends made, and
/// the last failure's text; `None` when none failed.
pub fn drop_errors_at_exit() -> Option<(u64, Option<String>)> {
    let records = DROP_ERRORS.lock().ok()?;
    let count = records.iter().map(|r| r.count()).sum();
    let last = records.iter().rev().find_map(|r| r.last());
    (count != 0).then_some((count, last))
}

pub const KIB: usize = 1 << 10;
pub const MIB: usize = 1 << 20;
pub const GIB: usize = 1 << 30;
/// Below this size a sample is a batch of operations.
pub const BATCH_BYTES: usize = 64 * MIB;
/// The most operations in one batch.
pub const MAX_BATCH: usize = 100;

/// The sizes of a sweep: 4 KiB, then four times larger each step up to `largest`, and
/// `largest` itself.
pub fn sweep_sizes(largest: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::iter::successors(Some(4 * KIB), |s| s.checked_mul(4))
        .take_while(|&s| s <= largest)
        .collect();
    if sizes.last() != Some(&largest) {
        sizes.push(largest);
    }
    sizes
}

/// Operations per sample at `size`: `clamp(BATCH_BYTES / size, 1, MAX_BATCH)`.
pub fn batch_for(size: usize) -> usize {
    (BATCH_BYTES / size).clamp(1, MAX_BATCH)
}

/// The value at fraction `p` of `sorted` (nearest rank).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Median, p10 and p90 of `v`.
pub fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (
        percentile(&s, 0.5),
        percentile(&s, 0.1),
        percentile(&s, 0.9),
    )
}

/// `len` pseudo-random bytes with no zero among them (xorshift, fixed seed).
pub fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 255) as u8 + 1
        })
        .collect()
}

/// One timed operation of a line: what it enqueues for a slot at byte `offset`, of
/// `size` bytes.
pub type Op<'a> = Box<dyn Fn(&Timer, usize, usize) -> Result<()> + 'a>;

/// The timed samples of one line at one size.
pub struct Sweep {
    /// Operations per sample.
    pub batch: usize,
    /// Milliseconds per sample (a whole batch).
    pub ms: Vec<f64>,
}

impl Sweep {
    /// Median microseconds of one operation.
    pub fn median_us(&self) -> f64 {
        stats(&self.ms).0 * 1e3 / self.batch as f64
    }

    /// Median, p10 and p90 GB/s when one operation moves `bytes` (10^9 bytes per second).
    pub fn gbps(&self, bytes: usize) -> (f64, f64, f64) {
        let per_sample = (bytes * self.batch) as f64;
        let v: Vec<f64> = self
            .ms
            .iter()
            .map(|t| per_sample / (t * 1e-3) / 1e9)
            .collect();
        stats(&v)
    }
}

/// How [`sweep_size`] samples.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// Untimed samples first.
    pub warmup: usize,
    /// Timed samples.
    pub samples: usize,
    /// Whether a batch is captured into a CUDA graph and replayed (the device's time), or
    /// enqueued op by op for every sample (what a host loop of these calls gets; for ops
    /// that cannot be captured, such as `cuMemcpyPeerAsync`).
    pub graphs: bool,
}

/// Times `ops` at `size`, interleaved sample by sample. A single operation takes the
/// next slot of a rotation over `capacity` bytes; a batch covers consecutive slots and,
/// with [`Sampling::graphs`], is captured once per line into a CUDA graph over the first
/// `batch` slots and replayed for every sample.
pub fn sweep_size(
    timer: &Timer,
    size: usize,
    capacity: usize,
    sampling: Sampling,
    ops: &[(&'static str, Op<'_>)],
) -> Result<Vec<Sweep>> {
    let Sampling {
        warmup,
        samples,
        graphs,
    } = sampling;
    let batch = batch_for(size);
    let slots = (capacity / size).max(1);
    let enqueue_batch = |t: &Timer, op: &Op<'_>, first: usize| -> Result<()> {
        for b in 0..batch {
            op(t, ((first + b) % slots) * size, size)?;
        }
        Ok(())
    };
    let replays = if batch > 1 && graphs {
        ops.iter()
            .map(|(_, op)| timer.capture(|t| enqueue_batch(t, op, 0)))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let mut next = 0usize;
    let mut ms: Vec<Vec<f64>> = vec![Vec::new(); ops.len()];
    for sample in 0..warmup + samples {
        for (i, (_, op)) in ops.iter().enumerate() {
            let t = match replays.get(i) {
                Some(replay) => timer.time_ms(|t| t.replay(replay))?,
                None => {
                    next += 1;
                    timer.time_ms(|t| enqueue_batch(t, op, next))?
                }
            };
            if sample >= warmup {
                ms[i].push(f64::from(t));
            }
        }
    }
    Ok(ms.into_iter().map(|ms| Sweep { batch, ms }).collect())
}

/// Fills `src` with `pat` repeated (`src.len() >= pat.len()`): one upload, then device
/// copies on the timer's (the rank's) stream.
pub fn fill_source(
    world: &World<Cuda>,
    timer: &Timer,
    src: &DeviceBuffer<u8, Cuda>,
    pat: &[u8],
) -> Result<()> {
    world.write(src, 0, pat)?;
    let (base, len) = (src.ptr(), src.len());
    for at in (pat.len()..len).step_by(pat.len()) {
        // SAFETY: both ranges lie inside `src`, a live allocation of `len` bytes; the
        // upload before them is ordered on the same stream.
        unsafe { timer.memcpy_dtod(base + at as u64, base, pat.len().min(len - at))? };
    }
    timer.synchronize()
}

/// Where an operation checked by [`verify`] writes.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// This rank's memory.
    Local(DeviceSlice<'a, u8, Cuda>),
    /// Rank `.1`'s copy of a symmetric object (read through its mapping here).
    Peer(SymSlice<'a, u8, Cuda>, usize),
}

/// Poisons the first `size + 4096` bytes of `dst`, runs `op` at offset 0, and checks
/// that `dst` holds `pat` repeated and the 4 KiB after it are untouched.
pub fn verify(
    world: &World<Cuda>,
    timer: &Timer,
    what: &str,
    dst: Target<'_>,
    size: usize,
    pat: &[u8],
    op: &Op<'_>,
) -> Result<()> {
    let guard = 4096;
    let poison = vec![0xeeu8; size + guard];
    match dst {
        Target::Local(view) => world.write(&view, 0, &poison)?,
        Target::Peer(view, rank) => {
            let src = world.device_from_slice(&poison)?;
            world.put(&view.slice(..size + guard)?, &src, rank)?;
            // `src` is freed below: the put must be done with it.
            timer.synchronize()?;
        }
    }
    timer.synchronize()?;
    op(timer, 0, size)?;
    timer.synchronize()?;
    let got = match dst {
        Target::Local(view) => world.read(&view.slice(..size + guard)?)?,
        Target::Peer(view, rank) => world.read_peer(&view.slice(..size + guard)?, rank)?,
    };
    let bad = (0..size).find(|&i| got[i] != pat[i % pat.len()]);
    let overrun = got[size..].iter().any(|&b| b != 0xee);
    assert!(
        bad.is_none() && !overrun,
        "{what} of {size} bytes wrong: first bad byte {bad:?}, overrun {overrun}"
    );
    println!("verified {what} of {size} bytes");
    Ok(())
}
