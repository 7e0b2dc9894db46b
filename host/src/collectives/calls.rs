//! The collective calls that move data without reducing it (all-gather, all-to-all,
//! broadcast), and the device barrier.

use super::launching::{bytes_of, local};
use super::staging::Need;
use super::{Call, Collectives, element};
use crate::backend::Backend;
use crate::error::Result;
use crate::memory::AsDeviceSlice;

#[cfg(doc)]
use crate::error::Error;

impl<B: Backend> Collectives<B> {
    /// A barrier across all ranks, on the device: every block of every rank waits for
    /// the same block of every other rank. Everything each rank's kernels did before is
    /// complete and visible to every rank's later kernels. Collective.
    pub fn barrier(&self) -> Result<()> {
        self.world.collectively(|| {
            self.agreed(&[Call::Barrier as u64], &[], Ok(()))?;
            // SAFETY: the call's views were checked for its counts (`local`, `times_world`)
            // and agreed, and the table, grid and signal array are this handle's: the
            // kernel's `# Safety`.
            unsafe {
                self.launch(
                    symmem_kernels::symmem_barrier_all,
                    (
                        self.bases(),
                        self.world_u32(),
                        self.rank_u32(),
                        &self.signals,
                    ),
                )
            }
        })
    }

    /// All-gather: this rank's `src[0..count]` lands in every rank's `dst`, at elements
    /// `rank*count..(rank+1)*count`. Both are any device memory of this rank; where `dst`
    /// is not symmetric memory of this world's heap, the ranks write into this handle's
    /// staging scratch and each copies its result out ([`Collectives` staging](Collectives#memory-the-application-owns)).
    /// Collective.
    ///
    /// # Errors
    /// `dst` shorter than `world * count` or `src` shorter than `count`
    /// ([`Error::OutOfBounds`]), and the staging scratch's allocation errors.
    pub fn all_gather<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        count: usize,
    ) -> Result<()> {
        self.world.collectively(|| {
            let total = self.times_world(count);
            let checked = local(dst, total).and_then(|d| Ok((d, local(src, count)?)));
            let objects = self.objects(dst, src);
            let call = [Call::AllGather as u64, count as u64, element::<T>()];
            self.staged(&call, objects, checked, false, &[Need::Dst], |d, s| {
                // SAFETY: the call's views were checked for its counts (`local`,
                // `times_world`) and agreed, and the table, grid and signal array are this
                // handle's: the kernel's `# Safety`.
                unsafe {
                    self.launch(
                        symmem_kernels::symmem_all_gather,
                        self.moving(d, s, bytes_of::<T>(count)),
                    )
                }
            })
        })
    }

    /// All-to-all: chunk `j` (elements `j*count..(j+1)*count`) of this rank's `src` lands
    /// in chunk `rank` of rank `j`'s `dst`. Both hold `world * count` elements, any device
    /// memory of this rank (a `dst` that is not symmetric is staged, as for
    /// [`Collectives::all_gather`]). Collective.
    ///
    /// # Errors
    /// As [`Collectives::all_gather`].
    pub fn all_to_all<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        count: usize,
    ) -> Result<()> {
        self.world.collectively(|| {
            let total = self.times_world(count);
            let checked = local(dst, total).and_then(|d| Ok((d, local(src, total)?)));
            let objects = self.objects(dst, src);
            let call = [Call::AllToAll as u64, count as u64, element::<T>()];
            self.staged(&call, objects, checked, false, &[Need::Dst], |d, s| {
                // SAFETY: the call's views were checked for its counts (`local`,
                // `times_world`) and agreed, and the table, grid and signal array are this
                // handle's: the kernel's `# Safety`.
                unsafe {
                    self.launch(
                        symmem_kernels::symmem_all_to_all,
                        self.moving(d, s, bytes_of::<T>(count)),
                    )
                }
            })
        })
    }

    /// Broadcast: rank `root`'s `src[0..count]` lands in every rank's `dst` (the root's
    /// included; every rank pulls from the root). Both are any device memory of this rank;
    /// where `src` is not symmetric memory of this world's heap, the root copies it into
    /// this handle's staging scratch first. Collective.
    ///
    /// # Errors
    /// `root` out of range ([`Error::RankOutOfRange`]), `src` or `dst` shorter
    /// than `count`, and the staging scratch's allocation errors.
    pub fn broadcast<T: bytemuck::Pod + 'static>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        count: usize,
        root: usize,
    ) -> Result<()> {
        self.world.collectively(|| {
            let checked = self
                .check_rank(root)
                .and_then(|()| Ok((local(dst, count)?, local(src, count)?)));
            let objects = self.objects(dst, src);
            let call = [
                Call::Broadcast as u64,
                count as u64,
                element::<T>(),
                root as u64,
            ];
            let need = Need::Src {
                copy: self.world.rank() == root,
            };
            self.staged(&call, objects, checked, false, &[need], |d, s| {
                let (d, s, bases, world, rank, n, sig) = self.moving(d, s, bytes_of::<T>(count));
                // SAFETY: the call's views were checked for its counts (`local`,
                // `times_world`) and agreed, and the table, grid and signal array are this
                // handle's: the kernel's `# Safety`.
                unsafe {
                    self.launch(
                        symmem_kernels::symmem_broadcast,
                        (d, s, bases, world, rank, n, sig, root as u32),
                    )
                }
            })
        })
    }
}
