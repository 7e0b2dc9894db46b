//! Streams, events and graphs: synchronising and destroying streams, events for
//! completion and timing, and capturing a stream's work into a graph, instantiated and
//! launched.

use super::library::{DRIVER_ELAPSED_V2, driver_at_least};
use super::{Event, Graph, GraphExec, Stream, check};
use crate::error::Result;
use cudarc::driver::sys;
use std::ffi::c_uint;
use std::mem::MaybeUninit;

/// `cuStreamDestroy`.
///
/// # Safety
/// `stream` is owned by the caller (no other library destroys it) and is not used
/// afterwards.
pub(in crate::backend::cuda) unsafe fn stream_destroy(stream: Stream) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuStreamDestroy", unsafe {
        sys::cuStreamDestroy_v2(stream.0)
    })
}

/// `cuStreamSynchronize`.
pub(in crate::backend::cuda) fn stream_synchronize(stream: Stream) -> Result<()> {
    // SAFETY: the caller passes a live stream of the current context.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(stream.0)
    })
}

/// `cuEventCreate(CU_EVENT_DEFAULT)`: an event that records timing.
pub(in crate::backend::cuda) fn event_create() -> Result<Event> {
    let mut e = MaybeUninit::<sys::CUevent>::uninit();
    let flags = sys::CUevent_flags::CU_EVENT_DEFAULT as c_uint;
    // SAFETY: `e` is a valid out-pointer.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(e.as_mut_ptr(), flags)
    })?;
    // SAFETY: written by the driver on success.
    Ok(Event(unsafe { e.assume_init() }))
}

/// `cuEventCreate(CU_EVENT_DISABLE_TIMING)`: an event only for completion queries and
/// waits, cheaper to record than a timing one.
pub(in crate::backend::cuda) fn event_create_untimed() -> Result<Event> {
    let mut e = MaybeUninit::<sys::CUevent>::uninit();
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
    // SAFETY: `e` is a valid out-pointer.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(e.as_mut_ptr(), flags)
    })?;
    // SAFETY: written by the driver on success.
    Ok(Event(unsafe { e.assume_init() }))
}

/// `cuEventQuery`: `Ok(true)` when the work before the event's last record has completed,
/// `Ok(false)` while it is pending.
pub(in crate::backend::cuda) fn event_query(event: Event) -> Result<bool> {
    // SAFETY: a live event of the current context (the callers' invariant).
    match unsafe { sys::cuEventQuery(event.0) } {
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        rc => check("cuEventQuery", rc).map(|()| true),
    }
}

/// `cuEventDestroy`.
///
/// # Safety
/// `event` came from [`event_create`] and is not used afterwards.
pub(in crate::backend::cuda) unsafe fn event_destroy(event: Event) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuEventDestroy", unsafe { sys::cuEventDestroy_v2(event.0) })
}

/// `cuEventRecord` on `stream`.
pub(in crate::backend::cuda) fn event_record(event: Event, stream: Stream) -> Result<()> {
    // SAFETY: both are live handles of the current context (the callers' invariant).
    check("cuEventRecord", unsafe {
        sys::cuEventRecord(event.0, stream.0)
    })
}

/// `cuEventSynchronize`.
pub(in crate::backend::cuda) fn event_synchronize(event: Event) -> Result<()> {
    // SAFETY: a live, recorded event.
    check("cuEventSynchronize", unsafe {
        sys::cuEventSynchronize(event.0)
    })
}

/// `cuEventElapsedTime` between two completed events, in milliseconds (through cudarc,
/// which calls the form its bindings have: `_v2` from CUDA 13, which needs a driver from
/// 12.8).
pub(in crate::backend::cuda) fn event_elapsed_ms(start: Event, stop: Event) -> Result<f32> {
    if sys::CUDA_VERSION >= 13000 {
        driver_at_least(
            DRIVER_ELAPSED_V2,
            "timing with CUDA events (cuEventElapsedTime_v2)",
        )?;
    }
    // SAFETY: both events were recorded and have completed.
    Ok(unsafe { cudarc::driver::result::event::elapsed(start.0, stop.0) }?)
}

/// `cuStreamBeginCapture` in thread-local mode: work this thread enqueues on `stream` is
/// recorded into a graph instead of running, and other threads' driver calls are not
/// restricted.
pub(in crate::backend::cuda) fn stream_begin_capture(stream: Stream) -> Result<()> {
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream of the current context.
    check("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(stream.0, mode)
    })
}

/// `cuStreamEndCapture`: ends the capture begun on `stream` and returns its graph.
pub(in crate::backend::cuda) fn stream_end_capture(stream: Stream) -> Result<Graph> {
    let mut g = MaybeUninit::<sys::CUgraph>::uninit();
    // SAFETY: a live stream in capture; `g` is a valid out-pointer.
    check("cuStreamEndCapture", unsafe {
        sys::cuStreamEndCapture(stream.0, g.as_mut_ptr())
    })?;
    // SAFETY: written by the driver on success.
    Ok(Graph(unsafe { g.assume_init() }))
}

/// `cuGraphInstantiateWithFlags(graph, 0)`.
pub(in crate::backend::cuda) fn graph_instantiate(graph: Graph) -> Result<GraphExec> {
    let mut e = MaybeUninit::<sys::CUgraphExec>::uninit();
    // SAFETY: a live graph; `e` is a valid out-pointer.
    check("cuGraphInstantiate", unsafe {
        sys::cuGraphInstantiateWithFlags(e.as_mut_ptr(), graph.0, 0)
    })?;
    // SAFETY: written by the driver on success.
    Ok(GraphExec(unsafe { e.assume_init() }))
}

/// `cuGraphDestroy` (an instantiated graph does not need its source graph).
///
/// # Safety
/// `graph` came from [`stream_end_capture`] and is not used afterwards.
pub(in crate::backend::cuda) unsafe fn graph_destroy(graph: Graph) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuGraphDestroy", unsafe { sys::cuGraphDestroy(graph.0) })
}

/// `cuGraphLaunch` on `stream`.
pub(in crate::backend::cuda) fn graph_launch(exec: GraphExec, stream: Stream) -> Result<()> {
    // SAFETY: a live executable graph and stream of the current context.
    check("cuGraphLaunch", unsafe {
        sys::cuGraphLaunch(exec.0, stream.0)
    })
}

/// `cuGraphExecDestroy` (deferred by the driver while a launch of it is in flight).
///
/// # Safety
/// `exec` came from [`graph_instantiate`] and is not launched afterwards.
pub(in crate::backend::cuda) unsafe fn graph_exec_destroy(exec: GraphExec) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuGraphExecDestroy", unsafe {
        sys::cuGraphExecDestroy(exec.0)
    })
}
