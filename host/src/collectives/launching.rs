//! What every call of the handle shares: its launch with the handle's grid, the kernels'
//! common arguments, the agreement before a collective, and the checks of ranks and counts.

use super::Collectives;
use crate::backend::Backend;
use crate::error::Result;
use crate::memory::{AsDeviceSlice, DeviceSlice, SymmetricBuffer};
use symmem_device::UnsafeKernel;

#[cfg(doc)]
use super::ReductionParams;
#[cfg(doc)]
use crate::error::Error;

impl<B: Backend> Collectives<B> {
    /// Launches one of symmem's collective kernels with this handle's grid.
    ///
    /// # Safety
    /// `args` meet `kernel`'s `# Safety` section: the host call checked every count
    /// against its views, every rank against the world, and agreed the buffers.
    pub(super) unsafe fn launch<P: symmem_device::Params, A: crate::KernelArgs<B, P>>(
        &self,
        kernel: UnsafeKernel<P>,
        args: A,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.world
                .kernels()
                .launch_unchecked(kernel, self.grid, args)
        }
    }

    pub(super) fn bases(&self) -> &crate::table::PeerBases {
        self.world.heap_bases()
    }

    pub(super) fn world_u32(&self) -> u32 {
        self.world.world_size() as u32
    }

    pub(super) fn rank_u32(&self) -> u32 {
        self.world.rank() as u32
    }

    /// The arguments of a data-moving collective: `dst`, `src`, the heap table, `world`,
    /// `rank`, `bytes`, the signal array.
    #[allow(clippy::type_complexity)]
    pub(super) fn moving<'a, T>(
        &'a self,
        dst: &'a DeviceSlice<'a, T, B>,
        src: &'a DeviceSlice<'a, T, B>,
        bytes: u64,
    ) -> (
        DeviceSlice<'a, u8, B>,
        DeviceSlice<'a, u8, B>,
        &'a crate::table::PeerBases,
        u32,
        u32,
        u64,
        &'a SymmetricBuffer<u64, B>,
    ) {
        (
            dst.as_bytes(),
            src.as_bytes(),
            self.bases(),
            self.world_u32(),
            self.rank_u32(),
            bytes,
            &self.signals,
        )
    }

    /// The arguments of a reduction ([`ReductionParams`]).
    #[allow(clippy::type_complexity)]
    pub(super) fn reducing<'a, T>(
        &'a self,
        dst: &'a DeviceSlice<'a, T, B>,
        src: &'a DeviceSlice<'a, T, B>,
        count: usize,
    ) -> (
        &'a DeviceSlice<'a, T, B>,
        &'a DeviceSlice<'a, T, B>,
        &'a crate::table::PeerBases,
        u32,
        u32,
        u64,
        &'a SymmetricBuffer<u64, B>,
    ) {
        (
            dst,
            src,
            self.bases(),
            self.world_u32(),
            self.rank_u32(),
            count as u64,
            &self.signals,
        )
    }

    /// The leading arguments of a point-to-point kernel: `dst`, `src` (as bytes), the
    /// heap table, `world`, `rank`.
    #[allow(clippy::type_complexity)]
    pub(super) fn point<'a, T>(
        &'a self,
        dst: &DeviceSlice<'a, T, B>,
        src: &DeviceSlice<'a, T, B>,
    ) -> (
        DeviceSlice<'a, u8, B>,
        DeviceSlice<'a, u8, B>,
        &'a crate::table::PeerBases,
        u32,
        u32,
    ) {
        (
            dst.as_bytes(),
            src.as_bytes(),
            self.bases(),
            self.world_u32(),
            self.rank_u32(),
        )
    }

    pub(super) fn check_rank(&self, rank: usize) -> Result<()> {
        self.world.check_rank(rank)
    }

    /// Before a collective call `call` (its kind and parameters, words every rank passes
    /// alike) over the buffers `ids` (the signal array included): `checked` is this rank's
    /// own check of its arguments. If any buffer is new since the last agreement, every
    /// rank agrees first (a rank whose check failed still takes part, and the others get
    /// [`Error::PeerFailed`]); a poisoned world refuses. A call this rank goes on to make
    /// is recorded in the world's ledger (with its buffers), so the next agreement finds
    /// a rank that skipped a call or made a different one.
    pub(super) fn agreed<R>(&self, call: &[u64], ids: &[u64], checked: Result<R>) -> Result<R> {
        let mut all = ids.to_vec();
        all.push(self.signals.id());
        let value = self.world.check_collective(&all, checked)?;
        self.world.note_collective_call(call, &all);
        Ok(value)
    }

    /// `world * count`, saturating (an overflow then fails the bounds check).
    pub(super) fn times_world(&self, count: usize) -> usize {
        count.saturating_mul(self.world.world_size())
    }
}

/// The first `count` elements of the local view `view`.
///
/// # Errors
/// [`Error::OutOfBounds`].
pub(super) fn local<T, B: Backend>(
    view: &impl AsDeviceSlice<T, B>,
    count: usize,
) -> Result<DeviceSlice<'_, T, B>> {
    view.as_device_slice().slice(..count)
}

pub(super) fn bytes_of<T>(count: usize) -> u64 {
    (count * size_of::<T>()) as u64
}
