//! The HIP runtime behind the backend's handles: its calls as the shared GPU code makes
//! them ([`HipRuntime`]) and the device every handle keeps ([`Device`]).

use super::code_object::AlignedBytes;
use super::runtime;
use crate::backend::gpu::{self, DeviceScope, DropErrors};
use crate::backend::ipc::HANDLE_BYTES;
use crate::backend::{BackendKind, Grid};
use crate::error::Result;
use std::ffi::{CStr, c_int};
use std::sync::Arc;

/// The HIP runtime's handles, as the shared GPU handles ([`gpu`]) release them.
#[derive(Debug)]
pub struct HipRuntime;

impl gpu::Runtime for HipRuntime {
    const NAME: &'static str = "HIP";
    const KIND: BackendKind = BackendKind::Hip;
    const MAX_BLOCKS: u64 = super::MAX_BLOCKS;
    type Scope = Device;
    type Stream = runtime::Stream;
    type Module = runtime::Module;
    type Function = runtime::Function;
    type KernelArgs = AlignedBytes;
    type Graph = runtime::Graph;
    type GraphExec = runtime::GraphExec;
    // HIP maps every peer's memory through IPC, and an alias needs no retain.
    type Imported = std::convert::Infallible;
    type PeerRetain = std::convert::Infallible;

    fn stream_synchronize(stream: runtime::Stream) -> Result<()> {
        runtime::stream_synchronize(stream)
    }
    fn stream_begin_capture(stream: runtime::Stream) -> Result<()> {
        runtime::stream_begin_capture(stream)
    }
    unsafe fn memset_d8_async(
        dst: u64,
        value: u8,
        bytes: usize,
        stream: runtime::Stream,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { runtime::memset_d8_async(dst, value, bytes, stream) }
    }
    fn stream_end_capture(stream: runtime::Stream) -> Result<runtime::Graph> {
        runtime::stream_end_capture(stream)
    }
    fn graph_instantiate(graph: runtime::Graph) -> Result<runtime::GraphExec> {
        runtime::graph_instantiate(graph)
    }
    unsafe fn graph_destroy(graph: runtime::Graph) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { runtime::graph_destroy(graph) }
    }
    fn ipc_get_mem_handle(ptr: u64) -> Result<[u8; HANDLE_BYTES]> {
        runtime::ipc_get_mem_handle(ptr)
    }
    unsafe fn launch_kernel(
        function: runtime::Function,
        grid: Grid,
        stream: runtime::Stream,
        kernargs: &mut AlignedBytes,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller: `kernargs` is the kernel's explicit kernarg
        // segment, in storage aligned to KERNARG_BUFFER_ALIGN.
        unsafe { runtime::launch_kernel(function, grid.blocks, grid.threads, stream, kernargs) }
    }
    fn host_alloc_mapped(bytes: usize) -> Result<(*mut u8, u64)> {
        runtime::host_malloc_mapped(bytes)
    }
    fn module_get_global(module: runtime::Module, name: &CStr) -> Result<Option<(u64, usize)>> {
        runtime::module_get_global(module, name)
    }
    fn module_word(module: runtime::Module) -> u64 {
        module.word()
    }
    unsafe fn memcpy_htod(dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { runtime::memcpy_htod(dst, src) }
    }
    unsafe fn module_unload(module: runtime::Module) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { runtime::module_unload(module) }
    }
    unsafe fn stream_destroy(stream: runtime::Stream) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { runtime::stream_destroy(stream) }
    }
    unsafe fn ipc_close_mem_handle(ptr: u64) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { runtime::ipc_close_mem_handle(ptr) }
    }
    unsafe fn host_free(host: *mut u8) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { runtime::host_free(host) }
    }
}

/// One device of this process, with the record of drop failures of the backend that
/// drives it.
#[derive(Debug)]
pub struct Device {
    pub(super) ordinal: c_int,
    pub(super) drop_errors: Arc<DropErrors>,
}

impl DeviceScope for Device {
    fn make_current(&self) -> Result<()> {
        runtime::set_device(self.ordinal)
    }
    fn drop_errors(&self) -> &DropErrors {
        &self.drop_errors
    }
}
