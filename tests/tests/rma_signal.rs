//! Signals and the cross-rank barrier at every world size: put_with_signal (Set and
//! Add) into every peer, signal_wait_until with every comparison, repeated barriers,
//! and the grid-level put-with-signal.
#![allow(clippy::needless_range_loop)] // rank-indexed loops read best in tests

mod rma_common;
use rma_common::*;
use symmem::Grid;
use symmem_arch::Arch;
use symmem_rma::collectives::{self, signal_words};
use symmem_rma::{Cmp, SignalOp};

const BLOCK: Grid = Grid {
    blocks: 1,
    threads: 4,
};

/// Every rank puts 4095 bytes with a signal into every peer's slot for it; each rank
/// waits for every writer's signal and then must see the data.
fn put_with_signal(world: usize) {
    let n = 4095;
    let sig = 0; // world words: word r is rank r's signal to this rank
    let bar = 8 * world; // barrier words
    let data = (16 * world + 64).next_multiple_of(16) + 3;
    let w = World::new(world, data + world * (n + 16) + 64);
    for r in 0..world {
        w.bytes_mut(r)[..data].fill(0);
    }
    let pats: Vec<Vec<u8>> = (0..world)
        .map(|r| (0..n).map(|i| pattern(r, i)).collect())
        .collect();
    let mut locals = pats.clone();
    let lp: Vec<Shared<u8>> = locals.iter_mut().map(|v| Shared(v.as_mut_ptr())).collect();
    w.run(BLOCK, |arch, team, r| {
        let h = w.heap_ptr(r);
        // SAFETY: slots in range; signal words aligned and accessed only atomically.
        unsafe {
            for k in 0..world {
                let to = (r + k) % world;
                let (op, value) = if k % 2 == 0 {
                    (SignalOp::Set, 5)
                } else {
                    (SignalOp::Add, 5)
                };
                team.put_with_signal_block(
                    arch,
                    h.add(data + r * (n + 16)),
                    lp[r].get(),
                    n,
                    h.add(sig + 8 * r).cast(),
                    op,
                    value,
                    to,
                );
            }
            // Wait for every writer, each thread a different comparison.
            let cmp = [Cmp::Eq, Cmp::Ge, Cmp::Gt, Cmp::Ne][arch.thread_id() as usize % 4];
            let value = match cmp {
                Cmp::Eq | Cmp::Ge => 5,
                Cmp::Gt => 4,
                Cmp::Ne => 0, // the initial value
                _ => unreachable!(),
            };
            for from in 0..world {
                let seen = team.signal_wait_until(h.add(sig + 8 * from).cast(), cmp, value);
                assert_eq!(seen, 5);
                let got = std::slice::from_raw_parts(h.add(data + from * (n + 16)), n);
                assert_bytes(
                    got,
                    &pats[from],
                    &format!("world {world} rank {r} from {from}"),
                );
            }
            // Lt/Le against a value above: immediate.
            assert_eq!(team.signal_wait_until(h.add(sig).cast(), Cmp::Lt, 6), 5);
            assert_eq!(team.signal_wait_until(h.add(sig).cast(), Cmp::Le, 5), 5);
            // Barriers, three in a row.
            for _ in 0..3 {
                assert!(team.barrier_block(arch, h.add(bar).cast()));
            }
        }
    });
    for t in 0..world {
        assert_eq!(
            w.read::<u64>(t, bar, world),
            vec![3; world],
            "rank {t} barrier words"
        );
    }
}

/// Barrier as a real barrier: before it every rank writes its marker into every peer;
/// after it every rank must see every marker; repeated for several epochs.
fn barrier_epochs(world: usize) {
    let grid = Grid {
        blocks: 2,
        threads: 3,
    };
    let sig = 0;
    let marks = signal_words(world, 2) * 8;
    let w = World::new(world, marks + 8 * world * 2 + 64);
    for r in 0..world {
        w.bytes_mut(r).fill(0);
    }
    w.run(grid, |arch, team, r| {
        let h = w.heap_ptr(r);
        let b = arch.block_id() as usize;
        for epoch in 1..=6u64 {
            // SAFETY: the marker slot (block b, rank r) is written only by this block;
            // the signal array has world words per block.
            unsafe {
                if arch.thread_id() == 0 {
                    for to in 0..world {
                        team.store(h.add(marks + 8 * (b * world + r)).cast::<u64>(), epoch, to);
                    }
                }
                assert!(collectives::barrier(arch, team, h.add(sig).cast()));
                for from in 0..world {
                    let v = h
                        .add(marks + 8 * (b * world + from))
                        .cast::<u64>()
                        .read_volatile();
                    assert_eq!(
                        v, epoch,
                        "world {world} rank {r} block {b} epoch {epoch}: marker of {from}"
                    );
                }
                assert!(collectives::barrier(arch, team, h.add(sig).cast()));
            }
        }
    });
}

/// Grid-level put with signal: 3 blocks each add 1; the receiver waits for 3.
fn grid_put_signal(world: usize) {
    let grid = Grid {
        blocks: 3,
        threads: 2,
    };
    let n = 1000;
    let w = World::new(world, 16 + n + 64);
    for r in 0..world {
        w.bytes_mut(r)[..16].fill(0);
    }
    let pats: Vec<Vec<u8>> = (0..world)
        .map(|r| (0..n).map(|i| pattern(r, i)).collect())
        .collect();
    let mut locals = pats.clone();
    let lp: Vec<Shared<u8>> = locals.iter_mut().map(|v| Shared(v.as_mut_ptr())).collect();
    w.run(grid, |arch, team, r| {
        let h = w.heap_ptr(r);
        // SAFETY: as above.
        unsafe {
            collectives::put_signal_add(
                arch,
                team,
                h.add(16),
                lp[r].get(),
                n,
                h.cast(),
                1,
                (r + 1) % world,
            );
            team.signal_wait_until(h.cast(), Cmp::Eq, 3);
            let got = std::slice::from_raw_parts(h.add(16), n);
            assert_bytes(got, &pats[(r + world - 1) % world], "grid put_signal");
        }
    });
}

per_world! {
    put_with_signal => super::put_with_signal;
    barrier_epochs => super::barrier_epochs;
    grid_put_signal => super::grid_put_signal;
}
