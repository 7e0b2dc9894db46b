//! Host-side data movement on typed handles: reading and writing this rank's memory,
//! translated puts and gets to and from peers (through symmem's own kernels, launched as
//! a user's are), and direct copies.

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::memory::{AsDeviceSlice, AsSymSlice};
use crate::table::PeerBases;
use crate::world::World;

impl<B: Backend> World<B> {
    /// Translated put: `src` (this rank's elements) into rank `to`'s copy of `dst`, with
    /// the backend's launch shape for the size (`symmem_put`; for a rank on another node
    /// `symmem_rma_put`, whose team reaches it through the engine). Nothing tells `to`
    /// that the data arrived: follow with a [`World::barrier`].
    ///
    /// # Errors
    /// [`Error::RankOutOfRange`], [`Error::LengthMismatch`] unless `src` and
    /// `dst` have the same length, [`Error::NotAgreed`] before a barrier has confirmed
    /// `dst`'s allocation, and the launch's errors.
    pub fn put<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsSymSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        to: usize,
    ) -> Result<()> {
        let (dst, src) = (dst.as_sym_slice(), src.as_device_slice());
        self.check_rank(to)?;
        same_length(dst.len(), src.len())?;
        let bytes = src.byte_len();
        let (world, rank) = (self.world_size() as u32, self.rank() as u32);
        if !self.topology().reaches(to) {
            let (bases, dst) = (dst.peer_bases(), &dst.local().as_bytes());
            // SAFETY: `to` is a rank of the table (checked), `dst` this rank's copy of the
            // object it describes and `src` this rank's memory, both of `bytes` bytes.
            return unsafe {
                self.kernels().launch_unchecked(
                    symmem_kernels::symmem_rma_put,
                    self.engine_grid(),
                    (
                        dst,
                        &src.as_bytes(),
                        bases,
                        world,
                        rank,
                        bytes as u64,
                        to as u32,
                    ),
                )
            };
        }
        self.kernels().launch(
            symmem_kernels::symmem_put,
            self.backend().grid_for_bytes(bytes),
            (dst.as_bytes(), src.as_bytes(), to as u32),
        )
    }

    /// Translated get: rank `from`'s copy of `src` into `dst` (this rank's elements),
    /// as [`World::put`] (`symmem_get`, or `symmem_rma_get` for a rank on another node).
    /// Rank `from` must have finished writing them.
    ///
    /// # Errors
    /// As [`World::put`].
    pub fn get<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsSymSlice<T, B>,
        from: usize,
    ) -> Result<()> {
        let (dst, src) = (dst.as_device_slice(), src.as_sym_slice());
        self.check_rank(from)?;
        same_length(dst.len(), src.len())?;
        let bytes = dst.byte_len();
        let (world, rank) = (self.world_size() as u32, self.rank() as u32);
        if !self.topology().reaches(from) {
            let (bases, src) = (src.peer_bases(), &src.local().as_bytes());
            // SAFETY: as in `put`, with the roles of the buffers swapped.
            return unsafe {
                self.kernels().launch_unchecked(
                    symmem_kernels::symmem_rma_get,
                    self.engine_grid(),
                    (
                        &dst.as_bytes(),
                        src,
                        bases,
                        world,
                        rank,
                        bytes as u64,
                        from as u32,
                    ),
                )
            };
        }
        self.kernels().launch(
            symmem_kernels::symmem_get,
            self.backend().grid_for_bytes(bytes),
            (dst.as_bytes(), src.as_bytes(), from as u32),
        )
    }

    /// The launch shape of a kernel whose bytes all go through the off-node engine: the
    /// backend's collective grid (8 blocks on a GPU), whatever the size. Each thread moves
    /// large pieces as requests, so more blocks add no bandwidth; and a kernel that filled
    /// the GPU with threads waiting on replies would leave no room for the one-thread
    /// kernel with which a target's proxy applies a peer's signal on the same GPU, while
    /// the target's copies wait behind that kernel on its stream.
    fn engine_grid(&self) -> crate::backend::Grid {
        self.backend().collective_grid()
    }

    /// A direct device copy of `src` into `dst` with no translation (`symmem_copy`, the
    /// baseline translated puts are measured against).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`], the launch's errors.
    pub fn copy<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
    ) -> Result<()> {
        let (dst, src) = (dst.as_device_slice(), src.as_device_slice());
        same_length(dst.len(), src.len())?;
        let bytes = dst.byte_len();
        self.kernels().launch(
            symmem_kernels::symmem_copy,
            self.backend().grid_for_bytes(bytes),
            (dst.as_bytes(), src.as_bytes()),
        )
    }

    /// Copies `view` (this rank's memory) to the host, after all work enqueued so far:
    /// one counted synchronisation.
    pub fn read<T: bytemuck::Pod>(&self, view: &impl AsDeviceSlice<T, B>) -> Result<Vec<T>> {
        let view = view.as_device_slice();
        self.check_own(view.world())?;
        self.ready_for("a read")?;
        let mut out = vec![T::zeroed(); view.len()];
        // SAFETY: a view of this world is live memory of this rank holding its elements.
        unsafe {
            self.backend()
                .download(bytemuck::cast_slice_mut(&mut out), view.ptr())?
        };
        // The download waited for the device: a wait that gave up is known now.
        self.check_waits()?;
        Ok(out)
    }

    /// Copies rank `rank`'s copy of `view` to the host, read through its mapping in this
    /// address space (one counted synchronisation of this rank; the peer must have
    /// finished writing it, a barrier before).
    ///
    /// # Errors
    /// [`Error::RankOutOfRange`].
    pub fn read_peer<T: bytemuck::Pod>(
        &self,
        view: &impl AsSymSlice<T, B>,
        rank: usize,
    ) -> Result<Vec<T>> {
        let view = view.as_sym_slice();
        self.check_own(view.local().world())?;
        let ptr = view.peer_ptr(rank)?;
        let mut out = vec![T::zeroed(); view.len()];
        // SAFETY: every table entry is the object's memory on that rank, mapped in this
        // address space for the object's whole length (the provider contract), and the
        // view lies inside the object.
        unsafe {
            self.backend()
                .download(bytemuck::cast_slice_mut(&mut out), ptr)?
        };
        Ok(out)
    }

    /// Copies the device copy of `table` to the host (one counted synchronisation): what
    /// kernels read, to compare with [`PeerBases::entries`].
    pub fn read_table(&self, table: &PeerBases) -> Result<Vec<u64>> {
        if table.world_serial() != self.serial() {
            return Err(Error::ForeignHandle);
        }
        let mut out = vec![0u64; table.len()];
        // SAFETY: a table of this world is `len` u64s of live device memory.
        unsafe {
            self.backend()
                .download(bytemuck::cast_slice_mut(&mut out), table.device_ptr())?
        };
        Ok(out)
    }

    /// Enqueues writing `data` into `view` (this rank's memory), from element `at`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `at..at + data.len()` is not inside.
    pub fn write<T: bytemuck::Pod>(
        &self,
        view: &impl AsDeviceSlice<T, B>,
        at: usize,
        data: &[T],
    ) -> Result<()> {
        let view = view.as_device_slice();
        self.check_own(view.world())?;
        self.ready_for("a write")?;
        let range = view.slice(at..at.saturating_add(data.len()))?;
        // SAFETY: the range is inside a live view of this rank's memory.
        unsafe {
            self.backend()
                .upload(range.ptr(), bytemuck::cast_slice(data))
        }
    }

    /// Enqueues setting every byte of `view` (this rank's memory) to zero.
    pub fn fill_zero<T>(&self, view: &impl AsDeviceSlice<T, B>) -> Result<()> {
        let view = view.as_device_slice();
        self.check_own(view.world())?;
        self.ready_for("a fill")?;
        // SAFETY: a live view of this rank's memory.
        unsafe { self.backend().memset(view.ptr(), 0, view.byte_len()) }
    }
}

/// [`Error::LengthMismatch`] unless `a == b`.
fn same_length(a: usize, b: usize) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(Error::LengthMismatch { dst: a, src: b })
    }
}
