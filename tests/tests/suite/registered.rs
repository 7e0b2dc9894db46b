//! Memory the application owns, made symmetric (issue 43, part 1): `World::register` of a
//! plain device buffer and of a raw range of the application's memory, at world sizes 1
//! to 8, ranks as threads on the backend under test. Every all-reduce algorithm runs on
//! registered memory in place and out of place against a host reference; the one-shot
//! from a registered source and every two-shot between registered (or symmetric) buffers
//! stage nothing (the heap's free bytes do not move: no scratch is made); the other
//! collectives take registered memory too (staged where they need the heap). Lengths
//! that differ across ranks, and memory that is not shareable, are typed errors on every
//! rank; a dropped registration frees nothing before a barrier.

use super::app_memory::{ALGORITHMS, COUNTS, data, gpu, run, value};
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Error, PeerBaseProvider, RawRange};

/// Whether `algorithm` on `count` elements of registered memory stages nothing: the
/// barrier-free path never does, the one-shot does not from a registered source into
/// other memory, the two-shot does not between registered buffers, in place too.
fn unstaged(algorithm: Algorithm, count: usize, in_place: bool) -> bool {
    let bytes = count * 4;
    match algorithm {
        Algorithm::Lamport => true,
        Algorithm::OneShot => !in_place,
        Algorithm::TwoShot => true,
        Algorithm::Auto => {
            bytes <= symmem::collectives::LAMPORT_AUTO_BYTES
                || bytes > symmem::collectives::ONE_SHOT_MAX_BYTES
        }
    }
}

fn all_reduce(n: usize) {
    run(n, |w| {
        // `c` stages what it must; `unstaging` is only ever given calls that must not
        // stage, so it never makes a scratch: the heap's free bytes stay as they are.
        let c = Collectives::new(&w)?;
        let unstaging = Collectives::new(&w)?;
        let free = w.heap_free();
        let me = w.rank();
        let handle = |algorithm, count, in_place| {
            if unstaged(algorithm, count, in_place) {
                &unstaging
            } else {
                &c
            }
        };
        for &count in &COUNTS {
            let want: Vec<f32> = (0..count)
                .map(|i| (0..n).map(|r| value(r, i)).sum())
                .collect();
            // Registered once, used by every algorithm: as a model layer would.
            let x = w.register(w.device_from_slice(&data(me, count))?)?;
            let y = w.register(w.device_zeros::<f32>(count)?)?;
            let plain = w.device_zeros::<f32>(count)?;
            assert_eq!(x.table().entries()[me], x.local_ptr());
            for algorithm in ALGORITHMS {
                if algorithm == Algorithm::Lamport && count * 4 > c.lamport_capacity() {
                    continue;
                }
                let what = format!("world {n} rank {me} count {count} {algorithm:?}");
                w.write(&x, 0, &data(me, count))?;
                w.barrier()?;
                // Registered into registered, then into plain memory (which the
                // two-shot stages: peers write it).
                let h = handle(algorithm, count, false);
                h.all_reduce(&y, &x, count, ReduceOp::Sum, algorithm)?;
                assert_eq!(w.read(&y)?, want, "{what}: registered -> registered");
                c.all_reduce(&plain, &x, count, ReduceOp::Sum, algorithm)?;
                assert_eq!(w.read(&plain)?, want, "{what}: registered -> device");
                assert_eq!(w.read(&x)?, data(me, count), "{what}: src untouched");
                // In place.
                let h = handle(algorithm, count, true);
                h.all_reduce_in_place(&x, count, ReduceOp::Sum, algorithm)?;
                assert_eq!(w.read(&x)?, want, "{what}: in place");
                // Every rank is done with `x` before it is written again.
                c.barrier()?;
                unstaging.barrier()?;
            }
        }
        // Every call that must not stage went to `unstaging`, which holds no scratch;
        // `c` staged the two-shot into plain memory.
        assert_eq!(
            unstaging.staging_bytes(),
            0,
            "rank {me}: registered memory was staged"
        );
        assert!(
            c.staging_bytes() > 0,
            "rank {me}: plain memory was not staged"
        );
        assert_eq!(w.heap_free(), free - c.staging_bytes(), "rank {me}");
        unstaging.finalize()?;
        c.finalize()
    });
}

/// A raw range of the application's memory (here a plain device buffer that outlives
/// the registration, as a framework's allocation would), and the other collectives on
/// registered memory.
fn raw_ranges_and_other_collectives(n: usize) {
    run(n, |w| {
        let c = Collectives::new(&w)?;
        let me = w.rank();
        let count = 1000;
        let owner = w.device_from_slice(&vec![0.0f32; 2 * count])?;
        // The second half of the application's allocation: a range inside it.
        let at = owner.ptr() + (count * 4) as u64;
        // SAFETY: `owner` holds these elements and outlives the registration and the
        // barrier after its drop below.
        let x = w.register(unsafe { RawRange::<f32>::new(at, count) })?;
        assert_eq!(x.local_ptr(), at);
        w.write(&x, 0, &data(me, count))?;
        w.barrier()?;
        c.all_reduce_in_place(&x, count, ReduceOp::Sum, Algorithm::TwoShot)?;
        let want: Vec<f32> = (0..count)
            .map(|i| (0..n).map(|r| value(r, i)).sum())
            .collect();
        assert_eq!(w.read(&x)?, want, "rank {me}: raw range in place");
        assert_eq!(
            w.read(&owner.slice(..count)?)?,
            vec![0.0; count],
            "rank {me}: the range's neighbours are untouched"
        );
        // All-gather and broadcast into registered memory, reduce-scatter from it.
        let gathered = w.register(w.device_zeros::<f32>(n * count)?)?;
        let src = w.device_from_slice(&data(me, count))?;
        c.all_gather(&gathered, &src, count)?;
        let all: Vec<f32> = (0..n).flat_map(|r| data(r, count)).collect();
        assert_eq!(w.read(&gathered)?, all, "rank {me}: all_gather");
        let root = n - 1;
        c.broadcast(&x, &src, count, root)?;
        assert_eq!(w.read(&x)?, data(root, count), "rank {me}: broadcast");
        let part = w.device_zeros::<f32>(count)?;
        c.reduce_scatter(&part, &gathered, count / n.max(1), ReduceOp::Sum)?;
        let chunk = count / n.max(1);
        let want: Vec<f32> = (0..chunk)
            .map(|i| {
                let k = me * chunk + i;
                (0..n).map(|_| all[k]).sum()
            })
            .collect();
        assert_eq!(
            w.read(&part.slice(..chunk)?)?,
            want,
            "rank {me}: reduce_scatter"
        );
        c.barrier()?;
        drop(x);
        w.barrier()?;
        drop(owner);
        c.finalize()
    });
}

/// Lengths that differ across ranks are a `CollectiveMismatch` naming the rank that
/// differs, and an empty range is `ZeroSize`; neither leaves a registration behind.
fn typed_errors(n: usize) {
    if n < 2 {
        return;
    }
    run(n, |w| {
        let me = w.rank();
        let len = if me == n - 1 { 65 } else { 64 };
        match w.register(w.device_zeros::<f32>(len)?) {
            Err(Error::CollectiveMismatch { ranks, .. }) => {
                assert_eq!(ranks, vec![n - 1], "rank {me}")
            }
            other => panic!("rank {me}: {:?}", other.map(|_| ())),
        }
        let free = w.heap_free();
        // SAFETY: never dereferenced: the empty range is refused before any export.
        let empty = unsafe { RawRange::<f32>::new(64, 0) };
        let refused = w.register(empty).map(|_| ());
        assert!(
            matches!(refused, Err(Error::ZeroSize | Error::PeerFailed { .. })),
            "rank {me}: {refused:?}"
        );
        if gpu() {
            // An address of no allocation of this device.
            // SAFETY: the backend refuses it before anything touches it.
            let wild = unsafe { RawRange::<f32>::new(0x10, 16) };
            let refused = w.register(wild).map(|_| ());
            assert!(
                matches!(
                    refused,
                    Err(Error::NotShareable { .. } | Error::PeerFailed { .. })
                ),
                "rank {me}: {refused:?}"
            );
        }
        w.barrier()?;
        assert_eq!(
            w.heap_free(),
            free,
            "rank {me}: a failed registration kept heap"
        );
        Ok(())
    });
}

per_world! {
    all_reduce;
    raw_ranges_and_other_collectives;
    typed_errors;
}
