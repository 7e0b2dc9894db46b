//! Offset allocator for a symmetric heap.
//!
//! A symmetric heap is one contiguous region of the same size on every rank. Every rank
//! runs the same sequence of [`OffsetAllocator::alloc`] and [`OffsetAllocator::free`]
//! calls, so the allocator hands out *offsets* into the region, never addresses, and is
//! fully deterministic: its state is two [`BTreeMap`]s ordered by offset, it hashes
//! nothing and never looks at an address, so the same calls give the same offsets (and
//! the same errors) on every rank.
//!
//! Placement is first fit by lowest offset. Offsets and lengths are multiples of
//! [`MIN_ALIGN`]; the alignment padding in front of an aligned allocation and the tail
//! behind it stay on the free list. [`OffsetAllocator::free`] coalesces the released
//! range with the free ranges on both sides, so the free list always holds maximal
//! gaps between live allocations: once everything is freed, the whole heap is one free
//! range again, however fragmented it was.

use std::collections::BTreeMap;

/// Smallest alignment and size granule: every offset and every allocation length is a
/// multiple of this many bytes.
pub const MIN_ALIGN: usize = 256;

/// Why an [`OffsetAllocator`] call failed. The allocator's state is unchanged by a
/// failed call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllocError {
    /// An allocation of zero bytes was requested.
    #[error("cannot allocate zero bytes")]
    ZeroSize,
    /// The requested alignment is not a power of two.
    #[error("alignment {align} is not a power of two")]
    BadAlignment {
        /// The alignment asked for.
        align: usize,
    },
    /// No free range holds the request at its alignment right now; freeing may help.
    #[error(
        "out of symmetric heap memory: no free range holds {requested} bytes at the \
         requested alignment ({available} bytes free in total)"
    )]
    OutOfMemory {
        /// The size asked for, before rounding up to [`MIN_ALIGN`].
        requested: usize,
        /// Total free bytes in the heap (possibly fragmented), not the largest free range.
        available: usize,
    },
    /// The request can never fit, even in an empty heap.
    #[error("{requested} bytes can never fit in a symmetric heap of {capacity} bytes")]
    TooLarge {
        /// The size asked for, before rounding up to [`MIN_ALIGN`].
        requested: usize,
        /// The heap's usable capacity in bytes.
        capacity: usize,
    },
    /// The offset is not the start of a live allocation (double free or foreign offset).
    #[error("offset {offset} is not the start of a live allocation")]
    NotAllocated {
        /// The offset passed to [`OffsetAllocator::free`].
        offset: usize,
    },
}

/// Deterministic first-fit allocator of offsets in `0..capacity`.
///
/// Invariants (kept by every method): live and free ranges are disjoint, non-empty,
/// multiples of [`MIN_ALIGN`] in offset and length, and together tile `0..capacity`;
/// no two free ranges touch (they are fully coalesced).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetAllocator {
    capacity: usize,
    /// Free ranges, offset -> length, sorted by offset.
    free: BTreeMap<usize, usize>,
    /// Live allocations, offset -> length.
    live: BTreeMap<usize, usize>,
    /// Sum of the lengths in `free`.
    free_bytes: usize,
}

impl OffsetAllocator {
    /// Creates an allocator whose whole range is free. The usable capacity is `capacity`
    /// rounded down to a multiple of [`MIN_ALIGN`] (a shorter tail could never be handed
    /// out); [`capacity`](Self::capacity) reports that value.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity - capacity % MIN_ALIGN;
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        Self {
            capacity,
            free,
            live: BTreeMap::new(),
            free_bytes: capacity,
        }
    }

    /// The usable capacity in bytes, a multiple of [`MIN_ALIGN`].
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Allocates `size` bytes aligned to `max(align, MIN_ALIGN)` and returns the offset.
    ///
    /// The length reserved is `size` rounded up to a multiple of [`MIN_ALIGN`]. The
    /// allocation is placed in the free range with the lowest offset that holds it;
    /// padding in front of it and the rest behind it stay free. Errors, checked in this
    /// order: [`AllocError::ZeroSize`], [`AllocError::BadAlignment`],
    /// [`AllocError::TooLarge`] (also when rounding `size` up overflows),
    /// [`AllocError::OutOfMemory`]. No arithmetic wraps or panics.
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<usize, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(AllocError::BadAlignment { align });
        }
        let align = align.max(MIN_ALIGN);
        let too_large = AllocError::TooLarge {
            requested: size,
            capacity: self.capacity,
        };
        let len = size.checked_next_multiple_of(MIN_ALIGN).ok_or(too_large)?;
        // Offset 0 satisfies every alignment, so an empty heap holds anything up to capacity.
        if len > self.capacity {
            return Err(too_large);
        }
        let (block, block_len, start) = self
            .free
            .iter()
            .find_map(|(&block, &block_len)| {
                let start = block.checked_next_multiple_of(align)?;
                let end = start.checked_add(len)?;
                (end <= block + block_len).then_some((block, block_len, start))
            })
            .ok_or(AllocError::OutOfMemory {
                requested: size,
                available: self.free_bytes,
            })?;
        self.free.remove(&block);
        if start > block {
            self.free.insert(block, start - block);
        }
        // `start + len <= block + block_len <= capacity` was checked above.
        let end = start + len;
        let block_end = block + block_len;
        if block_end > end {
            self.free.insert(end, block_end - end);
        }
        self.live.insert(start, len);
        self.free_bytes -= len;
        Ok(start)
    }

    /// Frees the live allocation starting at `offset` and returns the bytes released (its
    /// rounded length). The range is merged with the free ranges directly before and
    /// after it. Fails with [`AllocError::NotAllocated`], changing nothing, when `offset`
    /// is not the start of a live allocation.
    pub fn free(&mut self, offset: usize) -> Result<usize, AllocError> {
        let len = self
            .live
            .remove(&offset)
            .ok_or(AllocError::NotAllocated { offset })?;
        let mut start = offset;
        let mut merged = len;
        if let Some((&prev, &prev_len)) = self.free.range(..offset).next_back()
            && prev + prev_len == offset
        {
            start = prev;
            merged += prev_len;
        }
        // Live ranges lie inside `0..capacity`, so `offset + len` does not overflow.
        if let Some(next_len) = self.free.remove(&(offset + len)) {
            merged += next_len;
        }
        self.free.insert(start, merged);
        self.free_bytes += len;
        Ok(len)
    }

    /// The live allocation `(offset, len)` containing byte `offset_inside`, if any; `len`
    /// is the rounded length. Answers whether a heap offset is symmetric.
    pub fn allocation(&self, offset_inside: usize) -> Option<(usize, usize)> {
        self.live
            .range(..=offset_inside)
            .next_back()
            .filter(|&(&start, &len)| offset_inside - start < len)
            .map(|(&start, &len)| (start, len))
    }

    /// Total free bytes, however fragmented.
    pub fn free_bytes(&self) -> usize {
        self.free_bytes
    }

    /// Length of the largest free range (0 when the heap is full). Takes time linear in
    /// the number of free ranges.
    pub fn largest_free(&self) -> usize {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Number of live allocations.
    pub fn live(&self) -> usize {
        self.live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1024;

    /// Checks the documented invariants: free and live ranges tile `0..capacity`, are
    /// granule-aligned, and no two free ranges touch.
    fn check(a: &OffsetAllocator) {
        let mut ranges: Vec<(usize, usize, bool)> = a
            .free
            .iter()
            .map(|(&o, &l)| (o, l, true))
            .chain(a.live.iter().map(|(&o, &l)| (o, l, false)))
            .collect();
        ranges.sort_unstable();
        let mut cursor = 0;
        let mut prev_free = false;
        for &(o, l, is_free) in &ranges {
            assert_eq!(o, cursor, "ranges must tile the heap: {ranges:?}");
            assert!(l > 0 && l.is_multiple_of(MIN_ALIGN) && o.is_multiple_of(MIN_ALIGN));
            assert!(
                !(prev_free && is_free),
                "free ranges not coalesced: {ranges:?}"
            );
            cursor = o + l;
            prev_free = is_free;
        }
        assert_eq!(cursor, a.capacity());
        assert_eq!(a.free_bytes(), a.free.values().sum::<usize>());
    }

    #[test]
    fn zero_size_is_rejected() {
        let mut a = OffsetAllocator::new(KIB);
        assert_eq!(a.alloc(0, 1), Err(AllocError::ZeroSize));
        assert_eq!(a.free_bytes(), KIB);
    }

    #[test]
    fn non_power_of_two_alignment_is_rejected() {
        let mut a = OffsetAllocator::new(KIB);
        for align in [0, 3, 384, usize::MAX] {
            assert_eq!(a.alloc(1, align), Err(AllocError::BadAlignment { align }));
        }
        assert_eq!(a.live(), 0);
    }

    #[test]
    fn request_larger_than_capacity_is_too_large() {
        let mut a = OffsetAllocator::new(4 * KIB);
        let too_large = |requested| AllocError::TooLarge {
            requested,
            capacity: 4 * KIB,
        };
        assert_eq!(a.alloc(4 * KIB + 1, 1), Err(too_large(4 * KIB + 1)));
        // Rounding up to MIN_ALIGN would overflow.
        assert_eq!(a.alloc(usize::MAX, 1), Err(too_large(usize::MAX)));
        // TooLarge is a verdict about the empty heap, reported even when it is full.
        a.alloc(4 * KIB, 1).unwrap();
        assert_eq!(a.alloc(8 * KIB, 1), Err(too_large(8 * KIB)));
    }

    #[test]
    fn out_of_memory_reports_total_free_bytes() {
        let mut a = OffsetAllocator::new(4 * KIB);
        let offs: Vec<usize> = (0..4).map(|_| a.alloc(KIB, 1).unwrap()).collect();
        a.free(offs[0]).unwrap();
        a.free(offs[2]).unwrap();
        // 2 KiB are free, but in two separate 1 KiB holes.
        assert_eq!(
            a.alloc(2 * KIB, 1),
            Err(AllocError::OutOfMemory {
                requested: 2 * KIB,
                available: 2 * KIB
            })
        );
        check(&a);
    }

    #[test]
    fn out_of_memory_when_only_alignment_prevents_a_fit() {
        let mut a = OffsetAllocator::new(8 * KIB);
        a.alloc(256, 1).unwrap();
        // 8 KiB - 256 bytes free in one range, but no 4 KiB-aligned 4 KiB + 256 inside it.
        let err = a.alloc(4 * KIB + 256, 4 * KIB).unwrap_err();
        assert_eq!(
            err,
            AllocError::OutOfMemory {
                requested: 4 * KIB + 256,
                available: 8 * KIB - 256
            }
        );
        assert_eq!(a.alloc(4 * KIB, 4 * KIB), Ok(4 * KIB));
        check(&a);
    }

    #[test]
    fn double_free_and_foreign_offsets_are_not_allocated() {
        let mut a = OffsetAllocator::new(4 * KIB);
        let x = a.alloc(512, 1).unwrap();
        assert_eq!(a.free(x), Ok(512));
        assert_eq!(a.free(x), Err(AllocError::NotAllocated { offset: x }));
        let y = a.alloc(512, 1).unwrap();
        for offset in [y + 256, y + 1, 3 * KIB, usize::MAX] {
            assert_eq!(a.free(offset), Err(AllocError::NotAllocated { offset }));
        }
        assert_eq!(a.live(), 1);
        check(&a);
    }

    #[test]
    fn error_messages_include_the_numbers() {
        let msg = AllocError::OutOfMemory {
            requested: 1000,
            available: 768,
        }
        .to_string();
        assert!(msg.contains("1000") && msg.contains("768"), "{msg}");
        let msg = AllocError::TooLarge {
            requested: 5000,
            capacity: 4096,
        }
        .to_string();
        assert!(msg.contains("5000") && msg.contains("4096"), "{msg}");
        assert!(
            AllocError::BadAlignment { align: 3 }
                .to_string()
                .contains('3')
        );
        let msg = AllocError::NotAllocated { offset: 512 }.to_string();
        assert!(msg.contains("512"), "{msg}");
    }

    #[test]
    fn sizes_round_up_and_capacity_rounds_down() {
        let mut a = OffsetAllocator::new(4 * KIB + 100);
        assert_eq!(a.capacity(), 4 * KIB);
        assert_eq!(a.free_bytes(), 4 * KIB);
        assert_eq!(a.alloc(1, 1), Ok(0));
        assert_eq!(a.alloc(257, 1), Ok(256));
        assert_eq!(a.allocation(256), Some((256, 512)));
        assert_eq!(a.free_bytes(), 4 * KIB - 768);
        assert_eq!(
            OffsetAllocator::new(100).alloc(1, 1),
            Err(AllocError::TooLarge {
                requested: 1,
                capacity: 0
            })
        );
    }

    #[test]
    fn first_fit_takes_the_lowest_offset() {
        let mut a = OffsetAllocator::new(8 * KIB);
        let offs: Vec<usize> = (0..4).map(|_| a.alloc(KIB, 1).unwrap()).collect();
        a.free(offs[3]).unwrap();
        a.free(offs[1]).unwrap();
        // Both the hole at 1 KiB and the tail at 3 KiB fit; the lower one wins.
        assert_eq!(a.alloc(512, 1), Ok(KIB));
        check(&a);
    }

    #[test]
    fn free_coalesces_with_left_neighbour() {
        let mut a = OffsetAllocator::new(3 * KIB);
        let [x, y, _z] = [(); 3].map(|_| a.alloc(KIB, 1).unwrap());
        a.free(x).unwrap();
        a.free(y).unwrap();
        assert_eq!(a.free.len(), 1);
        assert_eq!(a.largest_free(), 2 * KIB);
        check(&a);
    }

    #[test]
    fn free_coalesces_with_right_neighbour() {
        let mut a = OffsetAllocator::new(3 * KIB);
        let [_x, y, z] = [(); 3].map(|_| a.alloc(KIB, 1).unwrap());
        a.free(z).unwrap();
        a.free(y).unwrap();
        assert_eq!(a.free.len(), 1);
        assert_eq!(a.largest_free(), 2 * KIB);
        assert_eq!(a.alloc(2 * KIB, 1), Ok(KIB));
        check(&a);
    }

    #[test]
    fn free_coalesces_with_both_neighbours() {
        let mut a = OffsetAllocator::new(4 * KIB);
        let [x, y, z, _w] = [(); 4].map(|_| a.alloc(KIB, 1).unwrap());
        a.free(x).unwrap();
        a.free(z).unwrap();
        assert_eq!(a.free.len(), 2);
        assert_eq!(a.free(y), Ok(KIB));
        assert_eq!(a.free.len(), 1);
        assert_eq!(a.largest_free(), 3 * KIB);
        check(&a);
    }

    #[test]
    fn freeing_everything_restores_one_range() {
        let mut a = OffsetAllocator::new(64 * KIB);
        let offs: Vec<usize> = (1..=10)
            .map(|i| a.alloc(i * 700, 1 << i).unwrap())
            .collect();
        for &o in offs.iter().step_by(2).chain(offs.iter().skip(1).step_by(2)) {
            a.free(o).unwrap();
            check(&a);
        }
        assert_eq!(a.free_bytes(), 64 * KIB);
        assert_eq!(a.largest_free(), 64 * KIB);
        assert_eq!(a.alloc(64 * KIB, 1), Ok(0));
    }

    #[test]
    fn alignment_padding_returns_to_the_free_list() {
        let mut a = OffsetAllocator::new(16 * KIB);
        assert_eq!(a.alloc(256, 1), Ok(0));
        // Padding 256..4096 stays free in front of the aligned allocation.
        assert_eq!(a.alloc(KIB, 4 * KIB), Ok(4 * KIB));
        assert_eq!(a.free_bytes(), 16 * KIB - 256 - KIB);
        assert_eq!(a.free.get(&256), Some(&(4 * KIB - 256)));
        check(&a);
        // The padding is reused by later unaligned allocations.
        assert_eq!(a.alloc(3 * KIB, 1), Ok(256));
        assert_eq!(a.alloc(KIB, 1), Ok(5 * KIB));
        check(&a);
    }

    #[test]
    fn huge_alignment_does_not_overflow() {
        let mut a = OffsetAllocator::new(4 * KIB);
        let huge = 1 << (usize::BITS - 1);
        assert_eq!(a.alloc(256, huge), Ok(0));
        assert_eq!(
            a.alloc(256, huge),
            Err(AllocError::OutOfMemory {
                requested: 256,
                available: 4 * KIB - 256
            })
        );
        let mut big = OffsetAllocator::new(usize::MAX);
        assert_eq!(big.alloc(MIN_ALIGN, 1), Ok(0));
        assert_eq!(big.alloc(MIN_ALIGN, huge), Ok(huge));
        // The only free range past `huge` has no further multiple of `huge` in usize.
        assert!(matches!(
            big.alloc(usize::MAX - huge, huge),
            Err(AllocError::OutOfMemory { .. })
        ));
        check(&big);
    }

    #[test]
    fn allocation_finds_the_containing_range() {
        let mut a = OffsetAllocator::new(4 * KIB);
        let x = a.alloc(300, 1).unwrap();
        let y = a.alloc(KIB, 1).unwrap();
        assert_eq!(a.allocation(x), Some((x, 512)));
        assert_eq!(a.allocation(x + 511), Some((x, 512)));
        assert_eq!(a.allocation(y), Some((y, KIB)));
        assert_eq!(a.allocation(y + KIB), None);
        assert_eq!(a.allocation(usize::MAX), None);
        a.free(x).unwrap();
        assert_eq!(a.allocation(x), None);
    }

    #[test]
    fn identical_sequences_give_identical_offsets() {
        fn run(a: &mut OffsetAllocator) -> Vec<Result<usize, AllocError>> {
            let mut out = Vec::new();
            let mut held = Vec::new();
            // A fixed pseudo-random sequence (xorshift), the same for every "rank".
            let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
            for _ in 0..500 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                if s.is_multiple_of(3) && !held.is_empty() {
                    let o = held.swap_remove((s >> 8) as usize % held.len());
                    out.push(a.free(o));
                } else {
                    let r = a.alloc((s >> 16) as usize % (8 * KIB) + 1, 1 << ((s >> 40) % 13));
                    if let Ok(o) = r {
                        held.push(o);
                    }
                    out.push(r);
                }
            }
            out
        }
        let mut a = OffsetAllocator::new(128 * KIB);
        let mut b = OffsetAllocator::new(128 * KIB);
        let (ra, rb) = (run(&mut a), run(&mut b));
        assert_eq!(ra, rb);
        assert_eq!(a, b);
        assert!(
            ra.iter()
                .any(|r| matches!(r, Err(AllocError::OutOfMemory { .. })))
        );
        check(&a);
    }
}
