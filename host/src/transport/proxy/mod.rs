//! The proxied transport: a proxy thread per rank drains the rank's request ring
//! (`symmem_rma::engine`) over a [`Wire`], the network between ranks' proxies.
//!
//! * **Direct.** Where the wire reaches peers' heaps one-sidedly ([`Wire::has_window`]:
//!   an MPI window over the heap, the local wire's shared-memory heaps) and this rank's
//!   heap is at the kernels' addresses, puts and gets to a peer are [`Wire::put`] and
//!   [`Wire::get`], complete at the target before the next request: that is what makes a
//!   later signal, quiet or barrier cover them.
//! * **Atomics and signals** are applied by the *target's* proxy, with the same hardware
//!   atomics the target's own kernels and on-node peers use (an MPI accumulate is atomic
//!   only with other MPI accumulates, not with a kernel's atomics on the same word). They
//!   travel as requests ([`Wire::request`]); the target replies with the old value.
//! * **Staging.** Where the wire cannot reach kernel memory (a GPU heap under an MPI
//!   that is not GPU-aware), there is no window: the device stages the bytes in the
//!   ring's host memory and puts and gets travel as requests too, applied by the target's
//!   proxy through its [`HeapAccess`] (on CUDA, copies and a one-thread atomic kernel on
//!   a stream of its own). A staged put's data is sent from its slot's staging bytes and
//!   received into the target heap's inbox ([`HeapAccess::inbox`]), from which it is
//!   applied: the proxies copy none of it themselves. [`super::ENV_ENGINE_STAGING`]
//!   forces this path.
//! * **Streaming.** Requests are pipelined: a proxy keeps up to [`IN_FLIGHT`] of its
//!   rank's requests on the wire, and a target keeps up to its heap's
//!   [`HeapAccess::capacity`] of peers' requests under way, replying to each when it is
//!   complete. Order is kept where it is owed: a target applies one peer's requests in
//!   the order they were sent (the wire delivers them in order, the heap applies them in
//!   the order started) and replies in that order, and the proxy completes its rank's
//!   tickets in order, so a ticket counted complete means every earlier one is complete
//!   at its target. A put or get through the window waits until no request is in flight,
//!   so the window path keeps its order with the requests around it.
//! * **Helping.** Where kernels run on host threads, a kernel thread that waits on the
//!   ring runs rounds of the proxy's work itself while no other thread does
//!   (`Ring::help`; the proxy is behind a lock): its own request then completes without a
//!   hand-off to the proxy's thread, which may share the rank's core (`mpirun`'s default
//!   binding). The proxy's thread still serves peers and finishes what no kernel waits
//!   for.
//!
//! A wire's error is recorded as [`Error::Engine`], sets the rank's abort word so every
//! waiting kernel ends, and the proxy serves nothing more; the world reports it from its
//! next call.
//!
//! Its parts: `engine` (the [`Link`] a world holds: the ring's layout, the proxy thread's
//! start, `quiet` and `stop`), `worker` (the proxy's state and its rounds of work: the
//! thread's loop, helping, serving peers' requests, starting and completing this rank's),
//! `message` (the wire format of requests and replies, and the checks a target makes of
//! a request) and, for tests and fuzzing, `oracle` (a heap that checks every access, and
//! `check_wire`).
//!
//! [`Error::Engine`]: crate::error::Error::Engine
//! [`HeapAccess`]: crate::backend::HeapAccess
//! [`HeapAccess::inbox`]: crate::backend::HeapAccess::inbox
//! [`HeapAccess::capacity`]: crate::backend::HeapAccess::capacity

mod engine;
mod message;
#[cfg(any(test, fuzzing))]
mod oracle;
#[cfg(test)]
mod tests;
mod worker;

// The `fuzzing` module's door to the engine wire's checks.
#[cfg(fuzzing)]
pub(crate) use oracle::check_wire;

use super::{Attach, Link};
use crate::error::Result;
use engine::Engine;

/// The network between ranks' proxies: one-sided access to peers' heaps where it has
/// it, and requests with replies between proxies.
///
/// Every method is called by this rank's proxy only, one call at a time. Up to
/// `IN_FLIGHT` (16) of this rank's requests are in flight at once; a peer receives one
/// rank's requests in the order they were sent, and answers them in that order.
pub trait Wire: Send {
    /// Whether [`Wire::put`] and [`Wire::get`] reach peers' heaps.
    fn has_window(&self) -> bool;
    /// Writes `len` bytes at `src` to byte `offset` of `peer`'s heap: complete at the
    /// target, visible to its kernels, when it returns.
    ///
    /// # Safety
    /// `src..src + len` is readable memory of this process (a kernel's buffer or the
    /// ring's inline words); `offset..offset + len` lies inside the peer's heap.
    unsafe fn put(&mut self, peer: usize, offset: u64, src: *const u8, len: usize) -> Result<()>;
    /// Reads `len` bytes at byte `offset` of `peer`'s heap into `dst`: complete when it
    /// returns.
    ///
    /// # Safety
    /// `dst..dst + len` is writable memory of this process; the range lies inside the
    /// peer's heap.
    unsafe fn get(&mut self, peer: usize, offset: u64, dst: *mut u8, len: usize) -> Result<()>;
    /// Sends request `id` (unique among those in flight) to `peer`'s proxy: `header`,
    /// then the `data_len` bytes at `data`, which the target receives as one message
    /// ([`Wire::next_request`]); its reply will be `reply_len` bytes. Returns without
    /// waiting for either; the data is sent from where it is (a staged put's slot).
    ///
    /// # Safety
    /// `data..data + data_len` is readable memory of this process that stays unchanged
    /// until [`Wire::reply`] has returned this request's reply.
    unsafe fn request(
        &mut self,
        peer: usize,
        header: Vec<u8>,
        data: *const u8,
        data_len: usize,
        reply_len: usize,
        id: u64,
    ) -> Result<()>;
    /// A reply that has arrived, with its request's id; `None` when no reply has arrived
    /// since the last call returned one.
    fn reply(&mut self) -> Result<Option<(u64, Vec<u8>)>>;
    /// Receives the next request a peer's proxy sent to this rank into `inbox`, its
    /// header then its data, and returns `(from, bytes received)`; `None` when there is
    /// none now. A request longer than `inbox` is [`Error::Engine`] naming its sender.
    ///
    /// [`Error::Engine`]: crate::error::Error::Engine
    fn next_request(&mut self, inbox: &mut [u8]) -> Result<Option<(usize, usize)>>;
    /// Sends `reply` to the request `to` sent; returns without waiting for delivery.
    fn send_reply(&mut self, to: usize, reply: Vec<u8>) -> Result<()>;
    /// Releases the wire, after every rank's proxy has stopped serving (every rank is
    /// quiet and past a barrier). With `clean` what the ranks share is freed
    /// collectively; without (this proxy failed), it is left, as a peer may never take
    /// part.
    fn close(&mut self, clean: bool);
}

/// Slots in a rank's ring (with their staging, 16 MiB of page-locked host memory a rank).
const RING_SLOTS: usize = 64;

/// A rank's requests on the wire at once, at most: enough to keep a stream of pieces
/// moving while earlier ones are applied at the target (a quarter of the ring).
pub const IN_FLIGHT: usize = 16;

/// What the proxy failed with: the peer involved, and what happened.
type Failure = (Option<usize>, String);

/// Starts a proxied transport over `wire`, which the caller made collectively (with a
/// window over `attach.heap` where its `direct` address is given): allocates the ring in
/// memory the rank's kernels reach and starts the proxy thread. What a [`Wire`]'s
/// [`super::Transport::attach`] returns.
///
/// # Errors
/// The ring's allocation, [`Error::Os`] when the thread cannot start.
///
/// [`Error::Os`]: crate::error::Error::Os
pub fn start_proxy(wire: Box<dyn Wire>, attach: Attach<'_>) -> Result<Box<dyn Link>> {
    Ok(Box::new(Engine::start(wire, attach)?))
}
