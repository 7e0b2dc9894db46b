//! Aligned vector element types.
//!
//! A table-derived address carries no alignment the compiler can prove, so a plain
//! `[u32; 4]` copy splits into narrower accesses (two `st.global.b64` on sm_90). These
//! types wrap `core::simd` vectors: a load or store through `*mut U32x4` is one 16-byte
//! vector instruction (`global_load/store_dwordx4`, `ld/st.global.v4.b32`).

use core::simd::Simd;

/// Sixteen bytes as four `u32` lanes, 16-byte aligned: one vector access on every GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct U32x4(pub Simd<u32, 4>);

/// Eight bytes as two `u32` lanes, 8-byte aligned: one vector access on every GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct U32x2(pub Simd<u32, 2>);

impl U32x4 {
    /// All lanes set to `v`.
    #[inline(always)]
    pub const fn splat(v: u32) -> Self {
        Self(Simd::from_array([v; 4]))
    }
    /// The lanes as an array.
    #[inline(always)]
    pub const fn to_array(self) -> [u32; 4] {
        self.0.to_array()
    }
}

impl U32x2 {
    /// All lanes set to `v`.
    #[inline(always)]
    pub const fn splat(v: u32) -> Self {
        Self(Simd::from_array([v; 2]))
    }
    /// The lanes as an array.
    #[inline(always)]
    pub const fn to_array(self) -> [u32; 2] {
        self.0.to_array()
    }
}

const _: () = {
    assert!(core::mem::size_of::<U32x4>() == 16 && core::mem::align_of::<U32x4>() == 16);
    assert!(core::mem::size_of::<U32x2>() == 8 && core::mem::align_of::<U32x2>() == 8);
};

// SAFETY: both are transparent wrappers of plain integer vectors: no padding, every bit
// pattern valid, all-zero valid.
#[cfg(feature = "bytemuck")]
unsafe impl bytemuck::Zeroable for U32x4 {}
// SAFETY: see above.
#[cfg(feature = "bytemuck")]
unsafe impl bytemuck::Pod for U32x4 {}
// SAFETY: see above.
#[cfg(feature = "bytemuck")]
unsafe impl bytemuck::Zeroable for U32x2 {}
// SAFETY: see above.
#[cfg(feature = "bytemuck")]
unsafe impl bytemuck::Pod for U32x2 {}
