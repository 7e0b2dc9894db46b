//! The RAII handles both GPU backends make: each releases its runtime object on drop,
//! with its device current, recording a failure in the backend's [`DropErrors`].
//!
//! [`DropErrors`]: super::DropErrors

use super::{DeviceScope, Runtime};
use crate::backend::{DeviceRegion, SharedRegion};
use std::sync::Arc;

/// A loaded code object; unloaded on drop.
#[derive(Debug)]
pub(in crate::backend) struct LoadedModule<R: Runtime> {
    pub(in crate::backend) scope: Arc<R::Scope>,
    pub(in crate::backend) module: R::Module,
}

impl<R: Runtime> Drop for LoadedModule<R> {
    fn drop(&mut self) {
        self.scope.release(|| {
            // SAFETY: a module's owner drops it only once no kernel of it runs (a backend
            // synchronises its stream before its fields drop, a world keeps its modules
            // until it has left); the module is not used after this.
            unsafe { R::module_unload(self.module) }
        });
    }
}

/// Who destroys a rank's stream.
#[derive(Debug)]
pub(in crate::backend) enum StreamOwner {
    /// The backend made it: destroyed when the last handle of it drops (HIP's streams;
    /// every CUDA stream is cudarc's).
    #[cfg_attr(
        not(feature = "hip"),
        expect(dead_code, reason = "only the HIP backend makes its own streams")
    )]
    Backend,
    /// Another library made it and destroys it (a cudarc `CudaStream`): the rank keeps
    /// this handle of that library's, which keeps the stream alive, and drops it instead
    /// of destroying the stream.
    Foreign {
        /// Held for its drop (which lets go of the stream).
        _keep: Box<dyn std::any::Any + Send + Sync>,
    },
}

/// A rank's stream, with who owns it: destroyed on drop where the backend does.
#[derive(Debug)]
pub(in crate::backend) struct OwnedStream<R: Runtime> {
    pub(in crate::backend) scope: Arc<R::Scope>,
    pub(in crate::backend) stream: R::Stream,
    pub(in crate::backend) owner: StreamOwner,
}

impl<R: Runtime> Drop for OwnedStream<R> {
    fn drop(&mut self) {
        // A foreign stream's owner is dropped with this value's fields, after this.
        if let StreamOwner::Backend = self.owner {
            self.scope.release(|| {
                // SAFETY: the stream was created by the backend and is not used after this.
                unsafe { R::stream_destroy(self.stream) }
            });
        }
    }
}

/// A pointer opened from a peer's IPC handle; closed on drop.
#[derive(Debug)]
struct IpcOpened<R: Runtime> {
    scope: Arc<R::Scope>,
    ptr: u64,
}

impl<R: Runtime> Drop for IpcOpened<R> {
    fn drop(&mut self) {
        self.scope.release(|| {
            // SAFETY: `ptr` came from the runtime's IPC open and is not used after this.
            unsafe { R::ipc_close_mem_handle(self.ptr) }
        });
    }
}

/// Who owns the memory behind a [`Mapping`].
#[derive(Debug)]
enum MappingOwner<R: Runtime> {
    /// A peer's memory the runtime imported by its own means.
    Imported {
        /// Held for its drop (unmaps and releases the memory).
        _memory: R::Imported,
    },
    /// A peer's memory opened from its IPC handle.
    Ipc {
        /// Held for its drop (closes the IPC mapping).
        _opened: IpcOpened<R>,
    },
    /// Memory of this same process: a non-owning alias of the exporter's pointer.
    Alias {
        /// What access to another device's memory needs kept alive, if anything.
        _peer: Option<R::PeerRetain>,
    },
}

/// A peer's memory as mapped in this rank's address space.
#[derive(Debug)]
pub struct Mapping<R: Runtime> {
    base: u64,
    len: usize,
    owner: MappingOwner<R>,
}

impl<R: Runtime> Mapping<R> {
    /// `len` bytes at `base` of a peer's memory that the runtime imported by its own
    /// means: `memory`, released on drop.
    pub(in crate::backend) fn imported(base: u64, len: usize, memory: R::Imported) -> Self {
        let owner = MappingOwner::Imported { _memory: memory };
        Self { base, len, owner }
    }

    /// `len` bytes at `ptr`, opened from a peer's IPC handle with the device of `scope`
    /// current; closed on drop.
    pub(in crate::backend) fn opened(scope: Arc<R::Scope>, ptr: u64, len: usize) -> Self {
        let opened = IpcOpened { scope, ptr };
        let owner = MappingOwner::Ipc { _opened: opened };
        Self {
            base: ptr,
            len,
            owner,
        }
    }

    /// `len` bytes at `ptr`, memory exported by this same process: a non-owning alias,
    /// keeping `peer` (what access to another device's memory needs) alive.
    pub(in crate::backend) fn alias(ptr: u64, len: usize, peer: Option<R::PeerRetain>) -> Self {
        let owner = MappingOwner::Alias { _peer: peer };
        Self {
            base: ptr,
            len,
            owner,
        }
    }

    /// The `len` bytes from byte `offset` of this mapping (an application's range in the
    /// allocation a peer exported), still owning the whole.
    pub(in crate::backend) fn range(mut self, offset: u64, len: usize) -> Self {
        self.base += offset;
        self.len = len;
        self
    }

    /// True when this mapping is a non-owning alias of memory exported by this same
    /// process (the in-process IPC path).
    pub fn is_alias(&self) -> bool {
        matches!(self.owner, MappingOwner::Alias { .. })
    }

    /// True when this mapping was opened from the exporter's IPC handle.
    pub fn is_ipc(&self) -> bool {
        matches!(self.owner, MappingOwner::Ipc { .. })
    }
}

impl<R: Runtime> DeviceRegion for Mapping<R> {
    fn base(&self) -> u64 {
        self.base
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// Page-locked host memory mapped into the device: the rank's control block of bounded
/// waits. Freed on drop.
#[derive(Debug)]
pub struct HostMapped<R: Runtime> {
    host: *mut u8,
    device: u64,
    scope: Arc<R::Scope>,
}

impl<R: Runtime> HostMapped<R> {
    /// Takes ownership of the mapped host allocation at `host` (`device` for kernels).
    pub(in crate::backend) fn new(host: *mut u8, device: u64, scope: Arc<R::Scope>) -> Self {
        Self {
            host,
            device,
            scope,
        }
    }
}

// SAFETY: page-locked host memory, accessed atomically by the host and the device; the
// pointer is not tied to a thread, and the runtime frees it from any thread.
unsafe impl<R: Runtime> Send for HostMapped<R> {}
// SAFETY: as above; a shared reference only hands out the addresses.
unsafe impl<R: Runtime> Sync for HostMapped<R> {}

impl<R: Runtime> SharedRegion for HostMapped<R> {
    fn host_ptr(&self) -> *mut u8 {
        self.host
    }
    fn device_ptr(&self) -> u64 {
        self.device
    }
}

impl<R: Runtime> Drop for HostMapped<R> {
    fn drop(&mut self) {
        self.scope.release(|| {
            // SAFETY: allocated by the backend's `alloc_shared`, freed once; the world
            // drops it only after its last synchronisation, so no kernel reads it any more.
            unsafe { R::host_free(self.host) }
        });
    }
}
