//! AMD atomics: the generated IR library's `symmem_amdgpu_atomic_*` functions.
//!
//! Names are `symmem_amdgpu_atomic_<op>_<type>_<order>_<scope>` with `<op>` one of
//! `add sub xchg and or xor min max cas load store`, `<order>` one of `relaxed acquire
//! release acq_rel seq_cst` and `<scope>` one of `workgroup agent system`; the table
//! that generates them is `symmem_build::amdgpu_ir`. Each family below declares
//! its fifteen (order x scope) functions and a `call` that picks one with a `match`
//! that folds away for constant arguments.

use super::{AtomicInt, AtomicOp};
use crate::{Order, Scope};

/// Declares one family's fifteen functions (`$($name)*` is the symbol prefix) and an
/// `#[inline(always)] call(order, scope, args..)` that selects among them.
macro_rules! family {
    ([$($name:tt)*] ($($a:ident: $at:ty),*) $(-> $r:ty)?) => {
        unsafe extern "C" {
            #[link_name = concat!($($name)*, "_relaxed_workgroup")]
            fn relaxed_workgroup($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_relaxed_agent")]
            fn relaxed_agent($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_relaxed_system")]
            fn relaxed_system($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_acquire_workgroup")]
            fn acquire_workgroup($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_acquire_agent")]
            fn acquire_agent($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_acquire_system")]
            fn acquire_system($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_release_workgroup")]
            fn release_workgroup($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_release_agent")]
            fn release_agent($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_release_system")]
            fn release_system($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_acq_rel_workgroup")]
            fn acq_rel_workgroup($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_acq_rel_agent")]
            fn acq_rel_agent($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_acq_rel_system")]
            fn acq_rel_system($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_seq_cst_workgroup")]
            fn seq_cst_workgroup($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_seq_cst_agent")]
            fn seq_cst_agent($($a: $at),*) $(-> $r)?;
            #[link_name = concat!($($name)*, "_seq_cst_system")]
            fn seq_cst_system($($a: $at),*) $(-> $r)?;
        }

        /// Calls the function for `(order, scope)`.
        ///
        /// # Safety
        /// The pointer argument must satisfy [`AtomicInt`]'s contract.
        #[inline(always)]
        pub unsafe fn call(order: Order, scope: Scope, $($a: $at),*) $(-> $r)? {
            // SAFETY: every function is the named LLVM atomic on the caller's pointer.
            unsafe {
                match (order, scope) {
                    (Order::Relaxed, Scope::Block) => relaxed_workgroup($($a),*),
                    (Order::Relaxed, Scope::Device) => relaxed_agent($($a),*),
                    (Order::Relaxed, Scope::System) => relaxed_system($($a),*),
                    (Order::Acquire, Scope::Block) => acquire_workgroup($($a),*),
                    (Order::Acquire, Scope::Device) => acquire_agent($($a),*),
                    (Order::Acquire, Scope::System) => acquire_system($($a),*),
                    (Order::Release, Scope::Block) => release_workgroup($($a),*),
                    (Order::Release, Scope::Device) => release_agent($($a),*),
                    (Order::Release, Scope::System) => release_system($($a),*),
                    (Order::AcqRel, Scope::Block) => acq_rel_workgroup($($a),*),
                    (Order::AcqRel, Scope::Device) => acq_rel_agent($($a),*),
                    (Order::AcqRel, Scope::System) => acq_rel_system($($a),*),
                    (Order::SeqCst, Scope::Block) => seq_cst_workgroup($($a),*),
                    (Order::SeqCst, Scope::Device) => seq_cst_agent($($a),*),
                    (Order::SeqCst, Scope::System) => seq_cst_system($($a),*),
                }
            }
        }
    };
}

/// One module per (type, op): `$m::$op::call`.
macro_rules! amd_atomic {
    ($t:ident, $m:ident) => {
        mod $m {
            use super::{Order, Scope};
            macro_rules! rmw_family {
                ($op:ident) => {
                    pub mod $op {
                        use super::{Order, Scope};
                        family!(["symmem_amdgpu_atomic_", stringify!($op), "_", stringify!($t)]
                            (p: *mut $t, v: $t) -> $t);
                    }
                };
            }
            rmw_family!(add);
            rmw_family!(sub);
            rmw_family!(xchg);
            rmw_family!(and);
            rmw_family!(or);
            rmw_family!(xor);
            rmw_family!(min);
            rmw_family!(max);
            pub mod cas {
                use super::{Order, Scope};
                family!(["symmem_amdgpu_atomic_cas_", stringify!($t)]
                    (p: *mut $t, current: $t, new: $t) -> $t);
            }
            pub mod load {
                use super::{Order, Scope};
                family!(["symmem_amdgpu_atomic_load_", stringify!($t)] (p: *const $t) -> $t);
            }
            pub mod store {
                use super::{Order, Scope};
                family!(["symmem_amdgpu_atomic_store_", stringify!($t)] (p: *mut $t, v: $t));
            }
        }

        impl AtomicInt for $t {
            #[inline(always)]
            unsafe fn fetch_op(p: *mut $t, op: AtomicOp, v: $t, order: Order, scope: Scope) -> $t {
                // SAFETY: the caller upholds the pointer contract.
                unsafe {
                    match op {
                        AtomicOp::Add => $m::add::call(order, scope, p, v),
                        AtomicOp::Sub => $m::sub::call(order, scope, p, v),
                        AtomicOp::Xchg => $m::xchg::call(order, scope, p, v),
                        AtomicOp::And => $m::and::call(order, scope, p, v),
                        AtomicOp::Or => $m::or::call(order, scope, p, v),
                        AtomicOp::Xor => $m::xor::call(order, scope, p, v),
                        AtomicOp::Min => $m::min::call(order, scope, p, v),
                        AtomicOp::Max => $m::max::call(order, scope, p, v),
                    }
                }
            }
            #[inline(always)]
            unsafe fn op(p: *mut $t, op: AtomicOp, v: $t, order: Order, scope: Scope) {
                // SAFETY: forwarded; the unused result selects the no-return instruction.
                unsafe { Self::fetch_op(p, op, v, order, scope) };
            }
            #[inline(always)]
            unsafe fn compare_exchange(
                p: *mut $t,
                current: $t,
                new: $t,
                order: Order,
                scope: Scope,
            ) -> $t {
                // SAFETY: the caller upholds the pointer contract.
                unsafe { $m::cas::call(order, scope, p, current, new) }
            }
            #[inline(always)]
            unsafe fn load(p: *const $t, order: Order, scope: Scope) -> $t {
                // SAFETY: the caller upholds the pointer contract.
                unsafe { $m::load::call(order, scope, p) }
            }
            #[inline(always)]
            unsafe fn store(p: *mut $t, v: $t, order: Order, scope: Scope) {
                // SAFETY: the caller upholds the pointer contract.
                unsafe { $m::store::call(order, scope, p, v) }
            }
        }
    };
}

amd_atomic!(u32, t_u32);
amd_atomic!(i32, t_i32);
amd_atomic!(u64, t_u64);
amd_atomic!(i64, t_i64);
