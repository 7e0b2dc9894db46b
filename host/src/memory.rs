//! Typed device memory: symmetric buffers ([`SymmetricBuffer`], made by
//! [`World::allocate_symmetric`] and its kin), plain allocations ([`DeviceBuffer`]), views
//! of any device memory of a world ([`DeviceSlice`]), and views of symmetric memory with
//! their peer table ([`SymSlice`]). Every safe function of the crate takes these handles (element type,
//! length, owning world), never a raw address, and counts in elements.

use crate::backend::{Backend, DeviceRegion};
use crate::error::{Error, Result};
use crate::launch::{KernelArg, Lowering};
use crate::offset_alloc::MIN_ALIGN;
use crate::table::{PeerBaseProvider, PeerBases};
use crate::world::World;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use symmem_device::{PeerTable, SymView, SymViewMut, View, ViewMut};

/// `range` of a sequence of `len` elements, as (start, count).
fn bounds(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(start), Some(end)) if start <= end && end <= len => Ok((start, end - start)),
        (start, end) => {
            let start = start.unwrap_or(usize::MAX);
            Err(Error::OutOfBounds {
                start,
                len: end.unwrap_or(usize::MAX).saturating_sub(start),
                capacity: len,
            })
        }
    }
}

/// Plain device memory of this rank: `len` elements of `T`, not symmetric (the
/// allocation a program makes with `cuMemAlloc` / `hipMalloc`; memory of the host process
/// on the CPU backend). Its contents start undefined unless made by
/// [`World::device_zeros`] or [`World::device_from_slice`]. Share it with the other
/// ranks through a [`crate::Rendezvous`].
///
/// # Examples
/// ```
/// use symmem::{Config, backend::cpu::Cpu};
///
/// symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |world| {
///     let x = world.device_from_slice(&[1.0f32, 2.0, 3.0])?; // this rank's memory only
///     assert_eq!(x.len(), 3);
///     world.write(&x, 1, &[5.0])?; // element 1
///     assert_eq!(world.read(&x)?, [1.0, 5.0, 3.0]);
///     Ok(())
/// })?;
/// # Ok::<(), symmem::Error>(())
/// ```
pub struct DeviceBuffer<T, B: Backend> {
    world: World<B>,
    /// Taken only by `into_parts` and `drop`.
    memory: std::mem::ManuallyDrop<B::DeviceMemory>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T, B: Backend> Drop for DeviceBuffer<T, B> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `into_parts` forgets the buffer instead of dropping it.
        let memory = unsafe { std::mem::ManuallyDrop::take(&mut self.memory) };
        self.world.free_device_memory(memory);
    }
}

impl<T: bytemuck::Pod, B: Backend> DeviceBuffer<T, B> {
    pub(crate) fn new(world: World<B>, len: usize) -> Result<Self> {
        let bytes = len.checked_mul(size_of::<T>()).ok_or(Error::TooLarge {
            requested: usize::MAX,
            capacity: isize::MAX as usize,
        })?;
        if bytes == 0 {
            return Err(Error::ZeroSize);
        }
        let memory = std::mem::ManuallyDrop::new(world.backend().alloc_device(bytes)?);
        Ok(Self {
            world,
            memory,
            len,
            _t: PhantomData,
        })
    }

    /// The whole buffer as a view.
    pub fn as_slice(&self) -> DeviceSlice<'_, T, B> {
        DeviceSlice {
            world: &self.world,
            ptr: self.memory.base(),
            len: self.len,
            _t: PhantomData,
        }
    }

    /// Elements `range` of the buffer.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, T, B>> {
        self.as_slice().slice(range)
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no elements (never: empty allocations are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Device address of the first element (for printing and for `unsafe` interop).
    pub fn ptr(&self) -> u64 {
        self.memory.base()
    }

    /// The world it belongs to.
    pub fn world(&self) -> &World<B> {
        &self.world
    }

    pub(crate) fn into_parts(self) -> (World<B>, B::DeviceMemory, usize) {
        let mut this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the memory and the world's handle are each
        // taken once.
        let (memory, world) = unsafe {
            (
                std::mem::ManuallyDrop::take(&mut this.memory),
                std::ptr::read(&this.world),
            )
        };
        (world, memory, this.len)
    }
}

/// A view of `len` elements of `T` of device memory one world's rank can address: a
/// [`DeviceBuffer`], a symmetric buffer's local copy, a provider's local allocation, a
/// peer's copy as mapped here ([`SymSlice::peer`]), or part of one. Cheap to copy; it
/// borrows what it views.
pub struct DeviceSlice<'a, T, B: Backend> {
    world: &'a World<B>,
    ptr: u64,
    len: usize,
    _t: PhantomData<&'a [T]>,
}

impl<T, B: Backend> Clone for DeviceSlice<'_, T, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, B: Backend> Copy for DeviceSlice<'_, T, B> {}

impl<'a, T, B: Backend> DeviceSlice<'a, T, B> {
    /// A view of `len` elements at `ptr`, of `world`.
    ///
    /// # Safety
    /// `ptr..ptr + len * size_of::<T>()` is device memory of this rank of `world`,
    /// aligned for `T`, that stays allocated for `'a` and for as long as work enqueued
    /// with the view can run.
    pub unsafe fn from_raw_parts(world: &'a World<B>, ptr: u64, len: usize) -> Self {
        Self {
            world,
            ptr,
            len,
            _t: PhantomData,
        }
    }

    /// Elements `range` of this view.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<Self> {
        let (start, len) = bounds(range, self.len)?;
        Ok(self.sub(start, len))
    }

    /// Elements `start..start + len`, already checked to be inside.
    fn sub(&self, start: usize, len: usize) -> Self {
        Self {
            ptr: self.ptr + (start * size_of::<T>()) as u64,
            len,
            ..*self
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes.
    pub fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// Device address of the first element.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The world whose rank owns the memory.
    pub fn world(&self) -> &'a World<B> {
        self.world
    }

    /// Its address as a kernel argument of the launch `lowering` describes, after checking
    /// that it belongs to that launch's world.
    fn lowered(&self, lowering: &Lowering<'_, B>) -> Result<usize> {
        lowering.check_owner(self.world)?;
        Ok(self.ptr as usize)
    }

    /// The first `count` elements of `U` of the same memory (a staging area's bytes as the
    /// type of the data staged through it).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] where they do
    /// not fit, [`Error::BadAlignment`] where the memory is not aligned for `U`.
    pub(crate) fn reinterpret<U>(&self, count: usize) -> Result<DeviceSlice<'a, U, B>> {
        let bytes = count
            .checked_mul(size_of::<U>())
            .filter(|&b| b <= self.byte_len());
        if bytes.is_none() {
            return Err(Error::OutOfBounds {
                start: 0,
                len: count,
                capacity: self.byte_len() / size_of::<U>().max(1),
            });
        }
        if !self.ptr.is_multiple_of(align_of::<U>() as u64) {
            return Err(Error::BadAlignment {
                align: align_of::<U>(),
            });
        }
        Ok(DeviceSlice {
            world: self.world,
            ptr: self.ptr,
            len: count,
            _t: PhantomData,
        })
    }

    /// The same memory as bytes.
    pub fn as_bytes(&self) -> DeviceSlice<'a, u8, B> {
        DeviceSlice {
            world: self.world,
            ptr: self.ptr,
            len: self.byte_len(),
            _t: PhantomData,
        }
    }
}

/// A view of `len` elements of `T` of a symmetric object (a symmetric buffer, a
/// [`crate::Rendezvous`], an [`crate::ExternalTable`]): this rank's copy, and the peer
/// table that reaches every rank's copy. Cheap to copy; it borrows its object.
pub struct SymSlice<'a, T, B: Backend> {
    local: DeviceSlice<'a, T, B>,
    table: &'a PeerBases,
}

impl<T, B: Backend> Clone for SymSlice<'_, T, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, B: Backend> Copy for SymSlice<'_, T, B> {}

impl<'a, T, B: Backend> SymSlice<'a, T, B> {
    /// The whole object: `len` elements at `ptr` whose table is `table`.
    pub(crate) fn new(world: &'a World<B>, ptr: u64, len: usize, table: &'a PeerBases) -> Self {
        Self {
            local: DeviceSlice {
                world,
                ptr,
                len,
                _t: PhantomData,
            },
            table,
        }
    }

    /// Elements `range` of this view.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<Self> {
        let (start, len) = bounds(range, self.local.len)?;
        Ok(Self {
            local: self.local.sub(start, len),
            table: self.table,
        })
    }

    /// This rank's copy.
    pub fn local(&self) -> DeviceSlice<'a, T, B> {
        self.local
    }

    /// The same memory as bytes, with the same table.
    pub fn as_bytes(&self) -> SymSlice<'a, u8, B> {
        SymSlice {
            local: self.local.as_bytes(),
            table: self.table,
        }
    }

    /// The peer table of the object the view is part of.
    pub fn peer_bases(&self) -> &'a PeerBases {
        self.table
    }

    /// Rank `rank`'s copy of the view, as mapped in this address space: a device view
    /// this rank's kernels can read and write directly (what a translated access
    /// reaches). It lives as long as the object.
    ///
    /// # Errors
    /// [`Error::RankOutOfRange`].
    pub fn peer(&self, rank: usize) -> Result<DeviceSlice<'a, T, B>> {
        Ok(DeviceSlice {
            ptr: self.peer_ptr(rank)?,
            ..self.local
        })
    }

    /// Device address of the view's first element on rank `rank`, as mapped in this
    /// address space.
    ///
    /// # Errors
    /// [`Error::RankOutOfRange`], [`Error::OffNode`] for a rank on
    /// another node (its table entry is 0).
    pub fn peer_ptr(&self, rank: usize) -> Result<u64> {
        let entries = self.table.entries();
        let base = *entries.get(rank).ok_or(Error::RankOutOfRange {
            rank,
            world: entries.len(),
        })?;
        if base == 0 {
            return Err(Error::OffNode { rank });
        }
        Ok(base + self.byte_offset())
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.local.len
    }

    /// True for no elements.
    pub fn is_empty(&self) -> bool {
        self.local.len == 0
    }

    /// Byte offset of the view in its object: from this rank's table entry to the view.
    fn byte_offset(&self) -> u64 {
        self.local.ptr - self.table.entries()[self.local.world.rank()]
    }

    /// Device address of this rank's first element.
    pub fn ptr(&self) -> u64 {
        self.local.ptr
    }
}

impl<'a, T, B: Backend> From<SymSlice<'a, T, B>> for DeviceSlice<'a, T, B> {
    fn from(view: SymSlice<'a, T, B>) -> Self {
        view.local
    }
}

/// Anything that views typed device memory of one world's rank: a [`DeviceBuffer`], a
/// [`DeviceSlice`], a symmetric buffer or [`SymSlice`] (its local copy), a provider.
pub trait AsDeviceSlice<T, B: Backend> {
    /// The view.
    fn as_device_slice(&self) -> DeviceSlice<'_, T, B>;
}

/// Anything that views typed symmetric memory: a symmetric buffer, a [`SymSlice`], a
/// [`crate::Rendezvous`], an [`crate::ExternalTable`].
pub trait AsSymSlice<T, B: Backend> {
    /// The view.
    fn as_sym_slice(&self) -> SymSlice<'_, T, B>;
}

impl<T: bytemuck::Pod, B: Backend> AsDeviceSlice<T, B> for DeviceBuffer<T, B> {
    fn as_device_slice(&self) -> DeviceSlice<'_, T, B> {
        self.as_slice()
    }
}

impl<T, B: Backend> AsDeviceSlice<T, B> for DeviceSlice<'_, T, B> {
    fn as_device_slice(&self) -> DeviceSlice<'_, T, B> {
        *self
    }
}

impl<T, B: Backend> AsSymSlice<T, B> for SymSlice<'_, T, B> {
    fn as_sym_slice(&self) -> SymSlice<'_, T, B> {
        *self
    }
}

/// Symmetric views are device views of this rank's copy.
#[macro_export]
#[doc(hidden)]
macro_rules! local_copy_is_a_device_slice {
    ($($t:ty),*) => {$(
        impl<T, B: $crate::backend::Backend> $crate::AsDeviceSlice<T, B> for $t {
            fn as_device_slice(&self) -> $crate::DeviceSlice<'_, T, B> {
                $crate::AsSymSlice::as_sym_slice(self).local()
            }
        }
    )*};
}

local_copy_is_a_device_slice!(SymSlice<'_, T, B>, SymmetricBuffer<T, B>);

// SAFETY: a view's memory is live device memory of this rank holding `T`s, kept for as
// long as enqueued work can run: a `DeviceBuffer` frees only after the device is done
// with it (the runtimes' free waits), symmetric memory only at a barrier, which waits
// for this rank's device first.
unsafe impl<T: 'static, B: Backend, V: AsDeviceSlice<T, B>> KernelArg<B, *mut T> for &V {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*mut T,)> {
        <_ as KernelArg<B, *mut T>>::lower(&self.as_device_slice(), lowering)
    }
}

// SAFETY: as for `*mut T`.
unsafe impl<T: 'static, B: Backend, V: AsDeviceSlice<T, B>> KernelArg<B, *const T> for &V {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*const T,)> {
        <_ as KernelArg<B, *const T>>::lower(&self.as_device_slice(), lowering)
    }
}

// SAFETY: as for `&V` above: a view of live memory of this rank holding `T`s.
unsafe impl<T: 'static, B: Backend> KernelArg<B, *mut T> for DeviceSlice<'_, T, B> {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*mut T,)> {
        Ok((std::ptr::without_provenance_mut(self.lowered(lowering)?),))
    }
}

// SAFETY: as for `&V` above.
unsafe impl<T: 'static, B: Backend> KernelArg<B, *const T> for DeviceSlice<'_, T, B> {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*const T,)> {
        Ok((std::ptr::without_provenance(self.lowered(lowering)?),))
    }
}

// SAFETY: as for `*mut T`, and the length is the view's own: the memory holds `len` `T`s.
unsafe impl<T: 'static, B: Backend, V: AsDeviceSlice<T, B>> KernelArg<B, ViewMut<T>> for &V {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*mut T, u64)> {
        <_ as KernelArg<B, ViewMut<T>>>::lower(&self.as_device_slice(), lowering)
    }
}

// SAFETY: as for `ViewMut<T>`.
unsafe impl<T: 'static, B: Backend, V: AsDeviceSlice<T, B>> KernelArg<B, View<T>> for &V {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*const T, u64)> {
        <_ as KernelArg<B, View<T>>>::lower(&self.as_device_slice(), lowering)
    }
}

// SAFETY: as for `&V` above.
unsafe impl<T: 'static, B: Backend> KernelArg<B, ViewMut<T>> for DeviceSlice<'_, T, B> {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*mut T, u64)> {
        let (ptr,) = <Self as KernelArg<B, *mut T>>::lower(self, lowering)?;
        Ok((ptr, self.len as u64))
    }
}

// SAFETY: as for `&V` above.
unsafe impl<T: 'static, B: Backend> KernelArg<B, View<T>> for DeviceSlice<'_, T, B> {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*const T, u64)> {
        let (ptr,) = <Self as KernelArg<B, *const T>>::lower(self, lowering)?;
        Ok((ptr, self.len as u64))
    }
}

// SAFETY: this rank's copy of symmetric memory, as for `ViewMut<T>`; the table is the
// object's own (`PeerTable`'s argument: agreed, and kept as long), and every rank's copy
// holds the same `len` elements at the same offset from its entry.
unsafe impl<T: 'static, B: Backend, V: AsSymSlice<T, B>> KernelArg<B, SymViewMut<T>> for &V {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*mut T, u64, *const u64)> {
        <_ as KernelArg<B, SymViewMut<T>>>::lower(&self.as_sym_slice(), lowering)
    }
}

// SAFETY: as for `SymViewMut<T>`.
unsafe impl<T: 'static, B: Backend, V: AsSymSlice<T, B>> KernelArg<B, SymView<T>> for &V {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*const T, u64, *const u64)> {
        <_ as KernelArg<B, SymView<T>>>::lower(&self.as_sym_slice(), lowering)
    }
}

// SAFETY: as for `&V` above.
unsafe impl<T: 'static, B: Backend> KernelArg<B, SymViewMut<T>> for SymSlice<'_, T, B> {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*mut T, u64, *const u64)> {
        let (ptr, len) = <_ as KernelArg<B, ViewMut<T>>>::lower(&self.local, lowering)?;
        let (table,) = <_ as KernelArg<B, PeerTable>>::lower(&self.table, lowering)?;
        Ok((ptr, len, table))
    }
}

// SAFETY: as for `&V` above.
unsafe impl<T: 'static, B: Backend> KernelArg<B, SymView<T>> for SymSlice<'_, T, B> {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*const T, u64, *const u64)> {
        let (ptr, len) = <_ as KernelArg<B, View<T>>>::lower(&self.local, lowering)?;
        let (table,) = <_ as KernelArg<B, PeerTable>>::lower(&self.table, lowering)?;
        Ok((ptr, len, table))
    }
}

impl<B: Backend> World<B> {
    /// Allocates `len` elements of `T` in every rank's heap, collectively, without
    /// touching the memory; returns the buffer and its device-resident peer table.
    ///
    /// The table is computed from the heap bases and uploaded asynchronously: no
    /// device-to-host copy or synchronisation. Alignment is at least 256 bytes.
    pub fn allocate_symmetric<T: bytemuck::Pod>(
        &self,
        len: usize,
    ) -> Result<(SymmetricBuffer<T, B>, PeerBases)> {
        self.allocate_aligned(len, MIN_ALIGN)
    }

    /// As [`World::allocate_symmetric`], with alignment `align` (a power of two; at
    /// least 256 is used).
    pub fn allocate_aligned<T: bytemuck::Pod>(
        &self,
        len: usize,
        align: usize,
    ) -> Result<(SymmetricBuffer<T, B>, PeerBases)> {
        self.ready_for("an allocation")?;
        if !align.is_power_of_two() {
            return Err(Error::BadAlignment { align });
        }
        if align > self.max_align() {
            return Err(Error::AlignmentTooLarge {
                align,
                max: self.max_align(),
            });
        }
        let bytes = len.checked_mul(size_of::<T>()).ok_or(Error::TooLarge {
            requested: usize::MAX,
            capacity: self.heap_len(),
        })?;
        let allocation = self.allocate_raw(bytes, align.max(align_of::<T>()))?;
        let table = allocation.table;
        let buffer = SymmetricBuffer {
            world: self.clone(),
            serial: allocation.serial,
            id: allocation.id,
            offset: allocation.offset,
            len,
            table: table.clone(),
            _t: PhantomData,
        };
        Ok((buffer, table))
    }

    /// `empty`: [`World::allocate_symmetric`] without its table in the result.
    pub fn empty<T: bytemuck::Pod>(&self, len: usize) -> Result<SymmetricBuffer<T, B>> {
        self.allocate_symmetric(len).map(|(buffer, _)| buffer)
    }

    /// A symmetric buffer of `len` zeroed elements (zeroed on the device, asynchronously).
    pub fn zeros<T: bytemuck::Pod>(&self, len: usize) -> Result<SymmetricBuffer<T, B>> {
        let buffer = self.empty(len)?;
        self.fill_zero(&buffer)?;
        Ok(buffer)
    }

    /// A symmetric buffer of `len` copies of `value`.
    pub fn full<T: bytemuck::Pod>(&self, len: usize, value: T) -> Result<SymmetricBuffer<T, B>> {
        self.from_slice(&vec![value; len])
    }

    /// A symmetric buffer holding a copy of `data` on this rank (each rank passes its own).
    pub fn from_slice<T: bytemuck::Pod>(&self, data: &[T]) -> Result<SymmetricBuffer<T, B>> {
        let buffer = self.empty(data.len())?;
        self.write(&buffer, 0, data)?;
        Ok(buffer)
    }

    /// The peer table of `buffer`.
    pub fn peer_bases<T: bytemuck::Pod>(&self, buffer: &SymmetricBuffer<T, B>) -> PeerBases {
        buffer.table.clone()
    }

    /// Allocates plain device memory for `len` elements of `T` on this rank (not
    /// collective, not symmetric; share it with [`crate::Rendezvous`]). Its contents are
    /// undefined.
    ///
    /// # Errors
    /// [`Error::ZeroSize`], the backend's out-of-memory error.
    pub fn alloc<T: bytemuck::Pod>(&self, len: usize) -> Result<DeviceBuffer<T, B>> {
        self.not_capturing("an allocation")?;
        DeviceBuffer::new(self.clone(), len)
    }

    /// [`World::alloc`], zeroed (asynchronously).
    pub fn device_zeros<T: bytemuck::Pod>(&self, len: usize) -> Result<DeviceBuffer<T, B>> {
        let buffer = self.alloc(len)?;
        self.fill_zero(&buffer)?;
        Ok(buffer)
    }

    /// [`World::alloc`] holding a copy of `data` (uploaded asynchronously).
    pub fn device_from_slice<T: bytemuck::Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T, B>> {
        let buffer = self.alloc(data.len())?;
        self.write(&buffer, 0, data)?;
        Ok(buffer)
    }

    /// Lets go of a buffer given up with [`SymmetricBuffer::into_raw`], as dropping it
    /// would (collective: its memory is reused only after a barrier at which every rank
    /// has let go of it).
    ///
    /// # Errors
    /// `NotAllocated` for a buffer freed already or not of
    /// this world.
    pub fn free_raw(&self, raw: RawSymmetric) -> Result<()> {
        self.retire_allocation(raw.offset, raw.serial, raw.table)
    }
}

/// A symmetric buffer given up by [`SymmetricBuffer::into_raw`]: a heap offset and its
/// table slot, to be freed with [`World::free_raw`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawSymmetric {
    serial: u64,
    offset: usize,
    table: u64,
}

/// `len` elements of `T` at the same heap offset on every rank. Dropping it lets go of
/// it; its memory is reused after a barrier at which every rank has (see the module
/// documentation).
///
/// # Examples
/// ```
/// use symmem::{Config, backend::cpu::Cpu};
///
/// let copies = symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |world| {
///     let data = world.zeros::<u32>(4)?; // collective: every rank allocates it
///     let peer = 1 - world.rank();
///     world.barrier()?; // every copy exists before a peer's put reaches it
///     let mine = world.device_from_slice(&[world.rank() as u32 + 10; 4])?;
///     world.put(&data, &mine, peer)?; // into the peer's copy
///     world.barrier()?; // every put has landed
///     world.read(&data)
/// })?;
/// assert_eq!(copies[0].as_ref().unwrap(), &[11; 4]); // rank 1 wrote rank 0's copy
/// # Ok::<(), symmem::Error>(())
/// ```
pub struct SymmetricBuffer<T, B: Backend> {
    world: World<B>,
    serial: u64,
    id: u64,
    offset: usize,
    len: usize,
    table: PeerBases,
    _t: PhantomData<T>,
}

impl<T, B: Backend> SymmetricBuffer<T, B> {
    /// The world it belongs to.
    pub fn world(&self) -> &World<B> {
        &self.world
    }
    /// Device address of this rank's copy.
    pub fn ptr(&self) -> u64 {
        self.world.heap_base() + self.offset as u64
    }
    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for zero elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes.
    pub fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }
    /// Offset in the heap, the same on every rank.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// The device-resident peer table.
    pub fn peer_bases(&self) -> &PeerBases {
        &self.table
    }
    /// Its ledger id, the same on every rank whose ledgers agree.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
    /// The whole buffer as a view (this rank's copy and the table).
    pub fn as_slice(&self) -> SymSlice<'_, T, B> {
        SymSlice::new(&self.world, self.ptr(), self.len, &self.table)
    }

    /// Elements `range` of the buffer, on every rank.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<SymSlice<'_, T, B>> {
        self.as_slice().slice(range)
    }

    /// Gives up ownership without freeing; see [`World::free_raw`].
    pub fn into_raw(self) -> RawSymmetric {
        let raw = RawSymmetric {
            serial: self.serial,
            offset: self.offset,
            table: self.table.device_ptr(),
        };
        std::mem::forget(self);
        raw
    }
}

impl<T, B: Backend> AsSymSlice<T, B> for SymmetricBuffer<T, B> {
    fn as_sym_slice(&self) -> SymSlice<'_, T, B> {
        self.as_slice()
    }
}

impl<T, B: Backend> PeerBaseProvider for SymmetricBuffer<T, B> {
    fn table(&self) -> &PeerBases {
        &self.table
    }
    fn local_ptr(&self) -> u64 {
        self.ptr()
    }
    fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }
}

impl<T, B: Backend> Drop for SymmetricBuffer<T, B> {
    fn drop(&mut self) {
        self.table.mark_dropped();
        // The offset came from this world's allocator and is let go of once: cannot fail.
        let _ = self
            .world
            .retire_allocation(self.offset, self.serial, self.table.device_ptr());
    }
}
