//! What every GPU rank keeps besides its device handle: its stream, which device it
//! drives, and the count of its waits for the device; and what it does with them alike
//! on every runtime.

use super::{DeviceScope, LoadedModule, OwnedStream, Runtime, StreamOwner};
use crate::backend::ipc::IpcExport;
use crate::backend::{Grid, Shareable};
use crate::error::{Error, Result};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A GPU rank's stream on its device (shared with what replays on it), which device that
/// is, and how many times the rank has waited for it. Dropping it waits for the stream
/// first (a teardown wait, not counted), so nothing the backend frees afterwards is under
/// a running kernel.
#[derive(Debug)]
pub struct Rank<R: Runtime> {
    stream: Arc<OwnedStream<R>>,
    ordinal: usize,
    name: String,
    arch: String,
    syncs: AtomicU64,
}

/// Which device a [`Rank`] drives.
pub(in crate::backend) struct DeviceInfo {
    /// The device ordinal.
    pub ordinal: usize,
    /// The device's name.
    pub name: String,
    /// The device's architecture as the runtime names it.
    pub arch: String,
}

impl<R: Runtime> Rank<R> {
    /// The rank that uses `stream` on device `device` (reached through `scope`); `owner`
    /// says who destroys the stream.
    pub(in crate::backend) fn new(
        scope: Arc<R::Scope>,
        stream: R::Stream,
        owner: StreamOwner,
        device: DeviceInfo,
    ) -> Self {
        Self {
            stream: Arc::new(OwnedStream {
                scope,
                stream,
                owner,
            }),
            ordinal: device.ordinal,
            name: device.name,
            arch: device.arch,
            syncs: AtomicU64::new(0),
        }
    }

    /// The device's scope: makes it current, records drop failures.
    pub(in crate::backend) fn scope(&self) -> &R::Scope {
        &self.stream.scope
    }

    /// The device's scope, shared with a handle that keeps it.
    pub(in crate::backend) fn shared_scope(&self) -> Arc<R::Scope> {
        Arc::clone(&self.stream.scope)
    }

    /// The rank's stream.
    pub(in crate::backend) fn stream(&self) -> R::Stream {
        self.stream.stream
    }

    /// The rank's stream as owned, for what must keep it alive (a HIP graph replayed on
    /// it).
    #[cfg(feature = "hip")]
    pub(in crate::backend) fn owned_stream(&self) -> &Arc<OwnedStream<R>> {
        &self.stream
    }

    /// The device ordinal.
    pub(in crate::backend) fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's name.
    pub(in crate::backend) fn name(&self) -> &str {
        &self.name
    }

    /// The device's architecture as the runtime names it.
    pub(in crate::backend) fn arch(&self) -> &str {
        &self.arch
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

    /// What a peer needs to map this rank's device allocation of `len` bytes at `ptr`
    /// from byte `offset` on.
    pub(in crate::backend) fn export_ipc(
        &self,
        ptr: u64,
        len: usize,
        offset: u64,
    ) -> Result<Shareable> {
        self.scope().make_current()?;
        let handle = R::ipc_get_mem_handle(ptr)?;
        Ok(IpcExport::shareable(handle, self.ordinal, ptr, len, offset))
    }

    /// What a peer needs to map the application's `bytes` at `ptr`, inside the allocation
    /// of `len` bytes at `base` (on this rank's device): as [`Rank::export_ipc`] where the
    /// runtime gives the allocation an IPC handle; where it does not (a stream-ordered
    /// pool's memory, VMM memory), an export without one ([`IpcExport::has_handle`]),
    /// which only ranks of this process can use: they alias the pointer.
    ///
    /// # Errors
    /// [`Error::NotShareable`] for a range that runs past the allocation's end.
    pub(in crate::backend) fn export_ipc_range(
        &self,
        ptr: u64,
        bytes: usize,
        base: u64,
        len: usize,
    ) -> Result<Shareable> {
        let offset = ptr - base;
        if offset
            .checked_add(bytes as u64)
            .is_none_or(|end| end > len as u64)
        {
            return Err(Error::NotShareable {
                addr: ptr,
                bytes,
                why: format!(
                    "it runs past the end of its allocation ({len} bytes at {base:#x}): a \
                     registered range lies in one allocation"
                ),
            });
        }
        self.scope().make_current()?;
        let handle = R::ipc_get_mem_handle(base).unwrap_or_else(|e| {
            tracing::debug!(
                base,
                len,
                error = %e,
                "the runtime gives this allocation no IPC handle: only ranks of this process \
                 can map it"
            );
            [0; crate::backend::ipc::HANDLE_BYTES]
        });
        Ok(IpcExport::shareable(
            handle,
            self.ordinal,
            base,
            len,
            offset,
        ))
    }

    /// The code object `load` loads with the device current, unloaded on drop.
    pub(in crate::backend) fn load_module(
        &self,
        load: impl FnOnce() -> Result<R::Module>,
    ) -> Result<LoadedModule<R>> {
        self.scope().make_current()?;
        Ok(LoadedModule {
            scope: self.shared_scope(),
            module: load()?,
        })
    }

    /// Enqueues `function` over `grid` with the runtime's kernel arguments `args`.
    ///
    /// # Safety
    /// `args` are `function`'s arguments in the runtime's form, and every address among
    /// them satisfies the kernel's contract.
    pub(in crate::backend) unsafe fn launch(
        &self,
        function: R::Function,
        grid: Grid,
        args: &mut R::KernelArgs,
    ) -> Result<()> {
        self.scope().make_current()?;
        // SAFETY: forwarded from the caller.
        unsafe { R::launch_kernel(function, grid, self.stream(), args) }
    }

    /// Ends the capture begun on the stream and instantiates what it recorded. The
    /// recorded graph itself is destroyed (the instantiation does not need it: CUDA's
    /// does not, and the HIP runtimes this backend supports, ROCm 6.0 and later, clone
    /// the graph's nodes, kernarg buffers included, when instantiating); a failure
    /// there is recorded as a drop error.
    pub(in crate::backend) fn end_capture(&self) -> Result<R::GraphExec> {
        self.scope().make_current()?;
        let graph = R::stream_end_capture(self.stream())?;
        let exec = R::graph_instantiate(graph);
        // SAFETY: the graph was ended above and is not used again; the instantiation
        // does not need it (above).
        let destroyed = unsafe { R::graph_destroy(graph) };
        self.scope().drop_errors().record(destroyed);
        exec
    }

    /// The debug output of the backend `backend` of this rank: the device, then
    /// `runtime`'s fields.
    pub(in crate::backend) fn fmt_backend(
        &self,
        f: &mut fmt::Formatter<'_>,
        backend: &str,
        runtime: &[(&str, &dyn fmt::Debug)],
    ) -> fmt::Result {
        let mut out = f.debug_struct(backend);
        out.field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("arch", &self.arch);
        for (name, value) in runtime {
            out.field(name, value);
        }
        out.finish_non_exhaustive()
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
