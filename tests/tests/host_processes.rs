//! Ranks as separate processes over the UNIX-socket bootstrap.
//!
//! The test binary re-executes itself (`symmem_tests::processes`), with [`CHILD`]
//! naming what the child does. Children join with `UnixBootstrap::from_env()`, build a
//! `World` on the CPU backend, move data with translated puts and gets and check every
//! byte; in the failure tests one child aborts, exits early, hangs or is killed by the
//! parent, and the survivors must exit with `PeerLost` within a bounded time. The parent waits with a deadline, kills
//! leftovers and fails instead of hanging. Nothing may be left in `/dev/shm`.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::bootstrap::unix::UnixBootstrap;
use symmem::{Config, Error, PeerBaseProvider, Rendezvous, SymmetricBuffer, World};
use symmem_tests::processes::{
    CHILD, EXIT_PEER_LOST, Outcome, assert_no_shm_leftovers, child_mode, exit_child, report,
    spawn_ranks,
};

type W = World<Cpu>;

// ---------------------------------------------------------------------------------------
// Child side.

fn pattern(from: usize, to: usize, tag: usize, i: usize) -> u8 {
    let x = i.wrapping_mul(131) ^ (i >> 8) ^ from.wrapping_mul(37) ^ to.wrapping_mul(101);
    (x.wrapping_add(tag.wrapping_mul(53)) % 251) as u8 + 1
}

/// Every rank puts a distinct pattern into its region of every peer's copy, barrier,
/// checks every received byte, gets every peer's copy and checks it, barrier.
fn exchange(world: &W, buffer: &SymmetricBuffer<u8, Cpu>, tag: usize) -> symmem::Result<u64> {
    let (me, n) = (world.rank(), world.world_size());
    let region = buffer.len() / n;
    let bases = buffer.peer_bases();
    assert_eq!(bases.entries()[me], buffer.ptr(), "peer_bases[me] == ptr");
    for (r, &e) in bases.entries().iter().enumerate() {
        assert_eq!(e, world.heap_bases().entries()[r] + buffer.offset() as u64);
    }
    let offsets = world.all_gather_bytes(&(buffer.offset() as u64).to_le_bytes())?;
    assert!(
        offsets.iter().all(|o| *o == offsets[0]),
        "offsets differ across processes"
    );
    let staged: Vec<u8> = (0..n * region)
        .map(|i| pattern(me, i / region, tag, i % region))
        .collect();
    let source = world.device_from_slice(&staged)?;
    world.barrier()?;
    for step in 0..n {
        let to = (me + step) % n;
        world.put(
            &buffer.slice(me * region..(me + 1) * region)?,
            &source.slice(to * region..(to + 1) * region)?,
            to,
        )?;
    }
    world.barrier()?;
    let got = world.read(buffer)?;
    for (i, &b) in got.iter().enumerate() {
        assert_eq!(
            b,
            pattern(i / region, me, tag, i % region),
            "rank {me}: byte {i}, tag {tag}"
        );
    }
    let scratch = world.alloc::<u8>(buffer.len())?;
    for from in 0..n {
        world.get(&scratch, buffer, from)?;
        let theirs = world.read(&scratch)?;
        for (i, &b) in theirs.iter().enumerate() {
            assert_eq!(
                b,
                pattern(i / region, from, tag, i % region),
                "rank {me}: got byte {i} of {from}"
            );
        }
    }
    world.barrier()?;
    Ok(got.len() as u64 * 2)
}

fn child_puts(world: &W) -> symmem::Result<()> {
    let (me, n) = (world.rank(), world.world_size());
    let mut verified = 0;
    let (a, _) = world.allocate_symmetric::<u8>(n * 4096)?;
    verified += exchange(world, &a, 1)?;
    let (b, _) = world.allocate_symmetric::<u8>(n * 1003)?;
    verified += exchange(world, &b, 2)?;
    let freed = b.offset();
    drop(b);
    // Dropped memory comes back once a barrier has seen every rank let go of it.
    world.barrier()?;
    let (c, _) = world.allocate_symmetric::<u8>(n * 999)?;
    assert_eq!(
        c.offset(),
        freed,
        "allocation after a free reuses the range"
    );
    verified += exchange(world, &c, 3)?;
    // A rendezvous of plain allocations across processes (fds over the socket).
    let user = world.alloc::<u8>(n * 512)?;
    let user_base = user.ptr();
    let rendezvous = Rendezvous::new(user)?;
    assert_eq!(rendezvous.table().entries()[me], user_base);
    let source = world.device_from_slice(&[me as u8 + 7; 512])?;
    world.barrier()?;
    let dst = rendezvous.slice(me * 512..(me + 1) * 512)?;
    for to in 0..n {
        world.kernels().launch(
            symmem_kernels::symmem_put,
            world.backend().grid_for_bytes(512),
            (&dst, &source, to as u32),
        )?;
    }
    world.barrier()?;
    let got = world.read(&rendezvous)?;
    for (i, &byte) in got.iter().enumerate() {
        assert_eq!(byte, (i / 512) as u8 + 7, "rendezvous byte {i}");
    }
    verified += got.len() as u64;
    world.barrier()?;
    drop(rendezvous);
    // Registered memory across processes: a plain allocation (a memfd) is shared, and
    // the all-reduce reduces it in place through its own table, staging nothing.
    let coll = symmem::collectives::Collectives::new(world)?;
    let x = world.register(world.device_from_slice(&vec![me as f32 + 1.0; 3000])?)?;
    world.barrier()?;
    coll.all_reduce_in_place(
        &x,
        3000,
        symmem::collectives::ReduceOp::Sum,
        symmem::collectives::Algorithm::TwoShot,
    )?;
    let sum = (1..=n).sum::<usize>() as f32;
    assert_eq!(world.read(&x)?, vec![sum; 3000], "registered in place");
    assert_eq!(coll.staging_bytes(), 0, "registered memory was staged");
    verified += 3000 * 4;
    // Plain host memory of a process is not: every rank gets NotShareable, saying why.
    let host = vec![0.0f32; 64];
    // SAFETY: `host` outlives the attempt, which is refused before any kernel runs.
    let range = unsafe { symmem::RawRange::<f32>::new(host.as_ptr() as u64, host.len()) };
    match world.register(range) {
        Err(Error::NotShareable { why, .. }) => assert!(why.contains("another process"), "{why}"),
        other => panic!(
            "plain host memory across processes: {:?}",
            other.map(|_| ())
        ),
    }
    drop((x, coll));
    world.barrier()?;
    // And the heap still works after the rendezvous.
    let (d, _) = world.allocate_symmetric::<u8>(n * 2048 + n)?;
    verified += exchange(world, &d, 4)?;
    drop((a, c, d));
    world.barrier()?;
    assert_eq!(world.heap_free(), world.heap_len());
    println!("CHILD-OK rank {me} verified {verified} bytes");
    Ok(())
}

/// One rank misbehaves (`how`) after a first exchange; the others call a barrier.
fn child_misbehave(world: &W, how: &str, victim: usize, again: bool) -> symmem::Result<()> {
    let me = world.rank();
    let (a, _) = world.allocate_symmetric::<u8>(world.world_size() * 256)?;
    exchange(world, &a, 5)?;
    if me == victim {
        match how {
            "abort" => std::process::abort(),
            "exit" => std::process::exit(0),
            "sleep" => {
                std::thread::sleep(Duration::from_secs(3));
                return Ok(());
            }
            "wait-for-kill" => {
                println!("READY-TO-DIE rank {me}");
                std::io::stdout().flush().ok();
                std::thread::sleep(Duration::from_secs(60));
                return Ok(());
            }
            other => panic!("unknown child mode {other}"),
        }
    }
    let t = Instant::now();
    let r = world.barrier();
    println!(
        "CHILD-WAITED rank {me} elapsed_ms {}",
        t.elapsed().as_millis()
    );
    if r.is_err() && again {
        // A second collective after a lost peer is an error again, not a panic or a hang.
        let again = world.barrier();
        println!("CHILD-AGAIN rank {me} {:?}", again.as_ref().err());
        assert!(
            matches!(again, Err(Error::PeerLost { .. })),
            "second barrier: {again:?}"
        );
    }
    r
}

/// What a child does, from [`CHILD`]: `puts`, or `HOW R [again]` with `HOW` one of
/// `abort`, `exit`, `sleep`, `wait-for-kill` (rank `R` misbehaves, the others call a
/// barrier, and with `again` a second barrier after the first failed). Exits the
/// process with its outcome.
fn run_child(mode: &str) -> ! {
    let result = UnixBootstrap::from_env().and_then(|bootstrap| {
        let config = Config {
            heap_bytes: 2 << 20,
            timeout: bootstrap.timeout(),
            ..Config::default()
        };
        let world = World::new(Box::new(bootstrap), Cpu::new(), &config)?;
        let mut words = mode.split_whitespace();
        match (words.next(), words.next().and_then(|v| v.parse().ok())) {
            (Some("puts"), None) => child_puts(&world),
            (Some(how), Some(victim)) => {
                child_misbehave(&world, how, victim, words.next() == Some("again"))
            }
            _ => panic!("bad {CHILD}={mode}"),
        }
    });
    exit_child(&result)
}

// ---------------------------------------------------------------------------------------
// Parent side.

/// The survivors' `CHILD-WAITED ... elapsed_ms N` (libtest's `test NAME ... ` may
/// precede it on the same line).
fn waited_ms(outcome: &Outcome) -> Option<u64> {
    outcome.lines.iter().find_map(|l| {
        l.split("CHILD-WAITED ")
            .nth(1)?
            .split_whitespace()
            .last()?
            .parse()
            .ok()
    })
}

/// Checks a failure run: the victim ended as `victim_ended` says, every survivor exited
/// with `PeerLost` (naming `lost`, when given) within `bound` of the spawn.
fn assert_survivors_lost(
    outcomes: &[Outcome],
    victim: usize,
    lost: Option<usize>,
    bound: Duration,
) {
    let all = report(outcomes);
    for (rank, o) in outcomes.iter().enumerate().filter(|&(r, _)| r != victim) {
        assert_eq!(
            o.code(),
            Some(EXIT_PEER_LOST),
            "rank {rank} did not exit with PeerLost:\n{all}"
        );
        assert!(
            o.text().contains("CHILD-ERROR PeerLost"),
            "rank {rank}:\n{all}"
        );
        if let Some(lost) = lost {
            let named = format!("PeerLost {{ rank: Some({lost})");
            assert!(
                o.text().contains(&named),
                "rank {rank} should name rank {lost}:\n{all}"
            );
        }
        assert!(
            o.after < bound,
            "rank {rank} took {:?} (bound {bound:?}):\n{all}",
            o.after
        );
    }
}

#[test]
fn processes_put_and_verify() {
    if let Some(mode) = child_mode() {
        run_child(&mode);
    }
    for n in [2, 4] {
        let outcomes = spawn_ranks(
            "processes_put_and_verify",
            "puts",
            n,
            Duration::from_secs(20),
            Duration::from_secs(30),
            None,
        );
        let all = report(&outcomes);
        for (rank, o) in outcomes.iter().enumerate() {
            assert!(
                o.status.is_some_and(|s| s.success()),
                "rank {rank} failed:\n{all}"
            );
            assert!(
                o.text().contains(&format!("CHILD-OK rank {rank} verified")),
                "rank {rank}:\n{all}"
            );
        }
    }
    assert_no_shm_leftovers();
}

#[test]
fn processes_aborted_rank_gives_peer_lost() {
    if let Some(mode) = child_mode() {
        run_child(&mode);
    }
    // A spoke that aborts; the children's timeout is long, so the survivors must notice
    // the closed socket, not time out.
    let timeout = Duration::from_secs(20);
    let outcomes = spawn_ranks(
        "processes_aborted_rank_gives_peer_lost",
        "abort 2",
        4,
        timeout,
        Duration::from_secs(30),
        None,
    );
    let victim = &outcomes[2];
    assert_eq!(
        victim.status.and_then(|s| s.signal()),
        Some(6),
        "{}",
        report(&outcomes)
    );
    assert_survivors_lost(&outcomes, 2, Some(2), Duration::from_secs(5));
    for o in outcomes.iter().take(2) {
        assert!(
            waited_ms(o).is_some_and(|ms| ms < 2000),
            "{}",
            report(&outcomes)
        );
    }
    assert_no_shm_leftovers();
}

#[test]
fn processes_hub_exiting_early_gives_peer_lost() {
    if let Some(mode) = child_mode() {
        run_child(&mode);
    }
    let outcomes = spawn_ranks(
        "processes_hub_exiting_early_gives_peer_lost",
        "exit 0",
        3,
        Duration::from_secs(20),
        Duration::from_secs(30),
        None,
    );
    assert_eq!(outcomes[0].code(), Some(0), "{}", report(&outcomes));
    assert_survivors_lost(&outcomes, 0, Some(0), Duration::from_secs(5));
    assert_no_shm_leftovers();
}

#[test]
fn processes_killed_rank_gives_peer_lost() {
    if let Some(mode) = child_mode() {
        run_child(&mode);
    }
    let outcomes = spawn_ranks(
        "processes_killed_rank_gives_peer_lost",
        "wait-for-kill 1",
        3,
        Duration::from_secs(20),
        Duration::from_secs(30),
        Some((1, "READY-TO-DIE")),
    );
    assert_eq!(
        outcomes[1].status.and_then(|s| s.signal()),
        Some(9),
        "{}",
        report(&outcomes)
    );
    assert_survivors_lost(&outcomes, 1, Some(1), Duration::from_secs(5));
    assert_no_shm_leftovers();
}

#[test]
fn processes_hung_rank_times_out() {
    if let Some(mode) = child_mode() {
        run_child(&mode);
    }
    // Rank 2 stops answering for 3 s; with a 500 ms timeout the others give up after
    // about 500 ms, long before it would come back.
    let timeout = Duration::from_millis(500);
    let outcomes = spawn_ranks(
        "processes_hung_rank_times_out",
        "sleep 2",
        3,
        timeout,
        Duration::from_secs(30),
        None,
    );
    let all = report(&outcomes);
    // The spokes wait for the hub's verdict (twice the timeout): all name rank 2.
    assert_survivors_lost(&outcomes, 2, Some(2), Duration::from_millis(2500));
    for o in outcomes.iter().take(2) {
        let ms = waited_ms(o).unwrap_or_else(|| panic!("no CHILD-WAITED line:\n{all}"));
        assert!(
            (400..2000).contains(&ms),
            "gave up after {ms} ms, timeout 500 ms:\n{all}"
        );
    }
    assert_no_shm_leftovers();
}

#[test]
fn nothing_in_dev_shm() {
    if let Some(mode) = child_mode() {
        run_child(&mode);
    }
    let outcomes = spawn_ranks(
        "nothing_in_dev_shm",
        "abort 1",
        2,
        Duration::from_secs(20),
        Duration::from_secs(30),
        None,
    );
    assert_survivors_lost(&outcomes, 1, Some(1), Duration::from_secs(5));
    assert_no_shm_leftovers();
}

#[test]
fn processes_collective_after_peer_lost_is_an_error() {
    if let Some(mode) = child_mode() {
        run_child(&mode);
    }
    // After PeerLost, calling another collective (cleanup code does) must give an error
    // again on every survivor, the hub (rank 0) included: no panic, no hang.
    let outcomes = spawn_ranks(
        "processes_collective_after_peer_lost_is_an_error",
        "abort 2 again",
        3,
        Duration::from_secs(20),
        Duration::from_secs(30),
        None,
    );
    assert_survivors_lost(&outcomes, 2, Some(2), Duration::from_secs(5));
    for o in outcomes.iter().take(2) {
        assert!(o.text().contains("CHILD-AGAIN"), "{}", report(&outcomes));
    }
    assert_no_shm_leftovers();
}
