//! The engine a world holds for a proxied transport: it lays the ring out in memory the
//! rank's kernels reach, starts the proxy thread, and is the rank's [`Link`] (`quiet`,
//! `disown`, `stop`).

use super::worker::{ABANDON, Proxy, RUN, STOP, help, lock, run};
use super::{Failure, IN_FLIGHT, RING_SLOTS, Wire};
use crate::backend::{DeviceRegion, SharedRegion};
use crate::control::AbortWord;
use crate::error::{Error, Result};
use crate::transport::{Attach, EnginePath, Link, ModuleTransport};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use symmem_rma::engine::{Ring, STAGING_BYTES, Slot, state};

/// The ring's layout in its shared region: the ring, the slots, the staging bytes.
const RING_AT: usize = 0;
const SLOTS_AT: usize = 256;
const STAGING_AT: usize = SLOTS_AT + RING_SLOTS * size_of::<Slot>();
/// Bytes of the shared region a ring needs.
const RING_BYTES: usize = STAGING_AT + RING_SLOTS * STAGING_BYTES;

/// A running proxied transport: the [`Link`] of every [`Wire`].
pub(super) struct Engine {
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

impl Engine {
    /// Starts a proxied transport over `wire` (made collectively by the caller; its
    /// window, if any, over `attach.heap`): allocates and lays out the ring and starts
    /// the proxy thread.
    pub(super) fn start(wire: Box<dyn Wire>, attach: Attach<'_>) -> Result<Self> {
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

impl ModuleTransport for Engine {
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
