//! What one rank does in the RMA suite, generic over the backend, with the helpers the
//! suite shares: the thread suite (`suite/rma.rs`) runs these bodies with ranks as
//! threads, `rma_processes.rs` with ranks as processes.
//!
//! Every world gets two handles with different grids (the backend's default, and a
//! multi-block one) and alternates between them, so two signal arrays live side by side.
#![allow(clippy::needless_range_loop)] // rank-indexed loops read best in tests

use bytemuck::Pod;
use symmem::backend::{Backend, BackendKind, Grid};
use symmem::collectives::{Cmp, Collectives};
use symmem::{DeviceBuffer, DeviceSlice, SymmetricBuffer, World};

/// Guard byte after every checked range, and the fill of every destination.
pub const FILL: u8 = 0xEE;
/// Guard bytes after a [`local`] view's data.
pub const GUARD: usize = 16;

/// Whether `w` runs on a GPU (where every rank shares one device in these tests).
pub fn on_gpu<B: Backend>(w: &World<B>) -> bool {
    w.backend().kind() != BackendKind::Cpu
}

/// The multi-block grid every world also runs with: uneven block shares, several
/// threads per block (few on the CPU, where every thread is an OS thread).
pub fn second_grid(gpu: bool) -> Grid {
    let threads = if gpu { 64 } else { 2 };
    Grid { blocks: 3, threads }
}

/// The two handles of a world (collective).
pub fn handles<B: Backend>(w: &World<B>) -> symmem::Result<[Collectives<B>; 2]> {
    Ok([
        Collectives::new(w)?,
        Collectives::with_grid(w, second_grid(on_gpu(w)))?,
    ])
}

/// Deterministic byte `i` of the data tagged `tag`, never [`FILL`].
pub fn pattern(tag: usize, i: usize) -> u8 {
    let v = (i.wrapping_mul(31) ^ tag.wrapping_mul(97).wrapping_add(13) ^ (i >> 8)) as u8;
    if v == FILL { 0x11 } else { v }
}

/// Bytes `0..n` of the data tagged `tag`. The pattern repeats every 64 KiB, so one
/// period is computed and copied (debug builds are slow per byte).
pub fn patterned(tag: usize, n: usize) -> Vec<u8> {
    let period: Vec<u8> = (0..n.min(1 << 16)).map(|i| pattern(tag, i)).collect();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let take = (n - out.len()).min(period.len());
        out.extend_from_slice(&period[..take]);
    }
    out
}

/// Asserts `got == want`, reporting the first difference.
pub fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if got == want {
        return; // a memcmp; the search below is slow in a debug build
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i} of {}: got {:#04x}, want {:#04x}",
            got.len(),
            got[i],
            want[i]
        );
    }
}

/// Asserts every byte of `got` is still [`FILL`].
pub fn assert_guard(got: &[u8], what: &str) {
    if let Some(i) = got.iter().position(|&b| b != FILL) {
        panic!("{what}: guard byte {i} overwritten with {:#04x}", got[i]);
    }
}

/// `bytes` as elements of `T` (`bytes.len()` a multiple of their size).
pub fn from_bytes<T: Pod>(bytes: &[u8]) -> Vec<T> {
    let mut out = vec![T::zeroed(); bytes.len() / size_of::<T>()];
    bytemuck::cast_slice_mut(&mut out).copy_from_slice(bytes);
    out
}

/// Plain device memory of this rank: `data` at element `mis`, [`FILL`] bytes around it
/// (at least [`GUARD`] bytes after).
pub struct Local<T, B: Backend> {
    mem: DeviceBuffer<T, B>,
    at: usize,
    len: usize,
}

impl<T: Pod, B: Backend> Local<T, B> {
    /// The data.
    pub fn view(&self) -> DeviceSlice<'_, T, B> {
        self.mem.slice(self.at..self.at + self.len).expect("inside")
    }

    /// The data and the guard after it.
    pub fn guarded(&self) -> DeviceSlice<'_, T, B> {
        self.mem.slice(self.at..).expect("inside")
    }
}

/// Plain device memory of this rank holding `data` at element `mis`, [`FILL`] around
/// it ([`GUARD`] bytes after, rounded up to whole elements).
///
/// On one GPU, allocating or freeing device memory (`cuMemAlloc`, `cuMemFree`) may wait
/// for every kernel of the process, a peer rank's collective that waits for this rank
/// included: a deadlock. So tests keep every such allocation until their world ends,
/// and make them between host barriers: after this rank's previous collective has
/// completed (so no peer's kernel still waits for it) and before any rank launches the
/// next one.
pub fn local<T: Pod, B: Backend>(
    w: &World<B>,
    data: &[T],
    mis: usize,
) -> symmem::Result<Local<T, B>> {
    let guard = GUARD.div_ceil(size_of::<T>());
    let filled = vec![FILL; (mis + data.len() + guard) * size_of::<T>()];
    let mem = w.device_from_slice::<T>(&from_bytes(&filled))?;
    w.write(&mem, mis, data)?;
    Ok(Local {
        mem,
        at: mis,
        len: data.len(),
    })
}

/// A symmetric byte buffer of `n` bytes plus 16 guard bytes, all [`FILL`].
pub fn filled<B: Backend>(w: &World<B>, n: usize) -> symmem::Result<SymmetricBuffer<u8, B>> {
    w.full(n + 16, FILL)
}

/// The device barrier `repeats` times, alternating handles; then 20 rounds in which
/// every rank puts a round-stamped word into its slot of every peer's copy of one of
/// two buffers, and after the barrier every slot holds this round's words.
pub fn barrier_rounds<B: Backend>(w: &World<B>, repeats: usize) -> symmem::Result<()> {
    let cs = handles(w)?;
    let (me, n) = (w.rank(), w.world_size());
    for k in 0..repeats {
        cs[k % 2].barrier()?;
    }
    // Every rank's barriers done before anyone allocates (see `local`).
    w.backend().synchronize()?;
    w.barrier()?;
    // Two buffers: a fast rank's next round goes to the other one, and the round after
    // that waits for this rank's next barrier.
    let slots = [w.zeros::<u64>(n)?, w.zeros::<u64>(n)?];
    let word = local(w, &[0u64], 0)?;
    // Every rank has allocated them (one-sided puts need that agreed) and zeroed them.
    w.barrier()?;
    for round in 0..20u64 {
        let c = &cs[round as usize % 2];
        let buf = &slots[round as usize % 2];
        w.write(&word.view(), 0, &[round << 8 | me as u64])?;
        for k in 0..n {
            c.put(buf, me, &word.view(), (me + k) % n)?;
        }
        c.barrier()?;
        let got = w.read(buf)?;
        let want: Vec<u64> = (0..n as u64).map(|r| round << 8 | r).collect();
        assert_eq!(got, want, "world {n} rank {me} round {round}");
    }
    w.backend().synchronize()
}

/// For each of `sizes`: put-with-signal from every rank to every rank, a device-side
/// `Eq` wait for all of them, every byte and guard checked; then a ring (one byte to
/// the right neighbour) with a `Ge` wait.
pub fn put_with_signal_rounds<B: Backend>(w: &World<B>, sizes: &[usize]) -> symmem::Result<()> {
    let cs = handles(w)?;
    let (me, n) = (w.rank(), w.world_size());
    let signal = w.zeros::<u64>(3)?;
    let ring_buf = filled(w, 1)?;
    let ring_src = local(w, &[0u8], 0)?;
    let (mut expected, mut ring_expected) = (0u64, 0u64);
    let mut keep = Vec::new();
    for (k, &size) in sizes.iter().enumerate() {
        let c = &cs[k % 2];
        let dst = filled(w, n * size)?;
        let src = local(w, &patterned(me + 7, size), 1)?;
        w.barrier()?; // see `local`
        // No peer may write before this rank's fill (and zeroing) are done.
        c.barrier()?;
        // Every rank to every rank: region `me` of each peer's `dst`, signal word 1.
        let value = k as u64 + 1;
        let mut total = 0;
        for j in 0..n {
            let to = (me + j) % n;
            total = c.put_with_signal(&dst, me * size, &src.view(), &signal, 1, value, to)?;
        }
        assert_eq!(total, value * u64::from(c.grid().blocks));
        expected += n as u64 * total;
        // Every peer's puts to this rank have landed once the signal reaches this
        // (nobody signals word 1 again before the next round's barrier).
        c.signal_wait_until(&signal, 1, Cmp::Eq, expected)?;
        let got = w.read(&dst)?;
        for r in 0..n {
            let what = format!("put_with_signal world {n} size {size} rank {me} from {r}");
            assert_bytes(
                &got[r * size..(r + 1) * size],
                &patterned(r + 7, size),
                &what,
            );
        }
        assert_guard(&got[n * size..], &format!("put_with_signal size {size}"));
        // The source, and the guard after it, are as they were.
        let sent = w.read(&src.guarded())?;
        assert_bytes(
            &sent[..size],
            &patterned(me + 7, size),
            "put_with_signal source",
        );
        assert_guard(&sent[size..], "put_with_signal source guard");
        // A ring with `Ge`: one round-stamped byte to the right neighbour, word 2.
        let stamp = |r: usize| (k * 16 + r) as u8;
        w.write(&ring_src.view(), 0, &[stamp(me)])?;
        let ring =
            c.put_with_signal(&ring_buf, 0, &ring_src.view(), &signal, 2, 1, (me + 1) % n)?;
        ring_expected += ring;
        c.signal_wait_until(&signal, 2, Cmp::Ge, ring_expected)?;
        let got = w.read(&ring_buf)?;
        assert_eq!(got[0], stamp((me + n - 1) % n), "ring world {n} rank {me}");
        assert_guard(&got[1..], "ring");
        assert_eq!(
            w.read(&signal)?,
            vec![0, expected, ring_expected],
            "rank {me} signals"
        );
        // Nobody reuses a destination before every rank has checked it.
        c.barrier()?;
        keep.push(src);
    }
    // Nothing of this rank may still run when its world goes.
    w.backend().synchronize()
}

/// Atomics under contention: every rank x every thread x `iters` adds on every peer's
/// counter, four rounds over two grids, give exactly `world * blocks * threads * iters`
/// more on each every round.
pub fn atomic_rounds<B: Backend>(w: &World<B>) -> symmem::Result<()> {
    let gpu = on_gpu(w);
    let contended = if gpu {
        w.backend().collective_grid()
    } else {
        Grid {
            blocks: 2,
            threads: 8,
        }
    };
    let grids = [contended, second_grid(gpu)];
    atomic_rounds_on(w, grids, if gpu { 32 } else { 100 })
}

/// [`atomic_rounds`] with the two launches' grids and each thread's number of adds
/// chosen by the caller (an off-node peer is reached one proxied request at a time).
pub fn atomic_rounds_on<B: Backend>(
    w: &World<B>,
    grids: [Grid; 2],
    iters: u32,
) -> symmem::Result<()> {
    let (me, n) = (w.rank(), w.world_size());
    let cs = [
        Collectives::with_grid(w, grids[0])?,
        Collectives::with_grid(w, grids[1])?,
    ];
    let counter = w.zeros::<u64>(3)?;
    // Every rank has allocated the counter (one-sided adds need that agreed), and the
    // zeroing is done everywhere before any add.
    w.barrier()?;
    let mut expected = 0u64;
    for round in 0..4 {
        let c = &cs[round % 2];
        let per_rank = c.atomic_add_all(&counter, 1, iters)?;
        assert_eq!(
            per_rank,
            u64::from(c.grid().blocks) * u64::from(c.grid().threads) * u64::from(iters)
        );
        expected += n as u64 * per_rank;
        c.barrier()?;
        assert_eq!(
            w.read(&counter)?,
            vec![0, expected, 0],
            "world {n} rank {me} round {round}: every rank x every thread x {iters}"
        );
        // No rank adds again before every rank has read.
        c.barrier()?;
    }
    w.backend().synchronize()
}
