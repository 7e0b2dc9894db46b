//! Page-locked staging for host↔device copies, one ring per rank.
//!
//! Copies from or to pageable host memory go through the driver's own staging buffers,
//! which every user of the context shares. With several ranks on one GPU that couples
//! them: a rank whose download waits behind its own collective kernel (which waits for a
//! peer) holds up the peer's upload, the peer never launches its half of the
//! collective, and both hang. So each [`super::Cuda`] stages through a page-locked ring
//! of its own and the driver only ever sees page-locked host memory:
//!
//! - an upload copies the bytes into the ring, enqueues `cuMemcpyHtoDAsync` from there
//!   and records an event behind it; it returns without waiting for the device (the
//!   allocation path's zero-sync guarantee holds), and waits only when the ring is full
//!   of copies still in flight;
//! - a download enqueues `cuMemcpyDtoHAsync` into the ring, synchronises the stream once
//!   per ring's worth of bytes and copies out.

use super::driver::{self, Event, Stream};
use super::handles::Context;
use crate::backend::gpu::DeviceScope;
use crate::error::Result;
use std::collections::VecDeque;
use std::sync::Arc;

/// Bytes of page-locked memory per rank.
pub(super) const RING_BYTES: usize = 8 << 20;
/// The largest piece one upload copy stages (a quarter of the ring, so several uploads
/// stay in flight).
const UPLOAD_CHUNK: usize = RING_BYTES / 4;
/// Uploads in flight at most (one event each).
const EVENTS: usize = 32;

/// A stretch of the ring still read by an enqueued upload.
#[derive(Debug)]
struct Span {
    start: usize,
    end: usize,
    done: Event,
}

/// One rank's page-locked ring and the uploads still reading from it.
#[derive(Debug)]
pub(super) struct Staging {
    ctx: Arc<Context>,
    host: *mut u8,
    in_flight: VecDeque<Span>,
    idle_events: Vec<Event>,
}

// SAFETY: `host` is page-locked memory owned by this value alone; it is only touched
// through `&mut self` (the backend keeps `Staging` behind a mutex).
unsafe impl Send for Staging {}

impl Staging {
    /// Allocates the ring and its events in the current context.
    ///
    /// # Errors
    /// [`crate::Error::Driver`] when page-locked memory or events cannot be had.
    pub(super) fn new(ctx: Arc<Context>) -> Result<Self> {
        let mut staging = Self {
            ctx,
            host: driver::mem_host_alloc(RING_BYTES)?,
            in_flight: VecDeque::new(),
            idle_events: Vec::with_capacity(EVENTS),
        };
        for _ in 0..EVENTS {
            // On failure `staging` drops and frees what was made so far.
            staging.idle_events.push(driver::event_create_untimed()?);
        }
        Ok(staging)
    }

    /// Enqueues the copy of `src` to device address `dst` on `stream`; returns once the
    /// bytes are staged. `on_wait` is called for each wait on the device (ring full).
    ///
    /// # Safety
    /// `dst..dst + src.len()` is device memory writable by this context; `stream` is the
    /// stream every call on this `Staging` uses.
    pub(super) unsafe fn upload(
        &mut self,
        dst: u64,
        src: &[u8],
        stream: Stream,
        on_wait: &dyn Fn(),
    ) -> Result<()> {
        let mut dst = dst;
        for piece in src.chunks(UPLOAD_CHUNK) {
            let start = self.reserve(piece.len(), on_wait)?;
            // SAFETY: `reserve` returned a range inside the ring that no pending copy
            // reads, and `piece` is host memory that cannot overlap page-locked memory
            // this value owns.
            let staged = unsafe {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), self.host.add(start), piece.len());
                std::slice::from_raw_parts(self.host.add(start), piece.len())
            };
            // SAFETY: `dst` is the caller's; `staged` stays unchanged until the event
            // recorded below completes (the span keeps it reserved), and the ring is freed
            // only after every span's event has completed (`Drop`).
            unsafe { driver::memcpy_htod_async(dst, staged, stream)? };
            let done = self
                .idle_events
                .pop()
                .expect("reserve leaves an idle event");
            if let Err(e) = driver::event_record(done, stream) {
                // Nothing tracks the copy now: wait it out before the ring is reused.
                self.idle_events.push(done);
                driver::stream_synchronize(stream)?;
                on_wait();
                return Err(e);
            }
            self.in_flight.push_back(Span {
                start,
                end: start + piece.len(),
                done,
            });
            dst += piece.len() as u64;
        }
        Ok(())
    }

    /// Copies device bytes at `src` into `dst` through the ring, synchronising `stream`
    /// once per [`RING_BYTES`] (each counted through `on_wait`).
    ///
    /// # Safety
    /// `src..src + dst.len()` is device memory readable by this context; `stream` is the
    /// stream every call on this `Staging` uses.
    pub(super) unsafe fn download(
        &mut self,
        dst: &mut [u8],
        src: u64,
        stream: Stream,
        on_wait: &dyn Fn(),
    ) -> Result<()> {
        let mut src = src;
        for piece in dst.chunks_mut(RING_BYTES) {
            // Pending uploads read the ring on the same stream, before this copy writes
            // it, so the whole ring is usable; the sync below completes them all.
            // SAFETY: the ring holds `RING_BYTES` ≥ `piece.len()` bytes, and no host code
            // touches it until the stream is synchronised below.
            let ring = unsafe { std::slice::from_raw_parts_mut(self.host, piece.len()) };
            // SAFETY: `src` is the caller's; `ring` is read only after the sync below.
            let copied = unsafe { driver::memcpy_dtoh_async(ring, src, stream) };
            // Synchronise even when enqueuing failed, so no copy into the ring is in flight.
            let synced = driver::stream_synchronize(stream);
            on_wait();
            copied.and(synced)?;
            self.idle_events
                .extend(self.in_flight.drain(..).map(|span| span.done));
            piece.copy_from_slice(ring);
            src += piece.len() as u64;
        }
        Ok(())
    }

    /// The start of `bytes` (≤ [`UPLOAD_CHUNK`]) of the ring that no pending upload reads,
    /// with an idle event to track them. Only when there is none does it ask the driver
    /// which uploads have completed (all of them, when the newest has: one query per
    /// ring's worth in the common case), and waits on the oldest if that frees nothing.
    fn reserve(&mut self, bytes: usize, on_wait: &dyn Fn()) -> Result<usize> {
        debug_assert!(bytes <= UPLOAD_CHUNK);
        loop {
            if !self.idle_events.is_empty()
                && let Some(start) = self.free_range(bytes)
            {
                return Ok(start);
            }
            // Uploads complete in stream order.
            let newest = self
                .in_flight
                .back()
                .expect("an empty ring has room and events");
            if driver::event_query(newest.done)? {
                self.idle_events
                    .extend(self.in_flight.drain(..).map(|span| span.done));
                continue;
            }
            let oldest = self.in_flight.front().expect("not empty");
            if !driver::event_query(oldest.done)? {
                driver::event_synchronize(oldest.done)?;
                on_wait();
            }
            self.retire_front();
        }
    }

    /// Where `bytes` fit beside the pending spans (see [`fit`]).
    fn free_range(&self, bytes: usize) -> Option<usize> {
        match (self.in_flight.front(), self.in_flight.back()) {
            (Some(oldest), Some(newest)) => fit(oldest.start, newest.start, newest.end, bytes),
            _ => Some(0),
        }
    }

    fn retire_front(&mut self) {
        if let Some(span) = self.in_flight.pop_front() {
            self.idle_events.push(span.done);
        }
    }
}

/// Where `bytes` fit in a ring whose pending spans occupy one stretch from the oldest's
/// start to the newest's end, possibly wrapping round: after the newest, else (not
/// wrapped) from the ring's start up to the oldest.
fn fit(oldest_start: usize, newest_start: usize, newest_end: usize, bytes: usize) -> Option<usize> {
    let wrapped = newest_start < oldest_start;
    let limit = if wrapped { oldest_start } else { RING_BYTES };
    if newest_end + bytes <= limit {
        Some(newest_end)
    } else if !wrapped && bytes <= oldest_start {
        Some(0)
    } else {
        None
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.ctx.drop_errors.record(self.ctx.make_current());
        for span in std::mem::take(&mut self.in_flight) {
            self.ctx
                .drop_errors
                .record(driver::event_synchronize(span.done));
            self.idle_events.push(span.done);
        }
        for event in self.idle_events.drain(..) {
            // SAFETY: every event has completed (waited above) and is not used again.
            self.ctx
                .drop_errors
                .record(unsafe { driver::event_destroy(event) });
        }
        // SAFETY: no copy into or out of the ring is pending (every upload's event was
        // waited above; downloads complete before they return).
        self.ctx
            .drop_errors
            .record(unsafe { driver::mem_free_host(self.host) });
    }
}

#[cfg(test)]
mod tests {
    //! The ring's placement rule, checked without a device.

    use super::*;

    #[test]
    fn staging_ring_placement() {
        let r = RING_BYTES;
        // One span at the start: after it.
        assert_eq!(fit(0, 0, 100, UPLOAD_CHUNK), Some(100));
        // The tail is too short: wrap to the start only as far as the oldest has moved on.
        assert_eq!(fit(0, 0, r - 10, 11), None);
        assert_eq!(fit(20, 20, r - 10, 11), Some(0));
        assert_eq!(fit(20, 20, r - 10, 21), None);
        assert_eq!(fit(20, 20, r - 10, 10), Some(r - 10));
        // Wrapped (oldest at 1000, newest 0..500): only the gap between them.
        assert_eq!(fit(1000, 0, 500, 500), Some(500));
        assert_eq!(fit(1000, 0, 500, 501), None);
    }
}
