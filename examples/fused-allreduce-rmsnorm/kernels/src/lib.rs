//! A one-shot all-reduce fused with a residual add and RMSNorm, the way tensor-parallel
//! serving engines fuse the all-reduce after a row-parallel layer (Iris's
//! `fused_ar_rmsnorm`, FlashInfer's and TensorRT-LLM's all-reduce fusion), written with
//! symmem's device RMA layer: a cross-rank barrier, translated loads from every rank's
//! buffer, and another barrier before the buffer may be reused.
//!
//! For every element `i` of row `t` (`hidden` elements per row, `rows` rows):
//! `residual[i] = sum over ranks r of x_r[i] + residual[i]` (summed in rank order in
//! `f32`, stored in the element type), then
//! `out[i] = residual[i] / sqrt(mean over the row of residual^2 + eps) * weight[i % hidden]`.
#![no_std]
#![cfg_attr(
    any(target_arch = "amdgpu", target_arch = "nvptx64"),
    feature(abi_gpu_kernel)
)]

use symmem_device::rma::collectives::{Reducible, barrier};
use symmem_device::{Arch, PeerTable, bf16, kernel};

/// An element type the kernel computes in `f32`: every type symmem's reductions
/// accumulate in `f32` (`f32`, `bf16`, `f16`), converted as they convert
/// ([`Reducible::widen`], [`Reducible::narrow`]: for `bf16` one shift in and one rounding
/// add out, the values of `half`'s `to_f32`/`from_f32` without their extra NaN tests), so
/// the fused sum rounds exactly as the all-reduce's.
trait Real: Copy {
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
}

impl<T: Reducible<Acc = f32>> Real for T {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self.widen()
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        T::narrow(v)
    }
}

/// `1 / sqrt(v)` for `v > 0`: a bit-level first guess and three Newton steps, to `f32`
/// precision (`core` has no square root on every target).
#[inline(always)]
fn rsqrt(v: f32) -> f32 {
    let mut y = f32::from_bits(0x5f37_59df - (v.to_bits() >> 1));
    for _ in 0..3 {
        y *= 1.5 - 0.5 * v * y * y;
    }
    y
}

/// The fused body; see the crate documentation. Each thread of the grid takes whole
/// rows.
///
/// # Safety
/// `x` is this rank's copy of a buffer of `rows * hidden` elements whose peer table is
/// `sources` (a symmetric buffer's, or a registration's: memory the application owns);
/// `bases` is the heap's table (`world` entries each, `rank < world`); `out` and
/// `residual` hold `rows * hidden` elements and `weight` `hidden`, all local; `sig` is a
/// symmetric array of the heap of `signal_words(world, blocks)` zeroed words used only
/// by launches of this grid; every rank launches the same grid with the same `rows` and
/// `hidden`, and has written its `x` before.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn fused<T: Real, A: Arch>(
    arch: &A,
    out: *mut T,
    residual: *mut T,
    x: *const T,
    weight: *const T,
    bases: PeerTable,
    sources: PeerTable,
    world: u32,
    rank: u32,
    rows: u32,
    hidden: u32,
    eps: f32,
    sig: *mut u64,
) {
    // SAFETY: the caller's contract above.
    unsafe {
        let team = bases.team(world, rank);
        let sources = sources.team(world, rank);
        // Every rank's `x` is written before any rank reads it (a barrier that gave up
        // says a peer may not be here: its `x` is not to be read)...
        if !barrier(arch, &team, sig) {
            return;
        }
        let (rows, hidden) = (rows as usize, hidden as usize);
        let mut row = arch.global_id();
        while row < rows {
            let line = row * hidden;
            let mut squares = 0.0f32;
            for j in 0..hidden {
                let i = line + j;
                let mut sum = 0.0f32;
                for r in 0..world as usize {
                    sum += sources.load(x.add(i), r).to_f32();
                }
                let v = T::from_f32(sum + residual.add(i).read().to_f32());
                residual.add(i).write(v);
                squares += v.to_f32() * v.to_f32();
            }
            let scale = rsqrt(squares / hidden as f32 + eps);
            for j in 0..hidden {
                let i = line + j;
                let v = residual.add(i).read().to_f32() * scale * weight.add(j).read().to_f32();
                out.add(i).write(T::from_f32(v));
            }
            row += arch.global_threads();
        }
        // ...and no rank leaves while a peer may still read its `x` (the outcome reaches
        // the host through the rank's control block).
        let _ = barrier(arch, &team, sig);
    }
}

/// The fused all-reduce, residual add and RMSNorm in `f32`.
///
/// # Safety
/// See the crate documentation and `fused`'s contract.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub unsafe fn fused_ar_rmsnorm_f32(
    arch: &impl Arch,
    out: *mut f32,
    residual: *mut f32,
    x: *const f32,
    weight: *const f32,
    bases: PeerTable,
    sources: PeerTable,
    world: u32,
    rank: u32,
    rows: u32,
    hidden: u32,
    eps: f32,
    sig: *mut u64,
) {
    // SAFETY: forwarded.
    unsafe {
        fused(
            arch, out, residual, x, weight, bases, sources, world, rank, rows, hidden, eps, sig,
        )
    }
}

/// The fused all-reduce, residual add and RMSNorm in bf16 (computed in `f32`, each
/// stored value rounded once).
///
/// # Safety
/// See the crate documentation and `fused`'s contract.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub unsafe fn fused_ar_rmsnorm_bf16(
    arch: &impl Arch,
    out: *mut bf16,
    residual: *mut bf16,
    x: *const bf16,
    weight: *const bf16,
    bases: PeerTable,
    sources: PeerTable,
    world: u32,
    rank: u32,
    rows: u32,
    hidden: u32,
    eps: f32,
    sig: *mut u64,
) {
    // SAFETY: forwarded.
    unsafe {
        fused(
            arch, out, residual, x, weight, bases, sources, world, rank, rows, hidden, eps, sig,
        )
    }
}
