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

use crate::atomic::{AtomicInt, AtomicOp};
use crate::watch::{self, Watch};
use crate::{Order, Scope};
use symmem_arch::{LaneGroup, call_outlined};

/// A rank's request ring, written by the host when the world starts its engine.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Ring {
    /// Address of `capacity` [`Slot`]s (host-mapped memory).
    pub slots: u64,
    /// Number of slots: a power of two.
    pub capacity: u64,
    /// Address of the `u64` ticket counter (device memory; host memory on the CPU).
    pub tickets: u64,
    /// How many tickets the proxy has completed (the proxy stores it after each one).
    pub completed: u64,
    /// This rank's symmetric heap: requests carry offsets into it.
    pub heap_base: u64,
    /// The heap's length in bytes.
    pub heap_len: u64,
    /// Address of `capacity * STAGING_BYTES` staging bytes (host-mapped), slot `i`'s at
    /// `i * STAGING_BYTES`.
    pub staging: u64,
    /// Non-zero when the proxy reaches kernel memory itself (the CPU backend, or an MPI
    /// that is GPU-aware): puts and gets name the kernel's own addresses. Zero: data is
    /// staged through the slot's staging bytes.
    pub direct: u64,
    /// Non-zero where kernels run on host threads (the CPU backend): the address of an
    /// `unsafe extern "C" fn(u64)` that runs one round of the proxy's work, given
    /// [`Ring::help_context`], unless another thread is running one. The ring's waits
    /// call it, so a waiting thread completes the requests itself instead of handing
    /// them to the proxy's thread (a context switch each way where the two share a
    /// core). Zero on GPUs, whose waits never read it.
    pub help: u64,
    /// The argument [`Ring::help`] takes.
    pub help_context: u64,
    /// Address of the ring the proxy updates (its [`Ring::completed`]): this ring's own,
    /// or, in a module's copy ([`SYMMEM_ENGINE`]), the original's.
    pub live: u64,
}

// SAFETY: `repr(C)` of `u64`s only: no padding, and every bit pattern is a value.
unsafe impl bytemuck::Zeroable for Ring {}
// SAFETY: as above; `Copy` and `'static`.
unsafe impl bytemuck::Pod for Ring {}

impl Ring {
    /// No ring: every word zero (a module's [`SYMMEM_ENGINE`] until the host sets it).
    pub const NONE: Ring = Ring {
        slots: 0,
        capacity: 0,
        tickets: 0,
        completed: 0,
        heap_base: 0,
        heap_len: 0,
        staging: 0,
        direct: 0,
        help: 0,
        help_context: 0,
        live: 0,
    };
}

/// This rank's ring as a module global, on GPUs: a copy of its words (all constant but
/// [`Ring::completed`], which is read through [`Ring::live`]) that the host writes when it
/// loads the module ([`Ring::NONE`] without an engine). The ring itself is host memory,
/// and each read of it crosses the bus: the copy spares a request that many round trips
/// (reading the control block's `ring`, then the ring's words, on every operation).
///
/// Only GPU builds have it; the host's documentation shows it too.
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64", doc))]
#[unsafe(no_mangle)]
pub static mut SYMMEM_ENGINE: Ring = Ring::NONE;

/// Where NVSHMEM sees this rank's heap, for a world whose off-node transport is NVSHMEM:
/// the heap registered with NVSHMEM as symmetric memory (`nvshmemx_buffer_register_symmetric`)
/// is reached through NVSHMEM at `alias + (p - heap_base)` for every heap address `p`.
/// Every word zero: no NVSHMEM (the module global [`SYMMEM_NVSHMEM`] until the host sets
/// it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvshmemHeap {
    /// This rank's heap, as kernels address it.
    pub heap_base: u64,
    /// The heap's length in bytes.
    pub heap_len: u64,
    /// The heap's address in NVSHMEM's symmetric space (non-zero while the world runs).
    pub alias: u64,
}

// SAFETY: `repr(C)` of `u64`s only: no padding, and every bit pattern is a value.
unsafe impl bytemuck::Zeroable for NvshmemHeap {}
// SAFETY: as above; `Copy` and `'static`.
unsafe impl bytemuck::Pod for NvshmemHeap {}

impl NvshmemHeap {
    /// No NVSHMEM: every word zero.
    pub const NONE: NvshmemHeap = NvshmemHeap {
        heap_base: 0,
        heap_len: 0,
        alias: 0,
    };
}

/// This rank's heap as NVSHMEM sees it, as a module global of code objects built with
/// NVSHMEM (feature `nvshmem`, `sm_…` targets): written by the host when it loads the
/// module into a world whose transport is NVSHMEM, [`NvshmemHeap::NONE`] otherwise, so a
/// module built with NVSHMEM still runs in a world without it (through the ring, or
/// nowhere). Only such builds have it; the host's documentation shows it too.
#[cfg(any(all(feature = "nvshmem", target_arch = "nvptx64"), doc))]
#[unsafe(no_mangle)]
pub static mut SYMMEM_NVSHMEM: NvshmemHeap = NvshmemHeap::NONE;

#[cfg(all(feature = "nvshmem", target_arch = "nvptx64"))]
mod via_nvshmem;

/// One request. Field meanings per [`kind`]; see the module documentation for `turn`.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Slot {
    /// `lap * 4 + state` (see [`state`]).
    pub turn: u64,
    /// What to do: a [`request`] word.
    pub request: u64,
    /// The target rank.
    pub peer: u64,
    /// The byte offset in the target's symmetric heap.
    pub offset: u64,
    /// The local side of a put or get: a kernel address ([`Ring::direct`]), else unused
    /// (the data is in the slot's staging bytes, or inline in `operand`/`compare`).
    pub local: u64,
    /// Bytes moved by a put or get.
    pub len: u64,
    /// An atomic's operand; an inline put's first 8 bytes.
    pub operand: u64,
    /// A compare-and-swap's expected value; an inline put's second 8 bytes.
    pub compare: u64,
    /// The reply: an atomic's old value; an inline get's first 8 bytes.
    pub result: u64,
    /// An inline get's second 8 bytes.
    pub result_hi: u64,
}

/// Bytes of staging each slot owns: the largest piece one put request moves (a get's is
/// [`GET_CHUNK`]). Where the data is staged, each piece crosses the wire as a message of
/// its own, and messages this size move much faster than 64 KiB ones (`mpi_floor.c`: 5.9
/// against 3.4 GB/s on an H200's host, 4.95 against 3.41 on an H100's): a 64 MiB staged
/// put reached 0.53 of `MPI_Put` with 64 KiB pieces and 0.85 with these on the H200, 0.38
/// and 0.60-0.69 on the H100 (`BENCHMARKS.md`).
pub const STAGING_BYTES: usize = 256 << 10;
/// The largest piece one staged get requests: its reply is copied out of the ring's host
/// memory by the one thread that waits for it, and with replies of a whole slot
/// ([`STAGING_BYTES`]) a 16 MiB all-reduce at 2 nodes x 2 took 54-58 ms on an H100,
/// against 39-40 ms with these.
pub const GET_CHUNK: usize = 64 << 10;
/// Puts and gets of at most this many bytes travel inside the slot.
pub const INLINE_BYTES: usize = 16;

/// The states of a slot's `turn` word (added to `lap * 4`).
pub mod state {
    /// The slot is free for this lap's ticket.
    pub const FREE: u64 = 0;
    /// The request is filled in and waits for the proxy.
    pub const FULL: u64 = 1;
    /// The proxy completed the request and its reply is in the slot.
    pub const DONE: u64 = 2;
}

/// What a request does: the low byte of its [`request`] word.
pub mod kind {
    /// Bytes from here to the target.
    pub const PUT: u64 = 1;
    /// Bytes from the target to here.
    pub const GET: u64 = 2;
    /// An atomic on one element of the target, applied by the target.
    pub const ATOMIC: u64 = 3;
}

/// The atomic a request applies (bits 8-15 of its [`request`] word): an [`AtomicOp`]'s
/// index in [`AtomicOp::ALL`], or one of these.
pub mod atomic {
    /// Compare-and-swap.
    pub const CAS: u64 = 8;
    /// Atomic load.
    pub const LOAD: u64 = 9;
    /// Atomic store.
    pub const STORE: u64 = 10;
}

/// The packing of [`Slot::request`].
pub mod request {
    /// The request wants a reply: the proxy stores [`super::state::DONE`] and the thread
    /// frees the slot.
    pub const REPLY: u64 = 1 << 32;
    /// The data is inline in the slot (`operand`/`compare` for a put, `result`/
    /// `result_hi` for a get).
    pub const INLINE: u64 = 1 << 33;
    /// The data is in the slot's staging bytes.
    pub const STAGED: u64 = 1 << 34;
    /// An atomic's element is signed (min and max compare signed).
    pub const SIGNED: u64 = 1 << 35;

    /// A request word: `kind`, the atomic code, the element size in bytes, and flags.
    pub const fn pack(kind: u64, atomic: u64, size: u64, flags: u64) -> u64 {
        kind | (atomic << 8) | (size << 16) | flags
    }
    /// The request's kind.
    pub const fn kind(word: u64) -> u64 {
        word & 0xff
    }
    /// The request's atomic code.
    pub const fn atomic(word: u64) -> u64 {
        (word >> 8) & 0xff
    }
    /// The element size of an atomic.
    pub const fn size(word: u64) -> u64 {
        (word >> 16) & 0xff
    }
}

/// The index of `op` in [`AtomicOp::ALL`].
pub const fn atomic_code(op: AtomicOp) -> u64 {
    match op {
        AtomicOp::Add => 0,
        AtomicOp::Sub => 1,
        AtomicOp::Xchg => 2,
        AtomicOp::And => 3,
        AtomicOp::Or => 4,
        AtomicOp::Xor => 5,
        AtomicOp::Min => 6,
        AtomicOp::Max => 7,
    }
}

/// This rank's ring, if the world runs an engine: on GPUs the module's copy
/// ([`SYMMEM_ENGINE`]), on the host the one the control block names.
#[inline(always)]
fn ring() -> *const Ring {
    #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
    {
        let r = &raw const SYMMEM_ENGINE;
        // SAFETY: the host writes the global before any launch of the module, and never
        // while one runs.
        if unsafe { (&raw const (*r).capacity).read_volatile() } == 0 {
            core::ptr::null()
        } else {
            r
        }
    }
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    {
        let c = watch::control();
        if c.is_null() {
            return core::ptr::null();
        }
        // SAFETY: the live control block; the host sets `ring` before any launch.
        unsafe { u64::load(&raw const (*c).ring, Order::Relaxed, Scope::System) as *const Ring }
    }
}

#[inline(always)]
fn load(p: *const u64, order: Order) -> u64 {
    // SAFETY: callers pass words of the live ring.
    unsafe { u64::load(p, order, Scope::System) }
}

#[inline(always)]
fn store(p: *mut u64, v: u64, order: Order) {
    // SAFETY: callers pass words of the live ring.
    unsafe { u64::store(p, v, order, Scope::System) }
}

/// Waits until `cond` holds for the word at `p` of ring `r` (acquire); false if the wait
/// gave up. Where kernels run on host threads, each round first helps the proxy
/// ([`Ring::help`]).
#[inline(always)]
fn wait(r: *const Ring, p: *const u64, peer: u64, want: u64, cond: impl Fn(u64) -> bool) -> bool {
    let mut w = Watch::new();
    let mut spins = 0;
    loop {
        let v = load(p, Order::Acquire);
        if cond(v) {
            return true;
        }
        #[cfg(feature = "std")]
        help(r);
        #[cfg(not(feature = "std"))]
        let _ = r;
        crate::spin(&mut spins);
        if w.give_up(spins, p, want, v, peer) {
            return false;
        }
    }
}

/// Runs a round of the proxy's work on this thread if the ring offers it
/// ([`Ring::help`]).
#[cfg(feature = "std")]
#[inline(always)]
fn help(r: *const Ring) {
    // SAFETY: the live ring's words, set by the host before any launch.
    let (help, context) = unsafe { ((*r).help, (*r).help_context) };
    if help != 0 {
        // SAFETY: the host stores the address of a function of this signature, which
        // stays valid (with its context) while kernels run.
        unsafe {
            let help: unsafe extern "C" fn(u64) = core::mem::transmute(help as usize);
            help(context);
        }
    }
}

/// A request about to be posted: what the thread fills into its slot.
#[derive(Clone, Copy)]
pub(crate) struct Request {
    pub(crate) request: u64,
    pub(crate) peer: usize,
    /// Address of the element or range in this rank's copy (translated to a heap
    /// offset by [`post`]).
    pub(crate) addr: u64,
    pub(crate) local: u64,
    pub(crate) len: u64,
    pub(crate) operand: u64,
    pub(crate) compare: u64,
}

/// A posted request.
pub(crate) struct Ticket {
    ring: *const Ring,
    ticket: u64,
    slot: *mut Slot,
}

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

/// Posts `req`, first copying `stage_len` bytes from `stage_src` into the slot's staging
/// bytes; `None` if it could not be posted (recorded in the control block).
///
/// # Safety
/// `stage_src..+stage_len` readable, `stage_len <= STAGING_BYTES`; `req`'s local side
/// valid until the request completes.
#[inline(always)]
pub(crate) unsafe fn post(req: Request, stage_src: *const u8, stage_len: usize) -> Option<Ticket> {
    // SAFETY: forwarded; a thread alone is its own group.
    match unsafe { post_by(LaneGroup::ALONE, req, stage_src, stage_len) } {
        Posted::First(t) => Some(t),
        Posted::Failed | Posted::Helped => None,
    }
}

/// What [`post_by`] did on this lane.
pub(crate) enum Posted {
    /// The group's first lane: the request is posted.
    First(Ticket),
    /// Another lane of the group: the request is posted, and the first lane holds it.
    Helped,
    /// Not posted (recorded in the control block by the first lane).
    Failed,
}

/// [`post`] by a group of lanes: the first takes the slot, every lane stages its share
/// of the bytes ([`copy::copy_lanes`](crate::copy::copy_lanes)), and the first publishes
/// the request once every lane's share is visible ([`LaneGroup::sync_release`]). A 4 KiB
/// put's staging took one thread about 5 of its 24-26 us on an H100 (traced, 16 loads in
/// flight); a warp's 32 lanes store 4 KiB into host memory in about 2 us
/// (`small_put_floor.cu`).
///
/// # Safety
/// As [`post`], and every lane of `lanes` calls it with the same arguments, from
/// converged control flow ([`LaneGroup::broadcast`]).
#[inline(always)]
pub(crate) unsafe fn post_by(
    lanes: LaneGroup,
    req: Request,
    stage_src: *const u8,
    stage_len: usize,
) -> Posted {
    let r = ring();
    let peer = req.peer as u64;
    let first = lanes.is_first();
    if r.is_null() {
        if first {
            watch::record(watch::REASON_UNREACHABLE, peer, req.addr, 0, 0);
        }
        return Posted::Failed;
    }
    // SAFETY: the live ring's fields.
    let (slots, capacity, tickets, base, len) = unsafe {
        (
            (*r).slots,
            (*r).capacity,
            (*r).tickets,
            (*r).heap_base,
            (*r).heap_len,
        )
    };
    let offset = req.addr.wrapping_sub(base);
    if offset >= len || len - offset < req.len.max(1) {
        if first {
            watch::record(watch::REASON_UNREACHABLE, peer, req.addr, base, len);
        }
        return Posted::Failed;
    }
    // The first lane takes a ticket and waits for its slot; the group learns the ticket
    // plus one (0: the wait gave up).
    let mut taken = 0;
    if first {
        // SAFETY: the counter is a live device word only the device updates.
        let ticket = unsafe {
            u64::fetch_op(
                tickets as *mut u64,
                AtomicOp::Add,
                1,
                Order::Relaxed,
                Scope::Device,
            )
        };
        let lap = ticket / capacity;
        let slot = (slots as *mut Slot).wrapping_add((ticket & (capacity - 1)) as usize);
        // SAFETY: `slot` is in the ring.
        let turn = unsafe { &raw mut (*slot).turn };
        if wait(r, turn, peer, lap * 4, |v| v == lap * 4 + state::FREE) {
            taken = ticket + 1;
        }
    }
    // SAFETY: every lane of the group is here (the caller's contract).
    let taken = unsafe { lanes.broadcast(taken) };
    if taken == 0 {
        return Posted::Failed;
    }
    let ticket = taken - 1;
    let index = ticket & (capacity - 1);
    let lap = ticket / capacity;
    let slot = (slots as *mut Slot).wrapping_add(index as usize);
    if stage_len > 0 {
        // SAFETY: the slot is the group's until the first lane stores FULL; its staging
        // bytes follow from the ring's layout; the caller bounds `stage_len`; each lane
        // writes its own share.
        unsafe {
            let staging = ((*r).staging as *mut u8).add(index as usize * STAGING_BYTES);
            if lanes.lanes() == 1 {
                crate::copy::copy_alone(staging, stage_src, stage_len);
            } else {
                crate::copy::copy_lanes(
                    lanes.lane() as usize,
                    lanes.lanes() as usize,
                    staging,
                    stage_src,
                    stage_len,
                );
            }
        }
    }
    // SAFETY: every lane of the group is here (the caller's contract). After it, the
    // first lane's release below covers every lane's staged bytes.
    unsafe { lanes.sync_release(Scope::System) };
    if !first {
        return Posted::Helped;
    }
    // SAFETY: as above: the slot's words.
    unsafe {
        store(&raw mut (*slot).request, req.request, Order::Relaxed);
        store(&raw mut (*slot).peer, peer, Order::Relaxed);
        store(&raw mut (*slot).offset, offset, Order::Relaxed);
        store(&raw mut (*slot).local, req.local, Order::Relaxed);
        store(&raw mut (*slot).len, req.len, Order::Relaxed);
        store(&raw mut (*slot).operand, req.operand, Order::Relaxed);
        store(&raw mut (*slot).compare, req.compare, Order::Relaxed);
    }
    // Everything the group did before (the staged bytes, its own stores to memory the
    // request names) is visible to the proxy once it sees FULL.
    // SAFETY: the slot's turn word.
    store(
        unsafe { &raw mut (*slot).turn },
        lap * 4 + state::FULL,
        Order::Release,
    );
    Posted::First(Ticket {
        ring: r,
        ticket,
        slot,
    })
}

impl Ticket {
    /// Waits for the proxy's reply and returns the slot's two result words, having first
    /// copied `out_len` staged bytes to `out`; frees the slot. `None` if the wait gave
    /// up.
    ///
    /// # Safety
    /// The request was posted with [`request::REPLY`]; `out..+out_len` writable,
    /// `out_len <= STAGING_BYTES`.
    #[inline(always)]
    pub(crate) unsafe fn reply(self, out: *mut u8, out_len: usize) -> Option<[u64; 2]> {
        // SAFETY: the slot of a live ring.
        let (turn, peer) = unsafe { (&raw mut (*self.slot).turn, (*self.slot).peer) };
        // SAFETY: the live ring.
        let capacity = unsafe { (*self.ring).capacity };
        let lap = self.ticket / capacity;
        if !wait(self.ring, turn, peer, lap * 4 + state::DONE, |v| {
            v == lap * 4 + state::DONE
        }) {
            return None;
        }
        // SAFETY: DONE hands the slot back to this thread; the words are the ring's.
        let words = unsafe {
            if out_len > 0 {
                let index = (self.ticket & (capacity - 1)) as usize;
                let staging = ((*self.ring).staging as *const u8).add(index * STAGING_BYTES);
                crate::copy::copy_alone(out, staging, out_len);
            }
            [
                load(&raw const (*self.slot).result, Order::Relaxed),
                load(&raw const (*self.slot).result_hi, Order::Relaxed),
            ]
        };
        store(turn, (lap + 1) * 4 + state::FREE, Order::Release);
        Some(words)
    }

    /// Waits until the proxy has completed this request (and every earlier one).
    #[inline(always)]
    pub(crate) fn complete(self) {
        wait_completed(self.ring, self.ticket + 1);
    }
}

/// Waits until the proxy has completed `count` tickets.
#[inline(always)]
fn wait_completed(r: *const Ring, count: u64) {
    // SAFETY: the ring the proxy updates, and its word.
    let completed = unsafe { &raw const (*((*r).live as *const Ring)).completed };
    wait(r, completed, watch::NO_PEER, count, |v| v >= count);
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

/// Applies atomic request `request` (an [`kind::ATOMIC`] word) with `operand` and
/// `compare` to the element at `at`, at system scope and sequentially consistent;
/// returns the old value's bits (0 for a store). The target's side of an off-node
/// atomic: its proxy runs it on the host (CPU heaps) or in a one-thread kernel (GPU
/// heaps), so it is atomic with the kernels' own atomics on the element.
///
/// # Safety
/// `at` is valid for reads and writes of the request's element size (4 or 8 bytes),
/// aligned to it, and accessed only atomically while other threads may touch it.
#[inline(always)]
pub unsafe fn apply_atomic(at: *mut u8, request: u64, operand: u64, compare: u64) -> u64 {
    /// The request on an element of type `T`.
    ///
    /// # Safety
    /// As [`apply_atomic`], for a `T`.
    #[inline(always)]
    unsafe fn on<T: AtomicInt>(at: *mut T, code: u64, operand: u64, compare: u64) -> u64 {
        let (v, o, s) = (T::from_bits(operand), Order::SeqCst, Scope::System);
        // SAFETY: forwarded from the caller.
        unsafe {
            match code {
                atomic::CAS => T::compare_exchange(at, T::from_bits(compare), v, o, s).to_bits(),
                atomic::LOAD => T::load(at, o, s).to_bits(),
                atomic::STORE => {
                    T::store(at, v, o, s);
                    0
                }
                i => match AtomicOp::ALL.get(i as usize) {
                    Some(&op) => T::fetch_op(at, op, v, o, s).to_bits(),
                    None => 0,
                },
            }
        }
    }
    let code = request::atomic(request);
    let signed = request & request::SIGNED != 0;
    // SAFETY: forwarded from the caller, for the element type the request names.
    unsafe {
        match (request::size(request), signed) {
            (4, false) => on(at.cast::<u32>(), code, operand, compare),
            (4, true) => on(at.cast::<i32>(), code, operand, compare),
            (8, true) => on(at.cast::<i64>(), code, operand, compare),
            _ => on(at.cast::<u64>(), code, operand, compare),
        }
    }
}
