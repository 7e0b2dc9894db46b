//! Host atomics: core's `Atomic*::from_ptr`. One coherence domain, so scope is unused.

use super::{AtomicInt, AtomicOp};
use crate::{Order, Scope};
use core::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};

#[inline(always)]
const fn rmw(o: Order) -> Ordering {
    match o {
        Order::Relaxed => Ordering::Relaxed,
        Order::Acquire => Ordering::Acquire,
        Order::Release => Ordering::Release,
        Order::AcqRel => Ordering::AcqRel,
        Order::SeqCst => Ordering::SeqCst,
    }
}

#[inline(always)]
const fn load(o: Order) -> Ordering {
    match o {
        Order::Relaxed | Order::Release => Ordering::Relaxed,
        Order::Acquire | Order::AcqRel => Ordering::Acquire,
        Order::SeqCst => Ordering::SeqCst,
    }
}

#[inline(always)]
const fn store(o: Order) -> Ordering {
    match o {
        Order::Relaxed | Order::Acquire => Ordering::Relaxed,
        Order::Release | Order::AcqRel => Ordering::Release,
        Order::SeqCst => Ordering::SeqCst,
    }
}

macro_rules! host_atomic {
    ($t:ty, $a:ty) => {
        impl AtomicInt for $t {
            #[inline(always)]
            unsafe fn fetch_op(p: *mut $t, op: AtomicOp, v: $t, order: Order, _: Scope) -> $t {
                // SAFETY: the caller guarantees a valid, aligned, atomically accessed `p`.
                let a = unsafe { <$a>::from_ptr(p) };
                let o = rmw(order);
                match op {
                    AtomicOp::Add => a.fetch_add(v, o),
                    AtomicOp::Sub => a.fetch_sub(v, o),
                    AtomicOp::Xchg => a.swap(v, o),
                    AtomicOp::And => a.fetch_and(v, o),
                    AtomicOp::Or => a.fetch_or(v, o),
                    AtomicOp::Xor => a.fetch_xor(v, o),
                    AtomicOp::Min => a.fetch_min(v, o),
                    AtomicOp::Max => a.fetch_max(v, o),
                }
            }
            #[inline(always)]
            unsafe fn op(p: *mut $t, op: AtomicOp, v: $t, order: Order, scope: Scope) {
                // SAFETY: forwarded from the caller.
                unsafe { Self::fetch_op(p, op, v, order, scope) };
            }
            #[inline(always)]
            unsafe fn compare_exchange(
                p: *mut $t,
                current: $t,
                new: $t,
                order: Order,
                _: Scope,
            ) -> $t {
                // SAFETY: as in `fetch_op`.
                let a = unsafe { <$a>::from_ptr(p) };
                match a.compare_exchange(current, new, rmw(order), load(order)) {
                    Ok(old) | Err(old) => old,
                }
            }
            #[inline(always)]
            unsafe fn load(p: *const $t, order: Order, _: Scope) -> $t {
                // SAFETY: as in `fetch_op`; a load through the atomic never writes.
                unsafe { <$a>::from_ptr(p.cast_mut()) }.load(load(order))
            }
            #[inline(always)]
            unsafe fn store(p: *mut $t, v: $t, order: Order, _: Scope) {
                // SAFETY: as in `fetch_op`.
                unsafe { <$a>::from_ptr(p) }.store(v, store(order))
            }
        }
    };
}

host_atomic!(u32, AtomicU32);
host_atomic!(i32, AtomicI32);
host_atomic!(u64, AtomicU64);
host_atomic!(i64, AtomicI64);
