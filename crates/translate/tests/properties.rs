//! Properties of peer-base translation over random worlds and tables.

use proptest::prelude::*;
use symmem_translate::{PeerBases, TranslateError, U32x2, U32x4};

/// A random world: per-rank base addresses of one allocation of `len` bytes, distinct,
/// non-overlapping, with arbitrary gaps, in a random (not sorted) rank order.
#[derive(Debug, Clone)]
struct World {
    bases: Vec<u64>,
    len: usize,
}

fn world() -> impl Strategy<Value = World> {
    (1usize..=64, 1usize..=1 << 20).prop_flat_map(|(n, len)| {
        let gaps = prop::collection::vec(0u64..1 << 30, n);
        let order = Just((0..n).collect::<Vec<_>>()).prop_shuffle();
        (gaps, order, Just(len), 0u64..1 << 40).prop_map(move |(gaps, order, len, start)| {
            let mut next = start.next_multiple_of(256);
            let mut slots = Vec::with_capacity(n);
            for gap in gaps {
                slots.push(next);
                next = (next + len as u64 + gap).next_multiple_of(256);
            }
            let bases = order.iter().map(|&i| slots[i]).collect();
            World { bases, len }
        })
    })
}

fn ptr<T>(addr: u64) -> *mut T {
    std::ptr::without_provenance_mut(addr as usize)
}

/// Checks every property for one element type.
fn check<T>(w: &World, cur: usize, a: usize, b: usize, at: usize) -> Result<(), TestCaseError> {
    let size = size_of::<T>();
    prop_assume!(w.len >= size);
    let n = w.bases.len();
    let table = PeerBases::new(&w.bases);
    let offset = (at % (w.len - size + 1)) / align_of::<T>() * align_of::<T>();
    let local = ptr::<T>(w.bases[cur] + offset as u64);
    let remote = |p, from, to| table.remote(p, w.len, n, from, to);
    prop_assert_eq!(remote(local, cur, cur)?, local);
    let there = remote(local, cur, a)?;
    prop_assert_eq!(
        there.addr() as u64 - w.bases[a],
        offset as u64,
        "offset preserved"
    );
    prop_assert!(
        there.addr() as u64 + size as u64 <= w.bases[a] + w.len as u64,
        "inside"
    );
    prop_assert_eq!(remote(remote(there, a, b)?, b, a)?, there, "round trip");
    // SAFETY: both ranks are in range.
    prop_assert_eq!(unsafe { table.remote_unchecked(local, cur, a) }, there);
    prop_assert_eq!(
        remote(local, cur, n),
        Err(TranslateError::RankOutOfRange { rank: n, world: n })
    );
    prop_assert_eq!(
        remote(local, n + 3, a),
        Err(TranslateError::RankOutOfRange {
            rank: n + 3,
            world: n
        })
    );
    prop_assert_eq!(
        table.remote(local, w.len, n + 1, cur, a),
        Err(TranslateError::TableTooShort {
            entries: n,
            world: n + 1
        })
    );
    let outside = ptr::<T>(w.bases[cur] + w.len as u64 - size as u64 + 1);
    let refused = |r: Result<*mut T, TranslateError>| {
        matches!(r, Err(TranslateError::NotInAllocation { .. }))
    };
    prop_assert!(refused(remote(outside, cur, a)), "past the end");
    let before = ptr::<T>(w.bases[cur].wrapping_sub(1));
    prop_assert!(refused(remote(before, cur, a)), "before the start");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 512 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn translation_properties(w in world(), picks in any::<[usize; 3]>(), at in any::<usize>()) {
        let n = w.bases.len();
        let (cur, a, b) = (picks[0] % n, picks[1] % n, picks[2] % n);
        check::<u8>(&w, cur, a, b, at)?;
        check::<u32>(&w, cur, a, b, at)?;
        check::<u64>(&w, cur, a, b, at)?;
        check::<U32x2>(&w, cur, a, b, at)?;
        check::<U32x4>(&w, cur, a, b, at)?;
    }
}

#[test]
fn translation_moves_between_real_allocations_in_one_region() {
    // Four "ranks" are regions of one allocation at uneven offsets, so translated
    // pointers keep a provenance that covers them (valid under strict provenance/Miri).
    let mut region = vec![0u32; 4096];
    let starts = [3000usize, 100, 2000, 900];
    let len = 64 * size_of::<u32>();
    let base = region.as_mut_ptr();
    let bases: Vec<u64> = starts
        .iter()
        .map(|&s| base.wrapping_add(s).addr() as u64)
        .collect();
    let table = PeerBases::new(&bases);
    let mine = base.wrapping_add(starts[1] + 5);
    for to in 0..4 {
        let there = table.remote(mine, len, 4, 1, to).unwrap();
        // SAFETY: `there` lies inside `region` (start + 5 < start + 64).
        unsafe { there.write(to as u32 + 10) };
    }
    for (to, &s) in starts.iter().enumerate() {
        assert_eq!(region[s + 5], to as u32 + 10);
    }
}
