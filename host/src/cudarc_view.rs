//! symmem and cudarc's memory, both ways: [`CudarcView`], a typed view of this rank's
//! memory on the CUDA backend that cudarc's copies, kernels (`launch_builder(..).arg(..)`)
//! and libraries take as they take a `CudaView`; [`CudarcBorrow`], the application's
//! cudarc memory lent to symmem's calls ([`World::borrow_cudarc`]); and cudarc's
//! `CudaSlice` registered as symmetric memory ([`World::register`]).

use crate::backend::cuda::Cuda;
use crate::error::{Error, Result};
use crate::memory::{AsDeviceSlice, DeviceSlice};
use crate::provider::{Registrable, Sharing};
use crate::world::World;
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{
    CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, LaunchArgs, PushKernelArg,
    SyncOnDrop,
};
use std::marker::PhantomData;
use std::sync::Arc;

/// `len` elements of `T` of this rank's device memory (a symmetric buffer's local copy, a
/// [`crate::DeviceBuffer`], a slice of either), lent to cudarc for as long as the memory
/// is borrowed: it implements cudarc's `DevicePtr`/`DevicePtrMut` (so `memcpy_dtoh`,
/// `memcpy_htod`, `memcpy_dtod`, cuBLAS and the other cudarc libraries take it) and
/// `PushKernelArg`, so `stream.launch_builder(&f).arg(&view)` passes the address of its
/// first element, as for a `CudaView`.
///
/// # Ordering
/// The view carries no cudarc events: it is ordered by its stream alone, the world's
/// stream ([`Cuda::cudarc_stream`], which [`DeviceSlice`]'s `stream` gives). Work
/// enqueued on that stream, cudarc's and symmem's alike, runs in the order it was
/// enqueued, with no synchronisation. Handed to a cudarc call on *another* stream through
/// `DevicePtr`/`DevicePtrMut`, that stream first waits (on the device) for the world's
/// stream, and the host waits for that stream once the call is enqueued (cudarc drops the
/// returned `SyncOnDrop`), so symmem's later work cannot overlap it: correct, but a
/// synchronisation, which the world's stream never needs. A kernel launch
/// (`PushKernelArg`) orders nothing: launch on the world's stream, or order the streams
/// yourself.
///
/// # Lifetime
/// The view borrows the memory it views, so it cannot outlive it; as with symmem's own
/// launches, memory freed while enqueued work still uses it is the caller's to avoid
/// (symmetric memory is reused only after a barrier, which waits for the device first).
/// Through a shared view cudarc may write (`DevicePtrMut`, a kernel): device memory is not
/// Rust memory, and the races it could have are the same as for two symmem kernels.
///
/// # Examples
/// A symmetric buffer filled by cudarc's copy on the world's stream, then all-reduced by
/// symmem on the same stream (no synchronisation between them):
/// ```no_run
/// use symmem::backend::cuda::Cuda;
/// use symmem::collectives::{Algorithm, Collectives, ReduceOp};
/// use symmem::{Config, CudarcView};
///
/// symmem::spawn_ranks(2, &Config::default(), Cuda::for_rank, |world| {
///     let stream = world.backend().cudarc_stream().clone();
///     let coll = Collectives::new(&world)?;
///     let x = world.zeros::<f32>(1024)?;
///     stream.memcpy_htod(&[1.0f32; 1024], &mut CudarcView::new(&x))?; // cudarc writes it
///     coll.all_reduce_in_place(&x, 1024, ReduceOp::Sum, Algorithm::Auto)?;
///     assert_eq!(stream.clone_dtoh(&CudarcView::new(&x))?, [2.0; 1024]);
///     Ok(())
/// })?;
/// # Ok::<(), symmem::Error>(())
/// ```
/// More: [`crate::guides::cudarc`].
#[derive(Debug)]
pub struct CudarcView<'a, T> {
    ptr: CUdeviceptr,
    len: usize,
    stream: &'a Arc<CudaStream>,
    _t: PhantomData<&'a [T]>,
}

impl<T> Clone for CudarcView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for CudarcView<'_, T> {}

impl<'a, T> CudarcView<'a, T> {
    /// The view of `memory`, this rank's memory of a world on the CUDA backend, for as
    /// long as `memory` is borrowed.
    pub fn new(memory: &'a impl AsDeviceSlice<T, Cuda>) -> Self {
        memory.as_device_slice().into()
    }

    /// Device address of the first element.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The world's stream, the one the view is ordered by (see the type's documentation).
    pub fn stream(&self) -> &'a Arc<CudaStream> {
        self.stream
    }

    /// What a cudarc call on `stream` needs to be ordered with the world's stream: nothing
    /// on the world's stream itself; on another, a device-side wait for the world's
    /// stream now and a host wait for `stream` once the call is enqueued. A failure is
    /// recorded in `stream`'s context, where cudarc reports its own
    /// (`CudaContext::check_err`).
    fn order<'b>(&'b self, stream: &'b CudaStream) -> SyncOnDrop<'b> {
        if stream.cu_stream() == self.stream.cu_stream() {
            return SyncOnDrop::Sync(None);
        }
        stream.context().record_err(stream.join(self.stream));
        SyncOnDrop::sync_stream(stream)
    }
}

impl<'a, T> From<DeviceSlice<'a, T, Cuda>> for CudarcView<'a, T> {
    /// The view of `slice` for as long as `slice` borrows its memory.
    fn from(slice: DeviceSlice<'a, T, Cuda>) -> Self {
        Self {
            ptr: slice.ptr(),
            len: slice.len(),
            stream: slice.world().backend().cudarc_stream(),
            _t: PhantomData,
        }
    }
}

impl<T> cudarc::driver::DeviceSlice<T> for CudarcView<'_, T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        self.stream
    }
}

impl<T> DevicePtr<T> for CudarcView<'_, T> {
    fn device_ptr<'b>(&'b self, stream: &'b CudaStream) -> (CUdeviceptr, SyncOnDrop<'b>) {
        (self.ptr, self.order(stream))
    }
}

impl<T> DevicePtrMut<T> for CudarcView<'_, T> {
    fn device_ptr_mut<'b>(&'b mut self, stream: &'b CudaStream) -> (CUdeviceptr, SyncOnDrop<'b>) {
        (self.ptr, self.order(stream))
    }
}

// SAFETY: the kernel parameter is the view's device address, a `CUdeviceptr` pushed by
// cudarc's own `&u64` implementation; the reference to it lives for `'b`, as long as the
// builder (`'b: 'a`), so the pointer cudarc keeps is valid when it launches.
unsafe impl<'a, 'b: 'a, 'c: 'b, T> PushKernelArg<&'b CudarcView<'c, T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b CudarcView<'c, T>) -> &mut Self {
        <Self as PushKernelArg<&'b CUdeviceptr>>::arg(self, &arg.ptr)
    }
}

// SAFETY: as for `&CudarcView`.
unsafe impl<'a, 'b: 'a, 'c: 'b, T> PushKernelArg<&'b mut CudarcView<'c, T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b mut CudarcView<'c, T>) -> &mut Self {
        <Self as PushKernelArg<&'b CUdeviceptr>>::arg(self, &arg.ptr)
    }
}

/// The application's cudarc memory lent to symmem's calls (collectives, copies,
/// launches) for as long as it is borrowed: made by [`World::borrow_cudarc`]. It is a
/// [`DeviceSlice`] of this rank ([`AsDeviceSlice`]), ordered by cudarc's own protocol:
/// the world's stream waits for the memory's earlier reads and writes when the borrow
/// is made, and the borrow's drop records that stream's later work as the memory's
/// last write, so cudarc work after it waits for symmem's.
pub struct CudarcBorrow<'a, T> {
    view: DeviceSlice<'a, T, Cuda>,
    /// Records the write on the world's stream when dropped (cudarc's `SyncOnDrop`).
    _recorded: SyncOnDrop<'a>,
}

impl<T> AsDeviceSlice<T, Cuda> for CudarcBorrow<'_, T> {
    fn as_device_slice(&self) -> DeviceSlice<'_, T, Cuda> {
        self.view
    }
}

impl<T> std::fmt::Debug for CudarcBorrow<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudarcBorrow")
            .field("ptr", &self.view.ptr())
            .field("len", &self.view.len())
            .finish()
    }
}

/// [`Error::NotShareable`] unless `stream` (a cudarc slice's) belongs to the context of
/// `world`'s device: symmem's calls run on that device only.
fn check_context(world: &World<Cuda>, stream: &CudaStream, ptr: u64, bytes: usize) -> Result<()> {
    let ours = world.backend().cudarc_stream().context();
    let theirs = stream.context();
    if theirs.cu_ctx() == ours.cu_ctx() {
        return Ok(());
    }
    Err(Error::NotShareable {
        addr: ptr,
        bytes,
        why: format!(
            "it is cudarc memory of another CUDA context (device {}) than this rank's \
             (device {}): make the world's backend from the application's stream \
             (Cuda::from_cudarc_stream) or allocate on the rank's device",
            theirs.ordinal(),
            ours.ordinal()
        ),
    })
}

impl World<Cuda> {
    /// Lends the application's cudarc memory (a `CudaSlice`, a `CudaViewMut`: anything
    /// with cudarc's `DevicePtrMut`) to this world's calls while the borrow lives:
    /// every collective takes it as it takes symmem's memory (staged where an algorithm
    /// needs a symmetric buffer; [`World::register`] makes it symmetric instead).
    ///
    /// # Errors
    /// [`Error::NotShareable`] for memory of another CUDA context than this
    /// rank's.
    pub fn borrow_cudarc<'a, T, S>(&'a self, slice: &'a mut S) -> Result<CudarcBorrow<'a, T>>
    where
        S: DevicePtrMut<T>,
    {
        let len = cudarc::driver::DeviceSlice::len(slice);
        let stream = Arc::clone(cudarc::driver::DeviceSlice::stream(slice));
        let (ptr, recorded) = slice.device_ptr_mut(self.backend().cudarc_stream());
        check_context(self, &stream, ptr, len * size_of::<T>())?;
        // SAFETY: cudarc's slice is `len` elements of `T` of this context's device (just
        // checked), allocated while it is borrowed, which the borrow outlives not: `'a`.
        let view = unsafe { DeviceSlice::from_raw_parts(self, ptr, len) };
        Ok(CudarcBorrow {
            view,
            _recorded: recorded,
        })
    }
}

impl<T: DeviceRepr + bytemuck::Pod + Send> Registrable<T, Cuda> for CudaSlice<T> {
    fn share(self, world: &World<Cuda>) -> Result<Sharing<Cuda>> {
        let bytes = cudarc::driver::DeviceSlice::num_bytes(&self);
        let (ptr, recorded) = self.device_ptr(world.backend().cudarc_stream());
        // The world's stream now follows the slice's earlier writes.
        drop(recorded);
        check_context(
            world,
            cudarc::driver::DeviceSlice::stream(&self),
            ptr,
            bytes,
        )?;
        // SAFETY: the slice is `bytes` of this rank's device (just checked), and the box
        // keeps it allocated until every peer has let go of the rendezvous.
        Ok(unsafe { Sharing::application(world, ptr, bytes, Some(Box::new(self))) })
    }
}
