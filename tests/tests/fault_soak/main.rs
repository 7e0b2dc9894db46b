//! A randomized fault soak (issue 31): random programs over symmem's public API at 2-8
//! ranks, every result checked against a host model of every rank's memory, with at most
//! one fault per program. The ranks run through one of two launchers:
//!
//! * **threads** (`symmem::spawn_ranks`), on the CPU backend, a quarter of the programs
//!   split into emulated nodes (`Config::ranks_per_node`, peers on other nodes reached
//!   through the local transport's engine); or on the **CUDA** backend, every rank a
//!   thread with its own `Cuda` on GPU `rank % count` (`Cuda::for_rank`: all on GPU 0 on
//!   a machine with one), one node (the local transport refuses thread-ranks on a GPU
//!   split into nodes: `Error::NoEngine`, `off_node_local::cuda_is_refused`);
//! * **processes**, on the CPU backend: the test binary re-executed once per rank
//!   (`symmem_tests::processes`, children of `fixed_seeds_processes_soak`), joined over
//!   the UNIX-socket bootstrap, one node (that bootstrap has no off-node transport). Each
//!   child regenerates the program from its seed, runs its rank and prints every result
//!   as one line ([`Record`]), which the parent reads back for the same oracle.
//!
//! A program is a list of operations every rank makes in the same order: symmetric
//! allocations of random sizes and element types (`zeros`, `from_slice`) and drops,
//! `World::barrier`, `World::write` and `World::read`, puts and gets (`World::put`,
//! `World::get`, `Collectives::put`, `Collectives::get`), puts with a signal and a named
//! wait (`put_with_signal`, `signal_wait_until_from`), every collective (`barrier`,
//! `all_reduce` with each `Algorithm`, `all_gather`, `all_to_all`, `broadcast`,
//! `reduce_scatter`), graphs of collectives captured once and replayed, and calls the
//! model knows are refused (`NotAgreed`, `OutOfHeap`, `TooLarge`, `ZeroSize`,
//! `LamportUnavailable`). Values are small integers, as `f32`, `f64`, `bf16` and `f16`
//! too, so every sum is exact in any order and every result is compared exactly.
//!
//! The faults, one per program at a random operation of a random rank: the rank leaves
//! (returns, dropping its world; a process then exits), panics (a process catches it as
//! its world is dropped, and exits), skips a device collective, allocates a different
//! size than the others (every rank's next agreement must report `CollectiveMismatch`
//! naming it), or exhausts its heap (`OutOfHeap`, then it leaves). Processes only: the
//! rank is killed (SIGKILL): it prints a marker and goes on with its operations, and the
//! parent kills it as soon as it reads the marker, so the kill lands at a random point
//! inside the operations after it.
//!
//! The oracle, the same for both launchers and both backends (errors cross a process as a
//! [`Failure`], times as nanoseconds of `CLOCK_MONOTONIC`): before the fault every result
//! is exact (or the model's refusal); from the fault on, every surviving rank's result is
//! exact or a typed error, each error within the backend's bound of its call's start (the
//! wait deadline plus 1 s on the CPU; [`Tuning`]); a rank that got an error stops and
//! returns. What a killed rank printed before it died is checked like any rank's. No
//! panic but the injected one, no program runs past a bound (threads: run on a thread of
//! their own; processes: the parent kills leftovers at the bound), every child process
//! exits by itself (but the killed one) and is reaped, with a non-zero status only where
//! it ended with an error or had the fault, nothing is left in `/dev/shm`, and a healthy
//! world (of the program's backend) works after every faulty program.
//!
//! CI runs fixed seeds with each launcher on the CPU (`fixed_seeds_soak`,
//! `fixed_seeds_processes_soak`); `fixed_seeds_cuda_soak` runs a few as threads on CUDA,
//! and prints `skipped: CUDA backend unavailable: <why>` and passes where no GPU answers.
//! `SYMMEM_SOAK_SEED=N` makes each of those three replay one program with its launcher
//! and backend instead (name the test to pick one), with its operations and every rank's
//! results printed; `SYMMEM_SOAK_SECONDS=N` with `--ignored` runs random seeds for N
//! seconds (`long_soak`, `long_processes_soak`, `long_cuda_soak`) and prints a table. On a
//! GPU machine (the build makes the kernels' code objects, so `SYMMEM_GPU_TARGETS` must
//! not be empty there):
//!
//! ```text
//! SYMMEM_SOAK_SECONDS=600 cargo test --release -p symmem-tests --test fault_soak \
//!     -- --ignored --nocapture long_cuda_soak
//! ```
//!
//! The modules, in the order a program goes through them: [`values`], [`generator`]
//! (over [`model`]), [`rank`] (threads) and [`process_ranks`] (processes), [`oracle`].

use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::panic::AssertUnwindSafe;
use std::sync::{Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};
use symmem::backend::cpu::Cpu;
use symmem::backend::cuda::Cuda;
use symmem::backend::{Backend, Grid};
use symmem::bootstrap::unix::UnixBootstrap;
use symmem::collectives::{Algorithm, Cmp, Collectives, ReduceOp, bf16, f16};
use symmem::{Config, Error, SymmetricBuffer, World};
use symmem_tests::processes::{self, EXIT_ERROR, Outcome, child_mode};

mod generator;
mod model;
mod oracle;
mod process_ranks;
mod rank;
mod values;

use generator::*;
use model::*;
use oracle::*;
use process_ranks::*;
use rank::*;
use values::*;

/// Bytes of symmetric heap per rank.
const HEAP: usize = 2 << 20;
/// What a program's own buffers may hold at once (live, and dropped but not yet released
/// by a barrier), so that only the deliberate exhaustions fail.
const BUDGET: usize = HEAP / 2;
/// The barrier-free all-reduce's capacity (bytes per rank) of each program's handle.
const LAMPORT_CAPACITY: usize = 4096;
/// How long a rank waits for its peers in the bootstrap, and a device wait at most (the
/// CPU backend's: [`CPU`]).
const TIMEOUT: Duration = Duration::from_millis(1500);
const WAIT_DEADLINE: Duration = Duration::from_millis(1500);
/// An error must come this soon after its call started (the CPU backend's).
const ERROR_BOUND: Duration = Duration::from_millis(1500 + 1000);
/// A program that has not ended after this is a hang (the CPU backend's).
const PROGRAM_BOUND: Duration = Duration::from_secs(30);
/// The message of the injected panic (the panic hook keeps it quiet).
const INJECTED: &str = "fault_soak: injected panic";
/// The line a rank to be killed prints: its parent kills it on reading it.
const KILL_MARKER: &str = "SOAK-KILL-ME";
/// What starts a child's [`Record`] line (libtest's `test NAME ... ` may precede it).
const RECORD: &str = "SOAK-RECORD ";
/// The test whose children are the ranks of a processes program.
const CHILD_TEST: &str = "fixed_seeds_processes_soak";
/// The exit status of a child whose injected panic it caught.
const EXIT_INJECTED_PANIC: i32 = 5;
/// The exit status of a child that caught any other panic.
const EXIT_PANIC: i32 = 101;

/// What one operation reads back: one vector per read.
type Readouts = Vec<Vec<i64>>;

// ---------------------------------------------------------------------------------------
// Programs.

/// Which host call a put or get goes through.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    World,
    Collectives,
}

/// A call the model knows is refused, on every rank.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Refusal {
    /// `zeros::<u8>(heap)` while something is live.
    OutOfHeap,
    /// `zeros::<u8>(heap + 1)`.
    TooLarge,
    /// `zeros(0)`.
    ZeroSize,
}

/// One operation, made by every rank in program order. Buffers are named by slot (the
/// model's and each rank's list of buffers, in allocation order); ranks a call reaches are
/// `(rank + shift) % world`.
#[derive(Clone, Debug)]
enum Op {
    /// `from_slice` of values (`fill`) or `zeros`.
    Alloc {
        slot: usize,
        ty: Ty,
        len: usize,
        fill: bool,
    },
    Drop {
        slot: usize,
    },
    /// `World::barrier`.
    Barrier,
    /// `Collectives::barrier`.
    DeviceBarrier,
    Write {
        slot: usize,
        at: usize,
        len: usize,
    },
    Read {
        slot: usize,
    },
    /// Device barrier, put, device barrier.
    Put {
        api: Api,
        dst: usize,
        at: usize,
        len: usize,
        shift: usize,
    },
    /// Device barrier, get into plain device memory, read it, device barrier.
    Get {
        api: Api,
        src: usize,
        at: usize,
        len: usize,
        shift: usize,
    },
    /// Device barrier, put with signal, wait (naming the sender) for what the model says
    /// the signal holds then (`wait[rank]`), read `dst`, device barrier.
    PutSignal {
        dst: usize,
        at: usize,
        len: usize,
        signal: usize,
        index: usize,
        value: u64,
        shift: usize,
        wait: Vec<u64>,
    },
    /// Each collective is followed by a read of its destination.
    AllReduce {
        dst: usize,
        src: usize,
        count: usize,
        op: ReduceOp,
        algorithm: Algorithm,
    },
    AllGather {
        dst: usize,
        src: usize,
        count: usize,
    },
    AllToAll {
        dst: usize,
        src: usize,
        count: usize,
    },
    Broadcast {
        dst: usize,
        src: usize,
        count: usize,
        root: usize,
    },
    ReduceScatter {
        dst: usize,
        src: usize,
        count: usize,
        op: ReduceOp,
    },
    /// Capture `body` (collectives) once; `replays` times: write fresh values into slot
    /// `input`, replay, read every destination of `body`.
    Graph {
        body: Vec<Op>,
        input: usize,
        replays: usize,
    },
    Refused(Refusal),
}

impl Op {
    fn is_device_collective(&self) -> bool {
        matches!(
            self,
            Op::DeviceBarrier
                | Op::AllReduce { .. }
                | Op::AllGather { .. }
                | Op::AllToAll { .. }
                | Op::Broadcast { .. }
                | Op::ReduceScatter { .. }
        )
    }

    /// The buffer a collective writes (what is read after it).
    fn destination(&self) -> Option<usize> {
        match *self {
            Op::AllReduce { dst, .. }
            | Op::AllGather { dst, .. }
            | Op::AllToAll { dst, .. }
            | Op::Broadcast { dst, .. }
            | Op::ReduceScatter { dst, .. } => Some(dst),
            _ => None,
        }
    }

    /// The symmetric buffers whose agreement a collective checks (a fresh one makes every
    /// rank agree first).
    fn agreed_buffers(&self) -> Vec<usize> {
        match *self {
            Op::AllReduce { dst, src, .. } => vec![dst, src],
            Op::AllGather { dst, .. } | Op::AllToAll { dst, .. } => vec![dst],
            Op::Broadcast { src, .. } | Op::ReduceScatter { src, .. } => vec![src],
            Op::Graph { ref body, .. } => body.iter().flat_map(Op::agreed_buffers).collect(),
            _ => Vec::new(),
        }
    }
}

/// What the model expects of one operation on one rank.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Ok(Readouts),
    /// Refused with this error (its variant name), on every rank.
    Refused(&'static str),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum FaultKind {
    /// The rank returns from its body before the operation (its world is dropped).
    Leave,
    /// The rank panics before the operation.
    Panic,
    /// The rank skips the operation (a device collective) and goes on.
    Skip,
    /// The rank allocates more elements than the others at this `Alloc`.
    Mismatch,
    /// The rank allocates its whole heap before the operation (`OutOfHeap`), then stops.
    Exhaust,
    /// Processes only: the rank prints [`KILL_MARKER`] before the operation and goes on;
    /// its parent SIGKILLs it on reading the marker.
    Kill,
}

impl FaultKind {
    const ALL: [FaultKind; 6] = [
        FaultKind::Leave,
        FaultKind::Panic,
        FaultKind::Skip,
        FaultKind::Mismatch,
        FaultKind::Exhaust,
        FaultKind::Kill,
    ];

    fn name(self) -> &'static str {
        match self {
            FaultKind::Leave => "leave",
            FaultKind::Panic => "panic",
            FaultKind::Skip => "skip",
            FaultKind::Mismatch => "mismatch",
            FaultKind::Exhaust => "exhaust",
            FaultKind::Kill => "kill",
        }
    }

    /// The fault named `name` (by [`FaultKind::name`]).
    fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The faulty rank is gone at once, wherever its peers are (even a step behind): a
    /// panicking thread tells them it is lost, a killed process's end is seen by their
    /// watchdogs. The other faults act in program order.
    fn is_sudden(self) -> bool {
        matches!(self, FaultKind::Panic | FaultKind::Kill)
    }
}

/// How a program's ranks run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Launcher {
    /// Threads of this process (`symmem::spawn_ranks`) on a backend.
    Threads(Target),
    /// Processes of this test binary over the UNIX-socket bootstrap, on the CPU backend.
    Processes,
}

/// The backend a program's ranks run on.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    /// `Cpu::new()`: heaps in shared memory, kernels on host threads.
    Cpu,
    /// `Cuda::for_rank(rank)`: GPU `rank % count`, so every rank on GPU 0 of a machine
    /// with one (several ranks' streams on one context).
    Cuda,
}

/// What differs by backend: a kernel's threads per block, and the times a program is
/// held to.
#[derive(Clone, Copy, Debug)]
struct Tuning {
    /// Threads per block of every collective (the program draws the blocks).
    threads: u32,
    /// How long a rank waits for its peers in the bootstrap (`Config::timeout`).
    timeout: Duration,
    /// A device wait at most (`Config::wait_deadline`).
    wait_deadline: Duration,
    /// An error must come this soon after its call started.
    error_bound: Duration,
    /// A program that has not ended after this is a hang.
    program_bound: Duration,
    /// The healthy world after a faulty program must have answered by then.
    healthy_bound: Duration,
}

/// The CPU backend's, with either launcher: one thread per block (each is an OS thread).
const CPU: Tuning = Tuning {
    threads: 1,
    timeout: TIMEOUT,
    wait_deadline: WAIT_DEADLINE,
    error_bound: ERROR_BOUND,
    program_bound: PROGRAM_BOUND,
    healthy_bound: Duration::from_secs(10),
};

/// CUDA's (chosen before any GPU run; an H100's 164 programs, 2026-12-05, ended within
/// them with no slow error, `BENCHMARKS.md`'s Reliability section).
/// Several threads per block, as the suite's second grid (`suite/rma_ranks.rs`), so the
/// kernels' block-wide paths run too (the model counts signals per block, not per
/// thread); 8 ranks x 2 blocks of 64 fit any GPU at once. The device wait is the CPU's,
/// so a skipped collective is found as soon. A world forms slower: the ranks retain the
/// GPU's primary context (made anew for every program: the previous one's last rank
/// released it) and load their modules, taking turns in the driver while the first
/// waits in the bootstrap; so the bootstrap's timeout is 10 s, and a program's bound 60
/// s. An error may come up to one wait deadline later than on the CPU: a survivor's call
/// that synchronises the whole device (a deferred `cuMemFree` at a barrier) first waits
/// for every kernel of the context, a peer's spinning to its deadline included. An error
/// from the host's 10 s timeout is still slow: every fault here is announced (a
/// departure, a panic) or found by a device wait.
const CUDA: Tuning = Tuning {
    threads: 64,
    timeout: Duration::from_secs(10),
    wait_deadline: WAIT_DEADLINE,
    error_bound: Duration::from_millis(2 * 1500 + 1000),
    program_bound: Duration::from_secs(60),
    healthy_bound: Duration::from_secs(30),
};

impl Target {
    fn tuning(self) -> Tuning {
        match self {
            Target::Cpu => CPU,
            Target::Cuda => CUDA,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Fault {
    kind: FaultKind,
    rank: usize,
    step: usize,
}

#[derive(Clone, Debug)]
struct Program {
    seed: u64,
    /// The backend its ranks run on.
    target: Target,
    world: usize,
    /// Ranks per emulated node (`Config::ranks_per_node`), where the world is split into
    /// nodes that reach each other through the local transport's engine.
    per_node: Option<usize>,
    blocks: u32,
    ops: Vec<Op>,
    /// `expect[step][rank]`.
    expect: Vec<Vec<Expect>>,
    /// The first agreement after the fault (a `Mismatch` must be reported there).
    agreements: Vec<bool>,
    fault: Option<Fault>,
}

// ---------------------------------------------------------------------------------------
// Soaking: generate, run and check seeds; the tests.

impl Launcher {
    /// The test that replays a program of this launcher (`SYMMEM_SOAK_SEED`).
    fn replay_test(self) -> &'static str {
        match self {
            Launcher::Threads(Target::Cpu) => "fixed_seeds_soak",
            Launcher::Threads(Target::Cuda) => "fixed_seeds_cuda_soak",
            Launcher::Processes => CHILD_TEST,
        }
    }
}

/// One GPU program at a time in this process (`--include-ignored` runs the fixed and
/// the long CUDA soak side by side): two worlds' ranks spinning on one GPU could crowd
/// each other out, and a wait of one would time out for the other's sake.
fn one_at_a_time(launcher: Launcher) -> Option<MutexGuard<'static, ()>> {
    static GPU: Mutex<()> = Mutex::new(());
    (launcher == Launcher::Threads(Target::Cuda))
        .then(|| GPU.lock().unwrap_or_else(|p| p.into_inner()))
}

/// True (after printing the reason) where no CUDA device answers
/// ([`processes::cuda_missing`], as the other CUDA tests of this crate skip).
fn cuda_skip() -> bool {
    let why = processes::cuda_missing();
    if let Some(why) = &why {
        eprintln!("skipped: CUDA backend unavailable: {why}");
    }
    why.is_some()
}

/// Generates, runs and checks seed `seed` with `launcher`.
fn soak_one(seed: u64, launcher: Launcher, verbose: bool) -> Stats {
    let _gpu = one_at_a_time(launcher);
    let p = generate(seed, launcher);
    if verbose {
        eprintln!(
            "seed {seed} ({launcher:?}): world {}, ranks per node {:?}, blocks {}, fault {:?}",
            p.world, p.per_node, p.blocks, p.fault
        );
        for (k, op) in p.ops.iter().enumerate() {
            eprintln!("  {k:3}: {op:?}");
        }
    }
    let Some(seen) = run_bounded(&p, launcher) else {
        return Stats {
            programs: 1,
            hangs: 1,
            failures: vec![format!(
                "seed {seed}: HANG: the program ran past {:?} (fault {:?})",
                p.target.tuning().program_bound,
                p.fault
            )],
            ..Stats::default()
        };
    };
    if verbose {
        for (rank, steps) in seen.steps.iter().enumerate() {
            for (step, seen) in steps {
                eprintln!("  rank {rank} step {step}: {seen:?}");
            }
            eprintln!("  rank {rank} finalize: {:?}", seen.finalized[rank]);
            if let Ended::Processes { children, .. } = &seen.ended {
                let child = &children[rank];
                eprintln!(
                    "  rank {rank} process: {:?} after {:?}, killed {:?}",
                    child.status, child.after, child.killed
                );
                for line in child.lines.iter().filter(|line| !line.contains(RECORD)) {
                    eprintln!("  rank {rank} said: {line}");
                }
            }
        }
    }
    let mut s = check(&p, &seen);
    if p.fault.is_some()
        && let Err(why) = healthy_world_works(p.target)
    {
        s.failures.push(format!("seed {seed}: {why}"));
    }
    if let Err(e) = std::panic::catch_unwind(processes::assert_no_shm_leftovers) {
        s.failures.push(format!("seed {seed}: {}", panic_text(&*e)));
    }
    s
}

fn soak(
    seeds: impl Iterator<Item = u64>,
    launcher: Launcher,
    until: Option<Instant>,
) -> (Stats, Duration) {
    quiet_injected_panics();
    let start = Instant::now();
    let mut total = Stats::default();
    for seed in seeds {
        if until.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        let s = soak_one(seed, launcher, false);
        for f in &s.failures {
            eprintln!(
                "FAILED (replay with SYMMEM_SOAK_SEED={seed} cargo test -p symmem-tests \
                 --test fault_soak {}): {f}",
                launcher.replay_test()
            );
        }
        total.add(s);
    }
    (total, start.elapsed())
}

/// A CI soak with `launcher`: `seeds`, or the one of `SYMMEM_SOAK_SEED`, printed in full.
fn ci_soak(launcher: Launcher, seeds: std::ops::Range<u64>) {
    if let Ok(seed) = std::env::var("SYMMEM_SOAK_SEED") {
        quiet_injected_panics();
        let seed = seed.parse().expect("SYMMEM_SOAK_SEED is a number");
        let s = soak_one(seed, launcher, true);
        eprintln!("{}", s.table(Duration::ZERO));
        assert!(s.failures.is_empty(), "{:#?}", s.failures);
        return;
    }
    let (s, took) = soak(seeds, launcher, None);
    eprintln!("{launcher:?}: {}", s.table(took));
    assert!(s.failures.is_empty(), "{:#?}", s.failures);
    // A soak whose kills never land tests no kill (each victim would have to end within
    // the parent's look at its marker).
    assert!(
        s.faults.get("kill").is_none_or(|_| s.kills_landed > 0),
        "no kill landed"
    );
}

/// The CI soak of thread programs.
#[test]
fn fixed_seeds_soak() {
    ci_soak(Launcher::Threads(Target::Cpu), 0..CI_SEEDS);
}

/// A few thread programs on CUDA; skips, printing why, where no GPU answers.
#[test]
fn fixed_seeds_cuda_soak() {
    if cuda_skip() {
        return;
    }
    ci_soak(Launcher::Threads(Target::Cuda), 0..CI_CUDA_SEEDS);
}

/// The CI soak of process programs; in a child process (`SYMMEM_TEST_CHILD`), a rank of
/// one of them.
#[test]
fn fixed_seeds_processes_soak() {
    if let Some(mode) = child_mode() {
        run_child(&mode);
    }
    ci_soak(Launcher::Processes, 0..CI_PROCESS_SEEDS);
}

/// Thread programs the CI soak runs.
const CI_SEEDS: u64 = 40;
/// Process programs the CI soak runs.
const CI_PROCESS_SEEDS: u64 = 60;
/// Thread programs on CUDA the fixed soak runs.
const CI_CUDA_SEEDS: u64 = 16;

/// Random seeds with `launcher` for `SYMMEM_SOAK_SECONDS` seconds (default 300).
fn long(launcher: Launcher) {
    let seconds: u64 = std::env::var("SYMMEM_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let first = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64;
    eprintln!("long soak ({launcher:?}): {seconds} s of random seeds from {first}");
    let until = Instant::now() + Duration::from_secs(seconds);
    let (s, took) = soak(
        (0..).map(|k: u64| first.wrapping_add(k.wrapping_mul(0x9e37_79b9)) >> 1),
        launcher,
        Some(until),
    );
    eprintln!("{launcher:?}: {}", s.table(took));
    assert!(s.failures.is_empty(), "{:#?}", s.failures);
}

/// Random thread programs for `SYMMEM_SOAK_SECONDS` seconds (default 300).
#[test]
#[ignore = "long-running: SYMMEM_SOAK_SECONDS=N cargo test --test fault_soak -- --ignored"]
fn long_soak() {
    long(Launcher::Threads(Target::Cpu));
}

/// Random thread programs on CUDA for `SYMMEM_SOAK_SECONDS` seconds (default 300); skips,
/// printing why, where no GPU answers.
#[test]
#[ignore = "long-running, on a GPU: SYMMEM_SOAK_SECONDS=N cargo test --release -p symmem-tests \
            --test fault_soak -- --ignored --nocapture long_cuda_soak"]
fn long_cuda_soak() {
    if cuda_skip() {
        return;
    }
    long(Launcher::Threads(Target::Cuda));
}

/// Random process programs for `SYMMEM_SOAK_SECONDS` seconds (default 300).
#[test]
#[ignore = "long-running: SYMMEM_SOAK_SECONDS=N cargo test --test fault_soak -- --ignored"]
fn long_processes_soak() {
    long(Launcher::Processes);
}

/// A record reads back as the very record written, whatever its values, and a line cut
/// short (as a kill may cut the last one a victim prints) never reads as one.
#[test]
fn records_round_trip_and_a_cut_line_never_reads() {
    let failure = |kind: &str, rank, ranks: Vec<usize>| Failure {
        kind: kind.into(),
        rank,
        text: format!("{kind} {{ rank: {rank:?}, ranks: {ranks:?} }}"),
        ranks,
    };
    let records = [
        Record::Seen(
            3,
            Seen::Done {
                result: Ok(vec![vec![1, -2, i64::MIN, i64::MAX], Vec::new(), vec![0]]),
                took: Duration::from_nanos(1_234_567),
                ended: u64::MAX,
            },
        ),
        Record::Seen(
            0,
            Seen::Done {
                result: Ok(Vec::new()),
                took: Duration::ZERO,
                ended: 0,
            },
        ),
        Record::Seen(
            usize::MAX,
            Seen::Done {
                result: Err(failure("PeerLost", Some(2), Vec::new())),
                took: Duration::from_secs(2),
                ended: 7,
            },
        ),
        Record::Seen(
            9,
            Seen::Injected {
                kind: FaultKind::Kill,
                at: 5,
                result: None,
            },
        ),
        Record::Seen(
            9,
            Seen::Injected {
                kind: FaultKind::Skip,
                at: 5,
                result: Some(Ok(())),
            },
        ),
        Record::Seen(
            9,
            Seen::Injected {
                kind: FaultKind::Skip,
                at: 5,
                result: Some(Err(failure("CollectiveMismatch", None, vec![1, 3]))),
            },
        ),
        Record::Finalized(Ok(())),
        Record::Finalized(Err(failure("PeerFailed", None, vec![0]))),
        Record::Panicked("a panic, with words".into()),
    ];
    for record in records {
        let line = record.encode();
        let framed = line.strip_prefix(RECORD).expect("the prefix");
        assert_eq!(Record::decode(framed).as_ref(), Ok(&record), "{line}");
        for cut in 0..framed.len() {
            assert!(
                Record::decode(&framed[..cut]).is_err(),
                "{line} cut at {cut} reads"
            );
        }
    }
    // A line break in a text stays on the record's line.
    let line = Record::Panicked("two\nlines".into()).encode();
    assert!(!line.contains('\n'), "{line}");
}

// ---------------------------------------------------------------------------------------
// Regressions the soak found, reduced.

/// Rank 0 of 4 skips a two-shot all-reduce (2 blocks a rank) and makes two device
/// barriers instead (a skip followed by the next device call, as seed 2 of the soak did:
/// its put between two barriers): every other rank's all-reduce pairs its entry and exit
/// barriers with rank 0's two barriers and returns `Ok` without rank 0's share of the
/// reduction, and the world barrier after agreed: wrong answers and no error anywhere.
/// The device barriers count arrivals without naming the call they belong to. Fixed on
/// the host: every device collective call is recorded in the world's ledger, so the next
/// agreement (this `World::barrier`) names rank 0 (`CollectiveMismatch`). Until that
/// agreement, results after a skip are not checked.
#[test]
fn a_rank_that_skips_a_collective_desynchronises_the_next_ones() {
    let n = 4;
    let count = 16;
    let ranks = symmem::spawn_ranks(
        n,
        &config(),
        |_| Ok(Cpu::new()),
        |world| {
            let coll = Collectives::with_grid(&world, Grid::new(2, 1))?;
            let src = world.from_slice(&vec![world.rank() as i32 + 1; count])?;
            let dst = world.zeros::<i32>(count)?;
            world.barrier()?;
            let got = if world.rank() == 0 {
                coll.barrier()?;
                coll.barrier()?;
                Ok(Vec::new())
            } else {
                coll.all_reduce(&dst, &src, count, ReduceOp::Sum, Algorithm::TwoShot)
                    .and_then(|()| world.read(&dst))
            };
            let barrier = world.barrier();
            Ok((got, barrier))
        },
    )
    .expect("spawn_ranks");
    let sum = (1..=n as i32).sum::<i32>();
    for (rank, r) in ranks.into_iter().enumerate().skip(1) {
        let (got, barrier) = r.expect("the world forms");
        assert!(
            matches!(&got, Ok(v) if *v == vec![sum; count]) || got.is_err() || barrier.is_err(),
            "rank {rank}'s all-reduce gave {got:?} and its barrier {barrier:?}: a wrong \
             answer, no error"
        );
    }
}

/// Rank 1 skips an all-reduce over buffers allocated since the last agreement and calls
/// `World::barrier`, as a rank that skipped a call should to find out (seed 27 of the
/// soak): the all-reduce's agreement on rank 0 (its first use of fresh buffers) pairs
/// with rank 1's barrier, and both pass, so the barrier reports nothing on rank 1. Fixed
/// by naming the kind of call in every agreement: now both get `CollectiveMismatch`.
#[test]
fn a_barrier_does_not_pass_for_a_collectives_agreement() {
    let ranks = symmem::spawn_ranks(
        2,
        &config(),
        |_| Ok(Cpu::new()),
        |world| {
            let coll = Collectives::new(&world)?;
            let src = world.from_slice(&[1i32; 4])?;
            let dst = world.zeros::<i32>(4)?;
            Ok(if world.rank() == 0 {
                coll.all_reduce(&dst, &src, 4, ReduceOp::Sum, Algorithm::OneShot)
            } else {
                world.barrier()
            })
        },
    )
    .expect("spawn_ranks");
    for (rank, r) in ranks.into_iter().enumerate() {
        let r = r.expect("the world forms");
        assert!(
            matches!(&r, Err(Error::CollectiveMismatch { ranks, .. }) if *ranks == [1]),
            "rank {rank}: {r:?}"
        );
    }
}

/// Rank 1 of 3 all-reduces 8 elements where the others all-reduce 16 (buffers agreed
/// before, so the call itself exchanges nothing): the next agreement, a `World::barrier`,
/// names rank 1 on every rank (`CollectiveMismatch`), since every device collective call
/// is recorded in the world's ledger with its parameters.
#[test]
fn a_collective_with_another_count_is_named_at_the_next_agreement() {
    let ranks = symmem::spawn_ranks(
        3,
        &config(),
        |_| Ok(Cpu::new()),
        |world| {
            let coll = Collectives::new(&world)?;
            let src = world.from_slice(&[1i32; 16])?;
            let dst = world.zeros::<i32>(16)?;
            world.barrier()?;
            let count = if world.rank() == 1 { 8 } else { 16 };
            coll.all_reduce(&dst, &src, count, ReduceOp::Sum, Algorithm::OneShot)?;
            Ok(world.barrier())
        },
    )
    .expect("spawn_ranks");
    for (rank, r) in ranks.into_iter().enumerate() {
        let r = r.expect("the world forms and the all-reduce is enqueued");
        assert!(
            matches!(&r, Err(Error::CollectiveMismatch { ranks, .. }) if *ranks == [1]),
            "rank {rank}: {r:?}"
        );
    }
}

/// The child of [`a_panicking_hub_process_is_named_by_every_survivor`]: prints
/// `HUB-PANICS <rank> <its end>` and exits.
fn hub_panics_child() -> ! {
    let joined = UnixBootstrap::from_env()
        .and_then(|bootstrap| World::new(Box::new(bootstrap), Cpu::new(), &config()));
    let world = match joined {
        Ok(world) => world,
        Err(e) => processes::exit_child(&Err(e)),
    };
    let me = world.rank();
    let ran = std::panic::catch_unwind(AssertUnwindSafe(move || {
        // Dropped while unwinding on rank 0, at the end of the call on the others.
        let world = world;
        let coll = Collectives::new(&world)?;
        let flag = world.zeros::<u8>(1)?;
        world.barrier()?;
        match me {
            0 => {
                // Rank 1 is in its barrier by now.
                std::thread::sleep(Duration::from_millis(300));
                std::panic::panic_any(INJECTED)
            }
            // Waits for the hub.
            1 => world.barrier(),
            // Waits for rank 0 on the device (the read waits for the barrier's kernel),
            // told by its watchdog that rank 0 is lost.
            _ => coll.barrier().and_then(|()| world.read(&flag).map(drop)),
        }
    }));
    match ran {
        Ok(result) => println!("HUB-PANICS {me} {result:?}"),
        Err(_) => println!("HUB-PANICS {me} panicked"),
    }
    std::io::stdout().flush().expect("stdout");
    std::process::exit(0)
}

/// Rank 0 of 3 processes, the UNIX-socket bootstrap's hub, panics and its world is
/// dropped while unwinding (as the processes soak's panics of rank 0 did: seeds
/// 898244684907314652, 898244837537371370, 898244664999046385, 898245467965866507). Rank
/// 2, waiting for it in a device barrier, is told by its watchdog (`PeerLost` naming 0)
/// and leaves, telling the hub it stops because rank 0 was lost. The hub still serves
/// the group from its panicking world's `leave` (a barrier) and took a spoke that names
/// the hub for one that is lost itself: rank 1, waiting for the hub in `World::barrier`,
/// got `PeerLost` naming rank 2, a survivor, instead of rank 0. Fixed: a world whose
/// thread panicked ends its group naming itself (`Bootstrap::note_lost` of its own rank),
/// before its `leave`.
#[test]
fn a_panicking_hub_process_is_named_by_every_survivor() {
    let outcomes = processes::spawn_ranks(
        CHILD_TEST,
        "hub-panics",
        3,
        TIMEOUT,
        Duration::from_secs(20),
        None,
    );
    let all = processes::report(&outcomes);
    assert!(
        outcomes[0].text().contains("HUB-PANICS 0 panicked"),
        "rank 0 panics:\n{all}"
    );
    for (rank, o) in outcomes.iter().enumerate().skip(1) {
        assert!(
            o.text()
                .contains(&format!("HUB-PANICS {rank} Err(PeerLost {{ rank: Some(0)")),
            "rank {rank} should name rank 0:\n{all}"
        );
    }
    assert!(
        outcomes.iter().all(|o| o.status.is_some()),
        "every child exits by itself:\n{all}"
    );
    processes::assert_no_shm_leftovers();
}
