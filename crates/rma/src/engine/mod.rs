//! The device end of the off-node engine: a request ring in host-mapped memory that a
//! per-rank proxy thread drains with MPI one-sided operations.
//!
//! A peer whose entry in the peer table is 0 is not mapped here (it is on another node,
//! see the host's `topology`); [`crate::Team`]'s put, get, atomics, signals and point
//! operations post a request for it to this rank's [`Ring`] instead of touching its
//! memory. The ring is found as the wait bounds are, so a user's kernel reaches off-node
//! peers without a parameter: on GPUs through a copy of its constant words in the
//! module's own memory ([`SYMMEM_ENGINE`], read without crossing the bus), on the host
//! through the control block ([`crate::watch::Control::ring`]).
//!
//! **Protocol.** A thread takes a ticket `t` from the ring's counter (an atomic add in
//! device memory); its slot is `t % capacity`, its lap `t / capacity`. Each slot's
//! `turn` word is `lap * 4 + state`: the thread waits for [`state::FREE`] of its lap,
//! fills the slot (and its staging bytes), then stores [`state::FULL`] with release
//! semantics. The proxy takes slots in ticket order, performs each request to completion
//! (put and get flushed, atomics applied by the target), then either frees the slot for
//! the next lap or, when the request has a reply, stores [`state::DONE`]; the waiting
//! thread reads the reply and frees the slot itself. After each request the proxy stores
//! the number of completed tickets in [`Ring::completed`].
//!
//! **Ordering.** Requests complete one after the other in ticket order, so everything a
//! thread posted before a signal is complete at its target before the signal is applied,
//! and [`Team::quiet_block`](crate::Team::quiet_block) only has to wait until the proxy
//! has completed every ticket taken so far.
//!
//! **Helping.** Where kernels run on host threads (the CPU backend), a thread that waits
//! on the ring runs the proxy's work itself between looks ([`Ring::help`]): the same
//! rounds, in the same ticket order, one thread at a time. Handing each request to the
//! proxy's thread instead costs two context switches where the two share a core (as
//! under `mpirun`'s default binding of a rank to one core).
//!
//! **Bounds.** Every wait here (a slot, a reply, a completion) is bounded like a signal
//! wait ([`crate::watch`]): the deadline and the abort word end it, and then every later
//! wait of the rank. A request that cannot be routed (no engine, or an address outside
//! this rank's symmetric heap, which is the only memory peers expose) is recorded as
//! [`crate::watch::REASON_UNREACHABLE`] and not sent.
//!
//! Host and device touch slot words with single atomic loads and stores only (the ring
//! is host memory on GPUs, where device read-modify-writes are not atomic for the host);
//! the ticket counter is device memory and only the device updates it.

// Here: what the rest of the crate asks of the engine (whether it runs, how it moves
// data) and the operations `Team` posts, each an inline entry and an out-of-line body
// (kept in this module: their symbols keep their names). The ring's layout and the
// request words are in `layout`, posting a request and waiting for its reply or
// completion in `posting`, and the target's side of an atomic in `proxy`.

mod layout;
mod posting;
mod proxy;
#[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
mod via_nvshmem;

#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64", doc))]
pub use layout::SYMMEM_ENGINE;
#[cfg(any(all(feature = "nvshmem", target_arch = "nvptx64"), doc))]
pub use layout::SYMMEM_NVSHMEM;
pub use layout::{
    GET_CHUNK, INLINE_BYTES, NvshmemHeap, Ring, STAGING_BYTES, Slot, atomic, atomic_code, kind,
    request, state,
};
pub use proxy::apply_atomic;

use crate::atomic::AtomicInt;
use crate::{Order, Scope};
use posting::{Posted, Request, post, post_by, ring, wait_completed};
use symmem_arch::{LaneGroup, call_outlined};

/// Whether this rank's world runs an off-node engine (the same answer for every thread
/// of a launch).
#[inline(always)]
pub(crate) fn running() -> bool {
    !cfg!(feature = "on-node") && (!ring().is_null() || through_nvshmem())
}

/// Whether this rank's off-node requests go through NVSHMEM (a module built with it, in
/// a world whose transport is NVSHMEM): then each thread completes its own in a quiet
/// ([`quiet`] on every thread), where the ring's quiet waits for the whole rank's.
#[inline(always)]
pub(crate) fn through_nvshmem() -> bool {
    #[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
    let nvshmem = via_nvshmem::heap().is_some();
    #[cfg(not(all(feature = "nvshmem", target_arch = "nvptx64")))]
    let nvshmem = false;
    nvshmem
}

/// Slots in the ring (1 without an engine): how many requests a rank has posted at once,
/// at most.
#[inline(always)]
pub(crate) fn slots() -> usize {
    let r = ring();
    if r.is_null() {
        return 1;
    }
    // SAFETY: the live ring's word, set by the host before any launch.
    (unsafe { (*r).capacity }) as usize
}

/// Whether the engine moves data by staging (the proxy cannot reach kernel memory).
/// Without an engine, false (the request will be refused by [`post`]).
#[inline(always)]
pub(crate) fn staged() -> bool {
    let r = ring();
    // SAFETY: the live ring's constant word.
    !r.is_null() && unsafe { (*r).direct } == 0
}

/// The block's put of `n` bytes from local `src` to `addr` (this rank's copy) on
/// off-node rank `to` through NVSHMEM, where the world's transport is NVSHMEM (with
/// `wait`, complete on return); false, having done nothing, otherwise.
///
/// # Safety
/// Every thread of the block calls it with the same arguments, from converged control
/// flow; `src..+n` readable until complete; `addr..+n` in this rank's copy of a
/// symmetric allocation.
#[inline(always)]
pub(crate) unsafe fn put_by_block(
    addr: u64,
    src: *const u8,
    n: usize,
    to: usize,
    wait: bool,
) -> bool {
    #[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
    if let Some(h) = via_nvshmem::heap() {
        // SAFETY: forwarded from the caller.
        unsafe { via_nvshmem::put(h, addr, src, n, to, wait, via_nvshmem::By::Block) };
        return true;
    }
    let _ = (addr, src, n, to, wait);
    false
}

/// The block's get of `n` bytes at `addr` (this rank's copy) on off-node rank `from`
/// into local `dst` through NVSHMEM, in `dst` for the whole block on return, where the
/// world's transport is NVSHMEM; false, having done nothing, otherwise.
///
/// # Safety
/// As [`put_by_block`]; `dst..+n` writable.
#[inline(always)]
pub(crate) unsafe fn get_by_block(dst: *mut u8, addr: u64, n: usize, from: usize) -> bool {
    #[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
    if let Some(h) = via_nvshmem::heap() {
        // SAFETY: forwarded from the caller.
        unsafe { via_nvshmem::get(h, dst, addr, n, from, via_nvshmem::By::Block) };
        return true;
    }
    let _ = (dst, addr, n, from);
    false
}

/// Waits until every request any thread of this rank posted so far is complete (the
/// ring's part of a quiet); returns at once without an engine.
#[inline(always)]
pub(crate) fn quiet() {
    if running() {
        // SAFETY: `quiet_ring` has no requirements.
        unsafe { call_outlined(quiet_ring, [0; 6]) };
    }
}

/// [`quiet`]'s body, out of line (see [`call_outlined`]; the arguments are unused).
#[inline(never)]
unsafe extern "C" fn quiet_ring(_: u64, _: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    #[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
    if via_nvshmem::heap().is_some() {
        via_nvshmem::quiet();
        return 0;
    }
    let r = ring();
    if r.is_null() {
        return 0;
    }
    // SAFETY: the live ring's counter.
    let taken = unsafe { u64::load((*r).tickets as *const u64, Order::Relaxed, Scope::Device) };
    if taken > 0 {
        wait_completed(r, taken);
    }
    0
}

/// An atomic on an element of an off-node peer; the old value when `reply`.
///
/// # Safety
/// `addr` is the element's address in this rank's copy of a symmetric allocation.
#[inline(always)]
pub(crate) unsafe fn atomic<T: AtomicInt>(
    code: u64,
    addr: u64,
    operand: T,
    compare: T,
    to: usize,
    reply: bool,
) -> T {
    let args = [
        code,
        addr,
        operand.to_bits(),
        compare.to_bits(),
        to as u64,
        reply as u64,
    ];
    // SAFETY: forwarded from the caller.
    T::from_bits(unsafe { call_outlined(atomic_through_ring::<T>, args) })
}

/// [`atomic`]'s body, out of line (see [`call_outlined`]): the operand and the expected
/// value as bits, the old value as bits.
///
/// # Safety
/// As [`atomic`].
#[inline(never)]
unsafe extern "C" fn atomic_through_ring<T: AtomicInt>(
    code: u64,
    addr: u64,
    operand: u64,
    compare: u64,
    to: u64,
    reply: u64,
) -> u64 {
    let reply = reply != 0;
    #[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
    if let Some(h) = via_nvshmem::heap() {
        // SAFETY: forwarded from the caller.
        return unsafe {
            via_nvshmem::apply_atomic::<T>(h, code, addr, operand, compare, to as usize, reply)
        };
    }
    let flags =
        if reply { request::REPLY } else { 0 } | if T::SIGNED { request::SIGNED } else { 0 };
    let req = Request {
        request: request::pack(kind::ATOMIC, code, size_of::<T>() as u64, flags),
        peer: to as usize,
        addr,
        local: 0,
        len: size_of::<T>() as u64,
        operand,
        compare,
    };
    // SAFETY: nothing is staged.
    let posted = unsafe { post(req, core::ptr::null(), 0) };
    match posted {
        // SAFETY: posted with REPLY; nothing staged.
        Some(t) if reply => unsafe { t.reply(core::ptr::null_mut(), 0) }.map_or(0, |w| w[0]),
        _ => 0,
    }
}

/// Reads the `n <= 8` bytes at `addr` (this rank's copy of a symmetric allocation) on
/// off-node rank `from`: one inline get, whose reply comes back in a register (byte `i`
/// in bits `8 * i`); 0 if the request could not be made.
///
/// # Safety
/// `addr..+n` in this rank's copy of a symmetric allocation, `n <= 8`.
#[inline(always)]
pub(crate) unsafe fn load_word(addr: u64, n: usize, from: usize) -> u64 {
    // SAFETY: forwarded from the caller.
    unsafe { call_outlined(load_through_ring, [addr, n as u64, from as u64, 0, 0, 0]) }
}

/// [`load_word`]'s body, out of line (see [`call_outlined`]; the last three arguments
/// are unused).
///
/// # Safety
/// As [`load_word`].
#[inline(never)]
unsafe extern "C" fn load_through_ring(
    addr: u64,
    n: u64,
    from: u64,
    _: u64,
    _: u64,
    _: u64,
) -> u64 {
    #[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
    if let Some(h) = via_nvshmem::heap() {
        // SAFETY: forwarded from the caller.
        return unsafe { via_nvshmem::load_word(h, addr, n as usize, from as usize) };
    }
    get_inline(addr, n, from as usize).map_or(0, |w| w[0])
}

/// Writes the first `n <= 16` bytes of `words` (packed as by [`pack_inline`]) to `addr`
/// (this rank's copy of a symmetric allocation) on off-node rank `to`: one inline put,
/// which needs no wait (the data travels in the slot).
///
/// # Safety
/// `addr..+n` in this rank's copy of a symmetric allocation, `n <= 16`.
#[inline(always)]
pub(crate) unsafe fn store_words(addr: u64, [lo, hi]: [u64; 2], n: usize, to: usize) {
    let args = [addr, lo, hi, n as u64, to as u64, 0];
    // SAFETY: forwarded from the caller.
    unsafe { call_outlined(store_through_ring, args) };
}

/// [`store_words`]'s body, out of line (see [`call_outlined`]; the last argument is
/// unused).
///
/// # Safety
/// As [`store_words`].
#[inline(never)]
unsafe extern "C" fn store_through_ring(
    addr: u64,
    lo: u64,
    hi: u64,
    n: u64,
    to: u64,
    _: u64,
) -> u64 {
    #[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
    if let Some(h) = via_nvshmem::heap() {
        // SAFETY: forwarded from the caller.
        unsafe { via_nvshmem::store_words(h, addr, [lo, hi], n as usize, to as usize) };
        return 0;
    }
    put_inline(addr, [lo, hi], n, to as usize);
    0
}

/// Posts a put of the first `n <= 16` bytes of `words` (packed as by [`pack_inline`]) to
/// `addr` (this rank's copy) on off-node rank `to`, the data inside the request: nothing
/// waits for it.
#[inline(always)]
fn put_inline(addr: u64, [operand, compare]: [u64; 2], n: u64, to: usize) {
    let req = Request {
        request: request::pack(kind::PUT, 0, 0, request::INLINE),
        peer: to,
        addr,
        local: 0,
        len: n,
        operand,
        compare,
    };
    // SAFETY: nothing staged, no local side: the data is in the request.
    unsafe { post(req, core::ptr::null(), 0) };
}

/// A get of the `n <= 16` bytes at `addr` (this rank's copy) on off-node rank `from`
/// whose reply carries them: its two words, packed as by [`pack_inline`]; `None` if it
/// could not be made.
#[inline(always)]
fn get_inline(addr: u64, n: u64, from: usize) -> Option<[u64; 2]> {
    let req = Request {
        request: request::pack(kind::GET, 0, 0, request::REPLY | request::INLINE),
        peer: from,
        addr,
        local: 0,
        len: n,
        operand: 0,
        compare: 0,
    };
    // SAFETY: nothing staged, no local side: the reply brings the data.
    let t = unsafe { post(req, core::ptr::null(), 0) }?;
    // SAFETY: posted with REPLY; nothing staged.
    unsafe { t.reply(core::ptr::null_mut(), 0) }
}

/// The `n <= 16` bytes at `src` as the two words of an inline request: byte `i` in bits
/// `8 * (i % 8)` of word `i / 8` (the host reads them as little-endian bytes), the rest
/// zero. Built in registers: a byte buffer on the stack would be private (scratch)
/// memory in a GPU kernel.
///
/// # Safety
/// `src..+n` readable, `n <= INLINE_BYTES`.
#[inline(always)]
unsafe fn pack_inline(src: *const u8, n: usize) -> [u64; 2] {
    let (mut lo, mut hi) = (0u64, 0u64);
    for i in 0..n {
        // SAFETY: `i < n`.
        let byte = u64::from(unsafe { src.add(i).read() });
        if i < 8 {
            lo |= byte << (8 * i);
        } else {
            hi |= byte << (8 * (i - 8));
        }
    }
    [lo, hi]
}

/// Writes the first `n <= 16` bytes of an inline reply (packed as by [`pack_inline`]) to
/// `dst`.
///
/// # Safety
/// `dst..+n` writable, `n <= INLINE_BYTES`.
#[inline(always)]
unsafe fn unpack_inline([lo, hi]: [u64; 2], dst: *mut u8, n: usize) {
    for i in 0..n {
        let byte = if i < 8 {
            lo >> (8 * i)
        } else {
            hi >> (8 * (i - 8))
        };
        // SAFETY: `i < n`.
        unsafe { dst.add(i).write(byte as u8) };
    }
}

/// A put of `n` bytes from local `src` to the element range at `addr` (this rank's copy)
/// on off-node rank `to`, by the group `lanes` (one thread: [`LaneGroup::ALONE`]): where the
/// data is staged, every lane stages a share of each request ([`post_by`]); otherwise the
/// first lane alone posts. With `wait`, returns once `src` may be reused.
///
/// # Safety
/// `src..+n` readable (and unchanged until the request completes unless `wait`);
/// `addr..+n` in this rank's copy of a symmetric allocation; every lane of `lanes` calls
/// it with the same arguments, from converged control flow.
#[inline(always)]
pub(crate) unsafe fn put(
    addr: u64,
    src: *const u8,
    n: usize,
    to: usize,
    wait: bool,
    lanes: LaneGroup,
) {
    let args = [
        addr,
        src.addr() as u64,
        n as u64,
        to as u64,
        wait as u64,
        lanes.to_word(),
    ];
    // SAFETY: forwarded from the caller.
    unsafe { call_outlined(put_through_ring, args) };
}

/// [`put`]'s body, out of line (see [`call_outlined`]; `lanes` is [`LaneGroup::to_word`]'s).
///
/// # Safety
/// As [`put`].
#[inline(never)]
unsafe extern "C" fn put_through_ring(
    addr: u64,
    src: u64,
    n: u64,
    to: u64,
    wait: u64,
    lanes: u64,
) -> u64 {
    let (src, n, to, wait) = (src as *const u8, n as usize, to as usize, wait != 0);
    // SAFETY: made by `put` on this thread.
    let lanes = unsafe { LaneGroup::from_word(lanes) };
    if n == 0 {
        return 0;
    }
    #[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
    if let Some(h) = via_nvshmem::heap() {
        if lanes.is_first() {
            // SAFETY: forwarded from the caller.
            unsafe { via_nvshmem::put(h, addr, src, n, to, wait, via_nvshmem::By::Thread) };
        }
        return 0;
    }
    let base = Request {
        request: request::pack(kind::PUT, 0, 0, 0),
        peer: to,
        addr,
        local: 0,
        len: n as u64,
        operand: 0,
        compare: 0,
    };
    if !staged() || n <= INLINE_BYTES {
        // One request that no lane stages: the first lane's alone.
        if !lanes.is_first() {
            return 0;
        }
        if n <= INLINE_BYTES {
            // SAFETY: `n` readable bytes.
            put_inline(addr, unsafe { pack_inline(src, n) }, n as u64, to);
            return 0;
        }
        let req = Request {
            local: src.addr() as u64,
            ..base
        };
        // SAFETY: forwarded: the proxy reads `src` directly.
        if let Some(t) = unsafe { post(req, core::ptr::null(), 0) }
            && wait
        {
            t.complete();
        }
        return 0;
    }
    let mut done = 0;
    while done < n {
        let len = (n - done).min(STAGING_BYTES);
        let req = Request {
            request: base.request | request::STAGED,
            addr: addr + done as u64,
            len: len as u64,
            ..base
        };
        // SAFETY: `len <= STAGING_BYTES` readable bytes at `src + done`; the group's
        // lanes all run this loop alike (same arguments, and `post_by`'s outcome is the
        // group's).
        if let Posted::Failed = unsafe { post_by(lanes, req, src.add(done), len) } {
            return 0;
        }
        done += len;
    }
    0
}

/// One thread's get of `n` bytes from the element range at `addr` (this rank's copy) on
/// off-node rank `from` into local `dst`; the bytes are in `dst` on return.
///
/// # Safety
/// `dst..+n` writable; `addr..+n` in this rank's copy of a symmetric allocation.
#[inline(always)]
pub(crate) unsafe fn get(dst: *mut u8, addr: u64, n: usize, from: usize) {
    let args = [dst.addr() as u64, addr, n as u64, from as u64, 0, 0];
    // SAFETY: forwarded from the caller.
    unsafe { call_outlined(get_through_ring, args) };
}

/// [`get`]'s body, out of line (see [`call_outlined`]; the last two arguments are
/// unused).
///
/// # Safety
/// As [`get`].
#[inline(never)]
unsafe extern "C" fn get_through_ring(
    dst: u64,
    addr: u64,
    n: u64,
    from: u64,
    _: u64,
    _: u64,
) -> u64 {
    let (dst, n, from) = (dst as *mut u8, n as usize, from as usize);
    if n == 0 {
        return 0;
    }
    #[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
    if let Some(h) = via_nvshmem::heap() {
        // SAFETY: forwarded from the caller.
        unsafe { via_nvshmem::get(h, dst, addr, n, from, via_nvshmem::By::Thread) };
        return 0;
    }
    let base = Request {
        request: request::pack(kind::GET, 0, 0, request::REPLY),
        peer: from,
        addr,
        local: 0,
        len: n as u64,
        operand: 0,
        compare: 0,
    };
    if n <= INLINE_BYTES {
        if let Some(words) = get_inline(addr, n as u64, from) {
            // SAFETY: `n <= 16` writable bytes.
            unsafe { unpack_inline(words, dst, n) };
        }
        return 0;
    }
    if !staged() {
        let req = Request {
            local: dst.addr() as u64,
            ..base
        };
        // SAFETY: the proxy writes `dst` directly before it replies.
        if let Some(t) = unsafe { post(req, core::ptr::null(), 0) } {
            // SAFETY: posted with REPLY; nothing staged.
            unsafe { t.reply(core::ptr::null_mut(), 0) };
        }
        return 0;
    }
    let mut done = 0;
    while done < n {
        let len = (n - done).min(GET_CHUNK);
        let req = Request {
            request: base.request | request::STAGED,
            addr: addr + done as u64,
            len: len as u64,
            ..base
        };
        // SAFETY: nothing staged on the way out.
        let Some(t) = (unsafe { post(req, core::ptr::null(), 0) }) else {
            return 0;
        };
        // SAFETY: posted with REPLY; `len` staged bytes come back into `dst + done`.
        if unsafe { t.reply(dst.add(done), len) }.is_none() {
            return 0;
        }
        done += len;
    }
    0
}
