//! Lanes of one warp (NVIDIA) or wavefront (AMD) working on one call together.
//!
//! Where a single thread must own a resource (a request slot of the off-node engine) but
//! the work on it (copying a request's bytes) is better shared, the warp's first lane
//! takes the resource, [`LaneGroup::broadcast`] hands what it took to the others, they share
//! the work, and [`LaneGroup::sync_release`] makes every lane's part visible before the
//! first lane publishes the whole. On the host a warp is one thread, so a [`LaneGroup`] group
//! is always [`LaneGroup::ALONE`] there and both operations do nothing.

use crate::{Arch, Scope};

/// One thread's place in a group of lanes that calls a lane-cooperative function
/// together: lane [`LaneGroup::lane`] of the warp's first [`LaneGroup::lanes`] lanes.
///
/// A group is either one thread alone ([`LaneGroup::ALONE`]) or the lanes of one warp that
/// the block holds ([`LaneGroup::of_warp`]); nothing else can be made, so a group's lanes
/// are always consecutive hardware lanes from lane 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneGroup {
    lane: u32,
    lanes: u32,
}

impl LaneGroup {
    /// A thread on its own: [`LaneGroup::broadcast`] returns its own value and
    /// [`LaneGroup::sync_release`] is a no-op, whatever other lanes of its warp do meanwhile.
    pub const ALONE: LaneGroup = LaneGroup { lane: 0, lanes: 1 };

    /// This thread's place in its warp, in a one-dimensional block of `arch`: the lanes
    /// are the warp's threads the block holds (fewer than the warp's width in a last,
    /// partial warp). On the host, [`LaneGroup::ALONE`].
    #[inline(always)]
    pub fn of_warp<A: Arch>(arch: &A) -> LaneGroup {
        Self::in_warps_of(warp_size(), arch.thread_id(), arch.block_dim())
    }

    /// Thread `thread`'s place in its warp of `width` lanes, in a block of `block_dim`.
    #[inline(always)]
    const fn in_warps_of(width: u32, thread: u32, block_dim: u32) -> LaneGroup {
        let lane = thread % width;
        let first = thread - lane;
        let left = block_dim - first;
        LaneGroup {
            lane,
            lanes: if width < left { width } else { left },
        }
    }

    /// This thread's lane, `0..lanes()`.
    #[inline(always)]
    pub const fn lane(self) -> u32 {
        self.lane
    }

    /// LaneGroup in the group, at least 1.
    #[inline(always)]
    pub const fn lanes(self) -> u32 {
        self.lanes
    }

    /// Whether this is the group's first lane (the one that owns what the group shares).
    #[inline(always)]
    pub const fn is_first(self) -> bool {
        self.lane == 0
    }

    /// The group as one word (`lane | lanes << 32`), to pass through
    /// [`crate::call_outlined`]; [`LaneGroup::from_word`] reverses it.
    #[inline(always)]
    pub const fn to_word(self) -> u64 {
        self.lane as u64 | (self.lanes as u64) << 32
    }

    /// The group [`LaneGroup::to_word`] made.
    ///
    /// # Safety
    /// `word` came from [`LaneGroup::to_word`] on this thread.
    #[inline(always)]
    pub const unsafe fn from_word(word: u64) -> LaneGroup {
        LaneGroup {
            lane: word as u32,
            lanes: (word >> 32) as u32,
        }
    }

    /// The first lane's `v`, returned to every lane of the group.
    ///
    /// # Safety
    /// Every lane of the group calls it, from converged control flow (as for any
    /// block-cooperative function), and no other thread of the warp calls it at the same
    /// point: NVIDIA's `shfl.sync` waits for exactly the group's lanes, and AMD's
    /// `readfirstlane` reads the first active lane, which must be the group's first.
    #[inline(always)]
    pub unsafe fn broadcast(self, v: u64) -> u64 {
        if self.lanes == 1 {
            return v;
        }
        #[cfg(target_arch = "nvptx64")]
        // SAFETY: the group's lanes all arrive (the caller's contract); `mask` names them.
        let v = unsafe { crate::nvptx::broadcast_first(v, self.mask()) };
        #[cfg(target_arch = "amdgpu")]
        let v = core::arch::amdgpu::readfirstlane_u64(v);
        v
    }

    /// A barrier among the group's lanes that first releases each lane's own accesses at
    /// `scope`: when any lane returns, every lane's loads and stores from before its call
    /// have completed as far as `scope` reaches, so a release at `scope` by the first lane
    /// after it (publishing what the group wrote) covers the whole group's work.
    ///
    /// Per target: on NVIDIA GPUs each lane runs `fence.acq_rel.<scope>` and then
    /// `bar.warp.sync` over the group; on AMD GPUs the wave runs a release fence at
    /// `scope` (its counters cover every lane's accesses) and a wave barrier; on the host
    /// nothing (a group is one thread).
    ///
    /// # Safety
    /// As [`LaneGroup::broadcast`].
    #[inline(always)]
    pub unsafe fn sync_release(self, scope: Scope) {
        if self.lanes == 1 {
            return;
        }
        #[cfg(target_arch = "nvptx64")]
        // SAFETY: as in `broadcast`.
        unsafe {
            crate::nvptx::sync_warp_release(self.mask(), scope)
        };
        #[cfg(target_arch = "amdgpu")]
        crate::amdgpu::sync_wave_release(scope);
        #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
        let _ = scope;
    }

    /// The group's hardware lanes as a member mask (lanes `0..lanes`).
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    fn mask(self) -> u32 {
        if self.lanes >= 32 {
            u32::MAX
        } else {
            (1 << self.lanes) - 1
        }
    }
}

/// Threads per warp: 32 on NVIDIA GPUs, the wavefront's width on AMD GPUs (64 or 32), 1
/// on the host (each block thread is an OS thread of its own).
#[inline(always)]
pub fn warp_size() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    let w = 32;
    #[cfg(target_arch = "amdgpu")]
    let w = core::arch::amdgpu::wavefrontsize();
    #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
    let w = 1;
    w
}

#[cfg(test)]
mod tests {
    use super::LaneGroup;

    #[test]
    fn a_warp_holds_the_blocks_threads_from_its_first_lane() {
        // 48 threads in warps of 32: a whole warp, then a partial one of 16.
        for t in 0..48 {
            let g = LaneGroup::in_warps_of(32, t, 48);
            assert_eq!(g.lane(), t % 32, "thread {t}");
            assert_eq!(g.lanes(), if t < 32 { 32 } else { 16 }, "thread {t}");
            assert_eq!(g.is_first(), t % 32 == 0, "thread {t}");
            assert_eq!(
                // SAFETY: made by `to_word` just now.
                unsafe { LaneGroup::from_word(g.to_word()) },
                g
            );
        }
        // Wavefronts of 64, a block of 256: four whole groups.
        assert_eq!(LaneGroup::in_warps_of(64, 200, 256).lanes(), 64);
        assert_eq!(LaneGroup::in_warps_of(64, 200, 256).lane(), 8);
        // The host's warps of one thread: every thread alone.
        for t in 0..5 {
            assert_eq!(LaneGroup::in_warps_of(1, t, 5), LaneGroup::ALONE);
        }
        // A block of one thread on a GPU: a group of one, whose broadcast is its own.
        assert_eq!(LaneGroup::in_warps_of(32, 0, 1), LaneGroup::ALONE);
    }

    #[test]
    fn a_lone_thread_broadcasts_to_itself_and_syncs_with_no_one() {
        let g = LaneGroup::ALONE;
        // SAFETY: a group of one thread: nothing to wait for.
        unsafe {
            assert_eq!(g.broadcast(0xdead_beef_0123_4567), 0xdead_beef_0123_4567);
            g.sync_release(crate::Scope::System);
        }
    }
}
