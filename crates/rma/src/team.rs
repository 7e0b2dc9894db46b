//! [`Team`]: a peer-base table plus the calling rank, and every operation on it.

use crate::atomic::{AtomicInt, AtomicOp};
use crate::copy;
use crate::engine;
use crate::signal::{Cmp, SignalOp};
use crate::{Order, Scope};
use symmem_arch::warp::warp_size;
use symmem_arch::{Arch, LaneGroup};
use symmem_translate::PeerBases;

/// An element of at most 16 bytes as four 32-bit lanes, so that it stays in registers
/// on its way to or from the two words of an inline engine request (byte `i` in bits
/// `8 * (i % 8)` of word `i / 8`). Lanes rather than words: a value that meets a
/// 16-byte vector load of the on-node path keeps that load's `4 x u32` shape.
#[repr(C)]
union Lanes<T: Copy> {
    value: T,
    lanes: [u32; 4],
}

impl<T: Copy> Lanes<T> {
    /// The value whose bytes are the first `size_of::<T>()` bytes of `[lo, hi]`.
    ///
    /// # Safety
    /// `size_of::<T>() <= 16`; those bytes are a valid `T`.
    #[inline(always)]
    unsafe fn from_words([lo, hi]: [u64; 2]) -> T {
        let lanes = [lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32];
        // SAFETY: forwarded from the caller.
        unsafe { Lanes { lanes }.value }
    }

    /// `v`'s bytes as two words, zero beyond `size_of::<T>()`.
    ///
    /// # Safety
    /// `size_of::<T>() <= 16`; `T` has no padding (every byte read is initialised).
    #[inline(always)]
    unsafe fn words(v: T) -> [u64; 2] {
        let mut l = Lanes { lanes: [0; 4] };
        l.value = v;
        // SAFETY: every byte is initialised: `v`'s, then the zeros.
        let [a, b, c, d] = unsafe { l.lanes };
        [
            u64::from(a) | u64::from(b) << 32,
            u64::from(c) | u64::from(d) << 32,
        ]
    }
}

/// The ranks a kernel can reach: a [`PeerBases`] table (entry `r` is the symmetric
/// heap's address on rank `r`, mapped here) and this rank's index in it.
///
/// Every pointer argument named "symmetric" must lie in this rank's copy of the
/// allocation the table describes; the operation reaches the same offset on the peer
/// by translation. Pointers named "local" are used as they are. Ranks (`to`, `from`)
/// must be `< self.world()`: that is every unsafe method's first precondition.
///
/// **Peers on other nodes.** A peer whose table entry is 0 is not mapped here: every
/// operation below (point operations, ranges, atomics, signals, the barrier, quiet)
/// reaches it through the rank's off-node engine instead ([`crate::engine`]), with the
/// same ordering guarantees, as long as the symmetric pointers lie in the world's
/// symmetric heap (the memory peers expose). One branch on the entry picks the path.
#[derive(Clone, Copy, Debug)]
pub struct Team<'a> {
    bases: PeerBases<'a>,
    rank: usize,
}

impl<'a> Team<'a> {
    /// A team over `bases` as rank `rank`; `None` unless `rank < bases.len()`.
    #[inline(always)]
    pub fn new(bases: PeerBases<'a>, rank: usize) -> Option<Self> {
        (rank < bases.len()).then_some(Self { bases, rank })
    }

    /// A team from a kernel's arguments: the device-resident table, world size, rank.
    ///
    /// # Safety
    /// `table` points to `world` readable `u64`s that outlive `'a`, and `rank < world`.
    #[inline(always)]
    pub unsafe fn from_raw_parts(table: *const u64, world: u32, rank: u32) -> Self {
        Self {
            // SAFETY: forwarded from the caller.
            bases: unsafe { PeerBases::from_raw_parts(table, world as usize) },
            rank: rank as usize,
        }
    }

    /// This rank.
    #[inline(always)]
    pub const fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    #[inline(always)]
    pub const fn world(&self) -> usize {
        self.bases.len()
    }

    /// The peer-base table.
    #[inline(always)]
    pub const fn bases(&self) -> PeerBases<'a> {
        self.bases
    }

    /// The symmetric pointer `p` translated to rank `to`'s copy (a pointer offset).
    ///
    /// # Safety
    /// `to < self.world()`. Dereferencing the result needs `p` symmetric (see [`Team`]).
    #[inline(always)]
    pub unsafe fn translate<T>(&self, p: *mut T, to: usize) -> *mut T {
        debug_assert!(to < self.world());
        // SAFETY: `rank < world` by construction; `to < world` by the caller.
        unsafe { self.bases.remote_unchecked(p, self.rank, to) }
    }

    /// Rank `to`'s copy of symmetric `p`, or `None` when rank `to` is not mapped here
    /// (its table entry is 0: the engine reaches it).
    ///
    /// # Safety
    /// `to < self.world()`.
    #[inline(always)]
    unsafe fn reach<T>(&self, p: *mut T, to: usize) -> Option<*mut T> {
        let bases = self.bases.as_slice();
        // SAFETY: `rank < world` by construction; `to < world` by the caller.
        let (there, here) = unsafe { (*bases.get_unchecked(to), *bases.get_unchecked(self.rank)) };
        let there_too = p.wrapping_byte_offset(there.wrapping_sub(here) as isize);
        // The build for worlds on one node (feature `on-node`, loaded by no other
        // world) takes no branch: there every peer is mapped, and every table the host
        // lets a kernel take (the heap's, a buffer's, a rendezvous's, an external one,
        // which may hold no null entry there) has no 0 entry.
        if cfg!(feature = "on-node") {
            return Some(there_too);
        }
        (there != 0).then_some(there_too)
    }

    // ---- point operations -------------------------------------------------------

    /// Reads the element at symmetric `p` on rank `from` (a plain load of `T`: one
    /// 16-byte vector load for [`crate::U32x4`]).
    ///
    /// # Safety
    /// `from < world`; `p` symmetric and aligned for `T`; no concurrent write to it; `T`
    /// plain data (any bytes a valid value, as heap elements are).
    #[inline(always)]
    pub unsafe fn load<T: Copy>(&self, p: *const T, from: usize) -> T {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p.cast_mut(), from) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { q.read() },
            None if size_of::<T>() <= 16 => {
                // In registers: one word per inline get (a local buffer handed to the
                // engine would be stack memory in a GPU kernel).
                let (addr, n) = (p.addr() as u64, size_of::<T>());
                // SAFETY: the element's bytes on the peer; an unsent request gives zeros,
                // and `T` is plain data (kernel arguments and heap elements).
                unsafe {
                    let lo = engine::load_word(addr, n.min(8), from);
                    let hi = if n > 8 {
                        engine::load_word(addr + 8, n - 8, from)
                    } else {
                        0
                    };
                    Lanes::<T>::from_words([lo, hi])
                }
            }
            None => {
                let mut v = core::mem::MaybeUninit::<T>::zeroed();
                // SAFETY: a `T`'s bytes from the peer into `v`; an unsent request leaves
                // them zero, and `T` is plain data (kernel arguments and heap elements).
                unsafe {
                    engine::get(v.as_mut_ptr().cast(), p.addr() as u64, size_of::<T>(), from);
                    v.assume_init()
                }
            }
        }
    }

    /// Writes `v` to the element at symmetric `p` on rank `to` (a plain store).
    ///
    /// # Safety
    /// `to < world`; `p` symmetric and aligned for `T`; no concurrent access to it; `T`
    /// plain data without padding (its bytes travel as words to an off-node peer).
    #[inline(always)]
    pub unsafe fn store<T: Copy>(&self, p: *mut T, v: T, to: usize) {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p, to) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { q.write(v) },
            None if size_of::<T>() <= 16 => {
                // SAFETY: `T` is plain data without padding, at most 16 bytes; the
                // element's bytes go in the request.
                unsafe { engine::store_words(p.addr() as u64, Lanes::words(v), size_of::<T>(), to) }
            }
            // SAFETY: `v`'s bytes, kept until the put has read them.
            None => unsafe {
                engine::put(
                    p.addr() as u64,
                    (&raw const v).cast(),
                    size_of::<T>(),
                    to,
                    true,
                    LaneGroup::ALONE,
                )
            },
        }
    }

    /// [`Team::load`] of the `V` at symmetric `p.add(at[u])` on rank `from` for every
    /// `u`, translating `p` once: the loads of a batch are issued together, with one
    /// check of the table entry instead of one branch each.
    ///
    /// # Safety
    /// As [`Team::load`] for every `p.add(at[u])`.
    #[inline(always)]
    pub(crate) unsafe fn load_each<T: Copy, V: Copy, const N: usize>(
        &self,
        p: *const T,
        at: &[usize; N],
        from: usize,
    ) -> [V; N] {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p.cast_mut(), from) } {
            // SAFETY: forwarded from the caller.
            Some(q) => core::array::from_fn(|u| unsafe { q.add(at[u]).cast::<V>().read() }),
            // SAFETY: forwarded from the caller.
            None => core::array::from_fn(|u| unsafe { self.load(p.add(at[u]).cast::<V>(), from) }),
        }
    }

    /// [`Team::store`] of `vs[u]` at symmetric `p.add(at[u])` on rank `to` for each
    /// `u < real`, translating `p` once: the stores of a batch do not each reload the
    /// table (which the compiler must assume a store may have changed). Whole arrays
    /// and a count, not slices, so that the batch stays in registers.
    ///
    /// # Safety
    /// As [`Team::store`] for every `p.add(at[u])` with `u < real`.
    #[inline(always)]
    pub(crate) unsafe fn store_each<T: Copy, V: Copy, const N: usize>(
        &self,
        p: *mut T,
        (at, vs, real): (&[usize; N], &[V; N], usize),
        to: usize,
    ) {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p, to) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { write_each(q, (at, vs, real)) },
            None => {
                for u in 0..N {
                    if u < real {
                        // SAFETY: forwarded from the caller.
                        unsafe { self.store(p.add(at[u]).cast::<V>(), vs[u], to) }
                    }
                }
            }
        }
    }

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

    // ---- block-cooperative ranges -----------------------------------------------

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
    unsafe fn put_done_block<A: Arch>(
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

    // ---- atomics ---------------------------------------------------------------

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

    // ---- signals ------------------------------------------------------------------

    /// Updates the signal word at symmetric `sig` on rank `to` with release semantics
    /// at system scope: everything this thread did before is visible to a rank that
    /// observes the new value with an acquire wait, and so is everything the block did
    /// before an [`Arch::sync_block_release`] at [`Scope::System`] that this thread
    /// passed (a plain [`Arch::sync_block`] is not enough on AMD GPUs: the release
    /// would wait only for this thread's wave).
    ///
    /// # Safety
    /// `to < world`; `sig` symmetric, 8-aligned, accessed only atomically.
    #[inline(always)]
    pub unsafe fn signal(&self, sig: *mut u64, op: SignalOp, value: u64, to: usize) {
        // SAFETY: forwarded from the caller.
        unsafe {
            match op {
                SignalOp::Set => self.atomic_store(sig, value, to, Order::Release, Scope::System),
                SignalOp::Add => {
                    self.atomic(AtomicOp::Add, sig, value, to, Order::Release, Scope::System)
                }
            }
        }
    }

    /// Put with signal: the block puts `n` bytes from local `src` to symmetric `dst` on
    /// rank `to`, then (after [`Arch::sync_block_release`] at system scope, so every
    /// thread's stores are complete) thread 0 updates the signal at symmetric
    /// `sig` on rank `to` with release semantics. A rank that sees the update with
    /// [`Team::signal_wait_until`] sees all `n` bytes. On return `src` may be reused.
    ///
    /// # Safety
    /// As [`Team::put_nbi_block`] and [`Team::signal`]; every thread of the block calls
    /// it with the same arguments.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn put_with_signal_block<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        sig: *mut u64,
        op: SignalOp,
        value: u64,
        to: usize,
    ) {
        // Blocking towards `src` (it may be reused on return): an off-node put through the
        // engine's window is complete before the signal is posted. The soak found a
        // source freed by its caller while the proxy still read it (emulated nodes).
        // SAFETY: forwarded from the caller.
        unsafe { self.put_done_block(arch, dst, src, n, to) };
        arch.sync_block_release(Scope::System);
        if arch.thread_id() == 0 {
            // SAFETY: forwarded; the releasing barrier above completed every thread's
            // stores at system scope before this release.
            unsafe { self.signal(sig, op, value, to) };
        }
    }

    /// Waits until the local signal word at `sig` satisfies `cmp` against `value`,
    /// reading it with acquire semantics at system scope; returns the value seen. What
    /// the signalling rank did before its release update is visible afterwards.
    ///
    /// The wait is bounded (see [`crate::watch`]): if the host aborts or the deadline
    /// passes (a peer's departure does not end it: it names no peer; see
    /// [`Team::signal_wait_until_from`]), it records why in the rank's control block and returns the last value it
    /// saw, which then does not satisfy the condition; every later wait of the rank
    /// returns at once.
    ///
    /// # Safety
    /// `sig` valid, 8-aligned, accessed only atomically.
    #[inline(always)]
    pub unsafe fn signal_wait_until(&self, sig: *const u64, cmp: Cmp, value: u64) -> u64 {
        // SAFETY: forwarded from the caller.
        unsafe { self.wait_from(sig, cmp, value, crate::watch::NO_PEER) }
    }

    /// [`Team::signal_wait_until`] for a word that rank `peer` updates: the wait also
    /// gives up, promptly, once `peer` has left the world without satisfying it (see
    /// [`crate::watch`]), and a wait that gives up records `peer`.
    ///
    /// # Safety
    /// As [`Team::signal_wait_until`].
    #[inline(always)]
    pub unsafe fn signal_wait_until_from(
        &self,
        sig: *const u64,
        cmp: Cmp,
        value: u64,
        peer: usize,
    ) -> u64 {
        // SAFETY: forwarded from the caller.
        unsafe { self.wait_from(sig, cmp, value, peer as u64) }
    }

    /// [`Team::signal_wait_until`] for a word that rank `peer` updates ([`crate::watch::NO_PEER`]
    /// for none).
    ///
    /// # Safety
    /// As [`Team::signal_wait_until`].
    #[inline(always)]
    unsafe fn wait_from(&self, sig: *const u64, cmp: Cmp, value: u64, peer: u64) -> u64 {
        let mut watch = crate::watch::Watch::new();
        let mut spins = 0;
        loop {
            // SAFETY: forwarded from the caller.
            let v = unsafe { u64::load(sig, Order::Acquire, Scope::System) };
            if cmp.holds(v, value) {
                return v;
            }
            crate::spin(&mut spins);
            if watch.give_up(spins, sig, value, v, peer) {
                return v;
            }
        }
    }

    /// A barrier across every rank of the team, run by one block per rank.
    ///
    /// On return, everything any thread of the participating blocks did before the
    /// barrier (puts included) is complete and visible to every thread of them.
    /// `sig` is a symmetric array of [`crate::signal::barrier_words`]`(world)` `u64`s,
    /// zero before the first barrier and used only by barriers of this one block on
    /// every rank; word `r` counts rank `r`'s arrivals. Thread `t` signals and waits
    /// for the ranks `r ≡ t (mod block_dim)`.
    ///
    /// Returns true, on every thread of the block, when every rank arrived; false when
    /// the barrier gave up (a wait ended on a lost peer, the abort word or the deadline,
    /// here or at an earlier barrier on `sig`). After false, peers may not be in the
    /// same call at all: a kernel must not write into them (a collective whose entry
    /// barrier gave up and still wrote changed the buffer of a rank that never entered
    /// it, with no error on that rank).
    ///
    /// # Safety
    /// Every thread of the block calls it; exactly one block on every rank uses `sig`,
    /// and all of them call the same sequence of barriers on it.
    #[inline(always)]
    #[must_use = "false means peers may not be in this call: write nothing into them"]
    pub unsafe fn barrier_block<A: Arch>(&self, arch: &A, sig: *mut u64) -> bool {
        let world = self.world();
        let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
        // Only this rank ever updates its own arrival count, and only after the
        // barrier below, so every thread reads the same count here.
        // SAFETY: `sig` has `world` words; `rank < world`.
        let own = unsafe { u64::load(sig.add(self.rank), Order::Relaxed, Scope::Block) };
        if own & crate::watch::POISON != 0 {
            // This rank gave up at an earlier barrier on `sig` (its status says so): it
            // arrives no more, so its count on every peer stays at the last arrival it made
            // before it gave up, which peers may trust; waits for later ones see the poison.
            arch.sync_block();
            return false;
        }
        let arrival = own + 1;
        // Every thread's earlier work completes at system scope before any arrival.
        arch.sync_block_release(Scope::System);
        let mut r = tid;
        while r < world {
            // SAFETY: r < world; the word is symmetric. Release orders the block's
            // earlier work (through the releasing barrier above) before the arrival.
            unsafe { self.signal(sig.add(self.rank), SignalOp::Add, 1, r) };
            r += threads;
        }
        let mut r = tid;
        let mut gave_up = false;
        while r < world {
            // SAFETY: r < world.
            gave_up |= !unsafe { self.wait_arrival(sig.add(r), arrival, r) };
            r += threads;
        }
        if gave_up {
            // What this rank does after a wait that gave up is not to be trusted: its
            // arrival word on every peer says so, and their waits for a later arrival give
            // up too (this one, made before the wait, stands). On its own copy it stops
            // this rank's later barriers on `sig` from arriving (above).
            let mut p = 0;
            while p < world {
                // SAFETY: p < world; the word is symmetric. Relaxed: it orders nothing (no
                // arrival follows it).
                unsafe {
                    self.atomic(
                        AtomicOp::Or,
                        sig.add(self.rank),
                        crate::watch::POISON,
                        p,
                        Order::Relaxed,
                        Scope::System,
                    )
                };
                p += 1;
            }
        }
        arch.sync_block();
        // Whether any thread of the block gave up: each that did poisoned this rank's own
        // word too (above), before the block's barrier, so every thread reads the same.
        // SAFETY: `sig` has `world` words; `rank < world`.
        let own = unsafe { u64::load(sig.add(self.rank), Order::Relaxed, Scope::Block) };
        own & crate::watch::POISON == 0
    }

    /// A barrier's wait for rank `peer`'s arrival count at `sig` to reach `arrival`: true
    /// when it did, false when the wait gave up (see [`crate::watch`]) or the count, short
    /// of it, carries [`crate::watch::POISON`] (recorded as
    /// [`crate::watch::REASON_PEER_GAVE_UP`]).
    ///
    /// # Safety
    /// `sig` valid, 8-aligned, accessed only atomically.
    #[inline(always)]
    unsafe fn wait_arrival(&self, sig: *const u64, arrival: u64, peer: usize) -> bool {
        let mut watch = crate::watch::Watch::new();
        let mut spins = 0;
        loop {
            // SAFETY: forwarded from the caller.
            let v = unsafe { u64::load(sig, Order::Acquire, Scope::System) };
            // A peer that gave up arrives no more after it poisons its word: a count that
            // reached `arrival` was made before it gave up (the soak found lagging ranks
            // failing a barrier every peer had passed, on the poison alone).
            if v & !crate::watch::POISON >= arrival {
                return true;
            }
            if v & crate::watch::POISON != 0 {
                crate::watch::record(
                    crate::watch::REASON_PEER_GAVE_UP,
                    peer as u64,
                    sig.addr() as u64,
                    arrival,
                    v,
                );
                return false;
            }
            crate::spin(&mut spins);
            if watch.give_up(spins, sig, arrival, v, peer as u64) {
                return false;
            }
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

/// Writes `vs[u]` at `p.add(at[u])` (plain stores of `V`) for each `u < real`: a batch
/// of [`Team::store_each`] once translated, or of a thread's own memory. Whole arrays
/// and a count, not slices, so that the batch stays in registers.
///
/// # Safety
/// Every `p.add(at[u])` with `u < real` writable for a `V`, aligned for it.
#[inline(always)]
pub(crate) unsafe fn write_each<T, V: Copy, const N: usize>(
    p: *mut T,
    (at, vs, real): (&[usize; N], &[V; N], usize),
) {
    for u in 0..N {
        if u < real {
            // SAFETY: forwarded from the caller.
            unsafe { p.add(at[u]).cast::<V>().write(vs[u]) }
        }
    }
}
