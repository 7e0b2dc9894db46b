//! What the CUDA and HIP backends share, written once over a small trait of each
//! runtime's handles ([`Runtime`]): the record of failures while dropping
//! ([`DropErrors`]), the RAII handles that release a module, a stream, an IPC mapping
//! and mapped host memory, a peer's memory as mapped here ([`Mapping`]), a loaded
//! kernel crate with its kernels found by name ([`Module`]), the rank's stream and wait
//! count ([`Rank`]), the default launch shape, each rank's claim on its device's hardware
//! queues ([`QueueSlot`]), and the [`Backend`] implementation itself
//! over what differs between the runtimes ([`GpuBackend`]).
//!
//! Every handle keeps its backend's [`Runtime::Scope`]: what makes its device current on
//! the dropping thread, and the backend's [`DropErrors`], where a failed release goes.
//!
//! [`Backend`]: crate::backend::Backend

mod backend;
mod drop_errors;
mod handles;
mod launch_shape;
mod module;
mod queues;
mod rank;

pub use backend::GpuBackend;
pub use drop_errors::DropErrors;
use handles::LoadedModule;
pub use handles::{HostMapped, Mapping};
pub(in crate::backend) use handles::{OwnedStream, StreamOwner};
#[cfg(feature = "hip")]
pub(in crate::backend) use launch_shape::THREADS;
pub(in crate::backend) use launch_shape::grid_for_bytes;
pub use module::Module;
pub(in crate::backend) use queues::{QueueSetting, QueueSlot, configure as configure_queues};
pub(in crate::backend) use rank::DeviceInfo;
pub use rank::Rank;

use crate::backend::ipc::HANDLE_BYTES;
use crate::backend::{BackendKind, Grid};
use crate::error::Result;
use std::ffi::CStr;
use std::fmt::Debug;
use symmem_rma::engine::{NvshmemHeap, Ring};

/// The module globals a rank's kernels find the world by, with the bytes each gets: the
/// address of the control block `control` (`SYMMEM_CONTROL`, `symmem_rma::watch`) and,
/// where the world runs an off-node transport, a copy of its ring (`SYMMEM_ENGINE`,
/// `symmem_rma::engine`) or NVSHMEM's heap alias (`SYMMEM_NVSHMEM`).
fn module_globals(
    control: u64,
    engine: Option<&Ring>,
    nvshmem: Option<&NvshmemHeap>,
) -> Vec<(&'static CStr, Vec<u8>)> {
    let mut globals = vec![(c"SYMMEM_CONTROL", control.to_ne_bytes().to_vec())];
    if let Some(ring) = engine {
        globals.push((c"SYMMEM_ENGINE", bytemuck::bytes_of(ring).to_vec()));
    }
    if let Some(heap) = nvshmem {
        globals.push((c"SYMMEM_NVSHMEM", bytemuck::bytes_of(heap).to_vec()));
    }
    globals
}

/// The global NVSHMEM's device library keeps its state in: a module that has it calls
/// NVSHMEM and must be initialised by the NVSHMEM transport.
const NVSHMEM_DEVICE_STATE: &CStr = c"nvshmemi_device_state_d";

/// [`crate::Error::BadCodeObject`] unless global `name` of a module (of crate `module`,
/// built for `target`) is `want` bytes: the module was built against another symmem.
fn check_global(
    module: &'static str,
    target: &str,
    name: &CStr,
    bytes: usize,
    want: usize,
) -> Result<()> {
    if bytes == want {
        return Ok(());
    }
    Err(crate::error::Error::BadCodeObject {
        module,
        target: target.to_owned(),
        why: format!(
            "its {} global is {bytes} bytes, not the {want} this symmem writes: build it \
             against the same symmem-rma as the host",
            name.to_string_lossy()
        ),
    })
}

/// What a GPU backend's handles keep to reach their device: CUDA's retain of a primary
/// context, HIP's device ordinal, each with the backend's [`DropErrors`].
pub trait DeviceScope: Send + Sync + Debug + 'static {
    /// Makes the device current on the calling thread.
    fn make_current(&self) -> Result<()>;

    /// Where failures while dropping the backend's objects are recorded.
    fn drop_errors(&self) -> &DropErrors;

    /// Makes the device current and runs `release`, recording a failure of either (for
    /// `Drop`, which must not panic).
    fn release(&self, release: impl FnOnce() -> Result<()>) {
        self.drop_errors()
            .record(self.make_current().and_then(|()| release()));
    }
}

impl<S: DeviceScope> crate::backend::DeviceBinding for S {
    fn make_current(&self) -> Result<()> {
        DeviceScope::make_current(self)
    }
}

/// One GPU runtime's handle types and the calls that release them, for the shared RAII
/// types of this module. Implemented by a marker type of each backend.
pub trait Runtime: Debug + Send + Sync + 'static {
    /// The runtime's name in messages (`CUDA`, `HIP`).
    const NAME: &'static str;
    /// Which runtime this is.
    const KIND: BackendKind;
    /// The most blocks a launch may have.
    const MAX_BLOCKS: u64;
    /// What handles keep to reach their device.
    type Scope: DeviceScope;
    /// A stream.
    type Stream: Copy + Send + Sync + Debug;
    /// A loaded code object.
    type Module: Copy + Send + Sync + Debug;
    /// A kernel of a loaded code object.
    type Function: Copy + Send + Sync + Debug;
    /// A kernel launch's arguments in the form the runtime takes them.
    type KernelArgs;
    /// A stream's captured work, before instantiation.
    type Graph: Copy;
    /// An instantiated graph.
    type GraphExec;
    /// A peer's memory imported and mapped by the runtime's own means rather than IPC
    /// (CUDA: a peer's VMM heap from its file descriptor).
    type Imported: Send + Sync + Debug;
    /// What an in-process alias of another device's memory keeps alive (CUDA: a retain
    /// of that device's primary context).
    type PeerRetain: Send + Sync + Debug;

    /// The address and size of global `name` of `module`; `None` if it has none.
    fn module_get_global(module: Self::Module, name: &CStr) -> Result<Option<(u64, usize)>>;

    /// The runtime's module handle as an integer (a `CUmodule`, a `hipModule_t`), for a
    /// library that takes it.
    fn module_word(module: Self::Module) -> u64;

    /// Copies `src` to device address `dst` and returns once it is there.
    ///
    /// # Safety
    /// `dst..dst + src.len()` is writable device memory of the current device, not in
    /// use by a running kernel.
    unsafe fn memcpy_htod(dst: u64, src: &[u8]) -> Result<()>;

    /// Waits for all work enqueued on `stream`.
    fn stream_synchronize(stream: Self::Stream) -> Result<()>;

    /// Starts capturing `stream`'s launches into a graph.
    fn stream_begin_capture(stream: Self::Stream) -> Result<()>;

    /// Enqueues setting `bytes` bytes at `dst` to `value` on `stream`.
    ///
    /// # Safety
    /// `dst..dst + bytes` is writable device memory that nothing races with.
    unsafe fn memset_d8_async(
        dst: u64,
        value: u8,
        bytes: usize,
        stream: Self::Stream,
    ) -> Result<()>;

    /// Ends the capture of `stream`: the graph it recorded.
    fn stream_end_capture(stream: Self::Stream) -> Result<Self::Graph>;

    /// Instantiates `graph` for launching.
    fn graph_instantiate(graph: Self::Graph) -> Result<Self::GraphExec>;

    /// Destroys `graph`.
    ///
    /// # Safety
    /// `graph` is not used after this.
    unsafe fn graph_destroy(graph: Self::Graph) -> Result<()>;

    /// The IPC handle of the allocation at `ptr` on the current device.
    fn ipc_get_mem_handle(ptr: u64) -> Result<[u8; HANDLE_BYTES]>;

    /// Enqueues `function` over `grid` on `stream` with arguments `args`.
    ///
    /// # Safety
    /// `args` are `function`'s arguments in the runtime's form, and every address among
    /// them satisfies the kernel's contract.
    unsafe fn launch_kernel(
        function: Self::Function,
        grid: Grid,
        stream: Self::Stream,
        args: &mut Self::KernelArgs,
    ) -> Result<()>;

    /// Allocates `bytes` of page-locked host memory mapped into the current device:
    /// its host and device addresses.
    fn host_alloc_mapped(bytes: usize) -> Result<(*mut u8, u64)>;

    /// Unloads `module`.
    ///
    /// # Safety
    /// No kernel of `module` runs, and it is not used after this.
    unsafe fn module_unload(module: Self::Module) -> Result<()>;

    /// Destroys `stream`.
    ///
    /// # Safety
    /// `stream` was created by the backend and is not used after this.
    unsafe fn stream_destroy(stream: Self::Stream) -> Result<()>;

    /// Closes a pointer opened from a peer's IPC handle.
    ///
    /// # Safety
    /// `ptr` came from the runtime's IPC open and is not used after this.
    unsafe fn ipc_close_mem_handle(ptr: u64) -> Result<()>;

    /// Frees page-locked host memory.
    ///
    /// # Safety
    /// `host` came from the runtime's mapped host allocation, no kernel reads it any
    /// more, and it is not used after this.
    unsafe fn host_free(host: *mut u8) -> Result<()>;
}
