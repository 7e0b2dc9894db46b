//! Atomics under contention: every thread of every rank hammers one counter of each
//! type on every peer; the final values equal the model's exactly.
#![allow(clippy::needless_range_loop)] // rank-indexed loops read best in tests

mod rma_common;
use rma_common::*;
use symmem::Grid;
use symmem_rma::{AtomicOp, Order, Scope};

const GRID: Grid = Grid {
    blocks: 2,
    threads: 4,
};
const REPS: usize = 400;

fn hammer(world: usize) {
    let w = World::new(world, 64);
    // Initial values: the min/max counters start in the middle.
    for t in 0..world {
        w.bytes_mut(t)[..48].fill(0);
        w.write::<u32>(t, 32, &[1 << 31]);
    }
    let threads = (GRID.blocks * GRID.threads) as usize;
    w.run(GRID, |arch, team, r| {
        use symmem_arch::Arch;
        let h = w.heap_ptr(r);
        let me = (r * threads + arch.global_id()) as u64; // unique per thread of the world
        for k in 0..REPS {
            for to in 0..world {
                // SAFETY: aligned counters in every heap, accessed only atomically.
                unsafe {
                    // Fetch add at default order/scope, u64.
                    team.atomic_fetch_add(h.cast::<u64>(), 1, to);
                    // Non-fetch sub, i32, relaxed at system scope.
                    team.atomic(
                        AtomicOp::Sub,
                        h.add(8).cast::<i32>(),
                        3,
                        to,
                        Order::Relaxed,
                        Scope::System,
                    );
                    // Xor of a per-thread bit pattern, twice per two reps: cancels out.
                    team.atomic(
                        AtomicOp::Xor,
                        h.add(16).cast::<u64>(),
                        me * 0x9e37 + k as u64 / 2,
                        to,
                        Order::Release,
                        Scope::Device,
                    );
                    // Max and min of unique values.
                    team.atomic_fetch_max(
                        h.add(24).cast::<i64>(),
                        (me * 1000 + k as u64) as i64,
                        to,
                    );
                    team.atomic(
                        AtomicOp::Min,
                        h.add(32).cast::<u32>(),
                        (me * 1000 + k as u64) as u32,
                        to,
                        Order::SeqCst,
                        Scope::Block,
                    );
                    // A cas loop: increments by 2.
                    let p = h.add(40).cast::<u32>();
                    let mut cur = team.atomic_load(p, to, Order::Relaxed, Scope::Device);
                    loop {
                        let seen = team.atomic_compare_exchange(
                            p,
                            cur,
                            cur.wrapping_add(2),
                            to,
                            Order::AcqRel,
                            Scope::Device,
                        );
                        if seen == cur {
                            break;
                        }
                        cur = seen;
                    }
                }
            }
        }
    });
    let total = (world * threads * REPS) as u64;
    let last = (world * threads - 1) as u64;
    for t in 0..world {
        assert_eq!(w.read::<u64>(t, 0, 1), [total], "rank {t} add");
        assert_eq!(w.read::<i32>(t, 8, 1), [-3 * total as i32], "rank {t} sub");
        // REPS is even: every thread xored each of its values twice.
        assert_eq!(w.read::<u64>(t, 16, 1), [0], "rank {t} xor");
        assert_eq!(
            w.read::<i64>(t, 24, 1),
            [(last * 1000 + REPS as u64 - 1) as i64],
            "rank {t} max"
        );
        assert_eq!(w.read::<u32>(t, 32, 1), [0], "rank {t} min");
        assert_eq!(w.read::<u32>(t, 40, 1), [2 * total as u32], "rank {t} cas");
    }
}

per_world! {
    contention => super::hammer;
}
