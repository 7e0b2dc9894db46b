//! A rank that leaves while its peers wait for it on the device, ranks as threads: every
//! survivor's wait ends within 2 s of the leave, with the default 10-minute device-wait
//! deadline, and the survivor gets `PeerLost` naming the rank that left (not
//! `WaitTimedOut`). A rank whose thread panics is lost to its peers in the same way. A
//! rank that leaves after its last signal does not fail a peer that still reads it.
//!
//! The leaver drops its world (its watchdog tells every peer on this machine; see
//! `symmem::liveness`); the survivors wait (a) in a device barrier, (b) in a one-shot
//! all-reduce, (c) inside a user kernel, the fused all-reduce + RMSNorm example (its
//! barrier). Ranks as processes: `waits_processes`; under `mpirun`: `host_mpi`.
//!
//! On the CPU backend in CI; on CUDA (one GPU, ranks sharing it) where a GPU answers.

use std::sync::Mutex;
use std::time::{Duration, Instant};
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::backend::cuda::Cuda;
use symmem::collectives::{Cmp, Collectives};
use symmem::{Config, Error};
use symmem_tests::processes::cuda_missing;
use symmem_tests::waits::DeviceWaits;

/// How long the leaver lets the others wait before it leaves.
const LEAVER_DELAY: Duration = Duration::from_millis(300);
/// The bound from the leave to every survivor's error.
const BOUND: Duration = Duration::from_secs(2);

/// How the leaver ends.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// Returns: its world is dropped.
    Returns,
    /// Panics: its world is dropped while unwinding.
    Panics,
}

/// Runs `n` ranks on backend `make`: rank `leaver` ends as `end` after [`LEAVER_DELAY`],
/// every other rank waits in `wait`. Checks every survivor: `PeerLost` naming the leaver
/// within [`BOUND`] of the leave.
fn leave_one<B: Backend>(
    make: impl Fn(usize) -> symmem::Result<B> + Sync,
    wait: &str,
    n: usize,
    leaver: usize,
    end: End,
) {
    // The default device-wait deadline (10 minutes): only the leave can end the waits.
    let config = Config {
        heap_bytes: 8 << 20,
        ..Config::default()
    };
    let left_at: Mutex<Option<Instant>> = Mutex::new(None);
    // Each survivor's wait result and when it had it (kept here: a panicking leaver's
    // run returns nothing).
    let waits: Mutex<Vec<(usize, symmem::Result<()>, Instant)>> = Mutex::new(Vec::new());
    let ranks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        symmem::spawn_ranks(n, &config, &make, |world| {
            let rank = world.rank();
            let device = DeviceWaits::new(&world)?;
            world.barrier()?;
            if rank == leaver {
                std::thread::sleep(LEAVER_DELAY);
                *left_at.lock().unwrap() = Some(Instant::now());
                if end == End::Panics {
                    panic!("rank {rank} panics on purpose");
                }
                return Ok(());
            }
            let waited = device
                .wait(wait, None)
                // On a GPU the launch returned at once: a read waits for the device.
                .and_then(|()| world.read(device.dst()).map(drop));
            waits.lock().unwrap().push((rank, waited, Instant::now()));
            Ok(())
        })
    }));
    match (&ranks, end) {
        (Err(_), End::Panics) => {}
        (Ok(_), End::Returns) => {}
        _ => panic!("the leaver's panic should reach the caller exactly when it panicked"),
    }
    if let Ok(ranks) = ranks {
        for (rank, result) in ranks.expect("spawn_ranks").into_iter().enumerate() {
            assert!(result.is_ok(), "rank {rank}: {result:?}");
        }
    }
    let left_at = left_at.lock().unwrap().expect("the leaver left");
    let waits = waits.into_inner().unwrap();
    assert_eq!(waits.len(), n - 1, "every survivor reports");
    for (rank, waited, at) in waits {
        assert!(at >= left_at, "rank {rank} got {waited:?} before the leave");
        let after = at - left_at;
        eprintln!("{wait}, world {n}: rank {rank} got {waited:?} {after:?} after the leave");
        match waited {
            Err(Error::PeerLost { rank: Some(r), .. }) if r == leaver => {}
            other => panic!("rank {rank} should get PeerLost naming {leaver}: {other:?}"),
        }
        assert!(
            after < BOUND,
            "rank {rank} waited {after:?} after the leave"
        );
    }
}

#[test]
fn cpu_rank_leaves_during_a_device_barrier() {
    leave_one(|_| Ok(Cpu::new()), "barrier", 3, 1, End::Returns);
}

#[test]
fn cpu_rank_leaves_during_a_one_shot_all_reduce() {
    leave_one(|_| Ok(Cpu::new()), "all-reduce", 4, 0, End::Returns);
}

#[test]
fn cpu_rank_leaves_during_a_user_kernel() {
    leave_one(|_| Ok(Cpu::new()), "user-kernel", 3, 2, End::Returns);
}

#[test]
fn cpu_rank_panics_during_a_device_barrier() {
    leave_one(|_| Ok(Cpu::new()), "barrier", 3, 1, End::Panics);
}

#[test]
fn cuda_rank_leaves_during_a_device_barrier() {
    if let Some(why) = cuda_missing() {
        eprintln!("skipped: cuda backend unavailable: {why}");
        return;
    }
    leave_one(Cuda::for_rank, "barrier", 3, 1, End::Returns);
}

#[test]
fn cuda_rank_leaves_during_a_user_kernel() {
    if let Some(why) = cuda_missing() {
        eprintln!("skipped: cuda backend unavailable: {why}");
        return;
    }
    leave_one(Cuda::for_rank, "user-kernel", 3, 2, End::Returns);
}

/// A rank that puts with a signal to its peer and then leaves at once: the peer's wait
/// on it, named, sees the signal and the data, not the departure, however the two race;
/// and the peer's world is not poisoned by the departure (it reads its buffer after).
#[test]
fn a_departure_after_the_last_signal_fails_no_wait() {
    let config = Config {
        heap_bytes: 1 << 20,
        ..Config::default()
    };
    for round in 0..20u64 {
        let ranks = symmem::spawn_ranks(
            2,
            &config,
            |_| Ok(Cpu::new()),
            |world| {
                let coll = Collectives::new(&world)?;
                let data = world.zeros::<u64>(4)?;
                let signal = world.zeros::<u64>(1)?;
                let src = world.device_from_slice(&[round; 4])?;
                world.barrier()?;
                if world.rank() == 0 {
                    coll.put_with_signal(&data, 0, &src, &signal, 0, 1, 1)?;
                    // Dropping the world waits for the put, then tells rank 1.
                    return Ok(Vec::new());
                }
                // Rank 0 leaves as soon as it has signalled: this rank may still be
                // launching, or already waiting.
                let total = coll.signal_total(1);
                coll.signal_wait_until_from(&signal, 0, 0, Cmp::Ge, total)?;
                world.read(&data)
            },
        )
        .expect("spawn_ranks");
        let results: Vec<_> = ranks
            .into_iter()
            .map(|r| r.expect("no rank fails"))
            .collect();
        assert_eq!(results, [vec![], vec![round; 4]]);
    }
}

/// Rank 2 of 3 leaves; rank 1 learns it from a device wait that names it (`PeerLost`
/// naming 2) and returns; then rank 0 calls `World::barrier`: it must name rank 2, the
/// first rank lost, not rank 1, a survivor that went because of it (found by the fault
/// soak with panicking ranks: a survivor that learned of a loss from its world, not its
/// bootstrap, left no cause behind).
#[test]
fn a_survivor_that_stopped_for_a_loss_is_not_named_as_lost() {
    let config = Config {
        heap_bytes: 1 << 20,
        ..Config::default()
    };
    let rank1_done = std::sync::atomic::AtomicBool::new(false);
    let ranks = symmem::spawn_ranks(
        3,
        &config,
        |_| Ok(Cpu::new()),
        |world| {
            let coll = Collectives::new(&world)?;
            let signal = world.zeros::<u64>(1)?;
            world.barrier()?;
            match world.rank() {
                2 => Ok(Ok(())),
                1 => {
                    let waited = coll
                        .signal_wait_until_from(&signal, 0, 2, Cmp::Ge, 1)
                        .and_then(|()| world.check_waits());
                    rank1_done.store(true, std::sync::atomic::Ordering::Release);
                    Ok(waited)
                }
                _ => {
                    while !rank1_done.load(std::sync::atomic::Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    // Rank 1's world is dropped by now, or about to be.
                    std::thread::sleep(Duration::from_millis(300));
                    Ok(world.barrier())
                }
            }
        },
    )
    .expect("spawn_ranks");
    let results: Vec<_> = ranks
        .into_iter()
        .map(|r| r.expect("the world forms"))
        .collect();
    for rank in [0, 1] {
        assert!(
            matches!(results[rank], Err(Error::PeerLost { rank: Some(2), .. })),
            "rank {rank}: {:?} (the first rank lost is 2)",
            results[rank]
        );
    }
}
