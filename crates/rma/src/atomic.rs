//! Atomics on one element, with a memory [`Order`] and a [`Scope`] that reach the
//! instruction.
//!
//! [`AtomicInt`] is implemented for `u32`, `i32`, `u64` and `i64`; [`crate::Team`]'s
//! `atomic_*` methods translate a local pointer to a peer's and call it. Every function
//! here is `#[inline(always)]` and dispatches on `order` and `scope` with a `match`, so
//! with constant arguments (the only kind kernels pass) exactly one instruction sequence
//! survives; there is no run-time dispatch in a built kernel.
//!
//! Per target:
//!
//! * **host**: core atomics (`AtomicU32::from_ptr`, ...); a CPU has one coherence
//!   domain, so the scope changes nothing.
//! * **amdgpu**: `alwaysinline` LLVM IR functions `atomicrmw`/`cmpxchg`/`load atomic`/
//!   `store atomic` with `syncscope("workgroup" | "agent" | "")`, generated from tables
//!   by `symmem-build` (`amdgpu_ir.rs`) and declared here as `extern "C"`. A
//!   non-fetch operation calls the same function and drops the result; the backend then
//!   selects the no-return instruction.
//! * **nvptx**: inline PTX. Scopes are `.cta`/`.gpu`/`.sys`. Orders PTX lacks:
//!   - `SeqCst` read-modify-write is `fence.sc.<scope>` then `atom.acquire` (the
//!     libcu++ mapping); a `SeqCst` load is `fence.sc` then `ld.acquire`, a `SeqCst`
//!     store `fence.sc` then `st.relaxed`.
//!   - Non-fetch forms use `red`, which only has `.relaxed` and `.release`: `Acquire`
//!     is `red.relaxed` then `fence.acq_rel.<scope>`, `AcqRel` is `red.release` then
//!     `fence.acq_rel`, `SeqCst` is `fence.sc; red.relaxed; fence.acq_rel`.
//!     `red` has no exchange, so a non-fetch `Xchg` is an `atom.exch` whose result is
//!     dropped.
//!   - PTX has no `atom.sub`: sub is `atom.add` of the two's-complement negation.
//!   - The address is converted with `cvta.to.global` and the `.global` form is used.

use crate::{Order, Scope};

#[cfg(target_arch = "amdgpu")]
#[path = "atomic/amdgpu.rs"]
mod imp;
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
#[path = "atomic/host.rs"]
mod imp;
#[cfg(target_arch = "nvptx64")]
#[path = "atomic/nvptx.rs"]
mod imp;

/// A read-modify-write operation with one operand (compare-and-swap has its own
/// function, [`AtomicInt::compare_exchange`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// `*p = *p + v`, wrapping.
    Add,
    /// `*p = *p - v`, wrapping.
    Sub,
    /// `*p = v` (exchange).
    Xchg,
    /// `*p = *p & v`.
    And,
    /// `*p = *p | v`.
    Or,
    /// `*p = *p ^ v`.
    Xor,
    /// `*p = min(*p, v)`, signed for `i32`/`i64`.
    Min,
    /// `*p = max(*p, v)`, signed for `i32`/`i64`.
    Max,
}

impl AtomicOp {
    /// Every operation, for tables and tests.
    pub const ALL: [AtomicOp; 8] = [
        AtomicOp::Add,
        AtomicOp::Sub,
        AtomicOp::Xchg,
        AtomicOp::And,
        AtomicOp::Or,
        AtomicOp::Xor,
        AtomicOp::Min,
        AtomicOp::Max,
    ];
}

mod sealed {
    /// An element's bit pattern in a `u64` (requests to off-node peers carry them).
    pub trait Sealed: Sized {
        /// Whether min and max compare signed.
        const SIGNED: bool;
        /// The bits, zero-extended.
        fn to_bits(self) -> u64;
        /// The element from the low bits.
        fn from_bits(bits: u64) -> Self;
    }
    macro_rules! sealed {
        ($($t:ty, $u:ty, $signed:expr;)*) => {$(
            impl Sealed for $t {
                const SIGNED: bool = $signed;
                #[inline(always)]
                fn to_bits(self) -> u64 {
                    self as $u as u64
                }
                #[inline(always)]
                fn from_bits(bits: u64) -> Self {
                    bits as $u as $t
                }
            }
        )*};
    }
    sealed! {
        u32, u32, false;
        i32, u32, true;
        u64, u64, false;
        i64, u64, true;
    }
}

/// An integer type every target can operate on atomically: `u32`, `i32`, `u64`, `i64`.
///
/// Sealed: the set of types is the set of instructions the targets have.
pub trait AtomicInt: Copy + Eq + sealed::Sealed {
    /// Applies `op` with operand `v` to `*p` atomically and returns the old value.
    ///
    /// # Safety
    /// `p` must be valid for reads and writes, aligned to `size_of::<Self>()`, and
    /// accessed only atomically while other threads may touch it.
    unsafe fn fetch_op(p: *mut Self, op: AtomicOp, v: Self, order: Order, scope: Scope) -> Self;

    /// Applies `op` with operand `v` to `*p` atomically, without returning the old value
    /// (the no-return instruction on GPUs).
    ///
    /// # Safety
    /// As [`AtomicInt::fetch_op`].
    unsafe fn op(p: *mut Self, op: AtomicOp, v: Self, order: Order, scope: Scope);

    /// If `*p == current`, stores `new`; atomically. Returns the old value (the swap
    /// happened iff it equals `current`). On failure the read has the acquire half of
    /// `order`.
    ///
    /// # Safety
    /// As [`AtomicInt::fetch_op`].
    unsafe fn compare_exchange(
        p: *mut Self,
        current: Self,
        new: Self,
        order: Order,
        scope: Scope,
    ) -> Self;

    /// An atomic load with the acquire half of `order`.
    ///
    /// # Safety
    /// `p` must be valid for reads and aligned; as [`AtomicInt::fetch_op`] otherwise.
    unsafe fn load(p: *const Self, order: Order, scope: Scope) -> Self;

    /// An atomic store with the release half of `order`.
    ///
    /// # Safety
    /// `p` must be valid for writes and aligned; as [`AtomicInt::fetch_op`] otherwise.
    unsafe fn store(p: *mut Self, v: Self, order: Order, scope: Scope);
}
