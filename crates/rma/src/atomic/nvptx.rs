//! NVIDIA atomics: inline PTX, one instruction sequence per (op, type, order, scope).
//! The mapping of orders PTX lacks is documented in the parent module.

use super::{AtomicInt, AtomicOp};
use crate::{Order, Scope};
use core::arch::asm;

/// `fence.sc.<scope>;` before the operation, or nothing.
macro_rules! pre {
    (none, $s:literal) => {
        ""
    };
    (sc, $s:literal) => {
        concat!("fence.sc.", $s, ";\n\t")
    };
}

/// `fence.acq_rel.<scope>;` after the operation, or nothing.
macro_rules! post {
    (none, $s:literal) => {
        ""
    };
    (ar, $s:literal) => {
        concat!("\n\tfence.acq_rel.", $s, ";")
    };
}

/// Expands `$emit!((args) pre sem "<scope>" post)` for the run-time `scope`.
macro_rules! by_scope {
    ($scope:expr, $emit:ident!(($($a:tt)*) $pre:ident $sem:literal $post:ident)) => {
        match $scope {
            Scope::Block => $emit!(($($a)*) $pre $sem "cta" $post),
            Scope::Device => $emit!(($($a)*) $pre $sem "gpu" $post),
            Scope::System => $emit!(($($a)*) $pre $sem "sys" $post),
        }
    };
}

/// Expands `$emit!` for the run-time `order`, with the `(pre, sem, post)` the kind of
/// instruction (`atom`, `red`, `ld`, `st`) supports.
macro_rules! by_order {
    (atom, $order:expr, $scope:expr, $emit:ident!($($a:tt)*)) => {
        match $order {
            Order::Relaxed => by_scope!($scope, $emit!(($($a)*) none "relaxed" none)),
            Order::Acquire => by_scope!($scope, $emit!(($($a)*) none "acquire" none)),
            Order::Release => by_scope!($scope, $emit!(($($a)*) none "release" none)),
            Order::AcqRel => by_scope!($scope, $emit!(($($a)*) none "acq_rel" none)),
            Order::SeqCst => by_scope!($scope, $emit!(($($a)*) sc "acquire" none)),
        }
    };
    (red, $order:expr, $scope:expr, $emit:ident!($($a:tt)*)) => {
        match $order {
            Order::Relaxed => by_scope!($scope, $emit!(($($a)*) none "relaxed" none)),
            Order::Acquire => by_scope!($scope, $emit!(($($a)*) none "relaxed" ar)),
            Order::Release => by_scope!($scope, $emit!(($($a)*) none "release" none)),
            Order::AcqRel => by_scope!($scope, $emit!(($($a)*) none "release" ar)),
            Order::SeqCst => by_scope!($scope, $emit!(($($a)*) sc "relaxed" ar)),
        }
    };
    (ld, $order:expr, $scope:expr, $emit:ident!($($a:tt)*)) => {
        match $order {
            Order::Relaxed | Order::Release => {
                by_scope!($scope, $emit!(($($a)*) none "relaxed" none))
            }
            Order::Acquire | Order::AcqRel => {
                by_scope!($scope, $emit!(($($a)*) none "acquire" none))
            }
            Order::SeqCst => by_scope!($scope, $emit!(($($a)*) sc "acquire" none)),
        }
    };
    (st, $order:expr, $scope:expr, $emit:ident!($($a:tt)*)) => {
        match $order {
            Order::Relaxed | Order::Acquire => {
                by_scope!($scope, $emit!(($($a)*) none "relaxed" none))
            }
            Order::Release | Order::AcqRel => {
                by_scope!($scope, $emit!(($($a)*) none "release" none))
            }
            Order::SeqCst => by_scope!($scope, $emit!(($($a)*) sc "relaxed" none)),
        }
    };
}

/// `d = atom.<sem>.<scope>.global.<opty> [p], v`.
macro_rules! atom {
    (($reg:ident, $op:literal, $ty:literal, $p:ident, $v:ident, $d:ident) $pre:ident $sem:literal $s:literal $post:ident) => {
        asm!(
            concat!(
                pre!($pre, $s),
                "{{ .reg .b64 %g; cvta.to.global.u64 %g, {p}; atom.", $sem, ".", $s,
                ".global.", $op, ".", $ty, " {d}, [%g], {v}; }}",
                post!($post, $s)
            ),
            p = in(reg64) $p, v = in($reg) $v, d = out($reg) $d, options(nostack)
        )
    };
}

/// `red.<sem>.<scope>.global.<opty> [p], v`.
macro_rules! red {
    (($reg:ident, $op:literal, $ty:literal, $p:ident, $v:ident) $pre:ident $sem:literal $s:literal $post:ident) => {
        asm!(
            concat!(
                pre!($pre, $s),
                "{{ .reg .b64 %g; cvta.to.global.u64 %g, {p}; red.", $sem, ".", $s,
                ".global.", $op, ".", $ty, " [%g], {v}; }}",
                post!($post, $s)
            ),
            p = in(reg64) $p, v = in($reg) $v, options(nostack)
        )
    };
}

/// `d = atom.<sem>.<scope>.global.cas.<bty> [p], c, n`.
macro_rules! cas {
    (($reg:ident, $bty:literal, $p:ident, $c:ident, $n:ident, $d:ident) $pre:ident $sem:literal $s:literal $post:ident) => {
        asm!(
            concat!(
                pre!($pre, $s),
                "{{ .reg .b64 %g; cvta.to.global.u64 %g, {p}; atom.", $sem, ".", $s,
                ".global.cas.", $bty, " {d}, [%g], {c}, {n}; }}",
                post!($post, $s)
            ),
            p = in(reg64) $p, c = in($reg) $c, n = in($reg) $n, d = out($reg) $d,
            options(nostack)
        )
    };
}

/// `d = ld.<sem>.<scope>.global.<bty> [p]`.
macro_rules! ld {
    (($reg:ident, $bty:literal, $p:ident, $d:ident) $pre:ident $sem:literal $s:literal $post:ident) => {
        asm!(
            concat!(
                pre!($pre, $s),
                "{{ .reg .b64 %g; cvta.to.global.u64 %g, {p}; ld.", $sem, ".", $s,
                ".global.", $bty, " {d}, [%g]; }}",
                post!($post, $s)
            ),
            p = in(reg64) $p, d = out($reg) $d, options(nostack)
        )
    };
}

/// `st.<sem>.<scope>.global.<bty> [p], v`.
macro_rules! st {
    (($reg:ident, $bty:literal, $p:ident, $v:ident) $pre:ident $sem:literal $s:literal $post:ident) => {
        asm!(
            concat!(
                pre!($pre, $s),
                "{{ .reg .b64 %g; cvta.to.global.u64 %g, {p}; st.", $sem, ".", $s,
                ".global.", $bty, " [%g], {v}; }}",
                post!($post, $s)
            ),
            p = in(reg64) $p, v = in($reg) $v, options(nostack)
        )
    };
}

/// `AtomicInt` for one type: its register class and the PTX type suffixes of its
/// arithmetic (`u32`), bitwise (`b32`) and min/max (`u32` or `s32`) forms.
macro_rules! ptx_atomic {
    ($t:ty, $reg:ident, $arith:literal, $bits:literal, $minmax:literal) => {
        impl AtomicInt for $t {
            #[inline(always)]
            unsafe fn fetch_op(p: *mut $t, op: AtomicOp, v: $t, order: Order, scope: Scope) -> $t {
                let d: $t;
                // SAFETY: the caller guarantees a valid, aligned global `p`; each asm
                // block is one atomic on it (plus fences), and writes only `d`.
                unsafe {
                    match op {
                        AtomicOp::Add => {
                            by_order!(atom, order, scope, atom!($reg, "add", $arith, p, v, d))
                        }
                        AtomicOp::Sub => {
                            let v = v.wrapping_neg();
                            by_order!(atom, order, scope, atom!($reg, "add", $arith, p, v, d))
                        }
                        AtomicOp::Xchg => {
                            by_order!(atom, order, scope, atom!($reg, "exch", $bits, p, v, d))
                        }
                        AtomicOp::And => {
                            by_order!(atom, order, scope, atom!($reg, "and", $bits, p, v, d))
                        }
                        AtomicOp::Or => {
                            by_order!(atom, order, scope, atom!($reg, "or", $bits, p, v, d))
                        }
                        AtomicOp::Xor => {
                            by_order!(atom, order, scope, atom!($reg, "xor", $bits, p, v, d))
                        }
                        AtomicOp::Min => {
                            by_order!(atom, order, scope, atom!($reg, "min", $minmax, p, v, d))
                        }
                        AtomicOp::Max => {
                            by_order!(atom, order, scope, atom!($reg, "max", $minmax, p, v, d))
                        }
                    }
                }
                d
            }
            #[inline(always)]
            unsafe fn op(p: *mut $t, op: AtomicOp, v: $t, order: Order, scope: Scope) {
                // SAFETY: as in `fetch_op`; `red` writes no register.
                unsafe {
                    match op {
                        AtomicOp::Add => {
                            by_order!(red, order, scope, red!($reg, "add", $arith, p, v))
                        }
                        AtomicOp::Sub => {
                            let v = v.wrapping_neg();
                            by_order!(red, order, scope, red!($reg, "add", $arith, p, v))
                        }
                        AtomicOp::Xchg => {
                            Self::fetch_op(p, op, v, order, scope);
                        }
                        AtomicOp::And => {
                            by_order!(red, order, scope, red!($reg, "and", $bits, p, v))
                        }
                        AtomicOp::Or => by_order!(red, order, scope, red!($reg, "or", $bits, p, v)),
                        AtomicOp::Xor => {
                            by_order!(red, order, scope, red!($reg, "xor", $bits, p, v))
                        }
                        AtomicOp::Min => {
                            by_order!(red, order, scope, red!($reg, "min", $minmax, p, v))
                        }
                        AtomicOp::Max => {
                            by_order!(red, order, scope, red!($reg, "max", $minmax, p, v))
                        }
                    }
                }
            }
            #[inline(always)]
            unsafe fn compare_exchange(
                p: *mut $t,
                current: $t,
                new: $t,
                order: Order,
                scope: Scope,
            ) -> $t {
                let d: $t;
                // SAFETY: as in `fetch_op`.
                unsafe { by_order!(atom, order, scope, cas!($reg, $bits, p, current, new, d)) };
                d
            }
            #[inline(always)]
            unsafe fn load(p: *const $t, order: Order, scope: Scope) -> $t {
                let d: $t;
                // SAFETY: as in `fetch_op`; a load writes only `d`.
                unsafe { by_order!(ld, order, scope, ld!($reg, $bits, p, d)) };
                d
            }
            #[inline(always)]
            unsafe fn store(p: *mut $t, v: $t, order: Order, scope: Scope) {
                // SAFETY: as in `fetch_op`.
                unsafe { by_order!(st, order, scope, st!($reg, $bits, p, v)) };
            }
        }
    };
}

ptx_atomic!(u32, reg32, "u32", "b32", "u32");
ptx_atomic!(i32, reg32, "u32", "b32", "s32");
ptx_atomic!(u64, reg64, "u64", "b64", "u64");
ptx_atomic!(i64, reg64, "u64", "b64", "s64");
