//! Collectives as kernel bodies, built on [`Team`]'s operations.
//!
//! Every body is grid-level: each block of the launch takes one contiguous share of
//! the data ([`crate::copy::share`], starts 16-byte aligned relative to the buffers)
//! and synchronises with the *same block* on every other rank through its own
//! [`Team::barrier_block`] over `world` words of the signal array. So:
//!
//! * every rank must launch the same collective with the same grid and counts;
//! * `sig` is a symmetric array of [`signal_words`]`(world, blocks)` `u64`s, zero before
//!   its first use, reused by later collectives of the same team (the counters only
//!   grow).
//!
//! Each collective starts with a barrier (no rank writes into a peer's buffer, or reads
//! its source, before that peer has reached the collective) and ends with one (on
//! return this rank's result is complete and no peer still reads this rank's source).
//!
//! Reductions read 16 bytes per rank at a time ([`Reducible::unpack`], one vector load)
//! wherever the local addresses are 16-byte aligned (symmetric heaps' bases are, so a
//! symmetric address keeps its alignment on every rank), element by element elsewhere
//! and in the tail. They fold the ranks in rank order `0, 1, .., world-1`, accumulating
//! in [`Reducible::Acc`] (`f32` for [`bf16`] and [`struct@f16`]) and rounding once at the end, so every
//! rank gets bit-identical results and a host reference that folds in the same order
//! matches exactly. Float sums start from `+0.0` ([`Reducible::start`]), as the
//! barrier-free [`crate::lamport`] all-reduce does, so both give the same bits. Integer
//! sums wrap. `Min`/`Max` on floats follow `f32::min`/`f32::max` (`f64::min`/`f64::max`
//! for `f64`; a NaN operand is ignored).
//!
//! Every element type is plain loads, stores and arithmetic in registers (no atomic
//! arithmetic on the data), so every target serves every type: `f64` adds, mins and
//! maxes are native on sm_90 and gfx942/gfx950; `bf16` and `f16` are widened to `f32`.

use crate::atomic::AtomicInt;
use crate::team::write_each;
use crate::{Order, Scope, Team, U32x4, bf16, copy::share, f16, signal::barrier_words};
use symmem_arch::Arch;

/// A reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (wrapping for integers).
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
    impl Sealed for f64 {}
    impl Sealed for crate::bf16 {}
    impl Sealed for crate::f16 {}
}

/// An element type the reductions support: `f32`, `f64`, [`bf16`], [`struct@f16`], `i32`.
pub trait Reducible: Copy + sealed::Sealed {
    /// The type partial results are kept in.
    type Acc: Copy;
    /// The element as an accumulator.
    fn widen(self) -> Self::Acc;
    /// The accumulator rounded back to an element.
    fn narrow(acc: Self::Acc) -> Self;
    /// `op(a, b)`.
    fn combine(op: ReduceOp, a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// The first rank's value as the start of a fold: for a float sum `+0.0 + a` (so a
    /// sum of `-0.0`s is `+0.0`, as the barrier-free [`crate::lamport`] sum must give),
    /// else `a`.
    fn start(op: ReduceOp, a: Self::Acc) -> Self::Acc;
    /// One accumulator per element of a 16-byte vector (`[Acc; 16 / size_of::<Self>()]`).
    type Lanes: Copy;
    /// The elements packed in `v`, widened, in memory order.
    fn unpack(v: U32x4) -> Self::Lanes;
    /// [`Reducible::combine`] lane by lane.
    fn combine_lanes(op: ReduceOp, a: Self::Lanes, b: Self::Lanes) -> Self::Lanes;
    /// [`Reducible::start`] lane by lane.
    fn start_lanes(op: ReduceOp, a: Self::Lanes) -> Self::Lanes;
    /// Every lane narrowed ([`Reducible::narrow`]) and packed back in memory order.
    fn pack(acc: Self::Lanes) -> U32x4;
}

/// `f(a[k], b[k])` for every lane.
#[inline(always)]
fn zip_lanes<A: Copy, const N: usize>(a: [A; N], b: [A; N], f: impl Fn(A, A) -> A) -> [A; N] {
    core::array::from_fn(|k| f(a[k], b[k]))
}

/// The four 32-bit words of `v` in memory order.
#[inline(always)]
fn words(v: U32x4) -> [u32; 4] {
    v.to_array()
}

/// Four 32-bit words, in memory order, as a vector.
#[inline(always)]
fn from_words(w: [u32; 4]) -> U32x4 {
    U32x4::from_array(w)
}

impl Reducible for f32 {
    type Acc = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[inline(always)]
    fn narrow(acc: f32) -> f32 {
        acc
    }
    #[inline(always)]
    fn combine(op: ReduceOp, a: f32, b: f32) -> f32 {
        match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
    #[inline(always)]
    fn start(op: ReduceOp, a: f32) -> f32 {
        match op {
            ReduceOp::Sum => 0.0 + a,
            ReduceOp::Min | ReduceOp::Max => a,
        }
    }
    type Lanes = [f32; 4];
    #[inline(always)]
    fn unpack(v: U32x4) -> [f32; 4] {
        words(v).map(f32::from_bits)
    }
    #[inline(always)]
    fn combine_lanes(op: ReduceOp, a: [f32; 4], b: [f32; 4]) -> [f32; 4] {
        zip_lanes(a, b, |x, y| f32::combine(op, x, y))
    }
    #[inline(always)]
    fn start_lanes(op: ReduceOp, a: [f32; 4]) -> [f32; 4] {
        a.map(|x| f32::start(op, x))
    }
    #[inline(always)]
    fn pack(acc: [f32; 4]) -> U32x4 {
        from_words(acc.map(f32::to_bits))
    }
}

/// `x` as `f32`: its bits shifted into the upper half. The value of `bf16::to_f32`,
/// without its quieting of a signalling NaN: one shift, the instruction the kernels had
/// before they used `half` (a NaN still sums to a NaN).
#[inline(always)]
fn bf16_to_f32(x: bf16) -> f32 {
    f32::from_bits(u32::from(x.to_bits()) << 16)
}

/// `v` rounded to the nearest `bf16`, ties to even; a NaN stays a NaN with the quiet bit
/// set. The same bits as `bf16::from_f32` for every input (a test checks), written as one
/// add, as the kernels had it before they used `half`.
#[inline(always)]
fn bf16_from_f32(v: f32) -> bf16 {
    let b = v.to_bits();
    if v.is_nan() {
        return bf16::from_bits(((b >> 16) | 0x40) as u16);
    }
    let round = 0x7fff + ((b >> 16) & 1);
    bf16::from_bits((b.wrapping_add(round) >> 16) as u16)
}

/// Conversions through core's own `f16` (a primitive type here: this module does not
/// import `half::f16`): one instruction each on GPUs (`cvt.f32.f16` and `cvt.rn.f16.f32`
/// on nvptx, `v_cvt_f32_f16` and `v_cvt_f16_f32` on amdgcn).
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
mod core_f16 {
    /// The `f16` with bits `bits` as `f32` (exact).
    #[inline(always)]
    pub(super) fn to_f32(bits: u16) -> f32 {
        f16::from_bits(bits) as f32
    }

    /// The bits of `v` rounded to the nearest `f16`, ties to even.
    #[inline(always)]
    pub(super) fn from_f32(v: f32) -> u16 {
        (v as f16).to_bits()
    }
}

/// `x` as `f32` (exact). On GPUs one conversion instruction ([`core_f16`]); elsewhere
/// `half`'s `to_f32` (its software conversion, inlined into every lane, had kept the
/// reductions' vector loop out of line on GPUs, behind a call).
#[inline(always)]
fn f16_to_f32(x: f16) -> f32 {
    #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
    {
        core_f16::to_f32(x.to_bits())
    }
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    {
        x.to_f32()
    }
}

/// `v` rounded to the nearest `f16`, ties to even, subnormals kept, overflow to infinity:
/// the value of `half`'s `f16::from_f32` (a NaN stays a NaN, its payload as the hardware
/// makes it). On GPUs one instruction ([`core_f16`]), elsewhere `half`'s.
#[inline(always)]
fn f16_from_f32(v: f32) -> f16 {
    #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
    {
        f16::from_bits(core_f16::from_f32(v))
    }
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    {
        f16::from_f32(v)
    }
}

/// `Reducible` for a 16-bit float accumulated in `f32`, converted by `$widen`/`$narrow`.
macro_rules! reducible_half {
    ($t:ty, $widen:expr, $narrow:expr) => {
        impl Reducible for $t {
            type Acc = f32;
            #[inline(always)]
            fn widen(self) -> f32 {
                $widen(self)
            }
            #[inline(always)]
            fn narrow(acc: f32) -> $t {
                $narrow(acc)
            }
            #[inline(always)]
            fn combine(op: ReduceOp, a: f32, b: f32) -> f32 {
                f32::combine(op, a, b)
            }
            #[inline(always)]
            fn start(op: ReduceOp, a: f32) -> f32 {
                f32::start(op, a)
            }
            type Lanes = [f32; 8];
            #[inline(always)]
            fn unpack(v: U32x4) -> [f32; 8] {
                // Little-endian: the low half of each word is the element at the lower
                // address.
                let w = words(v);
                core::array::from_fn(|k| {
                    $widen(<$t>::from_bits((w[k / 2] >> (16 * (k % 2))) as u16))
                })
            }
            #[inline(always)]
            fn combine_lanes(op: ReduceOp, a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
                zip_lanes(a, b, |x, y| f32::combine(op, x, y))
            }
            #[inline(always)]
            fn start_lanes(op: ReduceOp, a: [f32; 8]) -> [f32; 8] {
                a.map(|x| f32::start(op, x))
            }
            #[inline(always)]
            fn pack(acc: [f32; 8]) -> U32x4 {
                let h = acc.map(|a| u32::from($narrow(a).to_bits()));
                from_words(core::array::from_fn(|k| h[2 * k] | (h[2 * k + 1] << 16)))
            }
        }
    };
}

reducible_half!(bf16, bf16_to_f32, bf16_from_f32);
reducible_half!(f16, f16_to_f32, f16_from_f32);

impl Reducible for f64 {
    type Acc = f64;
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
    #[inline(always)]
    fn narrow(acc: f64) -> f64 {
        acc
    }
    #[inline(always)]
    fn combine(op: ReduceOp, a: f64, b: f64) -> f64 {
        match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
    #[inline(always)]
    fn start(op: ReduceOp, a: f64) -> f64 {
        match op {
            ReduceOp::Sum => 0.0 + a,
            ReduceOp::Min | ReduceOp::Max => a,
        }
    }
    type Lanes = [f64; 2];
    #[inline(always)]
    fn unpack(v: U32x4) -> [f64; 2] {
        let w = words(v);
        core::array::from_fn(|k| {
            f64::from_bits(u64::from(w[2 * k]) | (u64::from(w[2 * k + 1]) << 32))
        })
    }
    #[inline(always)]
    fn combine_lanes(op: ReduceOp, a: [f64; 2], b: [f64; 2]) -> [f64; 2] {
        zip_lanes(a, b, |x, y| f64::combine(op, x, y))
    }
    #[inline(always)]
    fn start_lanes(op: ReduceOp, a: [f64; 2]) -> [f64; 2] {
        a.map(|x| f64::start(op, x))
    }
    #[inline(always)]
    fn pack(acc: [f64; 2]) -> U32x4 {
        let b = acc.map(f64::to_bits);
        from_words(core::array::from_fn(|k| {
            (b[k / 2] >> (32 * (k % 2))) as u32
        }))
    }
}

impl Reducible for i32 {
    type Acc = i32;
    #[inline(always)]
    fn widen(self) -> i32 {
        self
    }
    #[inline(always)]
    fn narrow(acc: i32) -> i32 {
        acc
    }
    #[inline(always)]
    fn combine(op: ReduceOp, a: i32, b: i32) -> i32 {
        match op {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
    #[inline(always)]
    fn start(_op: ReduceOp, a: i32) -> i32 {
        a
    }
    type Lanes = [i32; 4];
    #[inline(always)]
    fn unpack(v: U32x4) -> [i32; 4] {
        words(v).map(|w| w as i32)
    }
    #[inline(always)]
    fn combine_lanes(op: ReduceOp, a: [i32; 4], b: [i32; 4]) -> [i32; 4] {
        zip_lanes(a, b, |x, y| i32::combine(op, x, y))
    }
    #[inline(always)]
    fn start_lanes(_op: ReduceOp, a: [i32; 4]) -> [i32; 4] {
        a
    }
    #[inline(always)]
    fn pack(acc: [i32; 4]) -> U32x4 {
        from_words(acc.map(|a| a as u32))
    }
}

/// Signal words a collective launched with `blocks` blocks needs: `world` per block.
pub const fn signal_words(world: usize, blocks: usize) -> usize {
    barrier_words(world) * blocks
}

/// This block's barrier words.
#[inline(always)]
fn block_sig<A: Arch>(arch: &A, team: &Team<'_>, sig: *mut u64) -> *mut u64 {
    sig.wrapping_add(arch.block_id() as usize * barrier_words(team.world()))
}

/// This block's share `(start, len)` of `n` units, where `granule` units make 16 bytes.
#[inline(always)]
fn block_share<A: Arch>(arch: &A, n: usize, granule: usize) -> (usize, usize) {
    share(
        n,
        granule,
        arch.block_id() as usize,
        arch.grid_dim() as usize,
    )
}

/// Grid-level put: `n` bytes from local `src` to symmetric `dst` on rank `to`, each
/// block moving its share. No synchronisation with the peer (see the signal forms).
///
/// # Safety
/// As [`Team::put_nbi_block`], for the whole grid.
#[inline(always)]
pub unsafe fn put<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    to: usize,
) {
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: the share lies in 0..n; forwarded from the caller.
    unsafe { team.put_block(arch, dst.add(start), src.add(start), len, to) }
}

/// Grid-level get: `n` bytes from symmetric `src` on rank `from` into local `dst`.
///
/// # Safety
/// As [`Team::get_nbi_block`], for the whole grid.
#[inline(always)]
pub unsafe fn get<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    from: usize,
) {
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: the share lies in 0..n; forwarded from the caller.
    unsafe { team.get_block(arch, dst.add(start), src.add(start), len, from) }
}

/// Grid-level copy between two peers: `n` bytes from symmetric `src` on rank `from` to
/// symmetric `dst` on rank `to`, each block moving its share; this rank may be either or
/// neither. No synchronisation with the peers.
///
/// # Safety
/// As [`Team::copy_nbi_block`], for the whole grid.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    from: usize,
    to: usize,
) {
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: the share lies in 0..n; forwarded from the caller.
    unsafe { team.copy_block(arch, dst.add(start), src.add(start), len, from, to) }
}

/// Grid-level put with signal: every block puts its share of `n` bytes from local
/// `src` to symmetric `dst` on rank `to`, then adds `value` to the signal at symmetric
/// `sig` on rank `to` (release). Once the signal has grown by `grid_dim * value`, all
/// `n` bytes are visible there.
///
/// # Safety
/// As [`Team::put_with_signal_block`], for the whole grid.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn put_signal_add<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    sig: *mut u64,
    value: u64,
    to: usize,
) {
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: the share lies in 0..n; forwarded from the caller.
    unsafe {
        team.put_with_signal_block(
            arch,
            dst.add(start),
            src.add(start),
            len,
            sig,
            crate::SignalOp::Add,
            value,
            to,
        )
    }
}

/// A barrier across all ranks, every block with its peers' same block.
///
/// # Safety
/// `sig` as in the module docs; every rank launches it with the same grid.
#[inline(always)]
/// Returns [`Team::barrier_block`]'s answer: false when it gave up.
#[must_use = "false means peers may not be in this call: write nothing into them"]
pub unsafe fn barrier<A: Arch>(arch: &A, team: &Team<'_>, sig: *mut u64) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { team.barrier_block(arch, block_sig(arch, team, sig)) }
}

/// All-gather: rank `r`'s local `src[0..n]` (bytes) lands in every rank's symmetric
/// `dst[r*n..(r+1)*n]`. Pushes: each rank writes its share into every peer.
///
/// # Safety
/// `dst` symmetric with `world * n` writable bytes on every rank, `src` local with `n`
/// readable bytes not overlapping `dst`; `sig` and launches as in the module docs.
#[inline(always)]
pub unsafe fn all_gather<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    sig: *mut u64,
) {
    let (world, rank) = (team.world(), team.rank());
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: forwarded from the caller; shares lie inside the ranges above.
    unsafe {
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        for k in 0..world {
            let to = (rank + k) % world;
            team.put_nbi_block(arch, dst.add(rank * n + start), src.add(start), len, to);
        }
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
    }
}

/// All-to-all: chunk `j` (bytes `j*n..(j+1)*n`) of rank `i`'s local `src` lands in
/// chunk `i` of rank `j`'s symmetric `dst`.
///
/// # Safety
/// `dst` symmetric and `src` local, each with `world * n` bytes, not overlapping;
/// `sig` and launches as in the module docs.
#[inline(always)]
pub unsafe fn all_to_all<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    sig: *mut u64,
) {
    let (world, rank) = (team.world(), team.rank());
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: forwarded from the caller; shares lie inside the ranges above.
    unsafe {
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        for k in 0..world {
            let to = (rank + k) % world;
            team.put_nbi_block(
                arch,
                dst.add(rank * n + start),
                src.add(to * n + start),
                len,
                to,
            );
        }
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
    }
}

/// Broadcast: rank `root`'s symmetric `src[0..n]` (bytes) lands in every rank's local
/// `dst[0..n]` (the root's included). Pulls from the root.
///
/// # Safety
/// `root < world`; `src` symmetric with `n` readable bytes, `dst` local with `n`
/// writable bytes, not overlapping; `sig` and launches as in the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn broadcast<A: Arch>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    root: usize,
    sig: *mut u64,
) {
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, n, 16);
    // SAFETY: forwarded from the caller.
    unsafe {
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        team.get_nbi_block(arch, dst.add(start), src.add(start), len, root);
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
    }
}

/// Element `i` folded over every rank's symmetric `src`, in rank order.
#[inline(always)]
unsafe fn fold<T: Reducible>(team: &Team<'_>, op: ReduceOp, src: *const T) -> T {
    // SAFETY: the caller passes a symmetric element readable on every rank.
    unsafe {
        let mut acc = T::start(op, team.load(src, 0).widen());
        for r in 1..team.world() {
            acc = T::combine(op, acc, team.load(src, r).widen());
        }
        T::narrow(acc)
    }
}

/// Elements per 16 bytes of `T`.
const fn granule<T>() -> usize {
    16 / core::mem::size_of::<T>()
}

/// Vectors a thread folds at once: their loads from one rank are all in flight
/// together. One at a time, a thread waits a whole load latency per rank and vector,
/// which below a few MiB (a collective's few blocks) bounded the reductions' time. Four,
/// not eight: eight `bf16` accumulators of eight `f32` lanes each spilled to scratch on
/// gfx942 (the codegen test showed), and four keep every type in registers.
const IN_FLIGHT: usize = 4;

/// `[f(0), f(1), .., f(IN_FLIGHT - 1)]` written out: straight-line code, where a loop
/// (or `array::map`) over a batch of eight-lane `bf16`/`f16` accumulators stayed a loop
/// and kept them in local memory (the PTX showed).
macro_rules! batch {
    ($f:expr) => {{
        let f = $f;
        [f(0), f(1), f(2), f(3)]
    }};
}
const _: () = assert!(IN_FLIGHT == 4, "batch! writes out IN_FLIGHT places");

/// The [`granule`] elements at each of `at` in symmetric `src` (16-byte aligned on
/// every rank) folded over every rank in rank order, one vector each: per rank, one
/// 16-byte load per vector, all issued before any is combined; the same result bit for
/// bit as [`fold`] of each element.
#[inline(always)]
unsafe fn fold_vectors<T: Reducible>(
    team: &Team<'_>,
    op: ReduceOp,
    src: *const T,
    at: [usize; IN_FLIGHT],
) -> [U32x4; IN_FLIGHT] {
    // SAFETY: the caller passes symmetric, 16-byte aligned vectors readable everywhere.
    let from = |r| unsafe { team.load_each::<T, U32x4, IN_FLIGHT>(src, &at, r) };
    let first = from(0);
    let mut acc = batch!(|u: usize| T::start_lanes(op, T::unpack(first[u])));
    for r in 1..team.world() {
        let vs = from(r);
        acc = batch!(|u: usize| T::combine_lanes(op, acc[u], T::unpack(vs[u])));
    }
    batch!(|u: usize| T::pack(acc[u]))
}

/// Folds this thread's elements of `start..start + len` (`start` a multiple of the
/// granule) over every rank's symmetric `src` and hands the results on: when
/// `aligned`, 16-byte groups of [`granule`] elements as vectors, [`IN_FLIGHT`] at a
/// time, to `vectors((at, vs, real))` (element indices and their vectors, the first
/// `real` of them this thread's: a last, partial round reloads its first vector in the
/// other places; whole arrays, not slices, so that they stay in registers);
/// the remaining elements one by one to `scalar(i, x)`. Threads stride over both.
///
/// # Safety
/// `src.add(i)` symmetric and readable on every rank for every `i` in the range, 16-byte
/// aligned everywhere when `aligned`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn fold_my_elements<T: Reducible>(
    (tid, threads): (usize, usize),
    team: &Team<'_>,
    op: ReduceOp,
    src: *const T,
    (start, len): (usize, usize),
    aligned: bool,
    mut vectors: impl FnMut((&[usize; IN_FLIGHT], &[U32x4; IN_FLIGHT], usize)),
    mut scalar: impl FnMut(usize, T),
) {
    let g = granule::<T>();
    let whole = if aligned { len / g } else { 0 };
    let mut j = tid;
    while j < whole {
        let (at, real) = batch_at::<IN_FLIGHT>(j, threads, start, whole, g);
        // SAFETY: every index is one of this thread's whole vectors (forwarded).
        let vs = unsafe { fold_vectors(team, op, src, at) };
        vectors((&at, &vs, real));
        j += IN_FLIGHT * threads;
    }
    let mut i = start + whole * g + tid;
    while i < start + len {
        // SAFETY: inside the range (forwarded).
        scalar(i, unsafe { fold(team, op, src.add(i)) });
        i += threads;
    }
}

/// The element indices of the batch of `N` whole vectors a thread starts at vector `j`
/// of `whole` (`start + v * g` for vectors `j`, `j + threads`, ..), and how many of
/// them are real: the places past the last are vector `j` again.
#[inline(always)]
fn batch_at<const N: usize>(
    j: usize,
    threads: usize,
    start: usize,
    whole: usize,
    g: usize,
) -> ([usize; N], usize) {
    let real = (whole - j).div_ceil(threads).min(N);
    let vector = |u| if u < real { j + u * threads } else { j };
    (core::array::from_fn(|u| start + vector(u) * g), real)
}

/// Vectors a thread copies at once ([`copy_my_elements`]): a copy holds no accumulators,
/// so more of its loads fit in registers than a fold's (against [`IN_FLIGHT`] on an
/// H100, the staged all-reduce went from 18.3 to 16.8 us at 1 MiB on 2 ranks, and
/// was unchanged at 256 KiB: `BENCHMARKS.md`, issue 43).
const COPY_IN_FLIGHT: usize = 16;

/// Copies this thread's elements of `start..start + len` from local `src` to local
/// `dst`: when `aligned`, 16-byte vectors, [`COPY_IN_FLIGHT`] loads before their
/// stores, then the rest element by element. Threads stride over both.
///
/// # Safety
/// `src` readable and `dst` writable over the range, not overlapping, both 16-byte
/// aligned when `aligned`.
#[inline(always)]
unsafe fn copy_my_elements<T: Copy>(
    (tid, threads): (usize, usize),
    dst: *mut T,
    src: *const T,
    (start, len): (usize, usize),
    aligned: bool,
) {
    let g = granule::<T>();
    let whole = if aligned { len / g } else { 0 };
    let mut j = tid;
    // SAFETY: every index lies in the range (forwarded).
    unsafe {
        while j < whole {
            let (at, real) = batch_at::<COPY_IN_FLIGHT>(j, threads, start, whole, g);
            let vs: [U32x4; COPY_IN_FLIGHT] =
                core::array::from_fn(|u| src.add(at[u]).cast::<U32x4>().read());
            write_each(dst, (&at, &vs, real));
            j += COPY_IN_FLIGHT * threads;
        }
        let mut i = start + whole * g + tid;
        while i < start + len {
            dst.add(i).write(src.add(i).read());
            i += threads;
        }
    }
}

/// Whether every address is 16-byte aligned (the vector path's condition).
#[inline(always)]
fn all_aligned<const N: usize>(addrs: [usize; N]) -> bool {
    addrs.iter().fold(0, |acc, a| acc | a) % 16 == 0
}

/// One-shot all-reduce: every rank reads every rank's symmetric `src[0..count]` and
/// writes the reduction into its local `dst[0..count]`.
///
/// # Safety
/// `src` symmetric with `count` readable elements, `dst` local with `count` writable
/// ones, both aligned, not overlapping; `sig` and launches as in the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_one_shot<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    // SAFETY: forwarded; the team's own table translates `src` for every rank.
    unsafe { all_reduce_one_shot_from(arch, team, team, op, dst, src, count, sig) }
}

/// [`all_reduce_one_shot`] reading rank `r`'s `src` where table `sources` translates it,
/// while `team` synchronises: the all-reduce across nodes, whose `sources` point at local
/// copies of the off-node ranks' `src` (fetched in bulk through the engine before the
/// launch) and at the on-node ranks' own.
///
/// # Safety
/// As [`all_reduce_one_shot`]; `sources` has `team`'s rank and world size, and
/// translates `src` to `count` readable elements for every rank, 16-byte aligned where
/// `src` is, unchanged until every rank has passed the closing barrier.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_one_shot_from<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    sources: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, count, granule::<T>());
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    let aligned = all_aligned([dst.addr(), src.addr()]);
    // SAFETY: forwarded from the caller; every index lies in start..start + len <= count,
    // and vectors are used only when both sides are 16-byte aligned.
    unsafe {
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        fold_my_elements(
            (tid, threads),
            sources,
            op,
            src,
            (start, len),
            aligned,
            |batch| write_each(dst, batch),
            |i, x| dst.add(i).write(x),
        );
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
    }
}

/// Two-shot all-reduce: rank `r` reduces the `r`-th piece of each block's share from
/// every rank's symmetric `src` and writes it into that piece of every rank's
/// symmetric `dst` (reduce-scatter then all-gather, fused; each element is read
/// `world` times and written `world` times in all, instead of `world²` reads).
///
/// # Safety
/// `src` and `dst` symmetric with `count` elements each, aligned, not overlapping;
/// `sig` and launches as in the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_two_shot<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    // SAFETY: forwarded; the team's own table translates `dst` and `src` for every rank.
    unsafe { all_reduce_two_shot_through(arch, team, team, team, op, dst, src, count, sig) }
}

/// [`all_reduce_two_shot`] reading rank `r`'s `src` where table `sources` translates it
/// and writing its `dst` where `destinations` does, while `team` synchronises: the
/// all-reduce of memory outside the heap that has tables of its own (registered memory,
/// `World::register` on the host), which no one stages. `dst` may be `src` (in place):
/// each element is read, on every rank, only by the thread that then writes it there.
///
/// # Safety
/// As [`all_reduce_two_shot`], but `dst` and `src` may be the same (not otherwise
/// overlapping); `sources` and `destinations` have `team`'s rank and world size and
/// translate `src` and `dst` to `count` elements for every rank, 16-byte aligned where
/// they are.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_two_shot_through<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    destinations: &Team<'_>,
    sources: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        two_shot_checked(
            arch,
            team,
            (destinations, sources),
            op,
            (dst, src, count),
            sig,
            || true,
        )
    }
}

/// [`all_reduce_two_shot_through`]'s body, which reduces only where `agreed()`, asked
/// after the opening barrier (the same answer on every thread of the block), says so;
/// the closing barrier is taken either way.
///
/// # Safety
/// As [`all_reduce_two_shot_through`] wherever `agreed()` is true.
#[inline(always)]
unsafe fn two_shot_checked<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    tables: (&Team<'_>, &Team<'_>),
    op: ReduceOp,
    (dst, src, count): (*mut T, *const T, usize),
    sig: *mut u64,
    agreed: impl Fn() -> bool,
) {
    let (world, rank) = (team.world(), team.rank());
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, count, granule::<T>());
    let (piece, plen) = share(len, granule::<T>(), rank, world);
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    let aligned = all_aligned([dst.addr(), src.addr()]);
    // SAFETY: forwarded from the caller; every index lies in the piece, inside count,
    // and vectors are used only when both sides are 16-byte aligned.
    unsafe {
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        if agreed() {
            reduce_to_every_rank(
                (tid, threads),
                tables,
                op,
                dst,
                src,
                (start + piece, plen),
                aligned,
            );
        }
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
    }
}

/// Slots of the address exchange of [`all_reduce_two_shot_exchanging`]: `u64`s per block
/// of a launch over `world` ranks (a `dst` table, a `src` table and a word of each rank's
/// call, `world` entries each).
pub const fn exchange_words(world: usize, blocks: usize) -> usize {
    3 * world * blocks
}

/// [`all_reduce_two_shot_through`] where `dst`, `src` or both are plain memory with no
/// table, in a world whose ranks share one address space and device (threads of one
/// process on one GPU, or on the CPU), so that a peer dereferences this rank's pointer as
/// it is. The arguments `exchanged` names (bit 0 `dst`, bit 1 `src`) are reached through
/// tables made in the kernel: each block first stores their addresses into its entry of
/// every rank's slots in `exchange` (zeroed once), and after the opening barrier (which
/// publishes those stores) reads its own slots as their tables. The others go through
/// `destinations` and `sources`. Nothing is copied, and a call may pass other buffers
/// than the last: every call exchanges anew. With `exchanged` 0 it is
/// [`all_reduce_two_shot_through`].
///
/// Each rank also stores a word saying which arguments it exchanged in which call (the
/// block's barrier count, the same on every rank at the same call): a block whose peers'
/// words are not its own (a rank that passed symmetric or registered memory where this
/// one passed plain, whose entries are then another call's or none) writes nothing and
/// only closes the barrier, so a mismatched call never writes through a stale address
/// (the host's ledger names the rank that differs at the next agreement).
///
/// The slots are reused by the next call: a rank stores into a peer's slots only after
/// the closing barrier of its previous call, which that peer passed after its last read
/// of them.
///
/// # Safety
/// As [`all_reduce_two_shot_through`] for the arguments with tables; an exchanged
/// argument is, on every rank, this rank's memory of `count` elements that every rank's
/// kernel can dereference at this rank's address (the world's ranks share one address
/// space and device); `exchange` symmetric with [`exchange_words`]`(world, grid_dim)`
/// `u64`s, zeroed before the first launch, that only this kernel, launched with `sig`,
/// uses.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_two_shot_exchanging<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    (destinations, sources): (&Team<'_>, &Team<'_>),
    (exchange, exchanged): (*mut u64, u32),
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    let (world, rank) = (team.world(), team.rank());
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    let slots = exchange.wrapping_add(arch.block_id() as usize * exchange_words(world, 1));
    let (dst_exchanged, src_exchanged) = (exchanged & 1 != 0, exchanged & 2 != 0);
    // SAFETY: forwarded from the caller; the slots are this block's `3 * world` words of
    // the symmetric `exchange`, each rank's own entries written by it alone, and read
    // only after the opening barrier of the two-shot below has published them. The
    // block's barrier word is only ever changed by this rank's own arrivals, after the
    // barrier that follows, so every thread reads the same count.
    unsafe {
        let call = u64::load(
            block_sig(arch, team, sig).add(rank),
            Order::Relaxed,
            Scope::Block,
        ) & !crate::watch::POISON;
        let mine = u64::from(exchanged) | call << 2;
        // Nothing exchanged (registered or symmetric memory): no slot is written or read.
        let mut to = if exchanged == 0 { world } else { tid };
        while to < world {
            if dst_exchanged {
                team.store(slots.add(rank), dst.addr() as u64, to);
            }
            if src_exchanged {
                team.store(slots.add(world + rank), src.addr() as u64, to);
            }
            team.store(slots.add(2 * world + rank), mine, to);
            to += threads;
        }
        let exchanged_dst = Team::from_raw_parts(slots, world as u32, rank as u32);
        let exchanged_src = Team::from_raw_parts(slots.add(world), world as u32, rank as u32);
        two_shot_checked(
            arch,
            team,
            (
                if dst_exchanged {
                    &exchanged_dst
                } else {
                    destinations
                },
                if src_exchanged {
                    &exchanged_src
                } else {
                    sources
                },
            ),
            op,
            (dst, src, count),
            sig,
            || exchanged == 0 || (0..world).all(|r| slots.add(2 * world + r).read() == mine),
        )
    }
}

/// [`all_reduce_two_shot`] of memory peers cannot reach, through this rank's symmetric
/// scratch `stage`: each block copies its share of local `src` into `stage`, the
/// two-shot runs in place on `stage` (every rank's piece reduced and written into every
/// rank's `stage`), and each block copies its share of the result out into local `dst`:
/// one kernel, the same two barriers, instead of a copy in and a copy out around the
/// two-shot. `dst` may be `src` (in place).
///
/// # Safety
/// `src` local with `count` readable elements, `dst` local with `count` writable ones
/// (the same as `src` or not overlapping it), `stage` symmetric with `count` elements
/// that no one else uses during the call, all aligned for `T`; `sig` and launches as in
/// the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_two_shot_staged<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    stage: *mut T,
    count: usize,
    sig: *mut u64,
) {
    let (world, rank) = (team.world(), team.rank());
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, count, granule::<T>());
    let (piece, plen) = share(len, granule::<T>(), rank, world);
    let threads = (arch.thread_id() as usize, arch.block_dim() as usize);
    let aligned = all_aligned([dst.addr(), src.addr(), stage.addr()]);
    // SAFETY: forwarded from the caller; every index lies in this block's share, inside
    // count, and vectors are used only when all three are 16-byte aligned. The block's
    // copy in is complete and visible to its peers after the entry barrier; every
    // rank's piece of this block's share has reached this rank's stage after the
    // closing one, and no peer touches it again in this call.
    unsafe {
        copy_my_elements(threads, stage, src, (start, len), aligned);
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        reduce_to_every_rank(
            threads,
            (team, team),
            op,
            stage,
            stage,
            (start + piece, plen),
            aligned,
        );
        // Its outcome reaches the host through the rank's control block; after a
        // barrier that gave up, the stage is not whole: `dst` keeps what it had.
        if team.barrier_block(arch, sig) {
            copy_my_elements(threads, dst, stage, (start, len), aligned);
        }
    }
}

/// The two-shot's step: this thread's elements of `start..start + len` folded over
/// every rank's `src` (read through `sources`) and written into every rank's `dst`
/// (through `destinations`), each rank's copy in turn from this rank's own on.
///
/// # Safety
/// As [`fold_my_elements`] for `src` through `sources`; `dst` the same through
/// `destinations`, writable on every rank, and no one else's over the range; `dst` may
/// be `src` (each element is read, on every rank, only by the thread that then writes
/// it).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_to_every_rank<T: Reducible>(
    threads: (usize, usize),
    (destinations, sources): (&Team<'_>, &Team<'_>),
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    range: (usize, usize),
    aligned: bool,
) {
    let (world, rank) = (destinations.world(), destinations.rank());
    // SAFETY: forwarded from the caller.
    unsafe {
        fold_my_elements(
            threads,
            sources,
            op,
            src,
            range,
            aligned,
            |batch| {
                for k in 0..world {
                    destinations.store_each(dst, batch, (rank + k) % world);
                }
            },
            |i, v| {
                for k in 0..world {
                    destinations.store(dst.add(i), v, (rank + k) % world);
                }
            },
        );
    }
}

/// Reduce-scatter: rank `r`'s local `dst[0..count]` gets the reduction over every rank
/// of chunk `r` (`src[r*count..(r+1)*count]`) of the symmetric `src`.
///
/// # Safety
/// `src` symmetric with `world * count` readable elements, `dst` local with `count`
/// writable ones, aligned, not overlapping; `sig` and launches as in the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce_scatter<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    let rank = team.rank();
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, count, granule::<T>());
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    let chunk = src.wrapping_add(rank * count);
    let aligned = all_aligned([dst.addr(), chunk.addr()]);
    // SAFETY: forwarded from the caller; rank * count + i < world * count, and vectors
    // are used only when both sides are 16-byte aligned.
    unsafe {
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        fold_my_elements(
            (tid, threads),
            team,
            op,
            chunk,
            (start, len),
            aligned,
            |batch| write_each(dst, batch),
            |i, x| dst.add(i).write(x),
        );
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels' own `bf16` conversions against `half`'s: the same bits from every
    /// upper half of an `f32` with low halves at and around every rounding boundary
    /// (every 257th upper half under Miri), and the same value back.
    #[test]
    fn bf16_conversions_are_halfs() {
        let step = if cfg!(miri) { 257 } else { 1 };
        for hi in (0..=u16::MAX).step_by(step) {
            let x = bf16::from_bits(hi);
            let back = bf16_to_f32(x);
            if x.is_nan() {
                assert!(back.is_nan() && x.to_f32().is_nan(), "{hi:#06x}");
            } else {
                assert_eq!(back.to_bits(), x.to_f32().to_bits(), "{hi:#06x}");
            }
            for lo in [0, 1, 0x3fff, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff] {
                let v = f32::from_bits(u32::from(hi) << 16 | lo);
                assert_eq!(
                    bf16_from_f32(v).to_bits(),
                    bf16::from_f32(v).to_bits(),
                    "{:#010x}",
                    v.to_bits()
                );
            }
        }
    }

    /// Packing and unpacking keep every lane in memory order, for every element type.
    #[test]
    fn lanes_round_trip() {
        let v = U32x4::from_array([0x3f80_4000, 0xc000_0000, 0x3c00_bc00, 0x7bff_0001]);
        assert_eq!(bf16::pack(bf16::unpack(v)).to_array(), v.to_array());
        assert_eq!(f16::pack(f16::unpack(v)).to_array(), v.to_array());
        assert_eq!(f32::pack(f32::unpack(v)).to_array(), v.to_array());
        assert_eq!(i32::pack(i32::unpack(v)).to_array(), v.to_array());
        assert_eq!(f64::pack(f64::unpack(v)).to_array(), v.to_array());
        // Memory order: the element at the lowest address first.
        let bytes: [u8; 16] = bytemuck::cast(v.to_array());
        let f64s: [f64; 2] = bytemuck::cast(bytes);
        assert_eq!(f64::unpack(v).map(f64::to_bits), f64s.map(f64::to_bits));
        let f16s: [f16; 8] = bytemuck::cast(bytes);
        assert_eq!(f16::unpack(v), f16s.map(f16::to_f32));
        let bf16s: [bf16; 8] = bytemuck::cast(bytes);
        assert_eq!(bf16::unpack(v), bf16s.map(bf16::to_f32));
    }
}
