//! The off-node path through NVSHMEM's device library, for code objects built with it
//! (feature `nvshmem`, `sm_…` targets) in a world whose transport is NVSHMEM
//! ([`super::SYMMEM_NVSHMEM`] set): each put, get, point load and store, atomic and
//! quiet to a peer on another node is one call of NVSHMEM's device API, with the peer's
//! rank as its PE and the address's NVSHMEM alias ([`NvshmemHeap`]) as the symmetric
//! address. Nothing here waits on its own: NVSHMEM's calls return once issued (or, for
//! gets, fetches and [`quiet`], once complete), and symmem's signal waits and barriers
//! stay symmem's bounded ones.
//!
//! **Ordering**, as the transport seam documents it (`symmem::transport::Link`): every
//! atomic (a signal is one) first calls `nvshmem_fence`, so this thread's earlier puts
//! and stores to a PE are delivered before it; a put that must be complete on return
//! (`wait`) is followed by `nvshmem_quiet`; a block's quiet calls `nvshmem_quiet` on
//! every thread (NVSHMEM completes a thread's own operations), then the block barrier.
//! The ring orders a whole rank's requests to a peer; NVSHMEM orders a thread's, and
//! threads order each other through those quiets and barriers, which is what
//! `Team::quiet_block`, `put_with_signal_block` and `barrier_block` do.
//!
//! The local side of a put or get is passed as the kernel's own address: the P2P path
//! copies from and to any device memory. (NVSHMEM's IBGDA path needs local buffers it
//! registered; this was not run: no NIC is lent.)

use super::{NvshmemHeap, SYMMEM_NVSHMEM, atomic};
use crate::atomic::{AtomicInt, AtomicOp};
use crate::nvshmem as nv;
use crate::watch;
use core::ffi::{c_int, c_void};

/// The heap as NVSHMEM sees it, if the world's transport is NVSHMEM (the same answer
/// for every thread of a launch).
#[inline(always)]
pub(super) fn heap() -> Option<NvshmemHeap> {
    let h = &raw const SYMMEM_NVSHMEM;
    // SAFETY: the host writes the global before any launch of the module, and never
    // while one runs.
    let heap = unsafe { h.read_volatile() };
    (heap.alias != 0).then_some(heap)
}

impl NvshmemHeap {
    /// NVSHMEM's address of `addr..+n` in this rank's heap (the same offset in the
    /// peer's), or `None`, recorded as [`watch::REASON_UNREACHABLE`] for `peer`, where
    /// the range is not in the heap: peers expose nothing else.
    #[inline(always)]
    fn remote(&self, addr: u64, n: u64, peer: usize) -> Option<u64> {
        let offset = addr.wrapping_sub(self.heap_base);
        if offset >= self.heap_len || self.heap_len - offset < n.max(1) {
            watch::record(
                watch::REASON_UNREACHABLE,
                peer as u64,
                addr,
                self.heap_base,
                self.heap_len,
            );
            return None;
        }
        Some(self.alias + offset)
    }
}

/// NVSHMEM's PE number of `rank`: symmem's world and NVSHMEM's are formed with the same
/// ranks (`nvshmemx_set_attr_uniqueid_args(rank, …)`).
#[inline(always)]
fn pe(rank: usize) -> c_int {
    rank as c_int
}

/// Who issues a put or get: every thread of the block together (NVSHMEM's `_block`
/// calls), or one thread alone.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum By {
    /// The whole block, each thread with the same arguments, from converged control flow.
    Block,
    /// One thread.
    Thread,
}

/// A put of `n` bytes from local `src` to `addr` (this rank's copy) on `to`, by `by`;
/// with `wait`, complete (and `src` reusable) on return.
///
/// # Safety
/// `src..+n` readable until complete; with [`By::Block`], every thread of the block calls
/// it with the same arguments from converged control flow.
#[inline(always)]
pub(super) unsafe fn put(
    h: NvshmemHeap,
    addr: u64,
    src: *const u8,
    n: usize,
    to: usize,
    wait: bool,
    by: By,
) {
    let Some(dst) = h.remote(addr, n as u64, to) else {
        return;
    };
    let (dst, src, pe) = (dst as *mut c_void, src.cast(), pe(to));
    // SAFETY: NVSHMEM's symmetric address of the range on every PE; `src` and the
    // block's part forwarded from the caller.
    unsafe {
        match by {
            By::Block => nv::nvshmemx_putmem_nbi_block(dst, src, n, pe),
            By::Thread => nv::nvshmem_putmem_nbi(dst, src, n, pe),
        }
        if wait {
            nv::nvshmem_quiet();
        }
    }
}

/// A get of `n` bytes at `addr` (this rank's copy) on `from` into local `dst`, by `by`;
/// in `dst` on return (for every thread of the block, with [`By::Block`]).
///
/// # Safety
/// As [`put`]; `dst..+n` writable.
#[inline(always)]
pub(super) unsafe fn get(h: NvshmemHeap, dst: *mut u8, addr: u64, n: usize, from: usize, by: By) {
    let Some(src) = h.remote(addr, n as u64, from) else {
        return;
    };
    let (dst, src, pe) = (dst.cast(), src as *const c_void, pe(from));
    // SAFETY: as `put`.
    unsafe {
        match by {
            By::Block => nv::nvshmemx_getmem_block(dst, src, n, pe),
            By::Thread => nv::nvshmem_getmem(dst, src, n, pe),
        }
    }
}

/// The width of the next piece of a point access at `addr` with `left` bytes to go:
/// the widest of 8, 4, 2, 1 bytes that is aligned there and fits.
#[inline(always)]
fn piece(addr: u64, left: usize) -> usize {
    [8, 4, 2, 1]
        .into_iter()
        .find(|&w| left >= w && addr.is_multiple_of(w as u64))
        .unwrap_or(1)
}

/// Byte `i` of a packed point value (byte `i` in bits `8 * (i % 8)` of word `i / 8`,
/// as the ring's inline requests pack them).
#[inline(always)]
fn byte_of(words: [u64; 2], i: usize) -> u64 {
    (words[i / 8] >> (8 * (i % 8))) & 0xff
}

/// The `n <= 8` bytes at `addr` (this rank's copy) on `from`, packed (byte `i` in bits
/// `8 * i`): one `nvshmem_uintNN_g` per aligned piece; 0 if unreachable.
///
/// # Safety
/// `addr..+n` in this rank's copy of a symmetric allocation.
#[inline(always)]
pub(super) unsafe fn load_word(h: NvshmemHeap, addr: u64, n: usize, from: usize) -> u64 {
    let Some(at) = h.remote(addr, n as u64, from) else {
        return 0;
    };
    let (mut word, mut done) = (0u64, 0);
    while done < n {
        let p = at + done as u64;
        let w = piece(p, n - done);
        // SAFETY: `w` aligned bytes of the range on the peer (NVSHMEM's address).
        let v = unsafe {
            match w {
                8 => nv::nvshmem_uint64_g(p as *const u64, pe(from)),
                4 => u64::from(nv::nvshmem_uint32_g(p as *const u32, pe(from))),
                2 => u64::from(nv::nvshmem_uint16_g(p as *const u16, pe(from))),
                _ => u64::from(nv::nvshmem_uint8_g(p as *const u8, pe(from))),
            }
        };
        word |= v << (8 * done);
        done += w;
    }
    word
}

/// Stores the first `n <= 16` bytes of `words` (packed) at `addr` (this rank's copy) on
/// `to`: one `nvshmem_uintNN_p` per aligned piece.
///
/// # Safety
/// `addr..+n` in this rank's copy of a symmetric allocation.
#[inline(always)]
pub(super) unsafe fn store_words(h: NvshmemHeap, addr: u64, words: [u64; 2], n: usize, to: usize) {
    let Some(at) = h.remote(addr, n as u64, to) else {
        return;
    };
    let mut done = 0;
    while done < n {
        let p = at + done as u64;
        let w = piece(p, n - done);
        let v = (0..w).fold(0u64, |v, b| v | byte_of(words, done + b) << (8 * b));
        // SAFETY: `w` aligned bytes of the range on the peer (NVSHMEM's address).
        unsafe {
            match w {
                8 => nv::nvshmem_uint64_p(p as *mut u64, v, pe(to)),
                4 => nv::nvshmem_uint32_p(p as *mut u32, v as u32, pe(to)),
                2 => nv::nvshmem_uint16_p(p as *mut u16, v as u16, pe(to)),
                _ => nv::nvshmem_uint8_p(p as *mut u8, v as u8, pe(to)),
            }
        }
        done += w;
    }
}

/// The NVSHMEM atomics on one width of element, as unsigned bits (add, sub, exchange,
/// the bitwise operations, loads, stores and compare-and-swap do not depend on the sign;
/// min and max compare as [`AtomicInt::SIGNED`] says, through compare-and-swap:
/// NVSHMEM has no min or max).
trait Width: Copy + Eq {
    /// `nvshmem_uintNN_atomic_fetch`.
    unsafe fn fetch(p: *mut Self, pe: c_int) -> Self;
    /// `nvshmem_uintNN_atomic_set`.
    unsafe fn set(p: *mut Self, v: Self, pe: c_int);
    /// `nvshmem_uintNN_atomic_compare_swap`.
    unsafe fn compare_swap(p: *mut Self, cond: Self, v: Self, pe: c_int) -> Self;
    /// `op` (add, sub, exchange, and, or, xor) through the fetching call, or the
    /// non-fetching one where `reply` is false (then the result is meaningless).
    unsafe fn rmw(p: *mut Self, op: AtomicOp, v: Self, pe: c_int, reply: bool) -> Self;
    /// Whether `a` is below `b`, signed or not.
    fn below(a: Self, b: Self, signed: bool) -> bool;
    /// From and to the ring's 64-bit operand.
    fn from_u64(v: u64) -> Self;
    /// As a 64-bit reply.
    fn to_u64(self) -> u64;
}

/// [`Width`] for one unsigned type and its NVSHMEM names.
macro_rules! width {
    ($t:ty, $s:ty, $fetch:ident, $set:ident, $cas:ident, $swap:ident,
     $fadd:ident, $add:ident, $fand:ident, $and:ident, $for:ident, $or:ident,
     $fxor:ident, $xor:ident) => {
        impl Width for $t {
            #[inline(always)]
            unsafe fn fetch(p: *mut Self, pe: c_int) -> Self {
                // SAFETY: the caller's.
                unsafe { nv::$fetch(p, pe) }
            }
            #[inline(always)]
            unsafe fn set(p: *mut Self, v: Self, pe: c_int) {
                // SAFETY: the caller's.
                unsafe { nv::$set(p, v, pe) }
            }
            #[inline(always)]
            unsafe fn compare_swap(p: *mut Self, cond: Self, v: Self, pe: c_int) -> Self {
                // SAFETY: the caller's.
                unsafe { nv::$cas(p, cond, v, pe) }
            }
            #[inline(always)]
            unsafe fn rmw(p: *mut Self, op: AtomicOp, v: Self, pe: c_int, reply: bool) -> Self {
                // SAFETY: the caller's.
                unsafe {
                    match (op, reply) {
                        (AtomicOp::Add, true) => nv::$fadd(p, v, pe),
                        (AtomicOp::Add, false) => {
                            nv::$add(p, v, pe);
                            0
                        }
                        (AtomicOp::Sub, true) => nv::$fadd(p, v.wrapping_neg(), pe),
                        (AtomicOp::Sub, false) => {
                            nv::$add(p, v.wrapping_neg(), pe);
                            0
                        }
                        (AtomicOp::And, true) => nv::$fand(p, v, pe),
                        (AtomicOp::And, false) => {
                            nv::$and(p, v, pe);
                            0
                        }
                        (AtomicOp::Or, true) => nv::$for(p, v, pe),
                        (AtomicOp::Or, false) => {
                            nv::$or(p, v, pe);
                            0
                        }
                        (AtomicOp::Xor, true) => nv::$fxor(p, v, pe),
                        (AtomicOp::Xor, false) => {
                            nv::$xor(p, v, pe);
                            0
                        }
                        // Exchange (min and max never come here).
                        _ => nv::$swap(p, v, pe),
                    }
                }
            }
            #[inline(always)]
            fn below(a: Self, b: Self, signed: bool) -> bool {
                if signed { (a as $s) < (b as $s) } else { a < b }
            }
            #[inline(always)]
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_u64(self) -> u64 {
                u64::from(self)
            }
        }
    };
}

width!(
    u32,
    i32,
    nvshmem_uint32_atomic_fetch,
    nvshmem_uint32_atomic_set,
    nvshmem_uint32_atomic_compare_swap,
    nvshmem_uint32_atomic_swap,
    nvshmem_uint32_atomic_fetch_add,
    nvshmem_uint32_atomic_add,
    nvshmem_uint32_atomic_fetch_and,
    nvshmem_uint32_atomic_and,
    nvshmem_uint32_atomic_fetch_or,
    nvshmem_uint32_atomic_or,
    nvshmem_uint32_atomic_fetch_xor,
    nvshmem_uint32_atomic_xor
);
width!(
    u64,
    i64,
    nvshmem_uint64_atomic_fetch,
    nvshmem_uint64_atomic_set,
    nvshmem_uint64_atomic_compare_swap,
    nvshmem_uint64_atomic_swap,
    nvshmem_uint64_atomic_fetch_add,
    nvshmem_uint64_atomic_add,
    nvshmem_uint64_atomic_fetch_and,
    nvshmem_uint64_atomic_and,
    nvshmem_uint64_atomic_fetch_or,
    nvshmem_uint64_atomic_or,
    nvshmem_uint64_atomic_fetch_xor,
    nvshmem_uint64_atomic_xor
);

/// Applies atomic `code` (an [`AtomicOp`] index, [`atomic::CAS`], [`atomic::LOAD`] or
/// [`atomic::STORE`]) on the `W` at NVSHMEM address `p` on `pe`; the old value when
/// `reply`.
///
/// # Safety
/// `p` is NVSHMEM's address of an aligned `W` of the heap.
#[inline(always)]
unsafe fn apply<W: Width>(
    code: u64,
    p: *mut W,
    operand: W,
    compare: W,
    pe: c_int,
    signed: bool,
    reply: bool,
) -> W {
    // SAFETY: forwarded from the caller.
    unsafe {
        match code {
            atomic::CAS => W::compare_swap(p, compare, operand, pe),
            atomic::LOAD => W::fetch(p, pe),
            atomic::STORE => {
                W::set(p, operand, pe);
                operand
            }
            i => match AtomicOp::ALL.get(i as usize) {
                Some(&op @ (AtomicOp::Min | AtomicOp::Max)) => {
                    let better = |v: W, cur: W| match op {
                        AtomicOp::Min => W::below(v, cur, signed),
                        _ => W::below(cur, v, signed),
                    };
                    let mut cur = W::fetch(p, pe);
                    while better(operand, cur) {
                        let seen = W::compare_swap(p, cur, operand, pe);
                        if seen == cur {
                            break;
                        }
                        cur = seen;
                    }
                    cur
                }
                Some(&op) => W::rmw(p, op, operand, pe, reply),
                None => operand,
            },
        }
    }
}

/// An atomic on the `T` at `addr` (this rank's copy) on `to`, after `nvshmem_fence`
/// (this thread's earlier puts and stores to `to` are delivered first); the old value's
/// bits when `reply`, 0 if unreachable.
///
/// # Safety
/// `addr` is an aligned `T` of this rank's copy of a symmetric allocation.
#[inline(always)]
pub(super) unsafe fn apply_atomic<T: AtomicInt>(
    h: NvshmemHeap,
    code: u64,
    addr: u64,
    operand: u64,
    compare: u64,
    to: usize,
    reply: bool,
) -> u64 {
    let Some(at) = h.remote(addr, size_of::<T>() as u64, to) else {
        return 0;
    };
    // SAFETY: NVSHMEM's address of the aligned element (forwarded).
    unsafe {
        nv::nvshmem_fence();
        if size_of::<T>() == 8 {
            apply::<u64>(
                code,
                at as *mut u64,
                operand,
                compare,
                pe(to),
                T::SIGNED,
                reply,
            )
        } else {
            let v = apply::<u32>(
                code,
                at as *mut u32,
                u32::from_u64(operand),
                u32::from_u64(compare),
                pe(to),
                T::SIGNED,
                reply,
            );
            // The ring's reply carries a 4-byte element's bits zero-extended.
            v.to_u64()
        }
    }
}

/// Waits until this thread's NVSHMEM operations are complete (`nvshmem_quiet`).
#[inline(always)]
pub(super) fn quiet() {
    // SAFETY: no requirements beyond an initialised module, which `heap()` being set
    // says.
    unsafe { nv::nvshmem_quiet() }
}
