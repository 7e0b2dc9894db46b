//! Posting a request to the ring and waiting on it: finding this rank's ring, the bounded
//! waits (which help the proxy where kernels run on host threads), taking a ticket and
//! filling its slot alone or as a group of lanes ([`post`], [`post_by`]), and a
//! [`Ticket`]'s reply and completion.

#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64", doc))]
use super::SYMMEM_ENGINE;
// What the documentation below names.
#[cfg(doc)]
use super::request;
use super::{Ring, STAGING_BYTES, Slot, state};
use crate::atomic::{AtomicInt, AtomicOp};
use crate::watch::{self, Watch};
use crate::{Order, Scope};
use symmem_arch::LaneGroup;

/// This rank's ring, if the world runs an engine: on GPUs the module's copy
/// ([`SYMMEM_ENGINE`]), on the host the one the control block names.
#[inline(always)]
pub(super) fn ring() -> *const Ring {
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
pub(super) fn wait_completed(r: *const Ring, count: u64) {
    // SAFETY: the ring the proxy updates, and its word.
    let completed = unsafe { &raw const (*((*r).live as *const Ring)).completed };
    wait(r, completed, watch::NO_PEER, count, |v| v >= count);
}
