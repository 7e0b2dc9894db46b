//! The two-shot all-reduces: each rank reduces its piece of every block's share and
//! writes it into every rank's `dst` ([`all_reduce_two_shot`]); through tables of
//! registered memory ([`all_reduce_two_shot_through`]) or tables exchanged in the kernel
//! ([`all_reduce_two_shot_exchanging`]); or through a symmetric stage for memory peers
//! cannot reach ([`all_reduce_two_shot_staged`]).

use super::fold::{all_aligned, copy_my_elements, fold_my_elements, granule};
use super::{ReduceOp, Reducible, block_share, block_sig};
use crate::atomic::AtomicInt;
use crate::{Order, Scope, Team, copy::share};
use symmem_arch::Arch;

/// Two-shot all-reduce: rank `r` reduces the `r`-th piece of each block's share from
/// every rank's symmetric `src` and writes it into that piece of every rank's
/// symmetric `dst` (reduce-scatter then all-gather, fused; each element is read
/// `world` times and written `world` times in all, instead of `world²` reads).
///
/// # Safety
/// `src` and `dst` symmetric with `count` elements each, aligned, not overlapping;
/// `sig` and launches as in the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_two_shot<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    // SAFETY: forwarded; the team's own table translates `dst` and `src` for every rank.
    unsafe { all_reduce_two_shot_through(arch, team, team, team, op, dst, src, count, sig) }
}

/// [`all_reduce_two_shot`] reading rank `r`'s `src` where table `sources` translates it
/// and writing its `dst` where `destinations` does, while `team` synchronises: the
/// all-reduce of memory outside the heap that has tables of its own (registered memory,
/// `World::register` on the host), which no one stages. `dst` may be `src` (in place):
/// each element is read, on every rank, only by the thread that then writes it there.
///
/// # Safety
/// As [`all_reduce_two_shot`], but `dst` and `src` may be the same (not otherwise
/// overlapping); `sources` and `destinations` have `team`'s rank and world size and
/// translate `src` and `dst` to `count` elements for every rank, 16-byte aligned where
/// they are.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_two_shot_through<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    destinations: &Team<'_>,
    sources: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        two_shot_checked(
            arch,
            team,
            (destinations, sources),
            op,
            (dst, src, count),
            sig,
            || true,
        )
    }
}

/// [`all_reduce_two_shot_through`]'s body, which reduces only where `agreed()`, asked
/// after the opening barrier (the same answer on every thread of the block), says so;
/// the closing barrier is taken either way.
///
/// # Safety
/// As [`all_reduce_two_shot_through`] wherever `agreed()` is true.
#[inline(always)]
unsafe fn two_shot_checked<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    tables: (&Team<'_>, &Team<'_>),
    op: ReduceOp,
    (dst, src, count): (*mut T, *const T, usize),
    sig: *mut u64,
    agreed: impl Fn() -> bool,
) {
    let (world, rank) = (team.world(), team.rank());
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, count, granule::<T>());
    let (piece, plen) = share(len, granule::<T>(), rank, world);
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    let aligned = all_aligned([dst.addr(), src.addr()]);
    // SAFETY: forwarded from the caller; every index lies in the piece, inside count,
    // and vectors are used only when both sides are 16-byte aligned.
    unsafe {
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        if agreed() {
            reduce_to_every_rank(
                (tid, threads),
                tables,
                op,
                dst,
                src,
                (start + piece, plen),
                aligned,
            );
        }
        // Its outcome reaches the host through the rank's control block.
        let _ = team.barrier_block(arch, sig);
    }
}

/// Slots of the address exchange of [`all_reduce_two_shot_exchanging`]: `u64`s per block
/// of a launch over `world` ranks (a `dst` table, a `src` table and a word of each rank's
/// call, `world` entries each).
pub const fn exchange_words(world: usize, blocks: usize) -> usize {
    3 * world * blocks
}

/// [`all_reduce_two_shot_through`] where `dst`, `src` or both are plain memory with no
/// table, in a world whose ranks share one address space and device (threads of one
/// process on one GPU, or on the CPU), so that a peer dereferences this rank's pointer as
/// it is. The arguments `exchanged` names (bit 0 `dst`, bit 1 `src`) are reached through
/// tables made in the kernel: each block first stores their addresses into its entry of
/// every rank's slots in `exchange` (zeroed once), and after the opening barrier (which
/// publishes those stores) reads its own slots as their tables. The others go through
/// `destinations` and `sources`. Nothing is copied, and a call may pass other buffers
/// than the last: every call exchanges anew. With `exchanged` 0 it is
/// [`all_reduce_two_shot_through`].
///
/// Each rank also stores a word saying which arguments it exchanged in which call (the
/// block's barrier count, the same on every rank at the same call): a block whose peers'
/// words are not its own (a rank that passed symmetric or registered memory where this
/// one passed plain, whose entries are then another call's or none) writes nothing and
/// only closes the barrier, so a mismatched call never writes through a stale address
/// (the host's ledger names the rank that differs at the next agreement).
///
/// The slots are reused by the next call: a rank stores into a peer's slots only after
/// the closing barrier of its previous call, which that peer passed after its last read
/// of them.
///
/// # Safety
/// As [`all_reduce_two_shot_through`] for the arguments with tables; an exchanged
/// argument is, on every rank, this rank's memory of `count` elements that every rank's
/// kernel can dereference at this rank's address (the world's ranks share one address
/// space and device); `exchange` symmetric with [`exchange_words`]`(world, grid_dim)`
/// `u64`s, zeroed before the first launch, that only this kernel, launched with `sig`,
/// uses.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_two_shot_exchanging<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    (destinations, sources): (&Team<'_>, &Team<'_>),
    (exchange, exchanged): (*mut u64, u32),
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    count: usize,
    sig: *mut u64,
) {
    let (world, rank) = (team.world(), team.rank());
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    let slots = exchange.wrapping_add(arch.block_id() as usize * exchange_words(world, 1));
    let (dst_exchanged, src_exchanged) = (exchanged & 1 != 0, exchanged & 2 != 0);
    // SAFETY: forwarded from the caller; the slots are this block's `3 * world` words of
    // the symmetric `exchange`, each rank's own entries written by it alone, and read
    // only after the opening barrier of the two-shot below has published them. The
    // block's barrier word is only ever changed by this rank's own arrivals, after the
    // barrier that follows, so every thread reads the same count.
    unsafe {
        let call = u64::load(
            block_sig(arch, team, sig).add(rank),
            Order::Relaxed,
            Scope::Block,
        ) & !crate::watch::POISON;
        let mine = u64::from(exchanged) | call << 2;
        // Nothing exchanged (registered or symmetric memory): no slot is written or read.
        let mut to = if exchanged == 0 { world } else { tid };
        while to < world {
            if dst_exchanged {
                team.store(slots.add(rank), dst.addr() as u64, to);
            }
            if src_exchanged {
                team.store(slots.add(world + rank), src.addr() as u64, to);
            }
            team.store(slots.add(2 * world + rank), mine, to);
            to += threads;
        }
        let exchanged_dst = Team::from_raw_parts(slots, world as u32, rank as u32);
        let exchanged_src = Team::from_raw_parts(slots.add(world), world as u32, rank as u32);
        two_shot_checked(
            arch,
            team,
            (
                if dst_exchanged {
                    &exchanged_dst
                } else {
                    destinations
                },
                if src_exchanged {
                    &exchanged_src
                } else {
                    sources
                },
            ),
            op,
            (dst, src, count),
            sig,
            || exchanged == 0 || (0..world).all(|r| slots.add(2 * world + r).read() == mine),
        )
    }
}

/// [`all_reduce_two_shot`] of memory peers cannot reach, through this rank's symmetric
/// scratch `stage`: each block copies its share of local `src` into `stage`, the
/// two-shot runs in place on `stage` (every rank's piece reduced and written into every
/// rank's `stage`), and each block copies its share of the result out into local `dst`:
/// one kernel, the same two barriers, instead of a copy in and a copy out around the
/// two-shot. `dst` may be `src` (in place).
///
/// # Safety
/// `src` local with `count` readable elements, `dst` local with `count` writable ones
/// (the same as `src` or not overlapping it), `stage` symmetric with `count` elements
/// that no one else uses during the call, all aligned for `T`; `sig` and launches as in
/// the module docs.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn all_reduce_two_shot_staged<A: Arch, T: Reducible>(
    arch: &A,
    team: &Team<'_>,
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    stage: *mut T,
    count: usize,
    sig: *mut u64,
) {
    let (world, rank) = (team.world(), team.rank());
    let sig = block_sig(arch, team, sig);
    let (start, len) = block_share(arch, count, granule::<T>());
    let (piece, plen) = share(len, granule::<T>(), rank, world);
    let threads = (arch.thread_id() as usize, arch.block_dim() as usize);
    let aligned = all_aligned([dst.addr(), src.addr(), stage.addr()]);
    // SAFETY: forwarded from the caller; every index lies in this block's share, inside
    // count, and vectors are used only when all three are 16-byte aligned. The block's
    // copy in is complete and visible to its peers after the entry barrier; every
    // rank's piece of this block's share has reached this rank's stage after the
    // closing one, and no peer touches it again in this call.
    unsafe {
        copy_my_elements(threads, stage, src, (start, len), aligned);
        if !team.barrier_block(arch, sig) {
            // Peers may not be in this call: nothing goes to them.
            return;
        }
        reduce_to_every_rank(
            threads,
            (team, team),
            op,
            stage,
            stage,
            (start + piece, plen),
            aligned,
        );
        // Its outcome reaches the host through the rank's control block; after a
        // barrier that gave up, the stage is not whole: `dst` keeps what it had.
        if team.barrier_block(arch, sig) {
            copy_my_elements(threads, dst, stage, (start, len), aligned);
        }
    }
}

/// The two-shot's step: this thread's elements of `start..start + len` folded over
/// every rank's `src` (read through `sources`) and written into every rank's `dst`
/// (through `destinations`), each rank's copy in turn from this rank's own on.
///
/// # Safety
/// As [`fold_my_elements`] for `src` through `sources`; `dst` the same through
/// `destinations`, writable on every rank, and no one else's over the range; `dst` may
/// be `src` (each element is read, on every rank, only by the thread that then writes
/// it).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_to_every_rank<T: Reducible>(
    threads: (usize, usize),
    (destinations, sources): (&Team<'_>, &Team<'_>),
    op: ReduceOp,
    dst: *mut T,
    src: *const T,
    range: (usize, usize),
    aligned: bool,
) {
    let (world, rank) = (destinations.world(), destinations.rank());
    // SAFETY: forwarded from the caller.
    unsafe {
        fold_my_elements(
            threads,
            sources,
            op,
            src,
            range,
            aligned,
            |batch| {
                for k in 0..world {
                    destinations.store_each(dst, batch, (rank + k) % world);
                }
            },
            |i, v| {
                for k in 0..world {
                    destinations.store(dst.add(i), v, (rank + k) % world);
                }
            },
        );
    }
}
