//! The local wire: the proxied transport between emulated nodes of one process (ranks as
//! threads, [`crate::spawn_ranks`], split into nodes by `Config::ranks_per_node`).
//!
//! The ranks' proxies share one fabric: a window per rank (its heap at the kernels'
//! addresses, the CPU backend's shared memory) for one-sided puts and gets, an inbox per
//! rank for requests, and an inbox per rank for the replies to its requests in flight. A
//! put is a copy into the target's heap followed by a release fence, complete when it
//! returns, as `MPI_Put` + `MPI_Win_flush` are; everything else travels through the
//! inboxes and is applied by the target's proxy, exactly as over MPI. So the whole
//! off-node path (the device's ring, the proxy, staging, helping, the hierarchical
//! collectives) runs in plain `cargo test`, no `mpirun` needed. It serves the CPU backend
//! only: on a GPU, thread-ranks share the device's context, and its device-wide
//! synchronisations would stall the proxies (see [`LocalTransport`]'s `attach`).

use super::proxy::{Wire, start_proxy};
use super::{Attach, Link, Transport};
use crate::backend::BackendKind;
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::atomic::{Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// A request between proxies: the rank that sent it, and its message.
type Request = (usize, Vec<u8>);

/// What the proxies of one group of thread-ranks share.
pub(crate) struct Fabric {
    /// Each rank's heap window, `(address, bytes)`, while its transport is attached with
    /// one. A peer's copy holds the window's read lock for its whole length, so a rank
    /// that closes its window (the write lock) waits for copies into its heap to end, and
    /// none starts after: its heap may be freed once it has closed, even if it leaves
    /// before its peers are quiet (a lost rank's survivors do).
    windows: Vec<RwLock<Option<(usize, usize)>>>,
    /// Requests sent to each rank, `(from, message)`, in the order they were sent.
    inboxes: Vec<Mutex<VecDeque<Request>>>,
    /// Replies sent to each rank, `(from, reply)`, in the order they were sent.
    replies: Vec<Mutex<VecDeque<Request>>>,
}

/// Locks `mutex`; every update under these locks is a single push, pop or assignment,
/// so a lock a panicking thread poisoned still holds consistent state.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Fabric {
    /// The fabric of a group of `world` ranks.
    pub(crate) fn new(world: usize) -> Arc<Self> {
        Arc::new(Self {
            windows: (0..world).map(|_| RwLock::default()).collect(),
            inboxes: (0..world).map(|_| Mutex::default()).collect(),
            replies: (0..world).map(|_| Mutex::default()).collect(),
        })
    }
}

/// One thread-rank's local transport, before it is attached.
pub struct LocalTransport {
    fabric: Arc<Fabric>,
    rank: usize,
}

impl LocalTransport {
    /// Rank `rank`'s transport on `fabric`.
    pub(crate) fn new(fabric: Arc<Fabric>, rank: usize) -> Self {
        Self { fabric, rank }
    }
}

impl Transport for LocalTransport {
    fn name(&self) -> &'static str {
        "local"
    }

    fn reaches_device_memory(&self, _: BackendKind) -> bool {
        false
    }

    /// Registers the heap's window where data is not staged, then starts the proxy. Every
    /// rank attaches before its world's first barrier, so every window is there before
    /// any kernel can put.
    ///
    /// # Errors
    /// [`Error::NoEngine`] where kernels do not run on host threads (a GPU
    /// backend): thread-ranks of one GPU share its context, and a rank's device-wide
    /// synchronising call (a `cuMemFree` waits for every kernel of the context) blocks
    /// this rank's proxy behind it while a peer's kernel, which the call waits for,
    /// waits for that proxy: measured on the H200, every such world ended in
    /// `WaitTimedOut` at its deadline. A process per rank (`mpirun`) has no such coupling.
    fn attach(self: Box<Self>, attach: Attach<'_>) -> Result<Box<dyn Link>> {
        if !attach.kernels_on_host {
            return Err(Error::NoEngine(
                "the local transport serves kernels on host threads only: thread-ranks on a \
                 GPU would stall its proxy behind a rank's device-wide synchronisation; \
                 start one process per rank with mpirun (cargo feature `mpi`)",
            ));
        }
        let window = attach.heap.direct;
        if let Some(base) = window {
            *write(&self.fabric.windows[self.rank]) =
                Some((base.expose_provenance(), attach.heap.len));
        }
        let wire = LocalWire {
            fabric: self.fabric,
            rank: self.rank,
            window: window.is_some(),
            inflight: VecDeque::new(),
        };
        start_proxy(Box::new(wire), attach)
    }
}

/// One rank's proxy's end of the fabric.
struct LocalWire {
    fabric: Arc<Fabric>,
    rank: usize,
    /// This rank registered a window, so peers did too (the same backend and setting on
    /// every rank).
    window: bool,
    /// The ids of this rank's requests in flight with the peer each went to, oldest first:
    /// a peer answers one rank's requests in order.
    inflight: VecDeque<(usize, u64)>,
}

impl LocalWire {
    /// Runs `copy` on `peer`'s heap window at `offset`, for `len` bytes, holding the
    /// window open (its read lock) until the copy is done.
    fn with_window(
        &self,
        peer: usize,
        offset: u64,
        len: usize,
        copy: impl FnOnce(*mut u8),
    ) -> Result<()> {
        let window = self.fabric.windows.get(peer).ok_or_else(|| Error::Engine {
            peer: Some(peer),
            what: "a one-sided request to a rank outside the group".into(),
        })?;
        let window = window.read().unwrap_or_else(|p| p.into_inner());
        let (base, bytes) = window.ok_or_else(|| Error::Engine {
            peer: Some(peer),
            what: "a one-sided request, but the peer's heap has no window (it has left)".into(),
        })?;
        let inside = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= bytes as u64);
        if !inside {
            return Err(Error::Engine {
                peer: Some(peer),
                what: format!(
                    "a one-sided request for {len} bytes at heap offset {offset:#x} is \
                     outside the peer's heap of {bytes} bytes"
                ),
            });
        }
        copy(std::ptr::with_exposed_provenance_mut::<u8>(base).wrapping_add(offset as usize));
        Ok(())
    }
}

/// Write-locks a window; as for [`lock`], every update is a single assignment.
fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

impl Wire for LocalWire {
    fn has_window(&self) -> bool {
        self.window
    }

    unsafe fn put(&mut self, peer: usize, offset: u64, src: *const u8, len: usize) -> Result<()> {
        self.with_window(peer, offset, len, |dst| {
            // SAFETY: `src` is readable for `len` bytes (the caller's contract); `dst` lies
            // in the peer's heap, mapped in this process while its window is open, which
            // it is until the copy returns.
            unsafe { std::ptr::copy(src, dst, len) };
            // Publishes the bytes before whatever this proxy does next (a signal's
            // request).
            fence(Ordering::Release);
        })
    }

    unsafe fn get(&mut self, peer: usize, offset: u64, dst: *mut u8, len: usize) -> Result<()> {
        self.with_window(peer, offset, len, |src| {
            fence(Ordering::Acquire);
            // SAFETY: as in `put`, the other way round.
            unsafe { std::ptr::copy(src, dst, len) };
        })
    }

    unsafe fn request(
        &mut self,
        peer: usize,
        mut message: Vec<u8>,
        data: *const u8,
        data_len: usize,
        _reply_len: usize,
        id: u64,
    ) -> Result<()> {
        let inbox = self.fabric.inboxes.get(peer).ok_or_else(|| Error::Engine {
            peer: Some(peer),
            what: "a request to a rank outside the group".into(),
        })?;
        if data_len > 0 {
            // SAFETY: readable for `data_len` bytes (the caller's contract).
            message.extend_from_slice(unsafe { std::slice::from_raw_parts(data, data_len) });
        }
        lock(inbox).push_back((self.rank, message));
        self.inflight.push_back((peer, id));
        Ok(())
    }

    fn reply(&mut self) -> Result<Option<(u64, Vec<u8>)>> {
        let Some((from, reply)) = lock(&self.fabric.replies[self.rank]).pop_front() else {
            return Ok(None);
        };
        let at = self
            .inflight
            .iter()
            .position(|&(peer, _)| peer == from)
            .ok_or_else(|| Error::Engine {
                peer: Some(from),
                what: "a reply from a rank with no request of this rank in flight".into(),
            })?;
        let (_, id) = self.inflight.remove(at).expect("an index in range");
        Ok(Some((id, reply)))
    }

    fn next_request(&mut self, inbox: &mut [u8]) -> Result<Option<(usize, usize)>> {
        let Some((from, message)) = lock(&self.fabric.inboxes[self.rank]).pop_front() else {
            return Ok(None);
        };
        let room = inbox.len();
        let to = inbox
            .get_mut(..message.len())
            .ok_or_else(|| Error::Engine {
                peer: Some(from),
                what: format!(
                    "a request of {} bytes, more than the inbox's {room}",
                    message.len()
                ),
            })?;
        to.copy_from_slice(&message);
        Ok(Some((from, message.len())))
    }

    fn send_reply(&mut self, to: usize, reply: Vec<u8>) -> Result<()> {
        lock(&self.fabric.replies[to]).push_back((self.rank, reply));
        Ok(())
    }

    fn close(&mut self, _clean: bool) {
        // Every rank is quiet: no peer's proxy reaches this heap any more.
        *write(&self.fabric.windows[self.rank]) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_longer_than_the_inbox_is_refused_naming_its_sender() {
        let fabric = Fabric::new(2);
        let wire = |rank| LocalWire {
            fabric: fabric.clone(),
            rank,
            window: false,
            inflight: VecDeque::new(),
        };
        let (mut from, mut to) = (wire(1), wire(0));
        let data = [7u8; 32];
        // SAFETY: `data` outlives the request (the fabric holds a copy).
        unsafe { from.request(0, vec![1; 8], data.as_ptr(), data.len(), 16, 5) }.unwrap();
        let mut small = [0u8; 39];
        let refused = to.next_request(&mut small);
        assert!(
            matches!(refused, Err(Error::Engine { peer: Some(1), .. })),
            "{refused:?}"
        );
        // SAFETY: as above.
        unsafe { from.request(0, vec![1; 8], data.as_ptr(), data.len(), 16, 6) }.unwrap();
        let mut inbox = [0u8; 40];
        assert_eq!(to.next_request(&mut inbox).unwrap(), Some((1, 40)));
        assert_eq!((&inbox[..8], &inbox[8..]), (&[1u8; 8][..], &data[..]));
    }
}
