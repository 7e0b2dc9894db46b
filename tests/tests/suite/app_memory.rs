//! Collectives on memory the application owns (issue 43): every collective on plain
//! device buffers (not symmetric) and on symmetric ones, in place and out of place, at
//! world sizes 1 to 8, ranks as threads on the backend under test, each result against
//! a host reference. The all-reduce runs every algorithm; its inputs are small integers,
//! so every sum is exact and equal to the host's in any order.
//!
//! Also: the staging scratch is made once and reused (the heap's free bytes do not move
//! on a second call), symmetric buffers are never staged, a staged call can be captured
//! once the scratch is reserved, and partly overlapping buffers are refused.

use super::TestBackend;
use std::sync::{Mutex, MutexGuard};
use symmem::backend::BackendKind;
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, Error, World};

// The registered suite (`registered.rs`) runs on the same helpers: one lock for both.

pub(super) type W = World<TestBackend>;

/// Element counts: one, odd, around a vector, and past the barrier-free default slot.
pub(super) const COUNTS: [usize; 5] = [1, 17, 64, 4099, 20_000];

pub(super) const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::Auto,
    Algorithm::Lamport,
    Algorithm::OneShot,
    Algorithm::TwoShot,
];

pub(super) fn gpu() -> bool {
    super::KIND != BackendKind::Cpu
}

/// On a GPU, one test at a time (see `rma.rs`).
pub(super) fn exclusive() -> Option<MutexGuard<'static, ()>> {
    static LOCK: Mutex<()> = Mutex::new(());
    gpu().then(|| LOCK.lock().unwrap_or_else(|p| p.into_inner()))
}

pub(super) fn run(n: usize, body: impl Fn(W) -> symmem::Result<()> + Sync) {
    let _one = exclusive();
    let config = Config {
        heap_bytes: 16 << 20,
        ..Config::default()
    };
    let results = symmem::spawn_ranks(n, &config, super::make_backend, body).expect("launch");
    for (rank, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("world of {n}, rank {rank}: {e} ({e:?})"));
    }
}

/// Rank `rank`'s element `i`: small integers, so sums are exact in any order.
pub(super) fn value(rank: usize, i: usize) -> f32 {
    ((rank * 7 + i * 3) % 11) as f32 - 5.0
}

pub(super) fn data(rank: usize, count: usize) -> Vec<f32> {
    (0..count).map(|i| value(rank, i)).collect()
}

fn all_reduce(n: usize) {
    run(n, |w| {
        let c = Collectives::new(&w)?;
        let me = w.rank();
        for &count in &COUNTS {
            let want: Vec<f32> = (0..count)
                .map(|i| (0..n).map(|r| value(r, i)).sum())
                .collect();
            for algorithm in ALGORITHMS {
                if algorithm == Algorithm::Lamport && count * 4 > c.lamport_capacity() {
                    continue;
                }
                let what = format!("world {n} rank {me} count {count} {algorithm:?}");
                // Out of place, plain device memory both.
                let src = w.device_from_slice(&data(me, count))?;
                let dst = w.device_zeros::<f32>(count)?;
                c.all_reduce(&dst, &src, count, ReduceOp::Sum, algorithm)?;
                assert_eq!(w.read(&dst)?, want, "{what}: device -> device");
                assert_eq!(w.read(&src)?, data(me, count), "{what}: src untouched");
                // In place, plain device memory.
                c.all_reduce_in_place(&src, count, ReduceOp::Sum, algorithm)?;
                assert_eq!(w.read(&src)?, want, "{what}: in place");
                // In place on a view one element in: unaligned, so the staged copies and
                // folds go element by element.
                let wide = w.device_from_slice(&[&[0.5][..], &data(me, count)].concat())?;
                let view = wide.slice(1..)?;
                c.all_reduce_in_place(&view, count, ReduceOp::Sum, algorithm)?;
                assert_eq!(w.read(&view)?, want, "{what}: in place, unaligned");
                assert_eq!(w.read(&wide.slice(..1)?)?, [0.5], "{what}: before the view");
                // In place, a symmetric buffer (staged too: peers read it as it is written).
                let sym = w.full::<f32>(count, 0.0)?;
                w.write(&sym, 0, &data(me, count))?;
                w.barrier()?;
                c.all_reduce_in_place(&sym, count, ReduceOp::Sum, algorithm)?;
                assert_eq!(w.read(&sym)?, want, "{what}: symmetric in place");
                // Mixed: a symmetric source into plain memory, and the reverse.
                let sym_src = w.full::<f32>(count, 0.0)?;
                w.write(&sym_src, 0, &data(me, count))?;
                w.barrier()?;
                let plain_dst = w.device_zeros::<f32>(count)?;
                c.all_reduce(&plain_dst, &sym_src, count, ReduceOp::Sum, algorithm)?;
                assert_eq!(w.read(&plain_dst)?, want, "{what}: symmetric -> device");
                let sym_dst = w.zeros::<f32>(count)?;
                let plain_src = w.device_from_slice(&data(me, count))?;
                w.barrier()?;
                c.all_reduce(&sym_dst, &plain_src, count, ReduceOp::Sum, algorithm)?;
                assert_eq!(w.read(&sym_dst)?, want, "{what}: device -> symmetric");
            }
        }
        c.finalize()
    });
}

/// The two-shot above [`symmem::collectives::STAGED_KERNEL_MAX_BYTES`] on plain memory,
/// in place and out of place (the other tests' counts stay below it): where ranks share
/// one address space, through addresses its kernel exchanges; elsewhere (threads on
/// several GPUs) staged with the backend's copies instead of inside the kernel
/// (`rma_processes.rs` runs the staged paths with ranks as processes).
fn all_reduce_staged_by_copies(n: usize) {
    run(n, |w| {
        let c = Collectives::new(&w)?;
        let me = w.rank();
        let count = symmem::collectives::STAGED_KERNEL_MAX_BYTES / 4 + 3;
        let want: Vec<f32> = (0..count)
            .map(|i| (0..n).map(|r| value(r, i)).sum())
            .collect();
        let src = w.device_from_slice(&data(me, count))?;
        let dst = w.device_zeros::<f32>(count)?;
        c.all_reduce(&dst, &src, count, ReduceOp::Sum, Algorithm::Auto)?;
        assert_eq!(w.read(&dst)?, want, "rank {me}: out of place");
        c.all_reduce_in_place(&src, count, ReduceOp::Sum, Algorithm::TwoShot)?;
        assert_eq!(w.read(&src)?, want, "rank {me}: in place");
        c.finalize()
    });
}

fn byte_collectives(n: usize) {
    run(n, |w| {
        let c = Collectives::new(&w)?;
        let me = w.rank();
        for &count in &COUNTS {
            let what = format!("world {n} rank {me} count {count}");
            // All-gather into plain memory.
            let src = w.device_from_slice(&data(me, count))?;
            let dst = w.device_zeros::<f32>(n * count)?;
            c.all_gather(&dst, &src, count)?;
            let want: Vec<f32> = (0..n).flat_map(|r| data(r, count)).collect();
            assert_eq!(w.read(&dst)?, want, "{what}: all_gather");
            // All-to-all: chunk j of rank i is tagged i * n + j.
            let chunks: Vec<f32> = (0..n).flat_map(|j| data(me * n + j, count)).collect();
            let src = w.device_from_slice(&chunks)?;
            let dst = w.device_zeros::<f32>(n * count)?;
            c.all_to_all(&dst, &src, count)?;
            let want: Vec<f32> = (0..n).flat_map(|i| data(i * n + me, count)).collect();
            assert_eq!(w.read(&dst)?, want, "{what}: all_to_all");
            // Broadcast from every root, plain memory both.
            for root in 0..n {
                let src = w.device_from_slice(&data(100 + me, count))?;
                let dst = w.device_zeros::<f32>(count)?;
                c.broadcast(&dst, &src, count, root)?;
                assert_eq!(
                    w.read(&dst)?,
                    data(100 + root, count),
                    "{what}: root {root}"
                );
            }
            // Reduce-scatter from plain memory.
            let src = w.device_from_slice(&data(me, n * count))?;
            let dst = w.device_zeros::<f32>(count)?;
            c.reduce_scatter(&dst, &src, count, ReduceOp::Sum)?;
            let want: Vec<f32> = (0..count)
                .map(|i| (0..n).map(|r| value(r, me * count + i)).sum())
                .collect();
            assert_eq!(w.read(&dst)?, want, "{what}: reduce_scatter");
        }
        c.finalize()
    });
}

fn staging_is_made_once_and_symmetric_memory_never_staged(n: usize) {
    if super::KIND == BackendKind::Cpu || n == 1 {
        // Threads of one process on the CPU share its address space (and a world of one
        // shares its own).
        run(n, |w| {
            assert!(w.shares_address_space(), "rank {}", w.rank());
            Ok(())
        });
    }
    run(n, |w| {
        let c = Collectives::new(&w)?;
        let me = w.rank();
        let count = 4096;
        let sym_src = w.full::<f32>(count, me as f32)?;
        let sym_dst = w.zeros::<f32>(count)?;
        w.barrier()?;
        let before = w.heap_free();
        // Symmetric both: no scratch.
        c.all_reduce(&sym_dst, &sym_src, count, ReduceOp::Sum, Algorithm::TwoShot)?;
        assert_eq!(
            w.heap_free(),
            before,
            "rank {me}: symmetric memory was staged"
        );
        // The two-shot on plain memory stages nothing where the ranks share one
        // address space (threads on the CPU, or on one GPU): its kernel exchanges the
        // addresses. Elsewhere (threads on several GPUs) it stages.
        let plain = w.device_from_slice(&vec![1.0f32; count])?;
        c.all_reduce_in_place(&plain, count, ReduceOp::Sum, Algorithm::TwoShot)?;
        assert_eq!(
            c.staging_bytes() == 0,
            w.shares_address_space(),
            "rank {me}: staged {} bytes, address space shared: {}",
            c.staging_bytes(),
            w.shares_address_space()
        );
        assert_eq!(
            w.read(&plain)?,
            vec![n as f32; count],
            "rank {me}: two-shot"
        );
        // The one-shot in place stages its source: the scratch is made on the first
        // call, reused by the second.
        let plain = w.device_from_slice(&vec![1.0f32; count])?;
        let before = w.heap_free();
        c.all_reduce_in_place(&plain, count, ReduceOp::Sum, Algorithm::OneShot)?;
        let with_scratch = w.heap_free();
        assert!(with_scratch < before, "rank {me}: no scratch was made");
        c.all_reduce_in_place(&plain, count, ReduceOp::Sum, Algorithm::OneShot)?;
        assert_eq!(
            w.heap_free(),
            with_scratch,
            "rank {me}: the scratch grew again"
        );
        assert_eq!(w.read(&plain)?, vec![(n * n) as f32; count], "rank {me}");
        // Partly overlapping buffers are refused before anything is launched.
        let wide = w.device_zeros::<f32>(2 * count)?;
        let (front, back) = (wide.slice(..count)?, wide.slice(1..count + 1)?);
        let refused = c.all_reduce(&front, &back, count, ReduceOp::Sum, Algorithm::OneShot);
        assert!(
            matches!(refused, Err(Error::OverlappingBuffers { .. })),
            "rank {me}: {refused:?}"
        );
        c.barrier()?;
        c.finalize()
    });
}

fn captured_once_the_scratch_is_reserved(n: usize) {
    run(n, |w| {
        let c = Collectives::new(&w)?;
        let me = w.rank();
        let count = 1000;
        let x = w.device_from_slice(&vec![me as f32 + 1.0; count])?;
        // Growing the scratch inside a capture is refused; reserved first, it is not.
        let refused =
            w.capture(|| c.all_reduce_in_place(&x, count, ReduceOp::Sum, Algorithm::OneShot));
        assert!(
            matches!(refused, Err(Error::Capturing { .. })),
            "rank {me}: {refused:?}"
        );
        c.barrier()?;
        c.reserve_staging(count * 4)?;
        w.write(&x, 0, &vec![me as f32 + 1.0; count])?;
        w.barrier()?;
        let graph =
            w.capture(|| c.all_reduce_in_place(&x, count, ReduceOp::Sum, Algorithm::OneShot))?;
        graph.replay()?;
        let once: f32 = (1..=n).map(|r| r as f32).sum();
        assert_eq!(w.read(&x)?, vec![once; count], "rank {me}: first replay");
        graph.replay()?;
        assert_eq!(
            w.read(&x)?,
            vec![once * n as f32; count],
            "rank {me}: second replay"
        );
        drop(graph);
        // The two-shot on plain memory where the ranks share one address space: nothing
        // to reserve, its kernel exchanges the addresses on every replay.
        if w.shares_address_space() {
            let count = 5000;
            let y = w.device_from_slice(&vec![me as f32 + 1.0; count])?;
            w.barrier()?;
            let graph =
                w.capture(|| c.all_reduce_in_place(&y, count, ReduceOp::Sum, Algorithm::TwoShot))?;
            graph.replay()?;
            assert_eq!(w.read(&y)?, vec![once; count], "rank {me}: two-shot replay");
            graph.replay()?;
            assert_eq!(
                w.read(&y)?,
                vec![once * n as f32; count],
                "rank {me}: second two-shot replay"
            );
        }
        c.finalize()
    });
}

/// Where the ranks share one address space, a two-shot in which one rank passes
/// symmetric memory and the others plain memory writes nothing through the addresses the
/// others' kernels find in their exchange slots (left by an earlier call, whose buffers
/// are kept here to show they are untouched): their kernels see that the odd rank did not
/// exchange in this call and reduce nothing; the next agreement names the odd rank.
fn a_rank_with_other_memory_is_not_reached_through_old_addresses(n: usize) {
    if n < 2 {
        return;
    }
    run(n, |w| {
        if !w.shares_address_space() {
            return Ok(());
        }
        let c = Collectives::new(&w)?;
        let (me, odd, count) = (w.rank(), n - 1, 4099);
        // An earlier call through exchanged addresses: `earlier` is what peers' slots name.
        let earlier = w.device_from_slice(&data(me, count))?;
        c.all_reduce_in_place(&earlier, count, ReduceOp::Sum, Algorithm::TwoShot)?;
        let reduced = w.read(&earlier)?;
        let sym = w.full::<f32>(count, 1.0)?;
        w.barrier()?; // `sym` agreed: the odd rank's call needs no agreement of its own
        let plain = w.device_from_slice(&data(me, count))?;
        let mismatched = if me == odd {
            c.all_reduce_in_place(&sym, count, ReduceOp::Sum, Algorithm::TwoShot)
        } else {
            c.all_reduce_in_place(&plain, count, ReduceOp::Sum, Algorithm::TwoShot)
        };
        // Either refused now or named at the next agreement; a launch is complete by then.
        let next = mismatched.and_then(|()| w.barrier());
        match next {
            Err(Error::CollectiveMismatch { ranks, .. }) => {
                assert_eq!(ranks, [odd], "world {n} rank {me}")
            }
            other => panic!("world {n} rank {me}: {other:?}"),
        }
        assert_eq!(
            w.read(&earlier)?,
            reduced,
            "rank {me}: written through an old address"
        );
        if me != odd {
            assert_eq!(
                w.read(&plain)?,
                data(me, count),
                "rank {me}: reduced anyway"
            );
        }
        Ok(())
    });
}

per_world! {
    all_reduce;
    all_reduce_staged_by_copies;
    byte_collectives;
    staging_is_made_once_and_symmetric_memory_never_staged;
    captured_once_the_scratch_is_reserved;
    a_rank_with_other_memory_is_not_reached_through_old_addresses;
}
