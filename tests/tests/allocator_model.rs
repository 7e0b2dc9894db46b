//! Model test of `symmem::offset_alloc`: random alloc/free sequences against a plain
//! list of live ranges.
//!
//! The model computes, in `u128` so nothing can overflow, the gaps between live ranges
//! and the first gap that holds each request. Because the allocator coalesces fully, its
//! free ranges are exactly those gaps, so every result (offset or error) must match the
//! model's, and the heap must be one free range again once everything is freed.

use proptest::prelude::*;
use symmem::offset_alloc::{AllocError, MIN_ALIGN, OffsetAllocator};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// One step of a random sequence.
#[derive(Clone, Debug)]
enum Op {
    /// `alloc(size, align)`.
    Alloc { size: usize, align: usize },
    /// Free the live allocation at index `pick % live` (skipped when none is live).
    FreeLive { pick: usize },
    /// Free an offset that was freed before: usually a double free.
    FreeStale { pick: usize },
    /// Free an arbitrary offset: usually foreign.
    FreeAny { offset: usize },
    /// Ask which allocation contains byte `at`.
    Probe { at: usize },
    /// Ask about the bytes at both edges of live allocation `pick % live`, and just
    /// outside them.
    ProbeEdges { pick: usize },
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        16 => 1..=64 * KIB,
        1 => Just(0),
        2 => 0..=4 * MIB,
        1 => usize::MAX - 4 * KIB..=usize::MAX,
    ]
}

fn align() -> impl Strategy<Value = usize> {
    prop_oneof![
        16 => (0..=12u32).prop_map(|e| 1usize << e),
        1 => (13..usize::BITS).prop_map(|e| 1usize << e),
        1 => prop::sample::select(vec![0, 3, 96, 1000, usize::MAX]),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (size(), align()).prop_map(|(size, align)| Op::Alloc { size, align }),
        4 => any::<usize>().prop_map(|pick| Op::FreeLive { pick }),
        1 => any::<usize>().prop_map(|pick| Op::FreeStale { pick }),
        1 => prop_oneof![0..=2 * MIB, any::<usize>()].prop_map(|offset| Op::FreeAny { offset }),
        2 => prop_oneof![0..=2 * MIB, any::<usize>()].prop_map(|at| Op::Probe { at }),
        2 => any::<usize>().prop_map(|pick| Op::ProbeEdges { pick }),
    ]
}

fn capacity() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => (1..=4096usize).prop_map(|k| k * MIN_ALIGN),
        1 => 0..=MIB,
    ]
}

/// Live ranges `(offset, len)`, sorted by offset, in `u128` so sums cannot overflow.
struct Model {
    capacity: u128,
    live: Vec<(u128, u128)>,
}

impl Model {
    /// The gaps `(start, end)` between live ranges, including empty ones.
    fn gaps(&self) -> Vec<(u128, u128)> {
        let mut cursor = 0;
        let mut gaps = Vec::new();
        for &(o, l) in &self.live {
            gaps.push((cursor, o));
            cursor = o + l;
        }
        gaps.push((cursor, self.capacity));
        gaps
    }

    fn free_bytes(&self) -> u128 {
        self.capacity - self.live.iter().map(|&(_, l)| l).sum::<u128>()
    }

    fn largest_free(&self) -> u128 {
        self.gaps().iter().map(|&(s, e)| e - s).max().unwrap_or(0)
    }

    /// What `alloc` must return: the first aligned fit in offset order, or the error.
    fn alloc(&self, size: usize, align: usize) -> Result<usize, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(AllocError::BadAlignment { align });
        }
        let a = align.max(MIN_ALIGN) as u128;
        let g = MIN_ALIGN as u128;
        let len = (size as u128).div_ceil(g) * g;
        if len > self.capacity {
            return Err(AllocError::TooLarge {
                requested: size,
                capacity: self.capacity as usize,
            });
        }
        self.gaps()
            .into_iter()
            .map(|(s, e)| (s.div_ceil(a) * a, e))
            .find(|&(start, e)| start + len <= e)
            .map(|(start, _)| start as usize)
            .ok_or(AllocError::OutOfMemory {
                requested: size,
                available: self.free_bytes() as usize,
            })
    }

    fn insert(&mut self, offset: usize, len: usize) {
        let at = self.live.partition_point(|&(o, _)| o < offset as u128);
        self.live.insert(at, (offset as u128, len as u128));
    }

    /// What `free(offset)` must return; removes the range when it is live.
    fn free(&mut self, offset: usize) -> Result<usize, AllocError> {
        match self.live.iter().position(|&(o, _)| o == offset as u128) {
            Some(i) => Ok(self.live.remove(i).1 as usize),
            None => Err(AllocError::NotAllocated { offset }),
        }
    }

    fn containing(&self, at: usize) -> Option<(usize, usize)> {
        let at = at as u128;
        self.live
            .iter()
            .find(|&&(o, l)| o <= at && at < o + l)
            .map(|&(o, l)| (o as usize, l as usize))
    }
}

/// Applies `op` to both allocator and model and checks they agree.
fn step(
    a: &mut OffsetAllocator,
    m: &mut Model,
    freed: &mut Vec<usize>,
    op: &Op,
) -> Result<(), TestCaseError> {
    match *op {
        Op::Alloc { size, align } => {
            let expected = m.alloc(size, align);
            let got = a.alloc(size, align);
            prop_assert_eq!(got, expected, "alloc({}, {})", size, align);
            if let Ok(offset) = got {
                // A success means `size <= capacity`, so rounding cannot overflow.
                let len = size.div_ceil(MIN_ALIGN) * MIN_ALIGN;
                prop_assert_eq!(offset % align.max(MIN_ALIGN), 0);
                prop_assert!(offset as u128 + len as u128 <= m.capacity);
                prop_assert_eq!(a.allocation(offset), Some((offset, len)));
                let (o, l) = (offset as u128, len as u128);
                for &(lo, ll) in &m.live {
                    prop_assert!(o + l <= lo || lo + ll <= o, "overlaps ({}, {})", lo, ll);
                }
                m.insert(offset, len);
            }
        }
        Op::FreeLive { pick } => {
            if !m.live.is_empty() {
                let offset = m.live[pick % m.live.len()].0 as usize;
                prop_assert_eq!(a.free(offset), m.free(offset));
                freed.push(offset);
            }
        }
        Op::FreeStale { pick } => {
            if !freed.is_empty() {
                let offset = freed[pick % freed.len()];
                prop_assert_eq!(a.free(offset), m.free(offset));
            }
        }
        Op::FreeAny { offset } => prop_assert_eq!(a.free(offset), m.free(offset)),
        Op::Probe { at } => prop_assert_eq!(a.allocation(at), m.containing(at)),
        Op::ProbeEdges { pick } => {
            if !m.live.is_empty() {
                let (o, l) = m.live[pick % m.live.len()];
                let (o, l) = (o as usize, l as usize);
                for at in [o.wrapping_sub(1), o, o + l - 1, o + l] {
                    prop_assert_eq!(a.allocation(at), m.containing(at), "byte {}", at);
                }
            }
        }
    }
    prop_assert_eq!(a.live(), m.live.len());
    prop_assert_eq!(a.free_bytes() as u128, m.free_bytes());
    prop_assert_eq!(a.largest_free() as u128, m.largest_free());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every result matches the model; draining the heap leaves one free range.
    #[test]
    fn allocator_matches_interval_model(
        requested_capacity in capacity(),
        ops in prop::collection::vec(op(), 0..=200),
        drain in prop::collection::vec(any::<usize>(), 0..=200),
    ) {
        let mut a = OffsetAllocator::new(requested_capacity);
        let cap = a.capacity();
        prop_assert_eq!(cap, requested_capacity / MIN_ALIGN * MIN_ALIGN);
        let mut m = Model { capacity: cap as u128, live: Vec::new() };
        let mut freed = Vec::new();
        for op in &ops {
            step(&mut a, &mut m, &mut freed, op)?;
        }
        // Free what is left in a random order, then in offset order.
        for pick in drain.into_iter().chain(std::iter::repeat(0)) {
            if m.live.is_empty() {
                break;
            }
            step(&mut a, &mut m, &mut freed, &Op::FreeLive { pick })?;
        }
        prop_assert_eq!(a.live(), 0);
        prop_assert_eq!(a.free_bytes(), cap);
        prop_assert_eq!(a.largest_free(), cap);
        if cap > 0 {
            prop_assert_eq!(a.alloc(cap, 1), Ok(0));
            prop_assert_eq!(a.free_bytes(), 0);
        }
    }

    /// Two allocators fed the same sequence (two ranks) give identical results.
    #[test]
    fn same_sequence_gives_same_offsets(
        requested_capacity in capacity(),
        ops in prop::collection::vec(op(), 0..=200),
    ) {
        let mut ranks = [
            OffsetAllocator::new(requested_capacity),
            OffsetAllocator::new(requested_capacity),
        ];
        let mut held: Vec<usize> = Vec::new();
        for op in &ops {
            let results = ranks.each_mut().map(|a| match *op {
                Op::Alloc { size, align } => a.alloc(size, align),
                Op::FreeLive { pick } if !held.is_empty() => a.free(held[pick % held.len()]),
                Op::FreeLive { .. }
                | Op::FreeStale { .. }
                | Op::Probe { .. }
                | Op::ProbeEdges { .. } => Ok(0),
                Op::FreeAny { offset } => a.free(offset),
            });
            prop_assert_eq!(results[0], results[1], "{:?}", op);
            match *op {
                Op::Alloc { .. } => held.extend(results[0]),
                Op::FreeLive { pick } if !held.is_empty() => {
                    held.swap_remove(pick % held.len());
                }
                Op::FreeAny { offset } if results[0].is_ok() => held.retain(|&o| o != offset),
                _ => {}
            }
        }
        prop_assert_eq!(&ranks[0], &ranks[1]);
    }
}
