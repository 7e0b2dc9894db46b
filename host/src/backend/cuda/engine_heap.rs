//! The off-node engine's access to a CUDA heap from the proxy thread: the target's side
//! of staged puts and gets and of every atomic, for a transport that cannot reach device
//! memory itself.
//!
//! It drives a [`Cuda`] instance of its own on the rank's device (the same primary
//! context, its own non-blocking stream and staging ring), so nothing it does waits
//! behind the rank's kernels, which may be spinning on the very signal it is about to
//! apply. Bytes go in and out with the instance's upload and download; an atomic is a
//! one-thread launch of `symmem_engine_atomic`, so it is a device atomic like the ones
//! the rank's kernels use on the same word (a host write could tear or race with them).

use super::{Cuda, CudaDeviceMemory, CudaModule};
use crate::backend::{Backend, DeviceRegion, Grid, HeapAccess};
use crate::error::Result;

/// The proxy's way into one rank's CUDA heap.
pub(crate) struct CudaEngineHeap {
    // Field order is drop order: the word and the module before their backend.
    old: CudaDeviceMemory,
    module: CudaModule,
    cuda: Cuda,
    base: u64,
}

impl CudaEngineHeap {
    /// Access to the heap at device address `base` on device `ordinal`.
    pub(crate) fn new(ordinal: usize, base: u64) -> Result<Self> {
        let cuda = Cuda::new(ordinal)?;
        let module = cuda.load_module(&crate::backend::code_objects::KERNELS)?;
        let old = cuda.alloc_device(size_of::<u64>())?;
        Ok(Self {
            old,
            module,
            cuda,
            base,
        })
    }
}

impl HeapAccess for CudaEngineHeap {
    fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<()> {
        // SAFETY: inside the heap (the proxy checks every request's range); the heap
        // outlives the engine.
        unsafe { self.cuda.upload(self.base + offset as u64, bytes)? };
        self.cuda.synchronize()
    }

    fn read(&mut self, offset: usize, out: &mut [u8]) -> Result<()> {
        // SAFETY: as above; a download waits for the copy.
        unsafe { self.cuda.download(out, self.base + offset as u64) }
    }

    fn atomic(&mut self, offset: usize, request: u64, operand: u64, compare: u64) -> Result<u64> {
        let at = std::ptr::without_provenance_mut::<u8>((self.base + offset as u64) as usize);
        let old = std::ptr::without_provenance_mut::<u64>(self.old.base() as usize);
        // SAFETY: `at` is an aligned element inside the heap (checked by the proxy), `old`
        // a device word of this instance; both outlive the launch, which the download
        // below waits for.
        unsafe {
            crate::backend::launch_lowered(
                &self.cuda,
                &self.module,
                symmem_kernels::symmem_engine_atomic,
                Grid::new(1, 1),
                (at, request, operand, compare, old),
            )?;
        }
        let mut bytes = [0u8; 8];
        // SAFETY: the 8-byte word allocated above.
        unsafe { self.cuda.download(&mut bytes, self.old.base())? };
        Ok(u64::from_ne_bytes(bytes))
    }
}
