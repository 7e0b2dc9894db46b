//! Ranks that leave early, hang, panic or cannot make their backend: every other rank
//! gets `PeerLost` naming it, at once, and an error leaves the world usable.

use super::*;

#[test]
fn peer_lost_when_a_rank_returns_early() {
    let timeout = Duration::from_secs(10);
    let cfg = Config {
        heap_bytes: HEAP,
        timeout,
        ..Config::default()
    };
    for (n, leaver) in [(2, 1), (4, 2), (4, 0)] {
        let start = Instant::now();
        let results = run_raw(n, &cfg, |world| {
            if world.rank() == leaver {
                return Ok(Duration::ZERO);
            }
            let t = Instant::now();
            world.barrier()?;
            Ok(t.elapsed())
        });
        let elapsed = start.elapsed();
        for (rank, r) in results.into_iter().enumerate() {
            if rank == leaver {
                assert!(r.is_ok());
            } else {
                assert!(
                    matches!(r, Err(Error::PeerLost { rank: Some(l), waited }) if l == leaver && waited < timeout / 10),
                    "rank {rank}: {r:?}"
                );
                names(&r.unwrap_err(), &["raise Config::timeout"]);
            }
        }
        assert!(
            elapsed < timeout / 5,
            "took {elapsed:?}, timeout {timeout:?}"
        );
    }
}

#[test]
fn peer_lost_at_once_even_while_another_rank_is_slow() {
    // Rank 2 has left for good; rank 1 is merely slow. Rank 0 can tell at once that the
    // barrier will never complete, and should not wait for rank 1 to find out.
    let cfg = Config {
        heap_bytes: HEAP,
        timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let slow = Duration::from_millis(1500);
    let results = run_raw(3, &cfg, |world| {
        match world.rank() {
            2 => return Ok(Duration::ZERO),
            1 => std::thread::sleep(slow),
            _ => {}
        }
        let t = Instant::now();
        let r = world.barrier();
        assert!(
            matches!(r, Err(Error::PeerLost { rank: Some(2), .. })),
            "{r:?}"
        );
        Ok(t.elapsed())
    });
    let waited = results[0].as_ref().expect("rank 0");
    assert!(
        *waited < slow / 3,
        "rank 0 waited {waited:?} for a departed rank"
    );
}

#[test]
fn peer_lost_when_a_rank_hangs() {
    let timeout = Duration::from_millis(300);
    let cfg = Config {
        heap_bytes: HEAP,
        timeout,
        ..Config::default()
    };
    let hang = Duration::from_millis(2000);
    let results = run_raw(3, &cfg, |world| {
        if world.rank() == 1 {
            std::thread::sleep(hang);
            return Ok(Duration::ZERO);
        }
        let t = Instant::now();
        let r = world.barrier();
        let elapsed = t.elapsed();
        match r {
            Err(Error::PeerLost {
                rank: Some(1),
                waited,
            }) => {
                assert!(
                    waited >= timeout,
                    "gave up after {waited:?}, before the timeout"
                );
                assert!(
                    elapsed < timeout * 3,
                    "PeerLost after {elapsed:?}, timeout {timeout:?}"
                );
                Ok(elapsed)
            }
            other => panic!(
                "rank {}: expected PeerLost from rank 1, got {other:?}",
                world.rank()
            ),
        }
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

#[test]
fn peer_lost_when_a_rank_panics() {
    let seen = Mutex::new(Vec::new());
    let start = Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_raw(3, &config(), |world| {
            if world.rank() == 2 {
                panic!("rank 2 panics on purpose");
            }
            let r = world.barrier();
            seen.lock().expect("lock").push(r);
            Ok(())
        })
    }));
    assert!(outcome.is_err(), "launch re-raises the rank's panic");
    let seen = seen.into_inner().expect("lock");
    assert_eq!(seen.len(), 2);
    for r in seen {
        assert!(
            matches!(r, Err(Error::PeerLost { rank: Some(2), .. })),
            "{r:?}"
        );
    }
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn peer_lost_when_a_rank_cannot_create_its_backend() {
    let start = Instant::now();
    let results = symmem::spawn_ranks(
        3,
        &config(),
        |rank| {
            if rank == 1 {
                Err(Error::NoDevice { backend: "test" })
            } else {
                Ok(Cpu::new())
            }
        },
        |_world| Ok(()),
    )
    .expect("launch");
    assert!(
        matches!(results[1], Err(Error::NoDevice { backend: "test" })),
        "{:?}",
        results[1]
    );
    names(results[1].as_ref().unwrap_err(), &["use the CPU backend"]);
    for r in [&results[0], &results[2]] {
        assert!(
            matches!(r, Err(Error::PeerLost { rank: Some(1), .. })),
            "{r:?}"
        );
    }
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn errors_leave_the_world_usable() {
    // A burst of refused calls, then a full exchange that must still be exact.
    for_sizes(&[2, 3], |world| {
        let (rank, n) = (world.rank(), world.world_size());
        let _ = world.allocate_symmetric::<u8>(0);
        let _ = world.allocate_aligned::<u8>(16, 3);
        let _ = world.allocate_symmetric::<u8>(world.heap_len() * 2);
        let _ = world.translate(0, 0);
        let (buffer, _) = world.allocate_symmetric::<u64>(n)?;
        let _ = world.translate(buffer.ptr(), n);
        let source = world.device_from_slice(&[rank as u64 + 100])?;
        let _ = world.put(&buffer.slice(..2)?, &source, 0);
        let _ = world.put(&buffer.slice(rank..rank + 1)?, &source, n);
        world.barrier()?;
        for to in 0..n {
            world.put(&buffer.slice(rank..rank + 1)?, &source, to)?;
        }
        world.barrier()?;
        assert_eq!(
            world.read(&buffer)?,
            (0..n as u64).map(|r| r + 100).collect::<Vec<_>>()
        );
        world.barrier()
    });
}

// ---- the launch path's checks on its handles ---------------------------------------------
