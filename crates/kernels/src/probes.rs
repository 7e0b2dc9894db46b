//! Probe kernels: one library operation each, exported so codegen tests can read the
//! instructions a given order and scope compile to. Each translates its symmetric
//! pointer through the team like any kernel would.
//!
//! They show instructions, not usage: the block- and device-scope probes touch a peer's
//! element at a scope that does not reach a peer on another GPU (see
//! `symmem_arch::Scope`). No host code launches them.

use symmem_device::{Arch, PeerTable, kernel};
use symmem_rma::{AtomicOp, Order, Scope};

macro_rules! probe_add_u32 {
    ($name:ident, $what:expr, |$team:ident, $p:ident, $v:ident, $to:ident| $add:expr) => {
        #[doc = concat!("`*out = ", $what, "`: `fetch_add(p on rank to, v)`.")]
        ///
        /// # Safety
        /// `bases` holds `world` entries, `rank, to < world`, `p` symmetric, `out` local.
        #[kernel]
        pub unsafe fn $name(
            _arch: &impl Arch,
            $p: *mut u32,
            out: *mut u32,
            bases: PeerTable,
            world: u32,
            rank: u32,
            $v: u32,
            to: u32,
        ) {
            // SAFETY: forwarded from the host launch.
            unsafe {
                let $team = bases.team(world, rank);
                let $to = to as usize;
                out.write($add);
            }
        }
    };
    ($name:ident, $scope:expr) => {
        probe_add_u32!(
            $name,
            concat!("AcqRel at ", stringify!($scope)),
            |team, p, v, to| team.atomic_fetch(AtomicOp::Add, p, v, to, Order::AcqRel, $scope)
        );
    };
}

probe_add_u32!(symmem_probe_atomic_add_u32_block, Scope::Block);
probe_add_u32!(symmem_probe_atomic_add_u32_device, Scope::Device);
probe_add_u32!(symmem_probe_atomic_add_u32_system, Scope::System);
probe_add_u32!(
    symmem_probe_atomic_add_u32_default,
    "the shorthand's default order and scope, which must reach a peer on another GPU",
    |team, p, v, to| team.atomic_fetch_add(p, v, to)
);
