//! The proxy: the state of a rank's ring and of the requests under way, and its rounds
//! of work, run by the proxy's thread and by helping kernel threads: serving the requests
//! peers sent to this rank, and starting this rank's requests (through the wire's window,
//! or as requests to the target's proxy) and completing them in ticket order.

use super::message::{REPLY_WORDS, inline_bytes, parse, read_reply, reply_to, words_to_bytes};
use super::{Failure, IN_FLIGHT, RING_SLOTS, Wire};
use crate::backend::HeapAccess;
use crate::control::AbortWord;
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use symmem_rma::engine::{Ring, STAGING_BYTES, Slot, kind, request, state};

/// The ring and the requests under way: the proxy thread's, and the helping kernel
/// threads' while they hold its lock ([`help`]).
pub(super) struct Proxy {
    pub(super) wire: Box<dyn Wire>,
    /// Puts and gets go through the wire's window (else they are staged).
    pub(super) direct: bool,
    pub(super) ring: *mut Ring,
    pub(super) slots: *mut Slot,
    pub(super) staging: *mut u8,
    pub(super) heap: Box<dyn HeapAccess>,
    pub(super) heap_len: usize,
    pub(super) abort: AbortWord,
    pub(super) failure: Arc<Mutex<Option<Failure>>>,
    /// The next ticket to start, and the requests started and not yet completed, oldest
    /// first.
    pub(super) head: u64,
    pub(super) inflight: VecDeque<InFlight>,
    /// Peers' requests under way in the heap, oldest first: who to reply to.
    pub(super) serving: VecDeque<usize>,
    /// The proxy met an error (recorded in `failure`) and serves nothing more.
    pub(super) failed: bool,
    /// The rank was poisoned ([`Link::disown`]): none of its requests starts any more,
    /// as the memory they name may have been freed. Set under the proxy's lock.
    ///
    /// [`Link::disown`]: crate::transport::Link::disown
    pub(super) disowned: Arc<AtomicBool>,
    /// The wire is closed: nothing more may run.
    pub(super) closed: bool,
}

// SAFETY: the wire is the proxy's alone; the ring and the heap outlive the proxy (the
// engine joins it before freeing the ring, the world stops the engine before its heap).
unsafe impl Send for Proxy {}

/// A request that waits for the target's reply.
pub(super) struct InFlight {
    ticket: u64,
    /// An inline get: its data comes back as the reply's words, not staged bytes.
    inline_get: bool,
    /// The reply, once it has arrived (it completes in ticket order).
    reply: Option<Vec<u8>>,
}

pub(super) fn lock(proxy: &Mutex<Proxy>) -> std::sync::MutexGuard<'_, Proxy> {
    proxy.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the proxy thread is told ([`Engine`]'s `stop`): run, stop once nothing is in
/// flight, or stop now (a peer was lost: what is in flight may never be answered, and
/// the world waits for this thread in `finalize`; the wire closes as after a failure).
///
/// [`Engine`]: super::engine::Engine
pub(super) const RUN: u8 = 0;
pub(super) const STOP: u8 = 1;
pub(super) const ABANDON: u8 = 2;

/// The proxy thread: rounds of work until the engine stops with nothing in flight (or is
/// told to abandon what is), then the wire closes.
pub(super) fn run(proxy: &Mutex<Proxy>, stop: &AtomicU8) {
    let mut idle_since = Instant::now();
    loop {
        let (busy, settled) = {
            let mut p = lock(proxy);
            (
                p.step(true),
                p.failed || (p.inflight.is_empty() && p.serving.is_empty()),
            )
        };
        match stop.load(Ordering::Acquire) {
            STOP if settled => break,
            ABANDON => {
                // Found by the soak on emulated nodes (`fault_soak`'s fixed seed 0): a
                // survivor's `finalize` waited forever for this thread, whose request to
                // a panicked rank stayed in flight.
                lock(proxy).failed = true;
                break;
            }
            _ => {}
        }
        if busy {
            idle_since = Instant::now();
        } else if idle_since.elapsed() < Duration::from_millis(2) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    lock(proxy).close();
}

/// [`Ring::help`] where kernels run on host threads: a waiting kernel thread runs one
/// round of the proxy's work, unless another thread is running one.
///
/// # Safety
/// `context` is the address of the engine's live `Mutex<Proxy>`.
pub(super) unsafe extern "C" fn help(context: u64) {
    // SAFETY: the engine keeps the proxy alive while kernels run (the caller).
    let proxy = unsafe { &*(context as usize as *const Mutex<Proxy>) };
    if let Ok(mut p) = proxy.try_lock() {
        p.step(false);
    }
}

impl Proxy {
    /// One round: starts or finishes this rank's next request, and serves the requests
    /// peers sent here (`always_serve`, else only when this rank's own request made no
    /// progress: a helping kernel thread waits for its own); true if it did anything. An
    /// error is recorded (and the rank's abort word set) and ends the proxy's work.
    pub(super) fn step(&mut self, always_serve: bool) -> bool {
        if self.failed || self.closed {
            return false;
        }
        let step = self.progress().and_then(|progressed| {
            let served = if always_serve || !progressed {
                self.serve()?
            } else {
                false
            };
            Ok(progressed || served)
        });
        let busy = *step.as_ref().unwrap_or(&false);
        if let Err(e) = step {
            self.failed = true;
            self.fail(e);
        }
        busy
    }

    /// Closes the wire (collectively, unless the proxy failed: then what ranks share is
    /// left, as a peer may never take part); nothing runs after.
    fn close(&mut self) {
        if !self.closed {
            self.wire.close(!self.failed);
        }
        self.closed = true;
    }

    fn fail(&self, e: Error) {
        let (peer, what) = match e {
            Error::Engine { peer, what } => (peer, what),
            other => (None, other.to_string()),
        };
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert((peer, what));
        self.abort.abort(peer);
    }

    fn slot(&self, ticket: u64) -> *mut Slot {
        self.slots
            .wrapping_add((ticket % RING_SLOTS as u64) as usize)
    }

    fn staging(&self, ticket: u64) -> *mut u8 {
        self.staging
            .wrapping_add((ticket % RING_SLOTS as u64) as usize * STAGING_BYTES)
    }

    /// Serves the requests peers sent to this rank: replies to those whose heap operation
    /// finished, in the order they came, and starts new ones while the heap has room;
    /// true if it did anything.
    fn serve(&mut self) -> Result<bool> {
        let mut served = false;
        while !self.serving.is_empty() {
            let Some(done) = self.heap.finish()? else {
                break;
            };
            let to = self.serving.pop_front().expect("checked not empty");
            tracing::trace!(to, "a peer's request applied: replying");
            self.wire.send_reply(to, reply_to(done))?;
            served = true;
        }
        while self.serving.len() < self.heap.capacity() {
            let inbox = self.heap.inbox();
            let Some((from, len)) = self.wire.next_request(inbox)? else {
                break;
            };
            let message = inbox.get(..len).ok_or_else(|| Error::Engine {
                peer: Some(from),
                what: format!("a request of {len} bytes, longer than the inbox"),
            })?;
            let op = parse(message, self.heap_len, from)?;
            tracing::trace!(from, ?op, "a peer's request received");
            self.heap.start(op)?;
            self.serving.push_back(from);
            served = true;
        }
        Ok(served)
    }

    /// Takes in the replies that arrived, completes the oldest requests that have theirs
    /// (in ticket order), and starts the next ones; true if it did anything.
    fn progress(&mut self) -> Result<bool> {
        let mut progressed = false;
        while let Some((id, reply)) = self.wire.reply()? {
            let f = self
                .inflight
                .iter_mut()
                .find(|f| f.ticket == id && f.reply.is_none())
                .ok_or_else(|| Error::Engine {
                    peer: None,
                    what: format!("a reply to request {id}, which is not in flight"),
                })?;
            f.reply = Some(reply);
            progressed = true;
        }
        while self.inflight.front().is_some_and(|f| f.reply.is_some()) {
            let f = self.inflight.pop_front().expect("looked at above");
            let reply = f.reply.unwrap_or_default();
            let (words, staged) = read_reply(&reply, f.inline_get);
            self.finish(f.ticket, words, staged);
            progressed = true;
        }
        while self.start_next()? {
            progressed = true;
        }
        Ok(progressed)
    }

    /// Starts the request at `head` if its slot is full and there is room on the wire;
    /// true if it did.
    fn start_next(&mut self) -> Result<bool> {
        if self.inflight.len() >= IN_FLIGHT || self.disowned.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let head = self.head;
        let slot = self.slot(head);
        let lap = head / RING_SLOTS as u64;
        // SAFETY: the slot's turn word, read atomically.
        let turn = unsafe { AtomicU64::from_ptr(&raw mut (*slot).turn) }.load(Ordering::Acquire);
        if turn != lap * 4 + state::FULL {
            return Ok(false);
        }
        // SAFETY: FULL hands the slot to the proxy; its words were written before.
        let (req, peer, offset, local, len, operand, compare) = unsafe {
            (
                (*slot).request,
                (*slot).peer as usize,
                (*slot).offset,
                (*slot).local,
                (*slot).len,
                (*slot).operand,
                (*slot).compare,
            )
        };
        let inline = req & request::INLINE != 0;
        // Through the window where there is one and the data is not staged; otherwise the
        // request (and inline or staged data) travels to the target's proxy.
        let direct = req & request::STAGED == 0 && self.direct;
        let window = direct && matches!(request::kind(req), kind::PUT | kind::GET);
        if window && !self.inflight.is_empty() {
            // Complete in order: after every request before it.
            return Ok(false);
        }
        let words = [operand, compare];
        match request::kind(req) {
            kind::PUT if window => {
                let src = if inline {
                    words.as_ptr().cast::<u8>()
                } else {
                    local as *const u8
                };
                // SAFETY: the kernel's range (its contract), or the slot's inline words;
                // the engine's request lies in the peer's heap (the device checked it
                // against the heap's length).
                unsafe { self.wire.put(peer, offset, src, len as usize)? };
                self.finish(head, [0; 2], &[]);
            }
            kind::GET if window => {
                let mut words = [0u64; 2];
                let dst = if inline {
                    words.as_mut_ptr().cast::<u8>()
                } else {
                    local as *mut u8
                };
                // SAFETY: as above, for a writable range.
                unsafe { self.wire.get(peer, offset, dst, len as usize)? };
                self.finish(head, words, &[]);
            }
            _ => {
                let mut header = words_to_bytes(&[req, offset, len, operand, compare]);
                let put = request::kind(req) == kind::PUT;
                // A staged put's data goes from its slot's staging bytes, which the slot
                // keeps until the request completes.
                let data_len = if put && !inline {
                    (len as usize).min(STAGING_BYTES)
                } else {
                    0
                };
                if put && inline {
                    header.extend_from_slice(&inline_bytes(&words)[..(len as usize).min(16)]);
                }
                let reply_len = REPLY_WORDS * 8
                    + if request::kind(req) == kind::GET {
                        len as usize
                    } else {
                        0
                    };
                tracing::trace!(
                    ticket = head,
                    peer,
                    kind = request::kind(req),
                    len,
                    "a request sent"
                );
                // SAFETY: `data_len <= STAGING_BYTES` bytes of the slot's staging, which
                // the proxy owns (its turn is FULL) until `finish` after the reply.
                unsafe {
                    self.wire.request(
                        peer,
                        header,
                        self.staging(head),
                        data_len,
                        reply_len,
                        head,
                    )?
                };
                self.inflight.push_back(InFlight {
                    ticket: head,
                    inline_get: inline && request::kind(req) == kind::GET,
                    reply: None,
                });
            }
        }
        self.head += 1;
        Ok(true)
    }

    /// Completes ticket `ticket`: stores the reply (words, and staged bytes) and hands the
    /// slot back (DONE for a request with a reply, else FREE for the next lap), then
    /// counts it completed.
    fn finish(&self, ticket: u64, words: [u64; 2], staged: &[u8]) {
        tracing::trace!(ticket, "a request completed");
        let slot = self.slot(ticket);
        let lap = ticket / RING_SLOTS as u64;
        // SAFETY: the proxy owns the slot until it stores the new turn; the staged bytes
        // fit the slot's staging (they answer its own request).
        unsafe {
            let req = (*slot).request;
            if !staged.is_empty() {
                std::ptr::copy_nonoverlapping(
                    staged.as_ptr(),
                    self.staging(ticket),
                    staged.len().min(STAGING_BYTES),
                );
            }
            (*slot).result = words[0];
            (*slot).result_hi = words[1];
            let next = if req & request::REPLY != 0 {
                lap * 4 + state::DONE
            } else {
                (lap + 1) * 4 + state::FREE
            };
            AtomicU64::from_ptr(&raw mut (*slot).turn).store(next, Ordering::Release);
            AtomicU64::from_ptr(&raw mut (*self.ring).completed)
                .store(ticket + 1, Ordering::Release);
        }
    }
}
