//! A rank killed, or leaving, while its peers wait for it on the device, ranks as
//! processes: every survivor's kernel ends (nothing kills it), and the survivor returns
//! `PeerLost { rank: Some(victim) }` within the bootstrap timeout plus 1 s of the kill,
//! and within 2 s of a leave with the default 10-minute device-wait deadline, then exits
//! by itself; nothing is left in `/dev/shm`.
//!
//! The survivors wait (a) in a device barrier, (b) in a one-shot all-reduce, (c) in
//! `signal_wait_until`, (d) inside a user kernel, the fused all-reduce + RMSNorm example
//! (its barrier). The victim prints its marker half a second after the others started
//! waiting, and the parent SIGKILLs it on that line. The survivors learn it from their
//! world's liveness watchdog (`symmem::liveness`: a pidfd per peer process), which sets
//! their control block's abort word.
//!
//! On the CPU backend in CI; on CUDA (each process its own context on GPU 0) where a GPU
//! answers; on HIP with `--features hip` where an AMD GPU answers.

use std::time::{Duration, Instant};
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::backend::cuda::Cuda;
use symmem::bootstrap::Bootstrap;
use symmem::bootstrap::unix::UnixBootstrap;
use symmem::{Config, World};
use symmem_tests::processes::{
    CHILD, EXIT_PEER_LOST, Outcome, assert_no_shm_leftovers, child_mode, cuda_missing, exit_child,
    report, spawn_ranks,
};
use symmem_tests::waits::DeviceWaits;

/// The bootstrap timeout of the children: the bound on kill-to-exit is this plus 1 s.
const TIMEOUT: Duration = Duration::from_secs(3);
/// The device-wait deadline of the children: far longer than the bound, so a survivor
/// that only timed out would fail the test.
const WAIT_DEADLINE: Duration = Duration::from_secs(60);
/// How long the victim lets the others wait before its marker.
const VICTIM_DELAY: Duration = Duration::from_millis(500);
/// The marker the parent kills the victim on.
const MARKER: &str = "READY-TO-DIE";
/// What a leaving victim prints before it drops its world, with the time.
const LEAVING: &str = "LEAVING-AT-US";
/// The bound from a leave to every survivor's error.
const LEAVE_BOUND: Duration = Duration::from_secs(2);

/// Microseconds since the UNIX epoch: a clock every process of the test reads alike.
fn unix_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_micros()
}

/// How the victim ends.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// The parent SIGKILLs it.
    Killed,
    /// It drops its world and exits.
    Leaves,
}

/// One child: builds a world on `backend` and its [`DeviceWaits`], takes a barrier, then
/// either ends as `end` (the victim) or waits in `wait` (everyone else) and reports.
fn child<B: Backend>(
    bootstrap: UnixBootstrap,
    backend: B,
    wait: &str,
    victim: usize,
    end: End,
) -> symmem::Result<()> {
    let config = Config {
        heap_bytes: 8 << 20,
        timeout: bootstrap.timeout(),
        // A leave must end the waits by itself: the default deadline (10 minutes).
        wait_deadline: match end {
            End::Killed => WAIT_DEADLINE,
            End::Leaves => Config::default().wait_deadline,
        },
        ..Config::default()
    };
    let world = World::new(Box::new(bootstrap), backend, &config)?;
    let rank = world.rank();
    let device = DeviceWaits::new(&world)?;
    world.barrier()?;
    if rank == victim && end == End::Leaves {
        std::thread::sleep(VICTIM_DELAY);
        println!("{LEAVING} {}", unix_us());
        return Ok(());
    }
    if rank == victim {
        std::thread::sleep(VICTIM_DELAY);
        println!("{MARKER}");
        std::thread::sleep(WAIT_DEADLINE);
        panic!("rank {rank} was not killed");
    }
    let start = Instant::now();
    // A leaving victim's survivors wait for its signal by name; a killed one's, for
    // any rank's.
    let from = (end == End::Leaves).then_some(victim);
    let waited = device
        .wait(wait, from)
        // On a GPU the launch returned at once: the barrier waits for the device.
        .and_then(|()| world.barrier());
    println!(
        "CHILD-WAITED rank {rank} elapsed_ms {} at_us {}",
        start.elapsed().as_millis(),
        unix_us()
    );
    waited
}

/// Runs the child named by [`CHILD`] (`BACKEND WAIT VICTIM END`) and exits with its
/// outcome.
fn run_child(mode: &str) -> ! {
    let words: Vec<&str> = mode.split_whitespace().collect();
    let [backend, wait, victim, end] = words[..] else {
        panic!("bad {CHILD}={mode}")
    };
    let victim: usize = victim.parse().expect("victim rank");
    let end = if end == "leaves" {
        End::Leaves
    } else {
        End::Killed
    };
    let result = UnixBootstrap::from_env().and_then(|bootstrap| match backend {
        "cpu" => child(bootstrap, Cpu::new(), wait, victim, end),
        "cuda" => {
            let backend = Cuda::for_rank(bootstrap.rank())?;
            child(bootstrap, backend, wait, victim, end)
        }
        #[cfg(feature = "hip")]
        "hip" => child(
            bootstrap,
            symmem::backend::hip::Hip::new(0)?,
            wait,
            victim,
            end,
        ),
        _ => panic!("bad backend {backend}"),
    });
    exit_child(&result)
}

/// Survivor `rank` exited by itself with `PeerLost` naming `victim` (`all`: every rank's
/// report, for the message).
fn assert_lost_victim(rank: usize, o: &Outcome, victim: usize, all: &str) {
    assert_eq!(
        o.code(),
        Some(EXIT_PEER_LOST),
        "rank {rank} did not exit by itself with PeerLost:\n{all}"
    );
    let named = format!("PeerLost {{ rank: Some({victim})");
    assert!(
        o.text().contains(&named),
        "rank {rank} should name rank {victim}:\n{all}"
    );
}

/// Spawns `n` ranks waiting in `wait` on `backend`, kills `victim` on its marker, and
/// checks every survivor: exit by itself with `PeerLost` naming the victim, within
/// [`TIMEOUT`] plus 1 s of the kill. Prints each survivor's time from kill to exit.
fn kill_one(test: &str, backend: &str, wait: &str, n: usize, victim: usize) {
    let mode = format!("{backend} {wait} {victim} killed");
    let outcomes = spawn_ranks(
        test,
        &mode,
        n,
        TIMEOUT,
        Duration::from_secs(120),
        Some((victim, MARKER)),
    );
    let all = report(&outcomes);
    let killed = outcomes[victim]
        .killed
        .unwrap_or_else(|| panic!("the victim never printed its marker:\n{all}"));
    let bound = TIMEOUT + Duration::from_secs(1);
    for (rank, o) in outcomes.iter().enumerate().filter(|&(r, _)| r != victim) {
        assert_lost_victim(rank, o, victim, &all);
        let after_kill = o.after.saturating_sub(killed);
        eprintln!("{backend} {wait}, world {n}: rank {rank} exited {after_kill:?} after the kill");
        assert!(
            after_kill < bound,
            "rank {rank} exited {after_kill:?} after the kill (bound {bound:?}):\n{all}"
        );
    }
    assert_no_shm_leftovers();
}

/// Spawns `n` ranks waiting in `wait` on `backend`, of which `victim` leaves, and checks
/// every survivor: exit by itself with `PeerLost` naming the victim, having had the error
/// within [`LEAVE_BOUND`] of the leave; the victim exits by itself too.
fn leave_one(test: &str, backend: &str, wait: &str, n: usize, victim: usize) {
    let mode = format!("{backend} {wait} {victim} leaves");
    let outcomes = spawn_ranks(test, &mode, n, TIMEOUT, Duration::from_secs(120), None);
    let all = report(&outcomes);
    let stamp = |o: &Outcome, key: &str| -> Option<u128> {
        o.lines.iter().find_map(|l| {
            let mut words = l.split_whitespace();
            words.position(|w| w == key)?;
            words.next()?.parse().ok()
        })
    };
    let left = stamp(&outcomes[victim], LEAVING)
        .unwrap_or_else(|| panic!("the victim never left:\n{all}"));
    assert!(
        outcomes[victim].status.is_some(),
        "the victim did not exit by itself:\n{all}"
    );
    for (rank, o) in outcomes.iter().enumerate().filter(|&(r, _)| r != victim) {
        assert_lost_victim(rank, o, victim, &all);
        let at = stamp(o, "at_us").unwrap_or_else(|| panic!("rank {rank} never waited:\n{all}"));
        assert!(at >= left, "rank {rank} failed before the leave:\n{all}");
        let after = Duration::from_micros((at - left) as u64);
        eprintln!(
            "{backend} {wait}, world {n}: rank {rank} had its error {after:?} after the leave"
        );
        assert!(
            after < LEAVE_BOUND,
            "rank {rank} had its error {after:?} after the leave:\n{all}"
        );
    }
    assert_no_shm_leftovers();
}

/// Why `backend` cannot run here, if it cannot.
fn missing(backend: &str) -> Option<String> {
    match backend {
        "cpu" => None,
        "cuda" => cuda_missing(),
        #[cfg(feature = "hip")]
        "hip" => symmem_tests::unavailable(symmem::backend::hip::Hip::new(0)),
        _ => Some(format!("{backend} is not built in")),
    }
}

macro_rules! kill_tests {
    ($($name:ident: $run:ident, $backend:literal, $wait:literal, $n:literal, $victim:literal;)*) => {
        $(
            #[test]
            fn $name() {
                if let Some(mode) = child_mode() {
                    run_child(&mode);
                }
                if let Some(why) = missing($backend) {
                    eprintln!("skipped: {} backend unavailable: {why}", $backend);
                    return;
                }
                $run(stringify!($name), $backend, $wait, $n, $victim);
            }
        )*
    };
}

kill_tests! {
    cpu_killed_in_a_device_barrier: kill_one, "cpu", "barrier", 3, 1;
    cpu_killed_in_a_one_shot_all_reduce: kill_one, "cpu", "all-reduce", 4, 0;
    cpu_killed_in_signal_wait_until: kill_one, "cpu", "signal-wait", 2, 1;
    cpu_killed_in_a_user_kernel: kill_one, "cpu", "user-kernel", 3, 2;
    cuda_killed_in_a_device_barrier: kill_one, "cuda", "barrier", 3, 1;
    cuda_killed_in_a_one_shot_all_reduce: kill_one, "cuda", "all-reduce", 4, 0;
    cuda_killed_in_signal_wait_until: kill_one, "cuda", "signal-wait", 2, 1;
    cuda_killed_in_a_user_kernel: kill_one, "cuda", "user-kernel", 3, 2;
    hip_killed_in_a_device_barrier: kill_one, "hip", "barrier", 3, 1;
    hip_killed_in_a_one_shot_all_reduce: kill_one, "hip", "all-reduce", 4, 0;
    hip_killed_in_signal_wait_until: kill_one, "hip", "signal-wait", 2, 1;
    hip_killed_in_a_user_kernel: kill_one, "hip", "user-kernel", 3, 2;
    cpu_leaves_during_a_device_barrier: leave_one, "cpu", "barrier", 3, 1;
    cpu_leaves_during_a_one_shot_all_reduce: leave_one, "cpu", "all-reduce", 4, 0;
    cpu_leaves_during_a_named_signal_wait: leave_one, "cpu", "signal-wait", 2, 1;
    cpu_leaves_during_a_user_kernel: leave_one, "cpu", "user-kernel", 3, 2;
    cuda_leaves_during_a_device_barrier: leave_one, "cuda", "barrier", 3, 1;
    cuda_leaves_during_a_named_signal_wait: leave_one, "cuda", "signal-wait", 2, 1;
    cuda_leaves_during_a_user_kernel: leave_one, "cuda", "user-kernel", 3, 2;
    hip_leaves_during_a_device_barrier: leave_one, "hip", "barrier", 3, 1;
    hip_leaves_during_a_user_kernel: leave_one, "hip", "user-kernel", 3, 2;
}
