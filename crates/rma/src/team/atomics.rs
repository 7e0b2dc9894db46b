//! [`Team`]'s atomics on an element of a peer: the forms with an order and a scope, and
//! their `AcqRel`, `System`-scope shorthands.

use super::Team;
use crate::atomic::{AtomicInt, AtomicOp};
use crate::engine;
use crate::{Order, Scope};

impl Team<'_> {
    /// Applies `op` with operand `v` to the element at symmetric `p` on rank `to`;
    /// returns the old value.
    ///
    /// `scope` must reach the rank that owns the element: [`Scope::Device`] is atomic
    /// and ordered only against threads on this GPU, so on a peer's memory it is correct
    /// only when rank `to` shares this GPU; a peer on another GPU needs
    /// [`Scope::System`] (the shorthands' default).
    ///
    /// # Safety
    /// `to < world`; `p` symmetric and aligned; the element accessed only atomically
    /// while this may run.
    #[inline(always)]
    pub unsafe fn atomic_fetch<T: AtomicInt>(
        &self,
        op: AtomicOp,
        p: *mut T,
        v: T,
        to: usize,
        order: Order,
        scope: Scope,
    ) -> T {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p, to) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { T::fetch_op(q, op, v, order, scope) },
            // SAFETY: forwarded from the caller.
            None => unsafe {
                engine::atomic(engine::atomic_code(op), p.addr() as u64, v, v, to, true)
            },
        }
    }

    /// Applies `op` with operand `v` to the element at symmetric `p` on rank `to`,
    /// without returning the old value (the no-return instruction on GPUs). `scope` as
    /// in [`Team::atomic_fetch`].
    ///
    /// # Safety
    /// As [`Team::atomic_fetch`].
    #[inline(always)]
    pub unsafe fn atomic<T: AtomicInt>(
        &self,
        op: AtomicOp,
        p: *mut T,
        v: T,
        to: usize,
        order: Order,
        scope: Scope,
    ) {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p, to) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { T::op(q, op, v, order, scope) },
            // SAFETY: forwarded from the caller.
            None => unsafe {
                engine::atomic(engine::atomic_code(op), p.addr() as u64, v, v, to, false);
            },
        }
    }

    /// Compare-and-swap on the element at symmetric `p` on rank `to`: stores `new` if
    /// it holds `current`; returns the old value. `scope` as in [`Team::atomic_fetch`].
    ///
    /// # Safety
    /// As [`Team::atomic_fetch`].
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn atomic_compare_exchange<T: AtomicInt>(
        &self,
        p: *mut T,
        current: T,
        new: T,
        to: usize,
        order: Order,
        scope: Scope,
    ) -> T {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p, to) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { T::compare_exchange(q, current, new, order, scope) },
            // SAFETY: forwarded from the caller.
            None => unsafe {
                engine::atomic(engine::atomic::CAS, p.addr() as u64, new, current, to, true)
            },
        }
    }

    /// Atomic load of the element at symmetric `p` on rank `from`. `scope` as in
    /// [`Team::atomic_fetch`] (a device-scope load of another GPU's memory may read a
    /// stale cached value).
    ///
    /// # Safety
    /// As [`Team::atomic_fetch`].
    #[inline(always)]
    pub unsafe fn atomic_load<T: AtomicInt>(
        &self,
        p: *const T,
        from: usize,
        order: Order,
        scope: Scope,
    ) -> T {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p.cast_mut(), from) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { T::load(q, order, scope) },
            // SAFETY: forwarded from the caller.
            None => unsafe {
                engine::atomic(
                    engine::atomic::LOAD,
                    p.addr() as u64,
                    T::from_bits(0),
                    T::from_bits(0),
                    from,
                    true,
                )
            },
        }
    }

    /// Atomic store of `v` to the element at symmetric `p` on rank `to`. `scope` as in
    /// [`Team::atomic_fetch`].
    ///
    /// # Safety
    /// As [`Team::atomic_fetch`].
    #[inline(always)]
    pub unsafe fn atomic_store<T: AtomicInt>(
        &self,
        p: *mut T,
        v: T,
        to: usize,
        order: Order,
        scope: Scope,
    ) {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p, to) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { T::store(q, v, order, scope) },
            // SAFETY: forwarded from the caller.
            None => unsafe {
                engine::atomic(engine::atomic::STORE, p.addr() as u64, v, v, to, false);
            },
        }
    }
}

/// The default-order (`AcqRel`) and default-scope (`System`) shorthands. System scope
/// because the element is a peer's, and a peer may be another GPU, where a device-scope
/// atomic is not atomic with that GPU's own; where every rank shares this GPU, the
/// scoped forms ([`Team::atomic_fetch`], [`Team::atomic`]) with [`Scope::Device`] are
/// cheaper.
macro_rules! shorthand {
    ($($fetch:ident $nofetch:ident $op:ident;)*) => {
        impl Team<'_> {
            $(
                #[doc = concat!("`", stringify!($op), "` on the element at symmetric `p` on rank `to`, `AcqRel`, `System` scope; returns the old value.")]
                ///
                /// # Safety
                /// As [`Team::atomic_fetch`].
                #[inline(always)]
                pub unsafe fn $fetch<T: AtomicInt>(&self, p: *mut T, v: T, to: usize) -> T {
                    // SAFETY: forwarded from the caller.
                    unsafe {
                        self.atomic_fetch(AtomicOp::$op, p, v, to, Order::AcqRel, Scope::System)
                    }
                }

                #[doc = concat!("`", stringify!($op), "` on the element at symmetric `p` on rank `to`, `AcqRel`, `System` scope; no result (no-return instruction).")]
                ///
                /// # Safety
                /// As [`Team::atomic_fetch`].
                #[inline(always)]
                pub unsafe fn $nofetch<T: AtomicInt>(&self, p: *mut T, v: T, to: usize) {
                    // SAFETY: forwarded from the caller.
                    unsafe { self.atomic(AtomicOp::$op, p, v, to, Order::AcqRel, Scope::System) }
                }
            )*
        }
    };
}

shorthand! {
    atomic_fetch_add atomic_add Add;
    atomic_fetch_sub atomic_sub Sub;
    atomic_swap atomic_set Xchg;
    atomic_fetch_and atomic_and And;
    atomic_fetch_or atomic_or Or;
    atomic_fetch_xor atomic_xor Xor;
    atomic_fetch_min atomic_min Min;
    atomic_fetch_max atomic_max Max;
}

impl Team<'_> {
    /// [`Team::atomic_compare_exchange`] with `AcqRel` at `System` scope (see the
    /// shorthands above).
    ///
    /// # Safety
    /// As [`Team::atomic_fetch`].
    #[inline(always)]
    pub unsafe fn atomic_cas<T: AtomicInt>(&self, p: *mut T, current: T, new: T, to: usize) -> T {
        // SAFETY: forwarded from the caller.
        unsafe { self.atomic_compare_exchange(p, current, new, to, Order::AcqRel, Scope::System) }
    }
}
