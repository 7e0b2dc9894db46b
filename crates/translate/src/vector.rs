//! Aligned vector element types.
//!
//! A table-derived address carries no alignment the compiler can prove, so a plain
//! `[u32; 4]` copy splits into narrower accesses on a GPU (two `st.global.b64` on sm_90,
//! and fewer loads in flight on AMD). On the GPU targets these types wrap `core::simd`
//! vectors: a load or store through `*mut U32x4` is one 16-byte vector instruction
//! (`global_load/store_dwordx4`, `ld/st.global.v4.b32`). On the host (stable Rust has no
//! `core::simd`) they are 16- and 8-byte aligned `u32` arrays: the same size, alignment
//! and bytes, so host code and the CPU tests translate exactly the same layout.

#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
type Lanes<const N: usize> = core::simd::Simd<u32, N>;

/// Sixteen bytes as four `u32` lanes, 16-byte aligned: one vector access on every GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(
    any(target_arch = "amdgpu", target_arch = "nvptx64"),
    repr(transparent)
)]
#[cfg_attr(
    not(any(target_arch = "amdgpu", target_arch = "nvptx64")),
    repr(C, align(16))
)]
pub struct U32x4(
    #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))] Lanes<4>,
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))] [u32; 4],
);

/// Eight bytes as two `u32` lanes, 8-byte aligned: one vector access on every GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(
    any(target_arch = "amdgpu", target_arch = "nvptx64"),
    repr(transparent)
)]
#[cfg_attr(
    not(any(target_arch = "amdgpu", target_arch = "nvptx64")),
    repr(C, align(8))
)]
pub struct U32x2(
    #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))] Lanes<2>,
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))] [u32; 2],
);

macro_rules! lanes {
    ($t:ident, $n:literal) => {
        impl $t {
            /// All lanes set to `v`.
            #[inline(always)]
            pub const fn splat(v: u32) -> Self {
                Self::from_array([v; $n])
            }
            /// The vector whose lanes, in memory order, are `lanes`.
            #[inline(always)]
            pub const fn from_array(lanes: [u32; $n]) -> Self {
                #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
                let lanes = Lanes::from_array(lanes);
                Self(lanes)
            }
            /// The lanes, in memory order.
            #[inline(always)]
            pub const fn to_array(self) -> [u32; $n] {
                #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
                let lanes = self.0.to_array();
                #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
                let lanes = self.0;
                lanes
            }
        }
    };
}

lanes!(U32x4, 4);
lanes!(U32x2, 2);

const _: () = {
    assert!(core::mem::size_of::<U32x4>() == 16 && core::mem::align_of::<U32x4>() == 16);
    assert!(core::mem::size_of::<U32x2>() == 8 && core::mem::align_of::<U32x2>() == 8);
};

// SAFETY: both are plain `u32` lanes (a transparent integer vector on GPUs, an aligned
// array of exactly their size on the host): no padding, every bit pattern valid,
// all-zero valid.
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
