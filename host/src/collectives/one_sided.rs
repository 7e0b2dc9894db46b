//! The one-sided calls (put, get, put with signal, signal waits, atomics), which involve
//! only the calling rank's launch, and the check of the symmetric buffers they name.

use super::Collectives;
use crate::backend::{Backend, Grid};
use crate::error::{Error, Result};
use crate::memory::{AsDeviceSlice, DeviceSlice, SymmetricBuffer};
use symmem_rma::Cmp;

#[cfg(doc)]
use crate::world::World;

impl<B: Backend> Collectives<B> {
    /// Put: this rank's local `src` into rank `to`'s copy of `dst`, from element `at`,
    /// every block of the grid moving its share. Nothing tells `to` that the data
    /// arrived: follow with [`Collectives::barrier`] (every rank) or use
    /// [`Collectives::put_with_signal`].
    ///
    /// # Errors
    /// `to` out of range, `at..at+src.len()` outside `dst`, `dst` not in the
    /// heap or not agreed yet ([`Error::NotAgreed`]).
    pub fn put<T: bytemuck::Pod + 'static>(
        &self,
        dst: &SymmetricBuffer<T, B>,
        at: usize,
        src: &impl AsDeviceSlice<T, B>,
        to: usize,
    ) -> Result<()> {
        let src = src.as_device_slice();
        self.check_rank(to)?;
        let dst = self.one_sided(dst, at, src.len())?;
        let (d, s, bases, world, rank) = self.point(&dst, &src);
        // SAFETY: the rank was checked (`check_rank`), the symmetric range agreed and
        // checked against the buffer (`one_sided`), the local view holds the elements
        // moved, and the signal array is this handle's: the kernel's `# Safety`.
        unsafe {
            self.launch(
                symmem_kernels::symmem_rma_put,
                (d, s, bases, world, rank, src.byte_len() as u64, to as u32),
            )
        }
    }

    /// Get: rank `from`'s copy of `src`, from element `at`, into this rank's local
    /// `dst` (all of it). The peer must have finished writing them (a barrier or a
    /// signal before).
    ///
    /// # Errors
    /// As [`Collectives::put`].
    pub fn get<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &SymmetricBuffer<T, B>,
        at: usize,
        from: usize,
    ) -> Result<()> {
        let dst = dst.as_device_slice();
        self.check_rank(from)?;
        let src = self.one_sided(src, at, dst.len())?;
        let (d, s, bases, world, rank) = self.point(&dst, &src);
        // SAFETY: the rank was checked (`check_rank`), the symmetric range agreed and
        // checked against the buffer (`one_sided`), the local view holds the elements
        // moved, and the signal array is this handle's: the kernel's `# Safety`.
        unsafe {
            self.launch(
                symmem_kernels::symmem_rma_get,
                (d, s, bases, world, rank, dst.byte_len() as u64, from as u32),
            )
        }
    }

    /// Put with signal: as [`Collectives::put`], then every block adds `value` to
    /// element `index` of `signal` on rank `to`, with release semantics after its share
    /// of the data. Returns what the signal grows by in all,
    /// [`Collectives::signal_total`]`(value)`: once rank `to` sees it grown by that
    /// much (with [`Collectives::signal_wait_until`]), all the elements are there.
    ///
    /// # Errors
    /// As [`Collectives::put`], and for `index` outside `signal`.
    #[allow(clippy::too_many_arguments)]
    pub fn put_with_signal<T: bytemuck::Pod + 'static>(
        &self,
        dst: &SymmetricBuffer<T, B>,
        at: usize,
        src: &impl AsDeviceSlice<T, B>,
        signal: &SymmetricBuffer<u64, B>,
        index: usize,
        value: u64,
        to: usize,
    ) -> Result<u64> {
        let src = src.as_device_slice();
        self.check_rank(to)?;
        let dst = self.one_sided(dst, at, src.len())?;
        let sig = self.one_sided(signal, index, 1)?;
        let (d, s, bases, world, rank) = self.point(&dst, &src);
        // SAFETY: the rank was checked (`check_rank`), the symmetric range agreed and
        // checked against the buffer (`one_sided`), the local view holds the elements
        // moved, and the signal array is this handle's: the kernel's `# Safety`.
        unsafe {
            self.launch(
                symmem_kernels::symmem_rma_put_signal_add,
                (
                    d,
                    s,
                    bases,
                    world,
                    rank,
                    src.byte_len() as u64,
                    &sig,
                    to as u32,
                    value,
                ),
            )
        }?;
        Ok(self.signal_total(value))
    }

    /// What one [`Collectives::put_with_signal`] of `value` adds to its signal in all:
    /// `value` per block of the grid (wrapping).
    pub fn signal_total(&self, value: u64) -> u64 {
        value.wrapping_mul(u64::from(self.grid.blocks))
    }

    /// Enqueues a wait, on this rank's device, until element `index` of this rank's
    /// copy of `signal` satisfies `cmp` against `value` (an acquire load at system
    /// scope): this rank's later work sees what the signalling ranks did before their
    /// release updates. On a GPU it returns at once and holds back the stream; on the
    /// CPU backend it returns when the condition holds. If no rank satisfies the
    /// condition, the wait gives up after the world's
    /// [`Config::wait_deadline`](crate::Config::wait_deadline), or as soon as a peer
    /// process is found lost, and poisons the world ([`World::check_waits`]).
    ///
    /// The wait names no peer, so a peer's departure does not end it (only a lost peer,
    /// the world's abort and the deadline do): where one rank satisfies the condition,
    /// [`Collectives::signal_wait_until_from`] ends promptly when that rank leaves.
    ///
    /// # Errors
    /// `index` outside `signal`, `signal` not in the heap.
    pub fn signal_wait_until(
        &self,
        signal: &SymmetricBuffer<u64, B>,
        index: usize,
        cmp: Cmp,
        value: u64,
    ) -> Result<()> {
        self.wait_until(signal, index, cmp, value, symmem_rma::watch::NO_PEER)
    }

    /// [`Collectives::signal_wait_until`] for a signal that rank `from` satisfies: if
    /// `from` leaves the world (or is lost) before it does, the wait gives up within two
    /// of its looks at the control block, instead of at the deadline, and the world
    /// reports [`Error::PeerLost`] naming `from`. A signal `from`
    /// sent before it left still satisfies the wait.
    ///
    /// # Errors
    /// As [`Collectives::signal_wait_until`], and `from` outside the world.
    pub fn signal_wait_until_from(
        &self,
        signal: &SymmetricBuffer<u64, B>,
        index: usize,
        from: usize,
        cmp: Cmp,
        value: u64,
    ) -> Result<()> {
        self.check_rank(from)?;
        self.wait_until(signal, index, cmp, value, from as u64)
    }

    fn wait_until(
        &self,
        signal: &SymmetricBuffer<u64, B>,
        index: usize,
        cmp: Cmp,
        value: u64,
        from: u64,
    ) -> Result<()> {
        let sig = self.one_sided(signal, index, 1)?;
        // SAFETY: the signal word was checked inside an agreed symmetric buffer
        // (`one_sided`), and `from` is a rank of the world or none.
        unsafe {
            self.world.kernels().launch_unchecked(
                symmem_kernels::symmem_rma_signal_wait_until,
                Grid::new(1, 1),
                (
                    self.bases(),
                    self.world_u32(),
                    self.rank_u32(),
                    &sig,
                    cmp,
                    value,
                    from,
                ),
            )
        }
    }

    /// Atomics under contention: every thread of the grid adds 1 to element `index` of
    /// `counter` on every rank (its own first), `iters` times, each add `AcqRel` at
    /// system scope. Returns what it adds to each rank's counter:
    /// `blocks * threads * iters`. When every rank calls it, each counter grows by
    /// `world` times that; wait for the adds with a [`Collectives::barrier`].
    ///
    /// # Errors
    /// `index` outside `counter`, `counter` not in the heap.
    pub fn atomic_add_all(
        &self,
        counter: &SymmetricBuffer<u64, B>,
        index: usize,
        iters: u32,
    ) -> Result<u64> {
        let counter = self.one_sided(counter, index, 1)?;
        // SAFETY: the rank was checked (`check_rank`), the symmetric range agreed and
        // checked against the buffer (`one_sided`), the local view holds the elements
        // moved, and the signal array is this handle's: the kernel's `# Safety`.
        unsafe {
            self.launch(
                symmem_kernels::symmem_rma_atomic_add_all,
                (
                    &counter,
                    self.bases(),
                    self.world_u32(),
                    self.rank_u32(),
                    iters,
                ),
            )
        }?;
        Ok(u64::from(self.grid.blocks) * u64::from(self.grid.threads) * u64::from(iters))
    }

    /// As [`Collectives::symmetric`], for a one-sided call: the buffer must be agreed.
    fn one_sided<'a, T>(
        &self,
        buffer: &'a SymmetricBuffer<T, B>,
        at: usize,
        len: usize,
    ) -> Result<DeviceSlice<'a, T, B>> {
        let view = self.symmetric(buffer, at, len)?;
        self.world
            .check_one_sided(&[(buffer.id(), buffer.offset())])?;
        Ok(view)
    }

    /// Elements `at..at+len` of this rank's copy of `buffer`, checking that they lie in
    /// it and that it lies in this world's heap (so the heap-base table translates it).
    fn symmetric<'a, T>(
        &self,
        buffer: &'a SymmetricBuffer<T, B>,
        at: usize,
        len: usize,
    ) -> Result<DeviceSlice<'a, T, B>> {
        let view = buffer
            .slice(at..at.saturating_add(len))
            .map_err(|_| Error::OutOfBounds {
                start: at,
                len,
                capacity: buffer.len(),
            })?
            .local();
        self.world.check_own(buffer.world())?;
        let ptr = buffer.ptr();
        let heap = self.world.heap_bases().entries()[self.world.rank()];
        let in_heap = ptr >= heap
            && (ptr - heap)
                .checked_add(buffer.byte_len() as u64)
                .is_some_and(|end| end <= self.world.heap_len() as u64);
        if !in_heap {
            return Err(Error::NotSymmetric { addr: ptr });
        }
        Ok(view)
    }
}
