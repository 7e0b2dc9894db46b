//! The staging scratch: the symmetric memory of the handle through which a collective
//! reaches, on peers, an argument that is not symmetric memory of the heap (see
//! [memory the application owns](Collectives#memory-the-application-owns)), and its sizing.

use super::Collectives;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::memory::{AsDeviceSlice, DeviceSlice, SymmetricBuffer};

#[cfg(doc)]
use crate::world::World;

impl<B: Backend> Collectives<B> {
    /// Makes this handle's staging scratch at least `bytes` long now (collective: every
    /// rank passes the same `bytes`), so that a collective on memory that is not
    /// symmetric can be captured into a graph ([`World::capture`] cannot record the
    /// scratch's growth). A call stages at most its source's and destination's bytes.
    ///
    /// # Errors
    /// The allocation's ([`Error::OutOfHeap`]: raise
    /// [`Config::heap_bytes`](crate::Config::heap_bytes)), [`Error::Capturing`].
    pub fn reserve_staging(&self, bytes: usize) -> Result<()> {
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        self.staging_of(&mut staging, bytes).map(drop)
    }

    /// Bytes of staging scratch this handle holds: 0 until a call stages memory that
    /// is not symmetric (see [memory the application owns](Collectives#memory-the-application-owns)).
    pub fn staging_bytes(&self) -> usize {
        let staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        staging.as_ref().map_or(0, |s| s.len())
    }

    /// Runs `run` on `(dst, src)` after the agreement of `call`, first staging through this
    /// handle's scratch what `needs` must reach on peers and is not symmetric memory of
    /// this world's heap (or, for a source, is the destination too): a staged source is
    /// copied in before `run` (where `copy`), a staged destination copied out after.
    /// `checked` is this rank's check of its arguments; with `agree_both`, both arguments,
    /// where symmetric, take part in the agreement (else those in `needs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn staged<T: bytemuck::Pod + 'static>(
        &self,
        call: &[u64],
        (d_id, s_id): (Option<u64>, Option<u64>),
        checked: Result<(DeviceSlice<'_, T, B>, DeviceSlice<'_, T, B>)>,
        agree_both: bool,
        needs: &[Need],
        run: impl FnOnce(&DeviceSlice<'_, T, B>, &DeviceSlice<'_, T, B>) -> Result<()>,
    ) -> Result<()> {
        // The symmetric arguments a peer reaches take part in the agreement (a
        // collective's first use of an object agrees it, also when this rank's check of
        // the call failed), and with `agree_both` both do, whether or not a peer reaches
        // them (an all-reduce's, whatever its path).
        let mut ids: Vec<u64> = Vec::new();
        for need in needs.iter().filter(|_| !agree_both) {
            ids.extend(match need {
                Need::Src { .. } => s_id,
                Need::Dst => d_id,
            });
        }
        if agree_both {
            ids.extend(d_id.into_iter().chain(s_id));
        }
        let (d, s) = match checked {
            Ok(views) => views,
            Err(e) => return self.agreed(call, &ids, Err(e)),
        };
        let in_place = d.ptr() == s.ptr();
        let (mut stage_src, mut copy_src, mut stage_dst) = (false, false, false);
        for need in needs {
            match *need {
                Need::Src { copy } if s_id.is_none() || in_place => {
                    (stage_src, copy_src) = (true, copy);
                }
                Need::Dst if d_id.is_none() => stage_dst = true,
                Need::Src { .. } | Need::Dst => {}
            }
        }
        // Every rank must stage alike (peers reach the same heap offsets): the ledger
        // records which, so a rank that differs is named at the next agreement.
        let mut words = call.to_vec();
        words.push(u64::from(stage_src) | u64::from(stage_dst) << 1);
        if !stage_src && !stage_dst {
            self.agreed(&words, &ids, Ok(()))?;
            return run(&d, &s);
        }
        let src_room = if stage_src {
            s.byte_len().next_multiple_of(16)
        } else {
            0
        };
        let bytes = src_room + if stage_dst { d.byte_len() } else { 0 };
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        let scratch = self.staging_of(&mut staging, bytes)?;
        ids.push(scratch.id());
        self.agreed(&words, &ids, Ok(()))?;
        let area = scratch.as_slice().local();
        let s_used = if stage_src {
            area.reinterpret::<T>(s.len())?
        } else {
            s
        };
        let d_used = if stage_dst {
            area.slice(src_room..)?.reinterpret::<T>(d.len())?
        } else {
            d
        };
        if copy_src {
            self.world.copy(&s_used, &s)?;
        }
        run(&d_used, &s_used)?;
        if stage_dst {
            self.world.copy(&d, &d_used)?;
        }
        Ok(())
    }

    /// Runs `run` on `(dst, src, stage)` after the agreement of `call`, `stage` this
    /// handle's staging scratch as `src.len()` elements of `T`, for a kernel that copies
    /// through it itself (the staged two-shot). The ledger records the path, so a rank
    /// that passed other kinds of memory is named at the next agreement.
    pub(super) fn through_scratch<T: bytemuck::Pod + 'static>(
        &self,
        call: &[u64],
        (d_id, s_id): (Option<u64>, Option<u64>),
        checked: Result<(DeviceSlice<'_, T, B>, DeviceSlice<'_, T, B>)>,
        run: impl FnOnce(
            &DeviceSlice<'_, T, B>,
            &DeviceSlice<'_, T, B>,
            &DeviceSlice<'_, T, B>,
        ) -> Result<()>,
    ) -> Result<()> {
        let mut ids: Vec<u64> = d_id.into_iter().chain(s_id).collect();
        let (d, s) = match checked {
            Ok(views) => views,
            Err(e) => return self.agreed(call, &ids, Err(e)),
        };
        let mut words = call.to_vec();
        // Above the staged and unstaged paths' bits.
        words.push(1 << 4);
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        let scratch = self.staging_of(&mut staging, s.byte_len())?;
        ids.push(scratch.id());
        self.agreed(&words, &ids, Ok(()))?;
        let stage = scratch.as_slice().local().reinterpret::<T>(s.len())?;
        run(&d, &s, &stage)
    }

    /// The staging scratch in `slot`, made or grown (collectively) to at least `bytes`.
    fn staging_of<'g>(
        &self,
        slot: &'g mut Option<SymmetricBuffer<u8, B>>,
        bytes: usize,
    ) -> Result<&'g SymmetricBuffer<u8, B>> {
        if slot.as_ref().is_none_or(|b| b.len() < bytes) {
            self.world.not_capturing(
                "growing a collective's staging scratch (for memory that is not symmetric): \
                 make the same call once before capturing, or Collectives::reserve_staging",
            )?;
            let size = bytes.max(4096).next_power_of_two();
            tracing::debug!(
                rank = self.world.rank(),
                bytes = size,
                "a collective's staging scratch, for memory that is not symmetric"
            );
            // The old one goes back to the heap at the next barrier.
            *slot = None;
            *slot = Some(self.world.allocate_symmetric::<u8>(size)?.0);
        }
        slot.as_ref().ok_or(Error::ZeroSize)
    }

    /// The ledger ids of the symmetric heap allocations that hold `dst` and `src` (each
    /// `None` where it is not symmetric memory of this world's heap).
    pub(super) fn objects<T>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
    ) -> (Option<u64>, Option<u64>) {
        let object = |v: DeviceSlice<'_, T, B>| self.world.heap_object(v.ptr(), v.byte_len());
        (object(dst.as_device_slice()), object(src.as_device_slice()))
    }
}

/// What a collective must reach on every peer through the heap table, and so stages
/// where it is not symmetric memory of the heap (see [`Collectives::staged`]).
#[derive(Clone, Copy)]
pub(super) enum Need {
    /// The source (peers read it); `copy`: this rank's data goes into the scratch (not so
    /// for a broadcast's other ranks, whose source no peer reads).
    Src { copy: bool },
    /// The destination (peers write it); a staged one is copied out after the kernel.
    Dst,
}
