//! [`Team`]'s block-cooperative ranges: put, get and copy of a byte range by the whole
//! block (by load and store to a peer mapped here, else through the off-node engine),
//! with their blocking forms, fence and quiet.

use super::Team;
use crate::{Scope, copy, engine};
use symmem_arch::warp::warp_size;
use symmem_arch::{Arch, LaneGroup};

impl Team<'_> {
    /// The engine's part of a block's put to off-node rank `to`: one request by thread 0
    /// where the proxy reads `src` itself (then, with `wait`, thread 0 waits until `src`
    /// may be reused), else each warp stages its share, its lanes together.
    ///
    /// # Safety
    /// As [`Team::put_nbi_block`].
    #[inline(always)]
    unsafe fn put_off_node<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        to: usize,
        wait: bool,
    ) {
        // SAFETY: forwarded from the caller (the whole block calls it alike).
        if unsafe { engine::put_by_block(dst.addr() as u64, src, n, to, wait) } {
            return;
        }
        let ((start, len), lanes) = if engine::staged() {
            // A warp stages each of its requests (`engine::post_by`), from kernel
            // memory: shares of at least `PUT_PIECE` keep the requests few, whose
            // per-request cost (the proxy's, the wire's, the target's copy) is what a
            // staged put pays (4 KiB pieces made a 1 MiB put 256 requests: 2.1 ms on an
            // H100), and a large share goes in requests of a whole slot's staging. A
            // warp's lanes store a request's bytes into host memory together: one
            // thread alone took about 5 us of a 4 KiB put's 24-26 on an H100.
            (
                engine_share(arch, n, PUT_PIECE, warp_size()),
                LaneGroup::of_warp(arch),
            )
        } else if arch.thread_id() == 0 {
            ((0, n), LaneGroup::ALONE)
        } else {
            ((0, 0), LaneGroup::ALONE)
        };
        // SAFETY: forwarded; the share is inside the range and the same for every lane
        // of a warp, which all call (the block's threads all do, from converged flow).
        unsafe {
            engine::put(
                dst.addr() as u64 + start as u64,
                src.add(start),
                len,
                to,
                wait,
                lanes,
            )
        }
    }

    /// The engine's part of a block's get from off-node rank `from`: each thread gets
    /// its share, which is in `dst` when it returns.
    ///
    /// # Safety
    /// As [`Team::get_nbi_block`].
    #[inline(always)]
    unsafe fn get_off_node<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        from: usize,
    ) {
        // SAFETY: forwarded from the caller (the whole block calls it alike).
        if unsafe { engine::get_by_block(dst, src.addr() as u64, n, from) } {
            return;
        }
        // Smaller pieces than a put's: a thread copies its reply out of the ring's host
        // memory, over the bus, at far less than it reads kernel memory, so more threads
        // share the bytes.
        let (start, len) = engine_share(arch, n, GET_PIECE, 1);
        // SAFETY: forwarded; the share is inside the range.
        unsafe { engine::get(dst.add(start), src.addr() as u64 + start as u64, len, from) }
    }

    /// Put, non-blocking: this thread's share of copying `n` bytes from local `src` to
    /// symmetric `dst` on rank `to`. On return only this thread's share is issued: a
    /// later signal or barrier orders the data before it, but `src` may still be read
    /// (an off-node engine reads it after the kernel has moved on) until
    /// [`Team::quiet_block`].
    ///
    /// # Safety
    /// Every thread of the block calls it with the same arguments; `to < world`; `dst`
    /// symmetric with `n` writable bytes on rank `to`; `src..src+n` readable and not
    /// overlapping the destination; no one else touches the destination meanwhile.
    #[inline(always)]
    pub unsafe fn put_nbi_block<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        to: usize,
    ) {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(dst, to) } {
            // SAFETY: forwarded from the caller.
            Some(d) => unsafe { copy::copy_block(arch, d, src, n) },
            // SAFETY: forwarded from the caller.
            None => unsafe { self.put_off_node(arch, dst, src, n, to, false) },
        }
    }

    /// Put: as [`Team::put_nbi_block`], then a block barrier, so on return the whole
    /// block has read `src` (it may be reused) and issued every store. Remote
    /// visibility to other ranks still needs a fence, quiet, signal or barrier.
    ///
    /// # Safety
    /// As [`Team::put_nbi_block`].
    #[inline(always)]
    pub unsafe fn put_block<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        to: usize,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe { self.put_done_block(arch, dst, src, n, to) };
        arch.sync_block();
    }

    /// This thread's share of a put that has read its part of `src` on return: copied
    /// on-node, or through the off-node engine waiting until the request is complete (the
    /// engine reads `src` after posting). What [`Team::put_block`] and
    /// [`Team::put_with_signal_block`] share.
    ///
    /// # Safety
    /// As [`Team::put_nbi_block`].
    #[inline(always)]
    pub(super) unsafe fn put_done_block<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        to: usize,
    ) {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(dst, to) } {
            // SAFETY: forwarded from the caller.
            Some(d) => unsafe { copy::copy_block(arch, d, src, n) },
            // SAFETY: forwarded from the caller.
            None => unsafe { self.put_off_node(arch, dst, src, n, to, true) },
        }
    }

    /// Get, non-blocking: this thread's share of copying `n` bytes from symmetric `src`
    /// on rank `from` to local `dst`. Only this thread's bytes are in `dst` on return.
    ///
    /// # Safety
    /// As [`Team::put_nbi_block`] with source and destination swapped (`src` symmetric,
    /// readable on rank `from`; `dst` local and writable).
    #[inline(always)]
    pub unsafe fn get_nbi_block<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        from: usize,
    ) {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(src.cast_mut(), from) } {
            // SAFETY: forwarded from the caller.
            Some(s) => unsafe { copy::copy_block(arch, dst, s, n) },
            // SAFETY: forwarded from the caller.
            None => unsafe { self.get_off_node(arch, dst, src, n, from) },
        }
    }

    /// Get: as [`Team::get_nbi_block`], then a block barrier, so on return all `n`
    /// bytes are in `dst` for every thread of the block.
    ///
    /// # Safety
    /// As [`Team::get_nbi_block`].
    #[inline(always)]
    pub unsafe fn get_block<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        from: usize,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe { self.get_nbi_block(arch, dst, src, n, from) };
        arch.sync_block();
    }

    /// Copy between two peers, non-blocking: this thread's share of moving `n` bytes
    /// from symmetric `src` on rank `from` to symmetric `dst` on rank `to`.
    ///
    /// # Safety
    /// As [`Team::put_nbi_block`], with both pointers symmetric and both ranks `< world`.
    #[inline(always)]
    pub unsafe fn copy_nbi_block<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        from: usize,
        to: usize,
    ) {
        // SAFETY: forwarded from the caller.
        let (d, s) = unsafe { (self.reach(dst, to), self.reach(src.cast_mut(), from)) };
        match (d, s) {
            // SAFETY: forwarded from the caller.
            (Some(d), Some(s)) => unsafe { copy::copy_block(arch, d, s, n) },
            // SAFETY: forwarded: the source is mapped here.
            (None, Some(s)) => unsafe { self.put_off_node(arch, dst, s, n, to, true) },
            // SAFETY: forwarded: the destination is mapped here.
            (Some(d), None) => unsafe { self.get_off_node(arch, d, src, n, from) },
            // SAFETY: forwarded from the caller.
            (None, None) => unsafe { self.relay_off_node(arch, dst, src, n, from, to) },
        }
    }

    /// A copy between two off-node peers: each thread relays its share through
    /// registers, 8 bytes at a time (an inline get, then an inline put; rare:
    /// collectives never do it).
    ///
    /// # Safety
    /// As [`Team::copy_nbi_block`].
    #[inline(always)]
    unsafe fn relay_off_node<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        from: usize,
        to: usize,
    ) {
        let (start, len) = engine_share(arch, n, GET_PIECE, 1);
        let mut done = 0;
        while done < len {
            let piece = (len - done).min(8);
            let at = (start + done) as u64;
            // SAFETY: `piece <= 8` bytes inside both ranges (forwarded).
            unsafe {
                let word = engine::load_word(src.addr() as u64 + at, piece, from);
                engine::store_words(dst.addr() as u64 + at, [word, 0], piece, to);
            }
            done += piece;
        }
    }

    /// Copy between two peers: as [`Team::copy_nbi_block`], then a block barrier.
    ///
    /// # Safety
    /// As [`Team::copy_nbi_block`].
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn copy_block<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        from: usize,
        to: usize,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe { self.copy_nbi_block(arch, dst, src, n, from, to) };
        arch.sync_block();
    }

    /// Fence: this thread's earlier puts, stores and atomics are ordered before its
    /// later ones, as seen by every rank (a system-scope fence; on every target here
    /// that also waits for the earlier stores to complete).
    ///
    /// It covers this thread's own accesses only (on AMD GPUs, its wave's): one thread
    /// fencing after a block barrier does not publish what the other threads stored.
    /// For the whole block use [`Team::quiet_block`], or
    /// [`Arch::sync_block_release`] before one thread's release.
    #[inline(always)]
    pub fn fence<A: Arch>(&self, arch: &A) {
        arch.fence(Scope::System);
    }

    /// Quiet: every put, get and store the block issued before has completed and is
    /// visible to every rank, and every thread of the block may rely on it (a
    /// system-scope fence per thread, then a block barrier: every wave waits for its
    /// own accesses before the barrier, as the block-level quiet of RCCL and rocSHMEM
    /// does). Where the world runs an off-node engine, thread 0 then waits until the
    /// engine has completed every request posted so far (every thread's, as they all
    /// passed the barrier), and a second barrier hands that on to the block. Through
    /// NVSHMEM, which completes each thread's own operations, every thread calls
    /// `nvshmem_quiet` after its fence instead, and the one barrier hands both on.
    ///
    /// Block-cooperative: every thread of the block calls it.
    #[inline(always)]
    pub fn quiet_block<A: Arch>(&self, arch: &A) {
        arch.fence(Scope::System);
        // The same for every thread of the launch: whether requests go through NVSHMEM,
        // whether the world has an engine.
        if engine::through_nvshmem() {
            engine::quiet();
            arch.sync_block();
            return;
        }
        arch.sync_block();
        if engine::running() {
            if arch.thread_id() == 0 {
                engine::quiet();
            }
            arch.sync_block();
        }
    }
}

/// The smallest piece of an engine get (and of a relay between off-node peers) a thread
/// takes.
const GET_PIECE: usize = 4 << 10;

/// The smallest share of a block's staged put a warp takes (a thread, where a warp is one
/// thread): as threads' shares, a 1 MiB put was 16 threads' requests (0.49 ms on an H200,
/// against 0.53 ms as 4 threads' whole slots).
const PUT_PIECE: usize = 64 << 10;

/// This thread's share of `n` bytes moved through the engine, as one of groups of `group`
/// consecutive threads (1: each thread alone; [`warp_size`]: each warp, whose lanes get
/// the same share): contiguous pieces of at least `min_piece` bytes (fewer, larger
/// requests), 16-byte aligned starts, taken by at most the ring's slots' worth of the
/// grid's groups: a thread with no slot waits for
/// one reading the ring in host memory over the bus, and a thousand such threads per rank
/// (a 4 MiB all-reduce's gets at 2 nodes x 2) took 444 ms on an H100, 9.8 ms with the cap.
#[inline(always)]
fn engine_share<A: Arch>(arch: &A, n: usize, min_piece: usize, group: u32) -> (usize, usize) {
    let parts = n
        .div_ceil(min_piece)
        .clamp(1, arch.block_dim().div_ceil(group) as usize)
        .min((engine::slots() / arch.grid_dim() as usize).max(1));
    let part = (arch.thread_id() / group) as usize;
    if part < parts {
        copy::share(n, copy::VECTOR_BYTES, part, parts)
    } else {
        (0, 0)
    }
}
