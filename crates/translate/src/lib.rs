//! Peer-base translation: the one place where "my pointer" becomes "rank r's pointer".
//!
//! A symmetric allocation has one address per rank, as mapped in the caller's address
//! space. A [`PeerBases`] table holds them, indexed by rank; its entry for the calling
//! rank is the local pointer. Translation is
//!
//! ```text
//! remote(p, cur, to) = p - bases[cur] + bases[to]
//! ```
//!
//! computed by offsetting `p` itself (`wrapping_byte_offset`), never by turning an
//! integer into a pointer: the result keeps `p`'s provenance (Miri, strict provenance)
//! and, on GPUs, its address space (a global store stays a global store).
//!
//! [`PeerBases::remote`] is the checked form for host code; [`PeerBases::remote_unchecked`]
//! is the `#[inline(always)]` form kernels use.
#![no_std]
#![cfg_attr(
    any(target_arch = "amdgpu", target_arch = "nvptx64"),
    feature(portable_simd)
)]

mod vector;

pub use vector::{U32x2, U32x4};

/// Why a checked translation was refused. Each variant names the values that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TranslateError {
    /// A rank is not in `0..world`.
    #[error("rank {rank} is out of range for a world of {world}")]
    RankOutOfRange {
        /// The rank asked for.
        rank: usize,
        /// The world size.
        world: usize,
    },
    /// The table has fewer entries than the world has ranks.
    #[error("peer-base table has {entries} entries, the world has {world} ranks")]
    TableTooShort {
        /// Entries in the table.
        entries: usize,
        /// The world size.
        world: usize,
    },
    /// The pointer (or the element it points to) is not inside the allocation that
    /// `bases[cur]` starts.
    #[error("address {addr:#x} is not inside the allocation at {base:#x} of {len} bytes")]
    NotInAllocation {
        /// The pointer's address.
        addr: usize,
        /// `bases[cur]`.
        base: u64,
        /// The allocation's length in bytes.
        len: usize,
    },
}

/// A borrowed peer-base table: entry `r` is one allocation's address on rank `r`, as
/// mapped in this address space.
///
/// Every provider guarantees two things: `bases[my_rank] == local pointer`, and all
/// entries are congruent modulo 16 (so translation keeps 16-byte alignment and kernels
/// may choose their vector path from the local pointer alone).
#[derive(Clone, Copy, Debug)]
pub struct PeerBases<'a> {
    bases: &'a [u64],
}

impl<'a> PeerBases<'a> {
    /// Views `bases` as a peer-base table indexed by rank.
    #[inline(always)]
    pub const fn new(bases: &'a [u64]) -> Self {
        Self { bases }
    }

    /// Views `world` entries starting at `table` (a device-resident table in a kernel).
    ///
    /// # Safety
    /// `table` must point to `world` readable, initialised `u64`s that outlive `'a`.
    #[inline(always)]
    pub unsafe fn from_raw_parts(table: *const u64, world: usize) -> Self {
        // SAFETY: the caller guarantees `world` readable u64s at `table`.
        let bases = unsafe { core::slice::from_raw_parts(table, world) };
        Self { bases }
    }

    /// The table's entries.
    #[inline(always)]
    pub const fn as_slice(&self) -> &'a [u64] {
        self.bases
    }

    /// Number of entries (ranks) in the table.
    #[inline(always)]
    pub const fn len(&self) -> usize {
        self.bases.len()
    }

    /// True when the table has no entries.
    #[inline(always)]
    pub const fn is_empty(&self) -> bool {
        self.bases.is_empty()
    }

    /// The byte distance from rank `cur`'s copy to rank `to`'s copy, without checks.
    ///
    /// # Safety
    /// `cur` and `to` must be less than [`Self::len`].
    #[inline(always)]
    pub unsafe fn delta_unchecked(&self, cur: usize, to: usize) -> isize {
        // SAFETY: the caller keeps both ranks in range.
        let (from, to) = unsafe {
            (
                *self.bases.get_unchecked(cur),
                *self.bases.get_unchecked(to),
            )
        };
        to.wrapping_sub(from) as isize
    }

    /// `p - bases[cur] + bases[to]` with no checks: the kernel form.
    ///
    /// The result is `p` offset in place, so it keeps `p`'s provenance and address space.
    ///
    /// # Safety
    /// `cur` and `to` must be less than [`Self::len`]. Dereferencing the result is only
    /// sound if `p` lies in rank `cur`'s copy of the allocation and rank `to`'s copy is
    /// mapped at `bases[to]`.
    #[inline(always)]
    pub unsafe fn remote_unchecked<T>(&self, p: *mut T, cur: usize, to: usize) -> *mut T {
        // SAFETY: forwarded from the caller.
        p.wrapping_byte_offset(unsafe { self.delta_unchecked(cur, to) })
    }

    /// The checked form for host code: translates `p`, which must point to a whole `T`
    /// inside rank `cur`'s copy of an allocation of `len` bytes, into rank `to`'s copy.
    ///
    /// # Errors
    /// A table shorter than `world`, `cur` or `to` not in `0..world`, or `p`
    /// outside `[bases[cur], bases[cur] + len)`.
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "`p` is only offset, never dereferenced: translation is address arithmetic"
    )]
    pub fn remote<T>(
        &self,
        p: *mut T,
        len: usize,
        world: usize,
        cur: usize,
        to: usize,
    ) -> Result<*mut T, TranslateError> {
        if self.bases.len() < world {
            return Err(TranslateError::TableTooShort {
                entries: self.bases.len(),
                world,
            });
        }
        for rank in [cur, to] {
            if rank >= world {
                return Err(TranslateError::RankOutOfRange { rank, world });
            }
        }
        let base = self.bases[cur];
        let addr = p.addr();
        let outside = TranslateError::NotInAllocation { addr, base, len };
        let offset = (addr as u64).checked_sub(base).ok_or(outside)?;
        let end = offset
            .checked_add(core::mem::size_of::<T>() as u64)
            .ok_or(outside)?;
        if end > len as u64 || (core::mem::size_of::<T>() == 0 && offset >= len as u64) {
            return Err(outside);
        }
        // SAFETY: both ranks were checked against `world <= self.len()`.
        Ok(unsafe { self.remote_unchecked(p, cur, to) })
    }
}
