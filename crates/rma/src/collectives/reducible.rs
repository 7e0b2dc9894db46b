//! The reductions' operators ([`ReduceOp`]) and element types ([`Reducible`]): how each
//! type widens to its accumulator, combines, and unpacks from and packs into a 16-byte
//! vector, with the kernels' own `bf16` and `f16` conversions.

use crate::{U32x4, bf16, f16};

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
