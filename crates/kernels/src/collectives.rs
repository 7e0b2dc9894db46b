//! Collective entry points over `symmem_rma::collectives`. Every rank launches the
//! same kernel with the same grid and counts; `sig` is the symmetric signal array of
//! `symmem_rma::collectives::signal_words(world, grid_dim)` `u64`s, zeroed once.
//! Reductions have one kernel per (operator, type):
//! `symmem_{all_reduce_one_shot,all_reduce_two_shot,reduce_scatter}_{sum,min,max}_{f32,bf16,i32}`,
//! and the all-reduce across nodes, `symmem_all_reduce_gathered_{sum,min,max}_{f32,bf16,i32}`.

use symmem_device::{Arch, PeerTable, kernel};
use symmem_rma::Bf16;
use symmem_rma::collectives::{self, ReduceOp};
use symmem_rma::lamport;

/// All-gather of `n` bytes per rank (local `src`, symmetric `dst` of `world * n`).
///
/// # Safety
/// See `symmem_rma::collectives::all_gather`.
#[kernel]
pub unsafe fn symmem_all_gather(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    sig: *mut u64,
) {
    // SAFETY: forwarded from the host launch.
    unsafe {
        let team = bases.team(world, rank);
        collectives::all_gather(arch, &team, dst, src, n as usize, sig)
    }
}

/// All-to-all of `n` bytes per rank pair (local `src`, symmetric `dst`, `world * n`
/// each).
///
/// # Safety
/// See `symmem_rma::collectives::all_to_all`.
#[kernel]
pub unsafe fn symmem_all_to_all(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    sig: *mut u64,
) {
    // SAFETY: forwarded from the host launch.
    unsafe {
        let team = bases.team(world, rank);
        collectives::all_to_all(arch, &team, dst, src, n as usize, sig)
    }
}

/// Broadcast of `n` bytes from rank `root`'s symmetric `src` into every local `dst`.
///
/// # Safety
/// See `symmem_rma::collectives::broadcast`.
#[kernel]
pub unsafe fn symmem_broadcast(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    sig: *mut u64,
    root: u32,
) {
    // SAFETY: forwarded from the host launch.
    unsafe {
        let team = bases.team(world, rank);
        collectives::broadcast(arch, &team, dst, src, n as usize, root as usize, sig)
    }
}

macro_rules! reduction {
    ($name:ident, $body:ident, $op:expr, $t:ty) => {
        /// A reduction collective; see the `symmem_rma::collectives` function this
        /// name starts with for the buffers' roles and sizes (`count` in elements).
        ///
        /// # Safety
        /// See that function.
        #[kernel]
        pub unsafe fn $name(
            arch: &impl Arch,
            dst: *mut $t,
            src: *const $t,
            bases: PeerTable,
            world: u32,
            rank: u32,
            count: u64,
            sig: *mut u64,
        ) {
            // SAFETY: forwarded from the host launch.
            unsafe {
                let team = bases.team(world, rank);
                collectives::$body(arch, &team, $op, dst, src, count as usize, sig)
            }
        }
    };
}

macro_rules! reductions {
    ($($name:ident $body:ident $op:ident $t:ty;)*) => {
        $(reduction!($name, $body, ReduceOp::$op, $t);)*
    };
}

reductions! {
    symmem_all_reduce_one_shot_sum_f32 all_reduce_one_shot Sum f32;
    symmem_all_reduce_one_shot_min_f32 all_reduce_one_shot Min f32;
    symmem_all_reduce_one_shot_max_f32 all_reduce_one_shot Max f32;
    symmem_all_reduce_one_shot_sum_bf16 all_reduce_one_shot Sum Bf16;
    symmem_all_reduce_one_shot_min_bf16 all_reduce_one_shot Min Bf16;
    symmem_all_reduce_one_shot_max_bf16 all_reduce_one_shot Max Bf16;
    symmem_all_reduce_one_shot_sum_i32 all_reduce_one_shot Sum i32;
    symmem_all_reduce_one_shot_min_i32 all_reduce_one_shot Min i32;
    symmem_all_reduce_one_shot_max_i32 all_reduce_one_shot Max i32;
    symmem_all_reduce_two_shot_sum_f32 all_reduce_two_shot Sum f32;
    symmem_all_reduce_two_shot_min_f32 all_reduce_two_shot Min f32;
    symmem_all_reduce_two_shot_max_f32 all_reduce_two_shot Max f32;
    symmem_all_reduce_two_shot_sum_bf16 all_reduce_two_shot Sum Bf16;
    symmem_all_reduce_two_shot_min_bf16 all_reduce_two_shot Min Bf16;
    symmem_all_reduce_two_shot_max_bf16 all_reduce_two_shot Max Bf16;
    symmem_all_reduce_two_shot_sum_i32 all_reduce_two_shot Sum i32;
    symmem_all_reduce_two_shot_min_i32 all_reduce_two_shot Min i32;
    symmem_all_reduce_two_shot_max_i32 all_reduce_two_shot Max i32;
    symmem_reduce_scatter_sum_f32 reduce_scatter Sum f32;
    symmem_reduce_scatter_min_f32 reduce_scatter Min f32;
    symmem_reduce_scatter_max_f32 reduce_scatter Max f32;
    symmem_reduce_scatter_sum_bf16 reduce_scatter Sum Bf16;
    symmem_reduce_scatter_min_bf16 reduce_scatter Min Bf16;
    symmem_reduce_scatter_max_bf16 reduce_scatter Max Bf16;
    symmem_reduce_scatter_sum_i32 reduce_scatter Sum i32;
    symmem_reduce_scatter_min_i32 reduce_scatter Min i32;
    symmem_reduce_scatter_max_i32 reduce_scatter Max i32;
}

macro_rules! gathered {
    ($($name:ident $op:ident $t:ty;)*) => {$(
        /// The one-shot all-reduce across nodes: synchronises through `bases` (the heap
        /// table) and reads every rank's `src` where `sources` translates it (the
        /// off-node ranks' copies fetched here beforehand); see
        /// `symmem_rma::collectives::all_reduce_one_shot_from`.
        ///
        /// # Safety
        /// See that function.
        #[kernel]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            arch: &impl Arch,
            dst: *mut $t,
            src: *const $t,
            bases: PeerTable,
            sources: PeerTable,
            world: u32,
            rank: u32,
            count: u64,
            sig: *mut u64,
        ) {
            // SAFETY: forwarded from the host launch.
            unsafe {
                let team = bases.team(world, rank);
                let sources = sources.team(world, rank);
                collectives::all_reduce_one_shot_from(
                    arch,
                    &team,
                    &sources,
                    ReduceOp::$op,
                    dst,
                    src,
                    count as usize,
                    sig,
                )
            }
        }
    )*};
}

gathered! {
    symmem_all_reduce_gathered_sum_f32 Sum f32;
    symmem_all_reduce_gathered_min_f32 Min f32;
    symmem_all_reduce_gathered_max_f32 Max f32;
    symmem_all_reduce_gathered_sum_bf16 Sum Bf16;
    symmem_all_reduce_gathered_min_bf16 Min Bf16;
    symmem_all_reduce_gathered_max_bf16 Max Bf16;
    symmem_all_reduce_gathered_sum_i32 Sum i32;
    symmem_all_reduce_gathered_min_i32 Min i32;
    symmem_all_reduce_gathered_max_i32 Max i32;
}

macro_rules! lamport {
    ($name:ident, $t:ty) => {
        /// The barrier-free one-shot all-reduce (sum): local `dst` gets the sum of every
        /// rank's local `src` through the symmetric workspace `ws` (slots of `capacity`
        /// bytes). No signal array: the workspace's own header counts the calls.
        ///
        /// # Safety
        /// See `symmem_rma::lamport::all_reduce`.
        #[kernel]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            arch: &impl Arch,
            dst: *mut $t,
            src: *const $t,
            bases: PeerTable,
            world: u32,
            rank: u32,
            count: u64,
            ws: *mut u8,
            capacity: u64,
        ) {
            // SAFETY: forwarded from the host launch.
            unsafe {
                let team = bases.team(world, rank);
                lamport::all_reduce(arch, &team, dst, src, count as usize, ws, capacity as usize)
            }
        }
    };
}

lamport!(symmem_all_reduce_lamport_sum_f32, f32);
lamport!(symmem_all_reduce_lamport_sum_bf16, Bf16);

/// Prepares a Lamport workspace of `bytes` bytes (this rank's copy): a zero header and
/// every slot word the sentinel. Before the workspace's first call, and before any peer
/// can write into it (a barrier after it).
///
/// # Safety
/// `ws` writable for `bytes` bytes, 16-aligned, no kernel using it concurrently.
#[kernel]
pub unsafe fn symmem_lamport_reset(arch: &impl Arch, ws: *mut u8, bytes: u64) {
    let words = bytes as usize / 4;
    let header = lamport::HEADER_BYTES / 4;
    let mut w = arch.global_id();
    while w < words {
        let value = if w < header { 0 } else { lamport::SENTINEL };
        // SAFETY: w < bytes / 4.
        unsafe { ws.cast::<u32>().add(w).write(value) };
        w += arch.global_threads();
    }
}

/// A kernel that does nothing: the launch floor the small-message benchmarks measure
/// against.
#[kernel]
pub fn symmem_empty(_arch: &impl Arch) {}
