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

use super::{Attach, EnginePath, Link};
use crate::backend::{DeviceRegion, HeapAccess, HeapDone, HeapOp, SharedRegion};
use crate::control::AbortWord;
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use symmem_rma::engine::{Ring, STAGING_BYTES, Slot, kind, request, state};

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

/// Words of a request message's header: request, offset, len, operand, compare.
const HEADER_WORDS: usize = 5;
/// Words of a reply's header: result, result_hi.
const REPLY_WORDS: usize = 2;

/// The ring's layout in its shared region: the ring, the slots, the staging bytes.
const RING_AT: usize = 0;
const SLOTS_AT: usize = 256;
const STAGING_AT: usize = SLOTS_AT + RING_SLOTS * size_of::<Slot>();
/// Bytes of the shared region a ring needs.
const RING_BYTES: usize = STAGING_AT + RING_SLOTS * STAGING_BYTES;

/// What the proxy failed with: the peer involved, and what happened.
type Failure = (Option<usize>, String);

/// A running proxied transport: the [`Link`] of every [`Wire`].
struct Engine {
    /// The ring's `completed` word and its slots, as the host reads them.
    completed: *const u64,
    slots: *const Slot,
    stop: Arc<AtomicU8>,
    failure: Arc<Mutex<Option<Failure>>>,
    thread: Option<JoinHandle<()>>,
    /// The proxy, shared with kernel threads that help it; kept until they are gone.
    proxy: Arc<Mutex<Proxy>>,
    /// [`Link::disown`] was called (the proxy's flag, read by [`Link::quiet`]).
    disowned: Arc<AtomicBool>,
    /// The rank's abort word: once a peer is lost, [`Link::quiet`] waits no more.
    abort: AbortWord,
    path: EnginePath,
    /// The ring's words as written at the start (`live` its device address).
    ring: Ring,
    // Field order is drop order: the proxy has stopped (`Drop`) before the ring's
    // memory goes.
    _region: Box<dyn SharedRegion>,
    _tickets: Box<dyn DeviceRegion>,
}

// SAFETY: the pointers are into `_region`, which the engine owns and frees last, read
// only atomically.
unsafe impl Send for Engine {}
// SAFETY: as above; every other field is thread-safe.
unsafe impl Sync for Engine {}

/// The ring and the requests under way: the proxy thread's, and the helping kernel
/// threads' while they hold its lock ([`help`]).
struct Proxy {
    wire: Box<dyn Wire>,
    /// Puts and gets go through the wire's window (else they are staged).
    direct: bool,
    ring: *mut Ring,
    slots: *mut Slot,
    staging: *mut u8,
    heap: Box<dyn HeapAccess>,
    heap_len: usize,
    abort: AbortWord,
    failure: Arc<Mutex<Option<Failure>>>,
    /// The next ticket to start, and the requests started and not yet completed, oldest
    /// first.
    head: u64,
    inflight: VecDeque<InFlight>,
    /// Peers' requests under way in the heap, oldest first: who to reply to.
    serving: VecDeque<usize>,
    /// The proxy met an error (recorded in `failure`) and serves nothing more.
    failed: bool,
    /// The rank was poisoned ([`Link::disown`]): none of its requests starts any more,
    /// as the memory they name may have been freed. Set under the proxy's lock.
    disowned: Arc<AtomicBool>,
    /// The wire is closed: nothing more may run.
    closed: bool,
}

// SAFETY: the wire is the proxy's alone; the ring and the heap outlive the proxy (the
// engine joins it before freeing the ring, the world stops the engine before its heap).
unsafe impl Send for Proxy {}

/// A request that waits for the target's reply.
struct InFlight {
    ticket: u64,
    /// An inline get: its data comes back as the reply's words, not staged bytes.
    inline_get: bool,
    /// The reply, once it has arrived (it completes in ticket order).
    reply: Option<Vec<u8>>,
}

impl Engine {
    /// Starts a proxied transport over `wire` (made collectively by the caller; its
    /// window, if any, over `attach.heap`): allocates and lays out the ring and starts
    /// the proxy thread.
    fn start(wire: Box<dyn Wire>, attach: Attach<'_>) -> Result<Self> {
        let Attach {
            heap,
            memory,
            kernels_on_host,
            abort,
            ..
        } = attach;
        let access = (heap.access)()?;
        let region = memory.alloc_shared(RING_BYTES)?;
        let tickets = memory.alloc_device_zeroed(size_of::<u64>())?;
        let direct = wire.has_window();
        let host = region.host_ptr();
        let device = region.device_ptr();
        let ring = host.wrapping_add(RING_AT).cast::<Ring>();
        let stop = Arc::new(AtomicU8::new(RUN));
        let failure = Arc::new(Mutex::new(None));
        let disowned = Arc::new(AtomicBool::new(false));
        let proxy = Arc::new(Mutex::new(Proxy {
            wire,
            direct,
            ring,
            slots: host.wrapping_add(SLOTS_AT).cast(),
            staging: host.wrapping_add(STAGING_AT),
            heap: access,
            heap_len: heap.len,
            abort,
            failure: failure.clone(),
            head: 0,
            inflight: VecDeque::with_capacity(IN_FLIGHT),
            serving: VecDeque::new(),
            failed: false,
            disowned: disowned.clone(),
            closed: false,
        }));
        let (help, help_context) = if kernels_on_host {
            (
                help as unsafe extern "C" fn(u64) as usize as u64,
                Arc::as_ptr(&proxy) as u64,
            )
        } else {
            (0, 0)
        };
        let words = Ring {
            slots: device + SLOTS_AT as u64,
            capacity: RING_SLOTS as u64,
            tickets: tickets.base(),
            completed: 0,
            heap_base: heap.device_base,
            heap_len: heap.len as u64,
            staging: device + STAGING_AT as u64,
            direct: u64::from(direct),
            help,
            help_context,
            live: device + RING_AT as u64,
        };
        // SAFETY: the region is zeroed, of `RING_BYTES`, and no kernel uses it yet.
        unsafe { ring.write(words) };
        let thread = std::thread::Builder::new()
            .name("symmem-proxy".into())
            .spawn({
                let (proxy, stop) = (proxy.clone(), stop.clone());
                move || run(&proxy, &stop)
            })
            .map_err(|source| Error::Os {
                what: "spawning the engine's proxy thread",
                source,
            })?;
        Ok(Self {
            // SAFETY: fields of the ring written above.
            completed: unsafe { &raw const (*ring).completed },
            slots: host.wrapping_add(SLOTS_AT).cast(),
            stop,
            failure,
            thread: Some(thread),
            proxy,
            disowned,
            abort,
            path: if direct {
                EnginePath::Window
            } else {
                EnginePath::Staged
            },
            ring: words,
            _region: region,
            _tickets: tickets,
        })
    }
}

/// Starts a proxied transport over `wire`, which the caller made collectively (with a
/// window over `attach.heap` where its `direct` address is given): allocates the ring in
/// memory the rank's kernels reach and starts the proxy thread. What a [`Wire`]'s
/// [`super::Transport::attach`] returns.
///
/// Errors: the ring's allocation, [`Error::Os`] when the thread cannot start.
pub fn start_proxy(wire: Box<dyn Wire>, attach: Attach<'_>) -> Result<Box<dyn Link>> {
    Ok(Box::new(Engine::start(wire, attach)?))
}

impl super::ModuleTransport for Engine {
    fn ring(&self) -> Option<Ring> {
        Some(self.ring)
    }
}

impl Link for Engine {
    fn device_handle(&self) -> u64 {
        self.ring.live
    }

    fn path(&self) -> EnginePath {
        self.path
    }

    fn failure(&self) -> Option<Error> {
        let failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.as_ref().map(|(peer, what)| Error::Engine {
            peer: *peer,
            what: what.clone(),
        })
    }

    /// With the device idle, every ticket taken has its slot filled, and the proxy serves
    /// tickets in order: it is done when the slot of the first ticket not completed holds
    /// no request. A disowned rank's requests that never started never will: it is done
    /// once those on the wire are answered (while its peers still serve them, before the
    /// world's last barrier: without this wait the soak hung a `finalize`, whose proxy
    /// waited for replies from peers that had stopped).
    fn quiet(&self, deadline: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(e) = self.failure() {
                return Err(e);
            }
            // A request to a lost peer is never answered: the loss is the answer (the soak
            // found survivors' barriers failing with this wait's deadline instead).
            if let Some(lost) = self.abort.read() {
                return Err(Error::PeerLost {
                    rank: lost,
                    waited: start.elapsed(),
                });
            }
            // SAFETY: live words of the ring, read atomically.
            let (done, turn) = unsafe {
                let done = AtomicU64::from_ptr(self.completed.cast_mut()).load(Ordering::Acquire);
                let slot = self.slots.add((done % RING_SLOTS as u64) as usize);
                let turn = AtomicU64::from_ptr((&raw const (*slot).turn).cast_mut());
                (done, turn.load(Ordering::Acquire))
            };
            let lap = done / RING_SLOTS as u64;
            let quiet = if self.disowned.load(Ordering::Acquire) {
                lock(&self.proxy).inflight.is_empty()
            } else {
                turn != lap * 4 + state::FULL
            };
            if quiet {
                return Ok(());
            }
            if start.elapsed() > deadline {
                return Err(Error::WaitTimedOut {
                    peer: None,
                    waited: start.elapsed(),
                    signal: 0,
                    value: done + 1,
                    seen: done,
                });
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn disown(&self) {
        // Under the lock: a window put or get the proxy (or a helping kernel thread) is
        // in the middle of has finished, and none starts after.
        let _proxy = lock(&self.proxy);
        self.disowned.store(true, Ordering::Release);
    }

    fn stop(&mut self, clean: bool) {
        if !clean {
            self.failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert((None, "stopped after a peer was lost".into()));
        }
        let how = if clean { STOP } else { ABANDON };
        self.stop.store(how, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop(false);
    }
}

fn words_to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The two words of an inline request as its 16 data bytes (little-endian, as the
/// device packs them).
fn inline_bytes(words: &[u64; 2]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&words[0].to_le_bytes());
    out[8..].copy_from_slice(&words[1].to_le_bytes());
    out
}

fn word(bytes: &[u8], i: usize) -> u64 {
    bytes
        .get(i * 8..i * 8 + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// The heap operation `message`, a request from rank `from`, asks of this rank's heap of
/// `heap_len` bytes. Every field is checked before the heap is touched: a range outside
/// the heap, a put or get of more than a slot's staging (all a device sends as a
/// request) or a put whose data is not its length, an atomic that is not an aligned 4-
/// or 8-byte element, or an unknown kind is [`Error::Engine`] naming `from`.
fn parse(message: &[u8], heap_len: usize, from: usize) -> Result<HeapOp> {
    let [req, offset, len, operand, compare] = std::array::from_fn(|i| word(message, i));
    let payload = message.get(HEADER_WORDS * 8..).unwrap_or(&[]);
    let refuse = |what: String| Error::Engine {
        peer: Some(from),
        what,
    };
    let end = offset
        .checked_add(len)
        .filter(|&end| end <= heap_len as u64);
    if end.is_none() {
        return Err(refuse(format!(
            "a request for {len} bytes at heap offset {offset:#x} is outside the heap"
        )));
    }
    let (offset, len) = (offset as usize, len as usize);
    let kind = request::kind(req);
    if matches!(kind, kind::PUT | kind::GET) && len > STAGING_BYTES {
        return Err(refuse(format!(
            "a request to move {len} bytes, more than a slot's {STAGING_BYTES} bytes of \
             staging"
        )));
    }
    match kind {
        kind::ATOMIC => {
            let size = request::size(req);
            if offset % len.max(1) != 0 || !matches!(len, 4 | 8) || size != len as u64 {
                return Err(refuse(format!(
                    "a {len}-byte atomic (element of {size} bytes) at offset {offset:#x}: not \
                     an aligned 4- or 8-byte element"
                )));
            }
            Ok(HeapOp::Atomic {
                offset,
                request: req,
                operand,
                compare,
            })
        }
        kind::PUT => {
            if payload.len() != len {
                return Err(refuse(format!(
                    "a put of {len} bytes that carries {} bytes",
                    payload.len()
                )));
            }
            Ok(HeapOp::Write {
                offset,
                at: HEADER_WORDS * 8,
                len,
            })
        }
        kind::GET => Ok(HeapOp::Read { offset, len }),
        other => Err(refuse(format!("an unknown request kind {other}"))),
    }
}

/// The reply to a request whose heap operation finished with `done`: the result words
/// (the old value of an atomic), then a get's bytes.
fn reply_to(done: HeapDone) -> Vec<u8> {
    let mut reply = words_to_bytes(&[done.old, 0]);
    reply.extend_from_slice(&done.bytes);
    reply
}

/// The result words and the staged bytes of `reply`, a target's answer to this rank's
/// request (an inline get's data, at most 16 bytes, comes back as the words). Missing
/// bytes read as zeroes.
fn read_reply(reply: &[u8], inline_get: bool) -> ([u64; 2], &[u8]) {
    let (head, data) = reply.split_at((REPLY_WORDS * 8).min(reply.len()));
    if inline_get {
        let mut inline = [0u8; 16];
        let n = data.len().min(16);
        inline[..n].copy_from_slice(&data[..n]);
        ([word(&inline, 0), word(&inline, 1)], &[])
    } else {
        ([word(head, 0), word(head, 1)], data)
    }
}

fn lock(proxy: &Mutex<Proxy>) -> std::sync::MutexGuard<'_, Proxy> {
    proxy.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the proxy thread is told ([`Engine`]'s `stop`): run, stop once nothing is in
/// flight, or stop now (a peer was lost: what is in flight may never be answered, and
/// the world waits for this thread in `finalize`; the wire closes as after a failure).
const RUN: u8 = 0;
const STOP: u8 = 1;
const ABANDON: u8 = 2;

/// The proxy thread: rounds of work until the engine stops with nothing in flight (or is
/// told to abandon what is), then the wire closes.
fn run(proxy: &Mutex<Proxy>, stop: &AtomicU8) {
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
unsafe extern "C" fn help(context: u64) {
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
    fn step(&mut self, always_serve: bool) -> bool {
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

/// A heap of `len` bytes that holds nothing and checks every access the target's side
/// makes against it (the checks [`parse`] promises to have made); every operation
/// finishes at once.
#[cfg(any(test, fuzzing))]
struct CheckedHeap {
    len: usize,
    done: VecDeque<HeapDone>,
    inbox: Vec<u8>,
}

#[cfg(any(test, fuzzing))]
impl CheckedHeap {
    fn new(len: usize) -> Self {
        Self {
            len,
            done: VecDeque::new(),
            inbox: vec![0; crate::backend::INBOX_BYTES],
        }
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(len <= STAGING_BYTES, "{len} bytes at once");
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
    }
}

#[cfg(any(test, fuzzing))]
impl HeapAccess for CheckedHeap {
    fn capacity(&self) -> usize {
        1
    }
    fn inbox(&mut self) -> &mut [u8] {
        &mut self.inbox
    }
    fn start(&mut self, op: HeapOp) -> Result<()> {
        let done = match op {
            HeapOp::Write { offset, at, len } => {
                assert!(
                    at.checked_add(len)
                        .is_some_and(|end| end <= self.inbox.len())
                );
                self.check(offset, len);
                HeapDone::default()
            }
            HeapOp::Read { offset, len } => {
                self.check(offset, len);
                HeapDone {
                    old: 0,
                    bytes: vec![0xa5; len],
                }
            }
            HeapOp::Atomic {
                offset, request, ..
            } => {
                let size = request::size(request) as usize;
                assert!(matches!(size, 4 | 8) && offset.is_multiple_of(size));
                self.check(offset, size);
                HeapDone {
                    old: u64::MAX,
                    bytes: Vec::new(),
                }
            }
        };
        self.done.push_back(done);
        Ok(())
    }
    fn finish(&mut self) -> Result<Option<HeapDone>> {
        Ok(self.done.pop_front())
    }
}

/// What a target's proxy does with `message` from rank `from`, on a heap that finishes
/// every operation at once: the reply, or the refusal.
#[cfg(any(test, fuzzing))]
fn apply(
    heap: &mut dyn HeapAccess,
    heap_len: usize,
    message: &[u8],
    from: usize,
) -> Result<Vec<u8>> {
    let inbox = heap.inbox();
    let len = message.len().min(inbox.len());
    inbox[..len].copy_from_slice(&message[..len]);
    let op = parse(&inbox[..len], heap_len, from)?;
    heap.start(op)?;
    let done = heap
        .finish()?
        .expect("the heap finishes every operation at once");
    Ok(reply_to(done))
}

/// Applies `message` from rank `from` to a heap of `heap_len` bytes and reads `reply`
/// as a target's answer, checking that a request is refused with [`Error::Engine`]
/// naming `from` or touches only the heap's bytes, a put or get at most a slot's
/// staging, and that its reply has the size the requester expects. The oracle of the
/// property tests below and of the `transport` fuzz target.
///
/// # Panics
/// Where `apply` or `read_reply` breaks that.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_wire(message: &[u8], heap_len: usize, from: usize, reply: &[u8]) {
    let mut heap = CheckedHeap::new(heap_len);
    match apply(&mut heap, heap_len, message, from) {
        Ok(answer) => {
            let [req, _, len] = std::array::from_fn(|i| word(message, i));
            let data = if request::kind(req) == kind::GET {
                len
            } else {
                0
            };
            assert_eq!(answer.len() as u64, REPLY_WORDS as u64 * 8 + data);
        }
        Err(Error::Engine { peer, .. }) => assert_eq!(peer, Some(from)),
        Err(other) => panic!("{other:?}"),
    }
    for inline_get in [false, true] {
        let (_, staged) = read_reply(reply, inline_get);
        assert!(staged.len() <= reply.len() && (!inline_get || staged.is_empty()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bad_bytes::{bytes_near, huge_u64};
    use proptest::prelude::*;
    use symmem_rma::engine::{atomic, atomic_code};

    /// Requests as a proxy sends them for a heap of `HEAP` bytes.
    fn request_message() -> impl Strategy<Value = Vec<u8>> {
        let put = (0..HEAP as u64 - 64, 0u64..64, any::<u8>()).prop_map(|(offset, len, b)| {
            let req = request::pack(kind::PUT, 0, 0, request::STAGED);
            let mut m = words_to_bytes(&[req, offset, len, 0, 0]);
            m.resize(m.len() + len as usize, b);
            m
        });
        let get = (0..HEAP as u64 - 64, 0u64..64).prop_map(|(offset, len)| {
            let req = request::pack(kind::GET, 0, 0, request::REPLY | request::STAGED);
            words_to_bytes(&[req, offset, len, 0, 0])
        });
        let atomics = (
            0..HEAP as u64 / 8,
            0u64..11,
            any::<bool>(),
            any::<[u64; 2]>(),
        )
            .prop_map(|(element, code, wide, [operand, compare])| {
                let size = if wide { 8 } else { 4 };
                let req = request::pack(kind::ATOMIC, code, size, request::REPLY);
                words_to_bytes(&[req, element * size, size, operand, compare])
            });
        prop_oneof![put, get, atomics]
    }

    const HEAP: usize = 1 << 20;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_request_is_applied_inside_the_heap_or_refused(
            message in bytes_near(request_message()),
            reply in bytes_near(request_message()),
            heap_len in prop_oneof![Just(HEAP), Just(usize::MAX), 0usize..64],
            from in 0usize..8,
        ) {
            check_wire(&message, heap_len, from, &reply);
        }

        #[test]
        fn valid_requests_are_applied(message in request_message()) {
            let mut heap = CheckedHeap::new(HEAP);
            prop_assert!(apply(&mut heap, HEAP, &message, 1).is_ok());
        }

        #[test]
        fn a_huge_get_is_refused_before_its_reply_is_allocated(len in huge_u64()) {
            let req = request::pack(kind::GET, 0, 0, request::REPLY | request::STAGED);
            let message = words_to_bytes(&[req, 0, len, 0, 0]);
            check_wire(&message, usize::MAX, 3, &[]);
        }
    }

    /// What the proxy under test sent, and the replies the test hands it.
    #[derive(Default)]
    struct Fabric {
        sent: Vec<(usize, u64)>,
        /// Each request's data: where it was sent from, and how many bytes.
        data: Vec<(usize, usize)>,
        replies: VecDeque<(u64, Vec<u8>)>,
    }

    /// A wire that records requests and delivers the replies the test queues.
    struct FakeWire(Arc<Mutex<Fabric>>);

    impl Wire for FakeWire {
        fn has_window(&self) -> bool {
            false
        }
        unsafe fn put(&mut self, _: usize, _: u64, _: *const u8, _: usize) -> Result<()> {
            unreachable!("no window")
        }
        unsafe fn get(&mut self, _: usize, _: u64, _: *mut u8, _: usize) -> Result<()> {
            unreachable!("no window")
        }
        unsafe fn request(
            &mut self,
            peer: usize,
            _: Vec<u8>,
            data: *const u8,
            data_len: usize,
            _: usize,
            id: u64,
        ) -> Result<()> {
            let mut f = self.0.lock().unwrap();
            f.sent.push((peer, id));
            f.data.push((data.addr(), data_len));
            Ok(())
        }
        fn reply(&mut self) -> Result<Option<(u64, Vec<u8>)>> {
            Ok(self.0.lock().unwrap().replies.pop_front())
        }
        fn next_request(&mut self, _: &mut [u8]) -> Result<Option<(usize, usize)>> {
            Ok(None)
        }
        fn send_reply(&mut self, _: usize, _: Vec<u8>) -> Result<()> {
            Ok(())
        }
        fn close(&mut self, _: bool) {}
    }

    #[test]
    fn requests_stream_and_complete_in_ticket_order() {
        // 24 staged puts, alternating between peers 1 and 2, all posted at once.
        let mut ring = Box::new(Ring {
            capacity: RING_SLOTS as u64,
            ..Ring::default()
        });
        let mut slots: Vec<Slot> = (0..RING_SLOTS).map(|_| Slot::default()).collect();
        let mut staging = vec![0u8; RING_SLOTS * STAGING_BYTES];
        let mut abort = 0u64;
        for (t, slot) in slots.iter_mut().enumerate().take(24) {
            slot.request = request::pack(kind::PUT, 0, 0, request::STAGED);
            slot.peer = 1 + t as u64 % 2;
            slot.offset = t as u64 * 64;
            slot.len = 64;
            slot.turn = state::FULL;
        }
        let fabric = Arc::new(Mutex::new(Fabric::default()));
        let mut proxy = Proxy {
            wire: Box::new(FakeWire(fabric.clone())),
            direct: false,
            ring: &raw mut *ring,
            slots: slots.as_mut_ptr(),
            staging: staging.as_mut_ptr(),
            heap: Box::new(CheckedHeap::new(1 << 20)),
            heap_len: 1 << 20,
            // SAFETY: a live, aligned word, accessed atomically, outliving the proxy.
            abort: unsafe { AbortWord::new(&raw mut abort) },
            failure: Arc::default(),
            head: 0,
            inflight: VecDeque::new(),
            serving: VecDeque::new(),
            failed: false,
            disowned: Arc::default(),
            closed: false,
        };
        let completed = |ring: &Ring| ring.completed;
        let reply = |ids: &mut dyn Iterator<Item = u64>| {
            let mut f = fabric.lock().unwrap();
            f.replies
                .extend(ids.map(|id| (id, vec![0u8; REPLY_WORDS * 8])));
        };

        assert!(proxy.step(true));
        let sent = fabric.lock().unwrap().sent.clone();
        let want: Vec<(usize, u64)> = (0..IN_FLIGHT as u64)
            .map(|t| (1 + t as usize % 2, t))
            .collect();
        assert_eq!(sent, want, "a window of requests on the wire at once");
        assert_eq!(completed(&ring), 0);
        let data = fabric.lock().unwrap().data.clone();
        let slots_staging: Vec<(usize, usize)> = (0..IN_FLIGHT)
            .map(|t| (staging.as_ptr().addr() + t * STAGING_BYTES, 64))
            .collect();
        assert_eq!(
            data, slots_staging,
            "each put's data is sent from its slot's staging, not copied"
        );

        // Peer 2 answers all of its requests first: none completes while ticket 0, peer
        // 1's, is still out, and no slot is handed back early.
        reply(&mut (1..IN_FLIGHT as u64).step_by(2));
        proxy.step(true);
        assert_eq!(completed(&ring), 0);
        assert_eq!(slots[1].turn, state::FULL);

        // Ticket 0's reply completes tickets 0 and 1 (1's reply was waiting), and two more
        // requests start.
        reply(&mut std::iter::once(0));
        proxy.step(true);
        assert_eq!(completed(&ring), 2);
        assert_eq!(slots[0].turn, 4 + state::FREE);
        assert_eq!(slots[1].turn, 4 + state::FREE);
        assert_eq!(fabric.lock().unwrap().sent.len(), IN_FLIGHT + 2);

        // Every request sent and not yet answered is answered, newest first, round by
        // round: all 24 complete, and never more than the window is out.
        let mut answered: Vec<u64> = (1..IN_FLIGHT as u64).step_by(2).chain([0]).collect();
        for _ in 0..8 {
            let sent: Vec<u64> = fabric.lock().unwrap().sent.iter().map(|s| s.1).collect();
            let open: Vec<u64> = sent.into_iter().filter(|t| !answered.contains(t)).collect();
            assert!(open.len() <= IN_FLIGHT);
            reply(&mut open.iter().rev().copied());
            answered.extend(open);
            proxy.step(true);
        }
        assert_eq!(completed(&ring), 24);
        assert!(proxy.inflight.is_empty());
        assert!(!proxy.failed);

        // A disowned rank (poisoned: its kernels' buffers may be freed) starts none of
        // its requests again, and what was already on the wire still completes.
        let post = |slot: &mut Slot| {
            slot.request = request::pack(kind::PUT, 0, 0, request::STAGED);
            slot.peer = 1;
            slot.len = 64;
            slot.turn = state::FULL;
        };
        slots[24..28].iter_mut().for_each(post);
        proxy.step(true);
        assert_eq!(fabric.lock().unwrap().sent.len(), 28);
        proxy.disowned.store(true, Ordering::Release);
        post(&mut slots[28]);
        reply(&mut (24..28));
        proxy.step(true);
        proxy.step(true);
        assert_eq!(completed(&ring), 28);
        assert_eq!(
            fabric.lock().unwrap().sent.len(),
            28,
            "ticket 28 never starts"
        );
        assert_eq!(slots[28].turn, state::FULL);
    }

    #[test]
    fn engine_get_longer_than_staging_is_refused() {
        // Found by review: a get's reply was allocated at the length the request named,
        // up to the whole heap; a device never asks for more than a slot's staging.
        let mut heap = CheckedHeap::new(1 << 40);
        let get = request::pack(kind::GET, 0, 0, request::REPLY | request::STAGED);
        let message = words_to_bytes(&[get, 0, 1 << 39, 0, 0]);
        let refused = apply(&mut heap, 1 << 40, &message, 2);
        assert!(
            matches!(refused, Err(Error::Engine { peer: Some(2), .. })),
            "{refused:?}"
        );
        let message = words_to_bytes(&[get, 8, STAGING_BYTES as u64, 0, 0]);
        let reply = apply(&mut heap, 1 << 40, &message, 2).unwrap();
        assert_eq!(reply.len(), REPLY_WORDS * 8 + STAGING_BYTES);
    }

    #[test]
    fn engine_put_shorter_than_its_length_is_refused() {
        // Found by review: a put whose message carried fewer bytes than its length wrote
        // what it carried and replied as if it had written them all.
        let mut heap = CheckedHeap::new(4096);
        let put = request::pack(kind::PUT, 0, 0, request::STAGED);
        let mut message = words_to_bytes(&[put, 64, 32, 0, 0]);
        message.extend_from_slice(&[7; 31]);
        let refused = apply(&mut heap, 4096, &message, 1);
        assert!(
            matches!(refused, Err(Error::Engine { peer: Some(1), .. })),
            "{refused:?}"
        );
        message.push(7);
        assert!(apply(&mut heap, 4096, &message, 1).is_ok());
    }

    #[test]
    fn an_unaligned_or_odd_sized_atomic_is_refused() {
        let mut heap = CheckedHeap::new(4096);
        let add = atomic_code(symmem_rma::AtomicOp::Add);
        for (size, offset) in [(8, 4), (4, 2), (2, 0), (16, 0)] {
            let req = request::pack(kind::ATOMIC, add, size, request::REPLY);
            let message = words_to_bytes(&[req, offset, size, 1, 0]);
            assert!(
                apply(&mut heap, 4096, &message, 0).is_err(),
                "{size} at {offset}"
            );
        }
        let cas = request::pack(kind::ATOMIC, atomic::CAS, 8, request::REPLY);
        let reply = apply(&mut heap, 4096, &words_to_bytes(&[cas, 8, 8, 1, 0]), 0).unwrap();
        assert_eq!(read_reply(&reply, false).0, [u64::MAX, 0]);
    }
}
