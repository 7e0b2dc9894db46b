//! Property test: random sequences of RMA operations (put, get, copy, store, atomics)
//! issued by random ranks, each run as a block-cooperative launch, checked after every
//! operation against a sequential model of every rank's heap.
#![allow(clippy::needless_range_loop)] // rank-indexed loops read best in tests

mod rma_common;
use proptest::prelude::*;
use rma_common::*;
use symmem::Grid;
use symmem_rma::{AtomicOp, Order, Scope};

const HEAP: usize = 256;
const GRID: Grid = Grid {
    blocks: 1,
    threads: 3,
};

#[derive(Clone, Debug)]
enum Op {
    /// `rank` puts `data` (its local buffer) into `to`'s heap at `dst`.
    Put {
        rank: usize,
        to: usize,
        dst: usize,
        data: Vec<u8>,
    },
    /// `rank` gets `len` bytes from `from`'s heap at `src` into its own heap at `dst`.
    Get {
        rank: usize,
        from: usize,
        src: usize,
        dst: usize,
        len: usize,
    },
    /// `rank` copies `len` bytes from `from`'s heap at `src` to `to`'s heap at `dst`.
    Copy {
        rank: usize,
        from: usize,
        to: usize,
        src: usize,
        dst: usize,
        len: usize,
    },
    /// `rank` stores a `u32` into `to`'s heap at 4-aligned `at`.
    Store {
        rank: usize,
        to: usize,
        at: usize,
        v: u32,
    },
    /// `rank` applies a fetch atomic on `u64` at 8-aligned `at` in `to`'s heap.
    Atomic {
        rank: usize,
        to: usize,
        at: usize,
        op: AtomicOp,
        v: u64,
    },
}

fn op_strategy(world: usize) -> impl Strategy<Value = Op> {
    let rank = 0..world;
    let range = (0..HEAP).prop_flat_map(|start| (Just(start), 0..=(HEAP - start).min(80)));
    prop_oneof![
        (rank.clone(), 0..world, range.clone(), any::<u8>()).prop_map(
            |(rank, to, (dst, len), seed)| Op::Put {
                rank,
                to,
                dst,
                data: (0..len)
                    .map(|i| (i as u8).wrapping_mul(seed) ^ seed)
                    .collect(),
            }
        ),
        (rank.clone(), 0..world, range.clone(), 0..HEAP).prop_map(
            |(rank, from, (src, len), dst)| Op::Get {
                rank,
                from,
                src,
                dst: dst.min(HEAP - len),
                len,
            }
        ),
        (rank.clone(), 0..world, 0..world, range, 0..HEAP).prop_map(
            |(rank, from, to, (src, len), dst)| Op::Copy {
                rank,
                from,
                to,
                src,
                dst: dst.min(HEAP - len),
                len,
            }
        ),
        (rank.clone(), 0..world, 0..HEAP / 4, any::<u32>()).prop_map(|(rank, to, k, v)| {
            Op::Store {
                rank,
                to,
                at: 4 * k,
                v,
            }
        }),
        (rank, 0..world, 0..HEAP / 8, 0..8usize, any::<u64>()).prop_map(|(rank, to, k, op, v)| {
            Op::Atomic {
                rank,
                to,
                at: 8 * k,
                op: AtomicOp::ALL[op],
                v,
            }
        }),
    ]
}

fn overlaps(a: usize, b: usize, len: usize) -> bool {
    a < b + len && b < a + len
}

/// Applies `op` to the model; `None` if the op would copy between overlapping ranges
/// of one heap (not allowed by the API), so it is skipped in both.
fn apply(model: &mut [Vec<u8>], op: &Op) -> Option<()> {
    match *op {
        Op::Put {
            to, dst, ref data, ..
        } => model[to][dst..dst + data.len()].copy_from_slice(data),
        Op::Get {
            rank,
            from,
            src,
            dst,
            len,
        } => {
            if from == rank && overlaps(src, dst, len) {
                return None;
            }
            let bytes = model[from][src..src + len].to_vec();
            model[rank][dst..dst + len].copy_from_slice(&bytes);
        }
        Op::Copy {
            from,
            to,
            src,
            dst,
            len,
            ..
        } => {
            if from == to && overlaps(src, dst, len) {
                return None;
            }
            let bytes = model[from][src..src + len].to_vec();
            model[to][dst..dst + len].copy_from_slice(&bytes);
        }
        Op::Store { to, at, v, .. } => model[to][at..at + 4].copy_from_slice(&v.to_ne_bytes()),
        Op::Atomic { to, at, op, v, .. } => {
            let old = u64::from_ne_bytes(model[to][at..at + 8].try_into().unwrap());
            let new = match op {
                AtomicOp::Add => old.wrapping_add(v),
                AtomicOp::Sub => old.wrapping_sub(v),
                AtomicOp::Xchg => v,
                AtomicOp::And => old & v,
                AtomicOp::Or => old | v,
                AtomicOp::Xor => old ^ v,
                AtomicOp::Min => old.min(v),
                AtomicOp::Max => old.max(v),
            };
            model[to][at..at + 8].copy_from_slice(&new.to_ne_bytes());
        }
    }
    Some(())
}

fn run(w: &World, op: &Op) {
    let rank = match *op {
        Op::Put { rank, .. }
        | Op::Get { rank, .. }
        | Op::Copy { rank, .. }
        | Op::Store { rank, .. }
        | Op::Atomic { rank, .. } => rank,
    };
    let h = Shared(w.heap_ptr(rank));
    let mut local = match op {
        Op::Put { data, .. } => data.clone(),
        _ => Vec::new(),
    };
    let lp = Shared(local.as_mut_ptr());
    w.run_one(rank, GRID, |arch, team| {
        let h = h.get();
        use symmem_arch::Arch;
        // SAFETY: every range was generated inside the heaps; overlapping copies are
        // filtered out by `apply`; single-element ops run on thread 0 only.
        unsafe {
            match *op {
                Op::Put {
                    to, dst, ref data, ..
                } => team.put_block(arch, h.add(dst), lp.get(), data.len(), to),
                Op::Get {
                    from,
                    src,
                    dst,
                    len,
                    ..
                } => team.get_block(arch, h.add(dst), h.add(src), len, from),
                Op::Copy {
                    from,
                    to,
                    src,
                    dst,
                    len,
                    ..
                } => team.copy_block(arch, h.add(dst), h.add(src), len, from, to),
                Op::Store { to, at, v, .. } if arch.thread_id() == 0 => {
                    team.store(h.add(at).cast::<u32>(), v, to)
                }
                Op::Atomic { to, at, op, v, .. } if arch.thread_id() == 0 => {
                    team.atomic_fetch(
                        op,
                        h.add(at).cast::<u64>(),
                        v,
                        to,
                        Order::AcqRel,
                        Scope::System,
                    );
                }
                _ => {}
            }
        }
    });
    drop(local);
}

fn check_sequence(world: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let w = World::new(world, HEAP);
    let mut model: Vec<Vec<u8>> = (0..world)
        .map(|r| (0..HEAP).map(|i| pattern(r, i)).collect())
        .collect();
    for r in 0..world {
        w.bytes_mut(r).copy_from_slice(&model[r]);
    }
    for (k, op) in ops.iter().enumerate() {
        if apply(&mut model, op).is_none() {
            continue;
        }
        run(&w, op);
        for r in 0..world {
            prop_assert_eq!(
                w.bytes(r),
                &model[r][..],
                "after op {} {:?}: rank {}",
                k,
                op,
                r
            );
        }
    }
    Ok(())
}

fn sequences(world: usize) {
    let config = ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op_strategy(world), 1..16))| {
        check_sequence(world, &ops)?;
    });
}

per_world! {
    random_sequences => super::sequences;
}
