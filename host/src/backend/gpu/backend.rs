//! The [`Backend`] implementation both GPU backends share: what differs between CUDA and
//! HIP is [`GpuBackend`]; the rest is written here once.

use super::{DeviceScope, HostMapped, Mapping, Module, Rank, Runtime, grid_for_bytes};
use crate::backend::{
    Backend, BackendKind, CodeObjects, DeviceRegion, DropErrors, Grid, HeapAccess, KernelLaunch,
    RangeExport, Sender, Shareable, SharedRegion,
};
use crate::error::Result;
use std::sync::Arc;

/// The part of [`Backend`] that differs between the GPU runtimes; every type that
/// implements it is a [`Backend`] through the implementation below. Methods of the same
/// name do what [`Backend`]'s say, with the differences noted.
pub trait GpuBackend: Send + Sync + 'static {
    /// The runtime's handles.
    type Runtime: Runtime;
    /// This rank's symmetric heap.
    type Heap: DeviceRegion;
    /// A plain device allocation.
    type DeviceMemory: DeviceRegion;
    /// A captured graph.
    type Graph: Send + Sync;

    /// The rank's stream, name and wait count.
    fn rank(&self) -> &Rank<Self::Runtime>;
    /// The backend's record of failed releases, shared with every handle it made.
    fn shared_drop_errors(&self) -> Arc<DropErrors>;
    /// See [`Backend::heap_granularity`].
    fn heap_granularity(&self) -> usize;
    /// See [`Backend::create_heap`].
    fn create_heap(&self, bytes: usize) -> Result<Self::Heap>;
    /// See [`Backend::export_heap`].
    fn export_heap(&self, heap: &Self::Heap) -> Result<Shareable>;
    /// See [`Backend::import_heap`].
    fn import_heap(
        &self,
        handle: Shareable,
        bytes: usize,
        sender: Sender,
    ) -> Result<Mapping<Self::Runtime>>;
    /// See [`Backend::alloc_device`].
    fn alloc_device(&self, bytes: usize) -> Result<Self::DeviceMemory>;
    /// See [`Backend::export_device_memory`].
    fn export_device_memory(&self, memory: &Self::DeviceMemory) -> Result<Shareable>;
    /// See [`Backend::import_device_memory`].
    fn import_device_memory(
        &self,
        handle: Shareable,
        bytes: usize,
        sender: Sender,
    ) -> Result<Mapping<Self::Runtime>>;
    /// See [`Backend::export_range`].
    ///
    /// # Safety
    /// As [`Backend::export_range`].
    unsafe fn export_range(&self, ptr: u64, bytes: usize) -> Result<RangeExport>;
    /// See [`Backend::upload`]; `src` is not empty and the device is current.
    ///
    /// # Safety
    /// As [`Backend::upload`].
    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<()>;
    /// See [`Backend::download`]; `dst` is not empty and the device is current. Counts
    /// its waits in [`Rank::count_sync`].
    ///
    /// # Safety
    /// As [`Backend::download`].
    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<()>;
    /// See [`Backend::load_module`].
    fn load_module(&self, objects: &'static CodeObjects) -> Result<Module<Self::Runtime>>;
    /// See [`Backend::loads_kernels_lazily`].
    fn loads_kernels_lazily(&self) -> Option<bool> {
        None
    }
    /// See [`Backend::heap_access`].
    fn heap_access(&self, heap: &Self::Heap) -> Result<Box<dyn HeapAccess>>;
    /// `launch`'s arguments in the form the runtime takes them.
    ///
    /// # Safety
    /// As [`Backend::launch`]: each of `launch.args` points at a value of its
    /// parameter's ABI type.
    unsafe fn kernel_args(
        &self,
        launch: &KernelLaunch<'_>,
    ) -> Result<<Self::Runtime as Runtime>::KernelArgs>;
    /// The graph of this rank that `exec` (the instantiated capture of its stream) is.
    fn graph(&self, exec: <Self::Runtime as Runtime>::GraphExec) -> Self::Graph;
    /// See [`Backend::replay`].
    ///
    /// # Safety
    /// As [`Backend::replay`].
    unsafe fn replay(&self, graph: &Self::Graph) -> Result<()>;
}

impl<T: GpuBackend> Backend for T {
    type Heap = T::Heap;
    type Mapping = Mapping<T::Runtime>;
    type DeviceMemory = T::DeviceMemory;
    type Module = Module<T::Runtime>;
    type Shared = HostMapped<T::Runtime>;
    type Graph = T::Graph;

    fn kind(&self) -> BackendKind {
        T::Runtime::KIND
    }

    fn device_name(&self) -> String {
        self.rank().name().to_owned()
    }

    fn device_arch(&self) -> Option<String> {
        Some(self.rank().arch().to_owned())
    }

    fn device_ordinal(&self) -> Option<usize> {
        Some(self.rank().ordinal())
    }

    fn heap_granularity(&self) -> usize {
        GpuBackend::heap_granularity(self)
    }

    fn create_heap(&self, bytes: usize) -> Result<T::Heap> {
        GpuBackend::create_heap(self, bytes)
    }

    fn export_heap(&self, heap: &T::Heap) -> Result<Shareable> {
        GpuBackend::export_heap(self, heap)
    }

    fn import_heap(
        &self,
        handle: Shareable,
        bytes: usize,
        sender: Sender,
    ) -> Result<Self::Mapping> {
        GpuBackend::import_heap(self, handle, bytes, sender)
    }

    fn alloc_device(&self, bytes: usize) -> Result<T::DeviceMemory> {
        GpuBackend::alloc_device(self, bytes)
    }

    fn export_device_memory(&self, memory: &T::DeviceMemory) -> Result<Shareable> {
        GpuBackend::export_device_memory(self, memory)
    }

    fn import_device_memory(
        &self,
        handle: Shareable,
        bytes: usize,
        sender: Sender,
    ) -> Result<Self::Mapping> {
        GpuBackend::import_device_memory(self, handle, bytes, sender)
    }

    unsafe fn export_range(&self, ptr: u64, bytes: usize) -> Result<RangeExport> {
        // SAFETY: forwarded from the caller.
        unsafe { GpuBackend::export_range(self, ptr, bytes) }
    }

    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.rank().scope().make_current()?;
        // SAFETY: the caller's contract, forwarded.
        unsafe { GpuBackend::upload(self, dst, src) }
    }

    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.rank().scope().make_current()?;
        // SAFETY: the caller's contract, forwarded.
        unsafe { GpuBackend::download(self, dst, src) }
    }

    unsafe fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let rank = self.rank();
        rank.scope().make_current()?;
        // SAFETY: `dst..dst + bytes` is writable device memory of this rank that nothing
        // races with (the caller's contract).
        unsafe { T::Runtime::memset_d8_async(dst, value, bytes, rank.stream()) }
    }

    fn load_module(&self, objects: &'static CodeObjects) -> Result<Self::Module> {
        GpuBackend::load_module(self, objects)
    }

    fn alloc_shared(&self, bytes: usize) -> Result<Self::Shared> {
        let scope = self.rank().shared_scope();
        scope.make_current()?;
        let (host, device) = T::Runtime::host_alloc_mapped(bytes.max(1))?;
        Ok(HostMapped::new(host, device, scope))
    }

    fn heap_access(&self, heap: &T::Heap) -> Result<Box<dyn HeapAccess>> {
        GpuBackend::heap_access(self, heap)
    }

    fn heap_host_ptr(&self, _: &T::Heap) -> Option<*mut u8> {
        None
    }

    fn kernels_on_host(&self) -> bool {
        false
    }

    fn device_binding(&self) -> Option<Arc<dyn crate::backend::DeviceBinding>> {
        Some(self.rank().shared_scope())
    }

    fn syncs_wait_for_the_device(&self) -> bool {
        true
    }

    fn loads_kernels_lazily(&self) -> Option<bool> {
        GpuBackend::loads_kernels_lazily(self)
    }

    fn drop_record(&self) -> Option<Arc<DropErrors>> {
        Some(self.shared_drop_errors())
    }

    unsafe fn watch(
        &self,
        module: &mut Self::Module,
        control: &Self::Shared,
        transport: Option<&dyn crate::backend::ModuleTransport>,
    ) -> Result<()> {
        self.rank().scope().make_current()?;
        let ring = transport.and_then(|t| t.ring());
        let nvshmem = transport.and_then(|t| t.nvshmem_heap());
        for (name, bytes) in
            super::module_globals(control.device_ptr(), ring.as_ref(), nvshmem.as_ref())
        {
            if let Some((global, size)) = T::Runtime::module_get_global(module.handle(), name)? {
                super::check_global(
                    module.crate_name(),
                    module.target(),
                    name,
                    size,
                    bytes.len(),
                )?;
                // SAFETY: the module's global of that size (checked above), in this
                // device's memory; no kernel of the module has been launched yet (it was
                // just loaded), so none reads it during the copy.
                unsafe { T::Runtime::memcpy_htod(global, &bytes)? };
            }
        }
        if let Some(transport) = transport
            && nvshmem.is_some()
            && T::Runtime::module_get_global(module.handle(), super::NVSHMEM_DEVICE_STATE)?
                .is_some()
        {
            // SAFETY: the module was just loaded in this rank's context, current above,
            // and the world stops its transport before it unloads its modules (the
            // caller's contract).
            unsafe { transport.init_cuda_module(T::Runtime::module_word(module.handle()))? };
        }
        Ok(())
    }

    unsafe fn launch(
        &self,
        module: &Self::Module,
        launch: &KernelLaunch<'_>,
        grid: Grid,
    ) -> Result<()> {
        let function = module.function(launch.name)?;
        // SAFETY: the caller's contract, forwarded.
        let mut args = unsafe { self.kernel_args(launch)? };
        // SAFETY: `args` are `launch`'s arguments for `function`, the kernel it names;
        // their addresses satisfy its contract (the caller's).
        unsafe { self.rank().launch(function, grid, &mut args) }
    }

    fn grid_for_bytes(&self, bytes: usize) -> Grid {
        grid_for_bytes(bytes as u64, T::Runtime::MAX_BLOCKS)
    }

    fn collective_grid(&self) -> Grid {
        // Few enough blocks that several ranks' grids fit on one GPU at once.
        Grid::new(8, 256)
    }

    fn synchronize(&self) -> Result<()> {
        self.rank().synchronize()
    }

    fn device_to_host_syncs(&self) -> u64 {
        self.rank().syncs()
    }

    fn begin_capture(&self) -> Result<()> {
        let rank = self.rank();
        rank.scope().make_current()?;
        T::Runtime::stream_begin_capture(rank.stream())
    }

    fn end_capture(&self) -> Result<T::Graph> {
        let exec = self.rank().end_capture()?;
        Ok(self.graph(exec))
    }

    unsafe fn replay(&self, graph: &T::Graph) -> Result<()> {
        // SAFETY: the caller's contract, forwarded.
        unsafe { GpuBackend::replay(self, graph) }
    }
}
