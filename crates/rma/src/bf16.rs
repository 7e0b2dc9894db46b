//! `bfloat16` as a plain 16-bit storage type, `bytemuck`-compatible.

/// A `bfloat16` value: the upper 16 bits of an IEEE-754 `f32`. Storage only; arithmetic
/// goes through `f32` ([`Bf16::to_f32`], [`Bf16::from_f32`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Bf16(pub u16);

// SAFETY: a transparent `u16`: no padding, every bit pattern is a valid value.
unsafe impl bytemuck::Zeroable for Bf16 {}
// SAFETY: as above; `Copy + 'static`.
unsafe impl bytemuck::Pod for Bf16 {}

impl Bf16 {
    /// The exact `f32` this value denotes.
    #[inline(always)]
    pub const fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }

    /// `v` rounded to the nearest `bfloat16`, ties to even; NaN stays a (quiet) NaN.
    #[inline(always)]
    pub const fn from_f32(v: f32) -> Self {
        let b = v.to_bits();
        if v.is_nan() {
            return Self(((b >> 16) | 0x40) as u16);
        }
        let round = 0x7fff + ((b >> 16) & 1);
        Self((b.wrapping_add(round) >> 16) as u16)
    }
}
