//! Device-side timing for benchmarks: a pair of CUDA events around work enqueued on the
//! backend's own stream, `cuMemcpyDtoDAsync` as the copy-engine reference, and CUDA-graph
//! capture and replay ([`Timer::capture`]) so small operations can be timed without the
//! host's per-launch cost, as other tools' benchmarks (Triton's `do_bench_cudagraph`) do.
//!
//! A [`Timer`] borrows a [`Cuda`] backend ([`Cuda::timer`]): it records its events on the
//! backend's own stream, so what it times is exactly what the world launches there
//! (through [`crate::Module::launch`], as any program does), and nothing needs ordering
//! between streams. The timer's own waits are not counted in
//! [`crate::backend::Backend::device_to_host_syncs`]: they are the benchmark's waits, not the library's.

use super::{Cuda, DeviceContext, driver};
use crate::backend::gpu::DeviceScope;
use crate::error::Result;

/// Times work on one backend's stream; see the module documentation.
#[derive(Debug)]
pub struct Timer<'a> {
    cuda: &'a Cuda,
    start: driver::Event,
    stop: driver::Event,
}

impl Cuda {
    /// A [`Timer`] on this backend's stream.
    ///
    /// # Errors
    /// [`crate::Error::Driver`] when the events cannot be created.
    pub fn timer(&self) -> Result<Timer<'_>> {
        self.ctx.make_current()?;
        let start = driver::event_create()?;
        let stop = driver::event_create().inspect_err(|_| {
            // SAFETY: created just above and not used afterwards.
            self.ctx
                .drop_errors
                .record(unsafe { driver::event_destroy(start) });
        })?;
        Ok(Timer {
            cuda: self,
            start,
            stop,
        })
    }
}

impl Timer<'_> {
    /// Enqueues `cuMemcpyDtoDAsync` of `bytes` from `src` to `dst` on the backend's stream.
    ///
    /// # Errors
    /// [`crate::Error::Driver`] when the driver refuses the copy.
    ///
    /// # Safety
    /// `src..src+bytes` is readable and `dst..dst+bytes` writable device memory of this
    /// context until the copy completes.
    pub unsafe fn memcpy_dtod(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.cuda.ctx.make_current()?;
        // SAFETY: forwarded from the caller; the stream is live.
        unsafe { driver::memcpy_dtod_async(dst, src, bytes, self.cuda.rank.stream()) }
    }

    /// Enqueues `cuMemcpyPeerAsync` of `bytes` from `src` (memory of `src_ctx`'s device)
    /// to `dst` (memory of `dst_ctx`'s device) on the backend's stream: the driver's
    /// reference copy between two GPUs.
    ///
    /// # Errors
    /// [`crate::Error::Driver`] when the driver refuses the copy.
    ///
    /// # Safety
    /// `src..src+bytes` is readable device memory of `src_ctx`'s device and
    /// `dst..dst+bytes` writable device memory of `dst_ctx`'s, until the copy completes.
    pub unsafe fn memcpy_peer(
        &self,
        dst: u64,
        dst_ctx: &DeviceContext,
        src: u64,
        src_ctx: &DeviceContext,
        bytes: usize,
    ) -> Result<()> {
        self.cuda.ctx.make_current()?;
        // SAFETY: forwarded from the caller; both contexts are retained by the borrowed
        // handles and the stream is live.
        unsafe {
            driver::memcpy_peer_async(
                dst,
                dst_ctx.0.ctx,
                src,
                src_ctx.0.ctx,
                bytes,
                self.cuda.rank.stream(),
            )
        }
    }

    /// Records the start event, runs `enqueue` (which enqueues work through this timer),
    /// records the stop event, waits for it and returns the elapsed device time in ms.
    ///
    /// # Errors
    /// Whatever `enqueue` returns, and [`crate::Error::Driver`] from the event calls.
    pub fn time_ms(&self, enqueue: impl FnOnce(&Self) -> Result<()>) -> Result<f32> {
        self.cuda.ctx.make_current()?;
        let stream = self.cuda.rank.stream();
        driver::event_record(self.start, stream)?;
        let enqueued = enqueue(self);
        self.cuda.ctx.make_current()?;
        driver::event_record(self.stop, stream)?;
        driver::event_synchronize(self.stop)?;
        enqueued?;
        driver::event_elapsed_ms(self.start, self.stop)
    }

    /// Waits until everything enqueued on the backend's stream is done (not counted as
    /// one of the library's synchronisations).
    ///
    /// # Errors
    /// [`crate::Error::Driver`], for instance when an enqueued kernel faulted.
    pub fn synchronize(&self) -> Result<()> {
        self.cuda.ctx.make_current()?;
        driver::stream_synchronize(self.cuda.rank.stream())
    }
}

/// Work captured from a [`Timer`]'s stream into an instantiated CUDA graph; one
/// [`Timer::replay`] enqueues all of it again, with the same arguments.
#[derive(Debug)]
pub struct Replay<'a> {
    cuda: &'a Cuda,
    exec: driver::GraphExec,
}

impl Timer<'_> {
    /// Records what `enqueue` enqueues through this timer into a graph instead of running
    /// it (stream capture, thread-local mode), and instantiates the graph.
    ///
    /// # Errors
    /// Whatever `enqueue` returns, and [`crate::Error::Driver`] when the driver refuses
    /// the capture (for instance a synchronising call inside `enqueue`).
    pub fn capture(&self, enqueue: impl FnOnce(&Self) -> Result<()>) -> Result<Replay<'_>> {
        self.cuda.ctx.make_current()?;
        let stream = self.cuda.rank.stream();
        driver::stream_begin_capture(stream)?;
        let enqueued = enqueue(self);
        self.cuda.ctx.make_current()?;
        // End the capture whatever `enqueue` did, so the stream runs work again.
        let graph = driver::stream_end_capture(stream)?;
        let exec = enqueued.and_then(|()| driver::graph_instantiate(graph));
        // SAFETY: the graph was ended above and is not used again (an instantiated graph
        // does not need it).
        self.cuda
            .ctx
            .drop_errors
            .record(unsafe { driver::graph_destroy(graph) });
        Ok(Replay {
            cuda: self.cuda,
            exec: exec?,
        })
    }

    /// Enqueues `replay`'s captured work on the backend's stream (one `cuGraphLaunch`).
    ///
    /// # Errors
    /// [`crate::Error::Driver`] when the driver refuses the launch.
    pub fn replay(&self, replay: &Replay<'_>) -> Result<()> {
        self.cuda.ctx.make_current()?;
        driver::graph_launch(replay.exec, self.cuda.rank.stream())
    }
}

impl Drop for Replay<'_> {
    fn drop(&mut self) {
        self.cuda
            .ctx
            .drop_errors
            .record(self.cuda.ctx.make_current());
        // SAFETY: instantiated in `Timer::capture` and not launched after this; the driver
        // defers the destruction while a launch is in flight.
        self.cuda
            .ctx
            .drop_errors
            .record(unsafe { driver::graph_exec_destroy(self.exec) });
    }
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        self.cuda
            .ctx
            .drop_errors
            .record(self.cuda.ctx.make_current());
        self.cuda
            .ctx
            .drop_errors
            .record(driver::event_synchronize(self.stop));
        for event in [self.start, self.stop] {
            // SAFETY: created in `Cuda::timer` and not used after this.
            self.cuda
                .ctx
                .drop_errors
                .record(unsafe { driver::event_destroy(event) });
        }
    }
}
