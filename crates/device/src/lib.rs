//! Write multi-GPU kernels in Rust: everything a kernel crate needs, in one `no_std`
//! dependency.
//!
//! A kernel is a function written once against the arch layer ([`Arch`]) and marked
//! [`kernel`]. On AMD and NVIDIA targets it becomes the exported entry point of the code
//! object the `symmem-build` crate builds from the application's `build.rs`; on the host
//! it becomes a typed [`Kernel`] value that `symmem`'s launch checks its arguments
//! against at compile time, and that the CPU backend runs on host threads.
//!
//! ```
//! use symmem_device::{Arch, SymViewMut, kernel};
//!
//! /// Adds `value` to element `i` of rank `to`'s copy of `data`, for every `i < n` it has.
//! #[kernel]
//! pub fn add_to_peer(arch: &impl Arch, data: SymViewMut<u32>, to: u32, n: u32, value: u32) {
//!     let i = arch.global_id();
//!     if i < n as usize
//!         && let Some(peer) = data.peer(to as usize)
//!         && let Some(old) = peer.get(i)
//!     {
//!         peer.set(i, old.wrapping_add(value));
//!     }
//! }
//! # fn main() { let _: symmem_device::Kernel<(SymViewMut<u32>, u32, u32, u32)> = add_to_peer; }
//! ```
//!
//! A kernel is a safe `fn` when its parameters keep it safe: views that carry their
//! length ([`View`], [`ViewMut`], [`SymView`], [`SymViewMut`]), checked indexing, and peer
//! access ([`SymViewMut::peer`], [`PeerTable::base`]) that yields nothing for a rank out
//! of range or a peer on another node. A kernel whose contract its parameters cannot
//! carry (raw pointers and counts) is an `unsafe fn` with a `# Safety` section: it
//! becomes an [`UnsafeKernel`], which the host launches only from `unsafe` code
//! (`symmem::Module::launch_unchecked`).
//!
//! [`paste_idents`] lets a `macro_rules!` name one kernel per element type (symmem's
//! own reductions are generated that way from one list of element types).
//!
//! The crate re-exports [`arch`] (thread ids, block barriers, scoped fences),
//! [`translate`] (peer-base translation, 16-byte vector types) and [`rma`] (`Team`:
//! load, store, get, put, scoped atomics, signals, barrier, collectives).
#![no_std]

#[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
pub use symmem_rma::nvshmem;
mod param;
#[cfg(all(
    target_os = "linux",
    not(any(target_arch = "amdgpu", target_arch = "nvptx64"))
))]
mod registry;
mod view;

pub use param::{
    Abi, AbiKind, AbiPart, AbiTuple, Kernel, Param, Params, PeerTable, Slot, TABLE_HEADER_WORDS,
    UnsafeKernel, cmp_to_abi, slots,
};
#[cfg(all(
    target_os = "linux",
    not(any(target_arch = "amdgpu", target_arch = "nvptx64"))
))]
pub use registry::{Declaration, declarations};
pub use symmem_arch as arch;
pub use symmem_arch::{Arch, Scope};
pub use symmem_macros::{kernel, paste_idents};
pub use symmem_rma as rma;
pub use symmem_rma::{Cmp, Order, Team, bf16, f16};
pub use symmem_translate as translate;
pub use symmem_translate::{PeerBases, U32x2, U32x4};
pub use view::{SymView, SymViewMut, View, ViewMut};

/// The arch handle an entry point runs with on this target (what `#[kernel]` passes).
#[cfg(target_arch = "amdgpu")]
pub use symmem_arch::amdgpu::Gpu;
/// The arch handle an entry point runs with on this target (what `#[kernel]` passes).
#[cfg(target_arch = "nvptx64")]
pub use symmem_arch::nvptx::Gpu;
