//! [`Team`]'s construction, its accessors, and the translation of a symmetric pointer to
//! a peer's copy (or to the engine, where the peer is not mapped here).

use super::Team;
use symmem_translate::PeerBases;

impl<'a> Team<'a> {
    /// A team over `bases` as rank `rank`; `None` unless `rank < bases.len()`.
    #[inline(always)]
    pub fn new(bases: PeerBases<'a>, rank: usize) -> Option<Self> {
        (rank < bases.len()).then_some(Self { bases, rank })
    }

    /// A team from a kernel's arguments: the device-resident table, world size, rank.
    ///
    /// # Safety
    /// `table` points to `world` readable `u64`s that outlive `'a`, and `rank < world`.
    #[inline(always)]
    pub unsafe fn from_raw_parts(table: *const u64, world: u32, rank: u32) -> Self {
        Self {
            // SAFETY: forwarded from the caller.
            bases: unsafe { PeerBases::from_raw_parts(table, world as usize) },
            rank: rank as usize,
        }
    }

    /// This rank.
    #[inline(always)]
    pub const fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    #[inline(always)]
    pub const fn world(&self) -> usize {
        self.bases.len()
    }

    /// The peer-base table.
    #[inline(always)]
    pub const fn bases(&self) -> PeerBases<'a> {
        self.bases
    }

    /// The symmetric pointer `p` translated to rank `to`'s copy (a pointer offset).
    ///
    /// # Safety
    /// `to < self.world()`. Dereferencing the result needs `p` symmetric (see [`Team`]).
    #[inline(always)]
    pub unsafe fn translate<T>(&self, p: *mut T, to: usize) -> *mut T {
        debug_assert!(to < self.world());
        // SAFETY: `rank < world` by construction; `to < world` by the caller.
        unsafe { self.bases.remote_unchecked(p, self.rank, to) }
    }

    /// Rank `to`'s copy of symmetric `p`, or `None` when rank `to` is not mapped here
    /// (its table entry is 0: the engine reaches it).
    ///
    /// # Safety
    /// `to < self.world()`.
    #[inline(always)]
    pub(super) unsafe fn reach<T>(&self, p: *mut T, to: usize) -> Option<*mut T> {
        let bases = self.bases.as_slice();
        // SAFETY: `rank < world` by construction; `to < world` by the caller.
        let (there, here) = unsafe { (*bases.get_unchecked(to), *bases.get_unchecked(self.rank)) };
        let there_too = p.wrapping_byte_offset(there.wrapping_sub(here) as isize);
        // The build for worlds on one node (feature `on-node`, loaded by no other
        // world) takes no branch: there every peer is mapped, and every table the host
        // lets a kernel take (the heap's, a buffer's, a rendezvous's, an external one,
        // which may hold no null entry there) has no 0 entry.
        if cfg!(feature = "on-node") {
            return Some(there_too);
        }
        (there != 0).then_some(there_too)
    }
}
