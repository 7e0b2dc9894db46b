//! The target's side of an off-node atomic ([`apply_atomic`]): what a peer's proxy runs
//! on the host (CPU heaps) or in a one-thread kernel (GPU heaps).

// What the documentation below names.
#[cfg(doc)]
use super::kind;
use super::{atomic, request};
use crate::atomic::{AtomicInt, AtomicOp};
use crate::{Order, Scope};

/// Applies atomic request `request` (an [`kind::ATOMIC`] word) with `operand` and
/// `compare` to the element at `at`, at system scope and sequentially consistent;
/// returns the old value's bits (0 for a store). The target's side of an off-node
/// atomic: its proxy runs it on the host (CPU heaps) or in a one-thread kernel (GPU
/// heaps), so it is atomic with the kernels' own atomics on the element.
///
/// # Safety
/// `at` is valid for reads and writes of the request's element size (4 or 8 bytes),
/// aligned to it, and accessed only atomically while other threads may touch it.
#[inline(always)]
pub unsafe fn apply_atomic(at: *mut u8, request: u64, operand: u64, compare: u64) -> u64 {
    /// The request on an element of type `T`.
    ///
    /// # Safety
    /// As [`apply_atomic`], for a `T`.
    #[inline(always)]
    unsafe fn on<T: AtomicInt>(at: *mut T, code: u64, operand: u64, compare: u64) -> u64 {
        let (v, o, s) = (T::from_bits(operand), Order::SeqCst, Scope::System);
        // SAFETY: forwarded from the caller.
        unsafe {
            match code {
                atomic::CAS => T::compare_exchange(at, T::from_bits(compare), v, o, s).to_bits(),
                atomic::LOAD => T::load(at, o, s).to_bits(),
                atomic::STORE => {
                    T::store(at, v, o, s);
                    0
                }
                i => match AtomicOp::ALL.get(i as usize) {
                    Some(&op) => T::fetch_op(at, op, v, o, s).to_bits(),
                    None => 0,
                },
            }
        }
    }
    let code = request::atomic(request);
    let signed = request & request::SIGNED != 0;
    // SAFETY: forwarded from the caller, for the element type the request names.
    unsafe {
        match (request::size(request), signed) {
            (4, false) => on(at.cast::<u32>(), code, operand, compare),
            (4, true) => on(at.cast::<i32>(), code, operand, compare),
            (8, true) => on(at.cast::<i64>(), code, operand, compare),
            _ => on(at.cast::<u64>(), code, operand, compare),
        }
    }
}
