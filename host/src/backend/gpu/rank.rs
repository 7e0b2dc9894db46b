//! What every GPU rank keeps besides its device: its stream, its name and the count of
//! its waits for the device.

use super::{DeviceScope, OwnedStream, Runtime};
use crate::error::Result;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A GPU rank's stream on its device (shared with what replays on it), the device's name
/// and how many times the rank has waited for the device. Dropping it waits for the
/// stream first (a teardown wait, not counted), so nothing the backend frees afterwards
/// is under a running kernel.
#[derive(Debug)]
pub struct Rank<R: Runtime> {
    stream: Arc<OwnedStream<R>>,
    name: String,
    syncs: AtomicU64,
}

impl<R: Runtime> Rank<R> {
    /// The rank of device `name` (reached through `scope`) that owns `stream`.
    pub(in crate::backend) fn new(scope: Arc<R::Scope>, stream: R::Stream, name: String) -> Self {
        Self {
            stream: Arc::new(OwnedStream { scope, stream }),
            name,
            syncs: AtomicU64::new(0),
        }
    }

    /// The device's scope: makes it current, records drop failures.
    pub(in crate::backend) fn scope(&self) -> &R::Scope {
        &self.stream.scope
    }

    /// The rank's stream.
    pub(in crate::backend) fn stream(&self) -> R::Stream {
        self.stream.stream
    }

    /// The rank's stream as owned, for what must keep it alive (a graph replayed on it).
    pub(in crate::backend) fn owned_stream(&self) -> &Arc<OwnedStream<R>> {
        &self.stream
    }

    /// The device's name.
    pub(in crate::backend) fn name(&self) -> &str {
        &self.name
    }

    /// Counts one wait for the device.
    pub(in crate::backend) fn count_sync(&self) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times the rank has waited for the device.
    pub(in crate::backend) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Waits for all work enqueued on the stream: one counted wait.
    pub(in crate::backend) fn synchronize(&self) -> Result<()> {
        self.scope().make_current()?;
        let synced = R::stream_synchronize(self.stream());
        self.count_sync();
        synced
    }
}

impl<R: Runtime> Drop for Rank<R> {
    fn drop(&mut self) {
        // Teardown only, not counted: nothing may be freed under a running kernel, so
        // wait for the stream before the backend's other fields drop.
        let stream = self.stream();
        self.scope().release(|| R::stream_synchronize(stream));
    }
}
