//! The off-node engine: a proxy thread per rank that drains the rank's request ring
//! (`symmem_rma::engine`) with MPI one-sided operations (cargo feature `mpi`).
//!
//! A world whose ranks span several nodes ([`crate::topology`]) starts one when it forms
//! and stops it when it leaves. It needs the MPI bootstrap at `MPI_THREAD_MULTIPLE` (the
//! proxy calls MPI while the world's own thread runs bootstrap collectives).
//!
//! * **Window.** Where the proxy reaches kernel memory (the CPU backend, and CUDA under
//!   an MPI that says it is CUDA-aware: `mpi_is_cuda_aware`), the rank's symmetric heap
//!   is an MPI window (`MPI_Win_create`, locked for every target once with
//!   `MPI_Win_lock_all`), on a duplicate of the bootstrap's communicator. Puts and gets
//!   to a peer are `MPI_Put`/`MPI_Get` on it, completed with `MPI_Win_flush` before the
//!   next request: that is what makes a later signal, quiet or barrier cover them.
//! * **Atomics and signals** are applied by the *target's* proxy, with the same hardware
//!   atomics the target's own kernels and on-node peers use. An MPI accumulate is atomic
//!   only with other MPI accumulates, not with a kernel's atomics on the same word.
//!   They travel as messages on the same communicator; the target replies with the old
//!   value.
//! * **Staging.** Where the proxy cannot reach kernel memory (a GPU heap under an MPI
//!   that is not GPU-aware), there is no window: the device stages the bytes in the
//!   ring's host memory and puts and gets travel as messages too, applied by the target's
//!   proxy through its [`HeapAccess`] (`Backend::engine_heap`: on CUDA, copies and a
//!   one-thread atomic kernel on a stream of its own).
//!   `SYMMEM_ENGINE_STAGING=1` forces this path (and no window) on the CPU backend, so
//!   CI exercises the device's staging code and the proxy's messages as a GPU uses them.
//!
//! * **Helping.** On the CPU backend a kernel thread that waits on the ring runs rounds
//!   of the proxy's work itself while no other thread does (`Ring::help`; the proxy is
//!   behind a lock): its own request then completes without a hand-off to the proxy's
//!   thread, which shares the rank's core under `mpirun`'s default binding. The proxy's
//!   thread still serves peers and finishes what no kernel waits for.
//!
//! Every MPI call's error is returned (`MPI_ERRORS_RETURN`): the proxy records it as
//! [`Error::Engine`], sets the rank's abort word so every waiting kernel ends, and
//! serves nothing more; the world reports it from its next call.

use crate::backend::SharedRegion;
use crate::error::{Error, Result};
use crate::liveness::AbortWord;
use mpi::ffi;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use symmem_rma::engine::{Ring, STAGING_BYTES, Slot, apply_atomic, kind, request, state};

/// Environment variable: `1` makes the CPU backend's engine stage data as a GPU's does.
pub const ENV_ENGINE_STAGING: &str = "SYMMEM_ENGINE_STAGING";

/// Slots in a rank's ring.
pub(crate) const RING_SLOTS: usize = 64;

/// Message tags on the engine's communicator.
const TAG_REQUEST: c_int = 1;
const TAG_REPLY: c_int = 2;

/// Words of a request message's header: request, offset, len, operand, compare.
const HEADER_WORDS: usize = 5;
/// Words of a reply's header: result, result_hi.
const REPLY_WORDS: usize = 2;

/// The ring's layout in its shared region: the ring, the slots, the staging bytes.
const RING_AT: usize = 0;
const SLOTS_AT: usize = 256;
const STAGING_AT: usize = SLOTS_AT + RING_SLOTS * size_of::<Slot>();

/// Bytes of the shared region a ring needs.
pub(crate) const fn ring_bytes() -> usize {
    STAGING_AT + RING_SLOTS * STAGING_BYTES
}

/// Whether the MPI library moves CUDA device memory itself (a CUDA-aware build): Open
/// MPI's `MPIX_Query_cuda_support()` extension, looked up at run time, says so. An MPI
/// without it is taken not to be: data is then staged through host memory.
pub(crate) fn mpi_is_cuda_aware() -> bool {
    // SAFETY: a lookup in the symbols the process has loaded.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"MPIX_Query_cuda_support".as_ptr()) };
    if symbol.is_null() {
        return false;
    }
    // SAFETY: Open MPI's extension: `int MPIX_Query_cuda_support(void)`, callable after
    // MPI_Init.
    let query: unsafe extern "C" fn() -> c_int = unsafe { std::mem::transmute(symbol) };
    // SAFETY: as above.
    unsafe { query() == 1 }
}

/// How the proxy reaches this rank's own heap, at byte offsets: the target's side of
/// staged puts and gets and of every atomic. Each call is complete, and visible to this
/// rank's kernels, when it returns; none waits behind this rank's own kernels.
pub trait HeapAccess: Send {
    /// Writes `bytes` at `offset`.
    fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<()>;
    /// Reads `out.len()` bytes at `offset`.
    fn read(&mut self, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Applies atomic request `request` to the element at `offset`
    /// ([`symmem_rma::engine::apply_atomic`]); returns the old value's bits.
    fn atomic(&mut self, offset: usize, request: u64, operand: u64, compare: u64) -> Result<u64>;
}

/// A heap in this process's address space (the CPU backend's memfd heap).
pub(crate) struct HostHeap {
    base: *mut u8,
}

impl HostHeap {
    /// The heap at `base`.
    ///
    /// # Safety
    /// `base` is the start of this rank's heap, mapped read-write in this process for
    /// as long as the value lives; callers pass offsets inside it.
    pub(crate) unsafe fn new(base: *mut u8) -> Self {
        Self { base }
    }
}

// SAFETY: the heap is shared memory, reachable from any thread of the process.
unsafe impl Send for HostHeap {}

impl HeapAccess for HostHeap {
    fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<()> {
        // SAFETY: inside the heap (the proxy checks every request's range); peers'
        // stores through the engine are ordered by the proxy, and the release fence
        // publishes them.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(offset), bytes.len())
        };
        std::sync::atomic::fence(Ordering::Release);
        Ok(())
    }
    fn read(&mut self, offset: usize, out: &mut [u8]) -> Result<()> {
        // SAFETY: inside the heap (checked by the proxy).
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }
    fn atomic(&mut self, offset: usize, request: u64, operand: u64, compare: u64) -> Result<u64> {
        // SAFETY: an aligned element inside the heap (checked by the proxy), which
        // kernels access only atomically.
        Ok(unsafe { apply_atomic(self.base.add(offset), request, operand, compare) })
    }
}

/// What the engine needs from the world that starts it.
pub(crate) struct Start<'a, S: SharedRegion> {
    /// The bootstrap's communicator (duplicated here).
    pub(crate) comm: ffi::MPI_Comm,
    /// Host memory the device reaches, of [`ring_bytes`]; zeroed.
    pub(crate) region: &'a S,
    /// The ring's ticket counter: a zeroed device word (see [`Ring::tickets`]).
    pub(crate) tickets: u64,
    /// The heap: where kernels see it, its length, and how the proxy reaches it.
    pub(crate) heap_device: u64,
    pub(crate) heap_len: usize,
    pub(crate) heap: Box<dyn HeapAccess>,
    /// Where the window exposes the heap when the proxy reaches kernel memory at the
    /// kernels' addresses (the CPU backend, a GPU-aware MPI); `None` when data is staged.
    pub(crate) direct: Option<*mut u8>,
    /// Kernels run on host threads (the CPU backend): their waits help the proxy
    /// ([`Ring::help`]).
    pub(crate) kernels_on_host: bool,
    pub(crate) abort: AbortWord,
}

/// How a rank's engine moves put and get data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnginePath {
    /// Through an MPI window over the heap, from and to the kernels' own memory.
    Window,
    /// Staged through host memory and applied by the target's proxy (no window: a GPU
    /// heap under an MPI that is not GPU-aware, or `SYMMEM_ENGINE_STAGING=1`).
    Staged,
}

/// What the proxy failed with: the peer involved, and what happened.
type Failure = (Option<usize>, String);

/// A running engine; [`Engine::stop`] ends it.
pub(crate) struct Engine {
    /// The ring's `completed` word and its slots, as the host reads them.
    completed: *const u64,
    slots: *const Slot,
    stop: Arc<AtomicBool>,
    failure: Arc<Mutex<Option<Failure>>>,
    thread: Option<JoinHandle<()>>,
    /// The proxy, shared with kernel threads that help it; kept until they are gone.
    _proxy: Arc<Mutex<Proxy>>,
    path: EnginePath,
}

// SAFETY: the pointers are into the world's shared region, which outlives the engine
// (the world stops it first), read only atomically.
unsafe impl Send for Engine {}
// SAFETY: as above; every other field is thread-safe.
unsafe impl Sync for Engine {}

/// MPI handles, the ring and the requests under way: the proxy thread's, and the
/// helping kernel threads' while they hold its lock ([`help`]).
struct Proxy {
    comm: ffi::MPI_Comm,
    /// The heap's window, where the proxy reaches kernel memory (`Ring::direct`).
    win: Option<ffi::MPI_Win>,
    ring: *mut Ring,
    slots: *mut Slot,
    staging: *mut u8,
    heap: Box<dyn HeapAccess>,
    heap_len: usize,
    abort: AbortWord,
    failure: Arc<Mutex<Option<Failure>>>,
    /// The next ticket, the request waiting for its reply, the replies being sent.
    queue: Queue,
    /// The proxy met an error (recorded in `failure`) and serves nothing more.
    failed: bool,
    /// The window and communicator are freed: nothing more may run.
    closed: bool,
}

/// Where the proxy is in its work.
#[derive(Default)]
struct Queue {
    head: u64,
    inflight: Option<InFlight>,
    outgoing: Vec<Outgoing>,
}

// SAFETY: MPI runs at MPI_THREAD_MULTIPLE (checked before an engine starts), so its
// handles may be used from the proxy thread; the ring and the heap outlive the proxy
// (the world joins it before freeing either).
unsafe impl Send for Proxy {}

fn check(code: c_int, what: &'static str, peer: Option<usize>) -> Result<()> {
    if code == ffi::MPI_SUCCESS as c_int {
        return Ok(());
    }
    let mut text = vec![0u8; 512];
    let mut len: c_int = 0;
    // SAFETY: a buffer of MPI_MAX_ERROR_STRING (256) bytes or more.
    unsafe { ffi::MPI_Error_string(code, text.as_mut_ptr().cast(), &mut len) };
    text.truncate(len.clamp(0, 512) as usize);
    Err(Error::Engine {
        peer,
        what: format!(
            "{what}: {} (MPI error {code})",
            String::from_utf8_lossy(&text)
        ),
    })
}

/// Exposes `len` bytes at `base` (the heap, at the kernels' addresses) as a window on
/// `comm` (collective), checks that its memory model is `MPI_WIN_UNIFIED` and locks it
/// for every target.
fn window(comm: ffi::MPI_Comm, base: *mut u8, len: usize) -> Result<ffi::MPI_Win> {
    // SAFETY: plain MPI calls on a live communicator and the live heap.
    unsafe {
        let mut win = std::mem::MaybeUninit::uninit();
        check(
            ffi::MPI_Win_create(
                base.cast(),
                len as ffi::MPI_Aint,
                1,
                ffi::RSMPI_INFO_NULL,
                comm,
                win.as_mut_ptr(),
            ),
            "MPI_Win_create over the symmetric heap",
            None,
        )?;
        let win = win.assume_init();
        check(
            ffi::MPI_Win_set_errhandler(win, ffi::RSMPI_ERRORS_RETURN),
            "MPI_Win_set_errhandler",
            None,
        )?;
        let mut model: *mut c_int = std::ptr::null_mut();
        let mut found: c_int = 0;
        check(
            ffi::MPI_Win_get_attr(
                win,
                ffi::MPI_WIN_MODEL as c_int,
                (&raw mut model).cast(),
                &mut found,
            ),
            "MPI_Win_get_attr(MPI_WIN_MODEL)",
            None,
        )?;
        if found == 0 || model.is_null() || *model != ffi::MPI_WIN_UNIFIED as c_int {
            return Err(Error::Engine {
                peer: None,
                what: "the MPI window's memory model is not MPI_WIN_UNIFIED: kernels \
                       would not see puts without MPI_Win_sync"
                    .into(),
            });
        }
        check(
            ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, win),
            "MPI_Win_lock_all",
            None,
        )?;
        Ok(win)
    }
}

impl Engine {
    /// Starts the engine: duplicates the communicator, creates the heap's window (both
    /// collective: every rank of the world calls this), lays out the ring in `region`
    /// and starts the proxy thread. Returns the engine and the ring's device address.
    pub(crate) fn start<S: SharedRegion>(start: Start<'_, S>) -> Result<(Self, u64)> {
        let mut comm = std::mem::MaybeUninit::uninit();
        check(
            // SAFETY: a valid communicator in, a fresh one out.
            unsafe { ffi::MPI_Comm_dup(start.comm, comm.as_mut_ptr()) },
            "MPI_Comm_dup",
            None,
        )?;
        // SAFETY: MPI_Comm_dup succeeded.
        let comm = unsafe { comm.assume_init() };
        check(
            // SAFETY: the fresh communicator.
            unsafe { ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN) },
            "MPI_Comm_set_errhandler",
            None,
        )?;
        // Forced staging goes without a window, as under an MPI that cannot reach GPU memory.
        let staging_forced = std::env::var(ENV_ENGINE_STAGING).as_deref() == Ok("1");
        let win = match start.direct.filter(|_| !staging_forced) {
            Some(base) => Some(window(comm, base, start.heap_len)?),
            None => None,
        };
        let host = start.region.host_ptr();
        let device = start.region.device_ptr();
        let ring = host.wrapping_add(RING_AT).cast::<Ring>();
        let direct = win.is_some();
        let stop = Arc::new(AtomicBool::new(false));
        let failure = Arc::new(Mutex::new(None));
        let proxy = Arc::new(Mutex::new(Proxy {
            comm,
            win,
            ring,
            slots: host.wrapping_add(SLOTS_AT).cast(),
            staging: host.wrapping_add(STAGING_AT),
            heap: start.heap,
            heap_len: start.heap_len,
            abort: start.abort,
            failure: failure.clone(),
            queue: Queue::default(),
            failed: false,
            closed: false,
        }));
        let (help, help_context) = if start.kernels_on_host {
            (
                help as unsafe extern "C" fn(u64) as usize as u64,
                Arc::as_ptr(&proxy) as u64,
            )
        } else {
            (0, 0)
        };
        // SAFETY: the region is zeroed, of `ring_bytes()`, and no kernel uses it yet.
        unsafe {
            ring.write(Ring {
                slots: device + SLOTS_AT as u64,
                capacity: RING_SLOTS as u64,
                tickets: start.tickets,
                completed: 0,
                heap_base: start.heap_device,
                heap_len: start.heap_len as u64,
                staging: device + STAGING_AT as u64,
                direct: u64::from(direct),
                help,
                help_context,
            })
        };
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
        let engine = Self {
            // SAFETY: fields of the ring written above.
            completed: unsafe { &raw const (*ring).completed },
            slots: host.wrapping_add(SLOTS_AT).cast(),
            stop,
            failure,
            thread: Some(thread),
            _proxy: proxy,
            path: if direct {
                EnginePath::Window
            } else {
                EnginePath::Staged
            },
        };
        Ok((engine, device + RING_AT as u64))
    }

    /// How the engine moves data.
    pub(crate) fn path(&self) -> EnginePath {
        self.path
    }

    /// The proxy's error, if it met one.
    pub(crate) fn failure(&self) -> Option<Error> {
        let failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.as_ref().map(|(peer, what)| Error::Engine {
            peer: *peer,
            what: what.clone(),
        })
    }

    /// Waits until the proxy has completed every request kernels posted (call it after
    /// the device is idle); bounded by `deadline`.
    ///
    /// With the device idle, every ticket taken has its slot filled, and the proxy serves
    /// tickets in order: it is done when the slot of the first ticket not completed holds
    /// no request.
    pub(crate) fn quiet(&self, deadline: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(e) = self.failure() {
                return Err(e);
            }
            // SAFETY: live words of the ring, read atomically.
            let (done, turn) = unsafe {
                let done = AtomicU64::from_ptr(self.completed.cast_mut()).load(Ordering::Acquire);
                let slot = self.slots.add((done % RING_SLOTS as u64) as usize);
                let turn = AtomicU64::from_ptr((&raw const (*slot).turn).cast_mut());
                (done, turn.load(Ordering::Acquire))
            };
            let lap = done / RING_SLOTS as u64;
            if turn != lap * 4 + state::FULL {
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

    /// Stops the proxy and joins it. With `clean` (every rank quiet and past a barrier)
    /// it frees the window and the communicator, collectively; without (a peer is lost)
    /// it leaves them, as MPI could wait forever for the lost rank.
    pub(crate) fn stop(&mut self, clean: bool) {
        if !clean {
            self.failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert((None, "stopped after a peer was lost".into()));
        }
        self.stop.store(true, Ordering::Release);
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

/// A request that waits for the target's reply.
struct InFlight {
    ticket: u64,
    /// An inline get: its data comes back as the reply's words, not staged bytes.
    inline_get: bool,
    request: ffi::MPI_Request,
    reply: Vec<u8>,
    /// The header it sent, and its send request (kept alive until both complete).
    sent: Vec<u8>,
    send: ffi::MPI_Request,
    peer: usize,
}

/// A reply this proxy sends, kept until MPI is done with its buffer.
struct Outgoing {
    request: ffi::MPI_Request,
    _buffer: Vec<u8>,
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

fn lock(proxy: &Mutex<Proxy>) -> std::sync::MutexGuard<'_, Proxy> {
    proxy.lock().unwrap_or_else(|p| p.into_inner())
}

/// The proxy thread: rounds of work until the engine stops with nothing in flight, then
/// the collective frees.
fn run(proxy: &Mutex<Proxy>, stop: &AtomicBool) {
    let mut idle_since = Instant::now();
    loop {
        let (busy, settled) = {
            let mut p = lock(proxy);
            (p.step(true), p.failed || p.queue.inflight.is_none())
        };
        if stop.load(Ordering::Acquire) && settled {
            break;
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

/// [`Ring::help`] on the CPU backend: a waiting kernel thread runs one round of the
/// proxy's work, unless another thread is running one.
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
        let mut queue = std::mem::take(&mut self.queue);
        let step = self
            .progress(&mut queue.head, &mut queue.inflight)
            .and_then(|progressed| {
                let served = if always_serve || !progressed {
                    self.serve(&mut queue.outgoing)?
                } else {
                    false
                };
                Ok(progressed || served)
            });
        self.queue = queue;
        let busy = *step.as_ref().unwrap_or(&false);
        if let Err(e) = step {
            self.failed = true;
            self.fail(e);
        }
        busy
    }

    /// Frees the window and the communicator (collective: every rank is past the
    /// world's final barrier), unless the proxy failed; nothing runs after.
    fn close(&mut self) {
        if !self.failed && !self.closed {
            // SAFETY: the proxy's own requests and handles.
            unsafe {
                for mut o in std::mem::take(&mut self.queue.outgoing) {
                    ffi::MPI_Wait(&mut o.request, ffi::RSMPI_STATUS_IGNORE);
                }
                if let Some(mut win) = self.win {
                    ffi::MPI_Win_unlock_all(win);
                    ffi::MPI_Win_free(&mut win);
                }
                ffi::MPI_Comm_free(&mut self.comm);
            }
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

    /// Serves the requests peers sent to this rank; true if it served any.
    fn serve(&mut self, outgoing: &mut Vec<Outgoing>) -> Result<bool> {
        outgoing.retain_mut(|o| {
            let mut flag: c_int = 0;
            // SAFETY: a live request of this proxy.
            unsafe { ffi::MPI_Test(&mut o.request, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            flag == 0
        });
        let mut served = false;
        loop {
            let mut flag: c_int = 0;
            let mut message = std::mem::MaybeUninit::<ffi::MPI_Message>::uninit();
            let mut status = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
            // SAFETY: plain MPI calls on this proxy's communicator.
            unsafe {
                check(
                    ffi::MPI_Improbe(
                        ffi::RSMPI_ANY_SOURCE,
                        TAG_REQUEST,
                        self.comm,
                        &mut flag,
                        message.as_mut_ptr(),
                        status.as_mut_ptr(),
                    ),
                    "MPI_Improbe",
                    None,
                )?;
            }
            if flag == 0 {
                return Ok(served);
            }
            served = true;
            // SAFETY: a matched message and its status.
            let (mut message, status) = unsafe { (message.assume_init(), status.assume_init()) };
            let from = status.MPI_SOURCE as usize;
            let mut count: c_int = 0;
            // SAFETY: as above.
            unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) };
            let mut buffer = vec![0u8; count.max(0) as usize];
            check(
                // SAFETY: a buffer of the message's size.
                unsafe {
                    ffi::MPI_Mrecv(
                        buffer.as_mut_ptr().cast(),
                        count,
                        ffi::RSMPI_UINT8_T,
                        &mut message,
                        ffi::RSMPI_STATUS_IGNORE,
                    )
                },
                "MPI_Mrecv of a request",
                Some(from),
            )?;
            let reply = self.apply(&buffer, from)?;
            // SAFETY: reading MPI's null-request constant.
            let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
            check(
                // SAFETY: the buffer lives in `outgoing` until the send completes.
                unsafe {
                    ffi::MPI_Isend(
                        reply.as_ptr().cast(),
                        reply.len() as c_int,
                        ffi::RSMPI_UINT8_T,
                        from as c_int,
                        TAG_REPLY,
                        self.comm,
                        &mut request,
                    )
                },
                "MPI_Isend of a reply",
                Some(from),
            )?;
            outgoing.push(Outgoing {
                request,
                _buffer: reply,
            });
        }
    }

    /// Applies a request from rank `from` to this rank's heap; returns the reply.
    fn apply(&mut self, message: &[u8], from: usize) -> Result<Vec<u8>> {
        let [req, offset, len, operand, compare] = std::array::from_fn(|i| word(message, i));
        let payload = message.get(HEADER_WORDS * 8..).unwrap_or(&[]);
        let bad = || Error::Engine {
            peer: Some(from),
            what: format!(
                "a request for {len} bytes at heap offset {offset:#x} is outside the heap"
            ),
        };
        let end = offset.checked_add(len).ok_or_else(bad)?;
        if end > self.heap_len as u64 {
            return Err(bad());
        }
        let (offset, len) = (offset as usize, len as usize);
        let mut reply = [0u64; REPLY_WORDS];
        match request::kind(req) {
            kind::ATOMIC => {
                let size = request::size(req);
                if offset % len.max(1) != 0 || !matches!(len, 4 | 8) || size != len as u64 {
                    return Err(Error::Engine {
                        peer: Some(from),
                        what: format!(
                            "a {len}-byte atomic (element of {size} bytes) at offset \
                             {offset:#x}: not an aligned 4- or 8-byte element"
                        ),
                    });
                }
                reply[0] = self.heap.atomic(offset, req, operand, compare)?;
            }
            kind::PUT => {
                let n = payload.len().min(len);
                self.heap.write(offset, &payload[..n])?;
            }
            kind::GET => {
                let mut out = words_to_bytes(&reply);
                out.resize(out.len() + len, 0);
                self.heap.read(offset, &mut out[REPLY_WORDS * 8..])?;
                return Ok(out);
            }
            other => {
                return Err(Error::Engine {
                    peer: Some(from),
                    what: format!("an unknown request kind {other}"),
                });
            }
        }
        Ok(words_to_bytes(&reply))
    }

    /// Starts or finishes the request at `head`; true if it did anything.
    fn progress(&self, head: &mut u64, inflight: &mut Option<InFlight>) -> Result<bool> {
        if let Some(f) = inflight {
            let mut flag: c_int = 0;
            // SAFETY: the in-flight receive (and send) of this proxy.
            unsafe {
                check(
                    ffi::MPI_Test(&mut f.request, &mut flag, ffi::RSMPI_STATUS_IGNORE),
                    "MPI_Test of a reply",
                    Some(f.peer),
                )?;
            }
            if flag == 0 {
                return Ok(false);
            }
            // SAFETY: the send completed before its reply could arrive.
            unsafe { ffi::MPI_Wait(&mut f.send, ffi::RSMPI_STATUS_IGNORE) };
            let f = inflight.take().expect("in flight");
            let (head_words, data) = f.reply.split_at(REPLY_WORDS * 8);
            if f.inline_get {
                let mut inline = [0u8; 16];
                let n = data.len().min(16);
                inline[..n].copy_from_slice(&data[..n]);
                self.finish(f.ticket, [word(&inline, 0), word(&inline, 1)], &[]);
            } else {
                self.finish(f.ticket, [word(head_words, 0), word(head_words, 1)], data);
            }
            *head += 1;
            return Ok(true);
        }
        let slot = self.slot(*head);
        let lap = *head / RING_SLOTS as u64;
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
        // request (and inline or staged data) travels as a message.
        let direct = req & request::STAGED == 0 && self.win.is_some();
        let words = [operand, compare];
        match request::kind(req) {
            kind::PUT if direct => {
                let src = if inline {
                    words.as_ptr().cast::<u8>()
                } else {
                    local as *const u8
                };
                self.rma(true, src.cast_mut(), peer, offset, len as usize)?;
                self.finish(*head, [0; 2], &[]);
                *head += 1;
            }
            kind::GET if direct => {
                let mut words = [0u64; 2];
                let dst = if inline {
                    words.as_mut_ptr().cast::<u8>()
                } else {
                    local as *mut u8
                };
                self.rma(false, dst, peer, offset, len as usize)?;
                self.finish(*head, words, &[]);
                *head += 1;
            }
            _ => {
                let mut sent = words_to_bytes(&[req, offset, len, operand, compare]);
                let inline_data = inline_bytes(&words);
                if request::kind(req) == kind::PUT {
                    sent.extend_from_slice(if inline {
                        &inline_data[..(len as usize).min(16)]
                    } else {
                        // SAFETY: the slot's staging bytes hold `len <= STAGING_BYTES`.
                        unsafe { std::slice::from_raw_parts(self.staging(*head), len as usize) }
                    });
                }
                let reply_len = REPLY_WORDS * 8
                    + if request::kind(req) == kind::GET {
                        len as usize
                    } else {
                        0
                    };
                // SAFETY: reading MPI's null-request constant.
                let null = unsafe { ffi::RSMPI_REQUEST_NULL };
                let mut f = InFlight {
                    ticket: *head,
                    inline_get: inline && request::kind(req) == kind::GET,
                    request: null,
                    reply: vec![0u8; reply_len],
                    sent,
                    send: null,
                    peer,
                };
                // SAFETY: both buffers live in `inflight` until the requests complete.
                unsafe {
                    check(
                        ffi::MPI_Irecv(
                            f.reply.as_mut_ptr().cast(),
                            reply_len as c_int,
                            ffi::RSMPI_UINT8_T,
                            peer as c_int,
                            TAG_REPLY,
                            self.comm,
                            &mut f.request,
                        ),
                        "MPI_Irecv of a reply",
                        Some(peer),
                    )?;
                    check(
                        ffi::MPI_Isend(
                            f.sent.as_ptr().cast(),
                            f.sent.len() as c_int,
                            ffi::RSMPI_UINT8_T,
                            peer as c_int,
                            TAG_REQUEST,
                            self.comm,
                            &mut f.send,
                        ),
                        "MPI_Isend of a request",
                        Some(peer),
                    )?;
                }
                *inflight = Some(f);
            }
        }
        Ok(true)
    }

    /// `MPI_Put` (`put`) or `MPI_Get` of `len` bytes between `local` and `offset` in
    /// `peer`'s heap window, then `MPI_Win_flush`: complete at both ends on return.
    fn rma(&self, put: bool, local: *mut u8, peer: usize, offset: u64, len: usize) -> Result<()> {
        let win = self.win.ok_or_else(|| Error::Engine {
            peer: Some(peer),
            what: "a direct request, but the heap has no window (data is staged)".into(),
        })?;
        const CHUNK: usize = 1 << 30;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK);
            let (at, target) = (
                local.wrapping_add(done),
                (offset + done as u64) as ffi::MPI_Aint,
            );
            // SAFETY: the kernel's range (its contract) and the peer's heap window.
            let code = unsafe {
                if put {
                    ffi::MPI_Put(
                        at.cast::<c_void>(),
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        peer as c_int,
                        target,
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        win,
                    )
                } else {
                    ffi::MPI_Get(
                        at.cast::<c_void>(),
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        peer as c_int,
                        target,
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        win,
                    )
                }
            };
            check(code, if put { "MPI_Put" } else { "MPI_Get" }, Some(peer))?;
            done += n;
        }
        // SAFETY: the proxy's window.
        check(
            unsafe { ffi::MPI_Win_flush(peer as c_int, win) },
            "MPI_Win_flush",
            Some(peer),
        )
    }

    /// Completes ticket `ticket`: stores the reply (words, and staged bytes) and hands the
    /// slot back (DONE for a request with a reply, else FREE for the next lap), then
    /// counts it completed.
    fn finish(&self, ticket: u64, words: [u64; 2], staged: &[u8]) {
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
