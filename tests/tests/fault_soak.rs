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
// Element types and values.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    I32,
    F32,
    F64,
    Bf16,
    F16,
    U64,
}

impl Ty {
    const ALL: [Ty; 6] = [Ty::I32, Ty::F32, Ty::F64, Ty::Bf16, Ty::F16, Ty::U64];

    fn size(self) -> usize {
        match self {
            Ty::I32 | Ty::F32 => 4,
            Ty::F64 | Ty::U64 => 8,
            Ty::Bf16 | Ty::F16 => 2,
        }
    }

    fn reducible(self) -> bool {
        self != Ty::U64
    }

    /// Values lie in `-span..=span` (`0..span` for `u64`): a sum over 8 ranks is exact.
    fn span(self) -> i64 {
        match self {
            Ty::I32 | Ty::F32 => 1000,
            Ty::F64 => 1_000_000,
            Ty::Bf16 => 16,
            Ty::F16 => 200,
            Ty::U64 => 1 << 40,
        }
    }
}

/// What a float that is not an integer reads as (never a value of the model).
const NOT_AN_INTEGER: i64 = i64::MIN;

fn exact(x: f64) -> i64 {
    if x.is_finite() && x.fract() == 0.0 {
        x as i64
    } else {
        NOT_AN_INTEGER
    }
}

/// An element type of the soak: model values (integers) in and out, exactly.
trait El: bytemuck::Pod + Send + Sync + 'static {
    fn of(v: i64) -> Self;
    fn val(self) -> i64;
}

impl El for i32 {
    fn of(v: i64) -> Self {
        v as i32
    }
    fn val(self) -> i64 {
        i64::from(self)
    }
}
impl El for u64 {
    fn of(v: i64) -> Self {
        v as u64
    }
    fn val(self) -> i64 {
        self as i64
    }
}
impl El for f32 {
    fn of(v: i64) -> Self {
        v as f32
    }
    fn val(self) -> i64 {
        exact(f64::from(self))
    }
}
impl El for f64 {
    fn of(v: i64) -> Self {
        v as f64
    }
    fn val(self) -> i64 {
        exact(self)
    }
}
impl El for bf16 {
    fn of(v: i64) -> Self {
        bf16::from_f32(v as f32)
    }
    fn val(self) -> i64 {
        exact(self.to_f64())
    }
}
impl El for f16 {
    fn of(v: i64) -> Self {
        f16::from_f32(v as f32)
    }
    fn val(self) -> i64 {
        exact(self.to_f64())
    }
}

/// The value rank `rank` puts at element `i` of what operation tag `tag` writes.
fn value(seed: u64, tag: u64, rank: usize, i: usize, ty: Ty) -> i64 {
    let mut x = seed
        ^ tag.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (rank as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9)
        ^ (i as u64).wrapping_mul(0x94d0_49bb_1331_11eb);
    // splitmix64's finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let span = ty.span();
    if ty == Ty::U64 {
        (x % span as u64) as i64
    } else {
        (x % (2 * span as u64 + 1)) as i64 - span
    }
}

fn values(seed: u64, tag: u64, rank: usize, len: usize, ty: Ty) -> Vec<i64> {
    (0..len).map(|i| value(seed, tag, rank, i, ty)).collect()
}

fn fold(op: ReduceOp, xs: impl Iterator<Item = i64>) -> i64 {
    let f = match op {
        ReduceOp::Sum => |a: i64, b: i64| a + b,
        ReduceOp::Min => |a: i64, b: i64| a.min(b),
        ReduceOp::Max => |a: i64, b: i64| a.max(b),
    };
    xs.reduce(f).expect("at least one rank")
}

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
// The model.

#[derive(Clone)]
struct MBuf {
    ty: Ty,
    len: usize,
    /// Every rank's copy.
    data: Vec<Vec<i64>>,
    agreed: bool,
}

#[derive(Clone)]
struct Model {
    seed: u64,
    n: usize,
    /// The world spans several (emulated) nodes: the barrier-free all-reduce is refused.
    nodes: bool,
    blocks: u64,
    bufs: Vec<Option<MBuf>>,
    /// Bytes of live buffers, and of dropped ones no barrier has released yet.
    live: usize,
    pending: usize,
}

fn bytes_of(ty: Ty, len: usize) -> usize {
    (ty.size() * len).next_multiple_of(256)
}

impl Model {
    fn buf(&self, slot: usize) -> &MBuf {
        self.bufs[slot].as_ref().expect("a live slot")
    }

    fn buf_mut(&mut self, slot: usize) -> &mut MBuf {
        self.bufs[slot].as_mut().expect("a live slot")
    }

    /// Every value of every buffer is held exactly by its element type.
    fn exact(&self) -> bool {
        self.bufs.iter().flatten().all(|b| {
            let limit = match b.ty {
                Ty::I32 => i64::from(i32::MAX),
                Ty::F32 => 1 << 24,
                Ty::F64 => 1 << 53,
                Ty::Bf16 => 1 << 8,
                Ty::F16 => 1 << 11,
                Ty::U64 => i64::MAX,
            };
            b.data.iter().flatten().all(|v| v.abs() <= limit)
        })
    }

    fn agree_all(&mut self) {
        for b in self.bufs.iter_mut().flatten() {
            b.agreed = true;
        }
    }

    fn reads(&self, slot: usize) -> Vec<Readouts> {
        (0..self.n)
            .map(|r| vec![self.buf(slot).data[r].clone()])
            .collect()
    }

    fn ok(&self) -> Vec<Expect> {
        vec![Expect::Ok(Vec::new()); self.n]
    }

    /// Applies `op` (tag `tag`) to the model; returns what each rank sees and whether the
    /// operation made the ranks agree (compare their ledgers).
    fn apply(&mut self, op: &Op, tag: u64) -> (Vec<Expect>, bool) {
        let n = self.n;
        let seed = self.seed;
        match *op {
            Op::Alloc {
                slot,
                ty,
                len,
                fill,
            } => {
                let data = (0..n)
                    .map(|r| {
                        if fill {
                            values(seed, tag, r, len, ty)
                        } else {
                            vec![0; len]
                        }
                    })
                    .collect();
                assert_eq!(slot, self.bufs.len());
                self.bufs.push(Some(MBuf {
                    ty,
                    len,
                    data,
                    agreed: false,
                }));
                self.live += bytes_of(ty, len);
                (self.ok(), false)
            }
            Op::Drop { slot } => {
                let b = self.bufs[slot].take().expect("a live slot");
                let bytes = bytes_of(b.ty, b.len);
                self.live -= bytes;
                self.pending += bytes;
                (self.ok(), false)
            }
            Op::Barrier => {
                self.agree_all();
                self.pending = 0;
                (self.ok(), true)
            }
            Op::DeviceBarrier => (self.ok(), false),
            Op::Write { slot, at, len } => {
                let b = self.buf_mut(slot);
                let ty = b.ty;
                for (r, copy) in b.data.iter_mut().enumerate() {
                    copy[at..at + len].copy_from_slice(&values(seed, tag, r, len, ty));
                }
                (self.ok(), false)
            }
            Op::Read { slot } => (
                self.reads(slot).into_iter().map(Expect::Ok).collect(),
                false,
            ),
            Op::Put {
                dst,
                at,
                len,
                shift,
                ..
            } => {
                if !self.buf(dst).agreed {
                    return (vec![Expect::Refused("NotAgreed"); n], false);
                }
                let b = self.buf_mut(dst);
                let ty = b.ty;
                for r in 0..n {
                    let v = values(seed, tag, r, len, ty);
                    b.data[(r + shift) % n][at..at + len].copy_from_slice(&v);
                }
                (self.ok(), false)
            }
            Op::Get {
                src,
                at,
                len,
                shift,
                ..
            } => {
                if !self.buf(src).agreed {
                    return (vec![Expect::Refused("NotAgreed"); n], false);
                }
                let b = self.buf(src);
                let out = (0..n)
                    .map(|r| Expect::Ok(vec![b.data[(r + shift) % n][at..at + len].to_vec()]))
                    .collect();
                (out, false)
            }
            Op::PutSignal {
                dst,
                at,
                len,
                signal,
                index,
                value: add,
                shift,
                ..
            } => {
                if !self.buf(dst).agreed || !self.buf(signal).agreed {
                    return (vec![Expect::Refused("NotAgreed"); n], false);
                }
                let b = self.buf_mut(dst);
                let ty = b.ty;
                for r in 0..n {
                    let v = values(seed, tag, r, len, ty);
                    b.data[(r + shift) % n][at..at + len].copy_from_slice(&v);
                }
                let total = add.wrapping_mul(self.blocks) as i64;
                let s = self.buf_mut(signal);
                for r in 0..n {
                    s.data[(r + shift) % n][index] += total;
                }
                (self.reads(dst).into_iter().map(Expect::Ok).collect(), false)
            }
            Op::AllReduce {
                dst,
                src,
                count,
                op: rop,
                algorithm,
            } => {
                let agreed = self.agree_for(op);
                let ty = self.buf(src).ty;
                let bytes = count * ty.size();
                let lamport = matches!(ty, Ty::F32 | Ty::Bf16 | Ty::F16)
                    && rop == ReduceOp::Sum
                    && bytes <= LAMPORT_CAPACITY
                    && !self.nodes;
                if algorithm == Algorithm::Lamport && !lamport {
                    return (vec![Expect::Refused("LamportUnavailable"); n], agreed);
                }
                let s = &self.buf(src).data;
                let folded: Vec<i64> = (0..count)
                    .map(|i| fold(rop, (0..n).map(|r| s[r][i])))
                    .collect();
                let d = self.buf_mut(dst);
                for copy in &mut d.data {
                    copy[..count].copy_from_slice(&folded);
                }
                (self.read_out(dst), agreed)
            }
            Op::AllGather { dst, src, count } => {
                let agreed = self.agree_for(op);
                let s: Vec<Vec<i64>> = (0..n)
                    .map(|r| self.buf(src).data[r][..count].to_vec())
                    .collect();
                let d = self.buf_mut(dst);
                for copy in &mut d.data {
                    for (j, chunk) in s.iter().enumerate() {
                        copy[j * count..(j + 1) * count].copy_from_slice(chunk);
                    }
                }
                (self.read_out(dst), agreed)
            }
            Op::AllToAll { dst, src, count } => {
                let agreed = self.agree_for(op);
                let s = self.buf(src).data.clone();
                let d = self.buf_mut(dst);
                for (r, copy) in d.data.iter_mut().enumerate() {
                    for (j, sj) in s.iter().enumerate() {
                        copy[j * count..(j + 1) * count]
                            .copy_from_slice(&sj[r * count..(r + 1) * count]);
                    }
                }
                (self.read_out(dst), agreed)
            }
            Op::Broadcast {
                dst,
                src,
                count,
                root,
            } => {
                let agreed = self.agree_for(op);
                let s = self.buf(src).data[root][..count].to_vec();
                let d = self.buf_mut(dst);
                for copy in &mut d.data {
                    copy[..count].copy_from_slice(&s);
                }
                (self.read_out(dst), agreed)
            }
            Op::ReduceScatter {
                dst,
                src,
                count,
                op: rop,
            } => {
                let agreed = self.agree_for(op);
                let s = self.buf(src).data.clone();
                let d = self.buf_mut(dst);
                for r in 0..n {
                    for i in 0..count {
                        d.data[r][i] = fold(rop, s.iter().map(|sj| sj[r * count + i]));
                    }
                }
                (self.read_out(dst), agreed)
            }
            Op::Graph {
                ref body,
                input,
                replays,
            } => {
                let agreed = self.agree_for(op);
                let mut out: Vec<Readouts> = vec![Vec::new(); n];
                let len = self.buf(input).len;
                for k in 0..replays {
                    let write = Op::Write {
                        slot: input,
                        at: 0,
                        len,
                    };
                    self.apply(&write, graph_tag(tag, k));
                    for sub in body {
                        let (seen, _) = self.apply(sub, 0);
                        assert!(
                            seen.iter().all(|e| matches!(e, Expect::Ok(_))),
                            "graphs hold no refused call"
                        );
                    }
                    // Every destination is read after the whole replay.
                    for dst in body.iter().filter_map(Op::destination) {
                        for (r, reads) in out.iter_mut().enumerate() {
                            reads.push(self.buf(dst).data[r].clone());
                        }
                    }
                }
                (out.into_iter().map(Expect::Ok).collect(), agreed)
            }
            Op::Refused(refusal) => {
                let name = match refusal {
                    Refusal::OutOfHeap => "OutOfHeap",
                    Refusal::TooLarge => "TooLarge",
                    Refusal::ZeroSize => "ZeroSize",
                };
                (vec![Expect::Refused(name); n], false)
            }
        }
    }

    /// A collective (or a capture) over a buffer no agreement has confirmed agrees first.
    fn agree_for(&mut self, op: &Op) -> bool {
        let fresh = op
            .agreed_buffers()
            .iter()
            .any(|&slot| !self.buf(slot).agreed);
        if fresh {
            self.agree_all();
        }
        fresh
    }

    fn read_out(&self, dst: usize) -> Vec<Expect> {
        self.reads(dst).into_iter().map(Expect::Ok).collect()
    }
}

fn graph_tag(tag: u64, replay: usize) -> u64 {
    (tag << 8) | 0x80 | replay as u64
}

// ---------------------------------------------------------------------------------------
// The generator.

struct Gen {
    rng: TestRng,
}

impl Gen {
    fn new(seed: u64) -> Self {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        bytes[8..16].copy_from_slice(b"symmsoak");
        Self {
            rng: TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
        }
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n.max(1) as u64) as usize
    }

    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

fn live_slots(m: &Model, want: impl Fn(&MBuf) -> bool) -> Vec<usize> {
    m.bufs
        .iter()
        .enumerate()
        .filter_map(|(i, b)| b.as_ref().filter(|b| want(b)).map(|_| i))
        .collect()
}

/// The program of seed `seed` for `launcher`: the same for a seed and launcher every time
/// (a child regenerates its parent's). The CPU threads' programs draw nothing for the
/// processes' choices, so a seed means the same thread program as before they existed;
/// a CUDA thread program is the CPU's on one node, as a processes program is (without
/// its kills).
fn generate(seed: u64, launcher: Launcher) -> Program {
    let mut g = Gen::new(seed);
    let n = g.range(2, 8);
    let blocks = if g.chance(25) { 2 } else { 1 };
    // A quarter of the programs split the world into emulated nodes of a size that
    // divides it (every peer remote when it is 1). Processes are drawn the same and run
    // on one node: their bootstrap has no off-node transport. So do CUDA's threads: the
    // local transport refuses thread-ranks on a GPU split into nodes (`Error::NoEngine`:
    // they stalled its proxy behind a rank's device-wide synchronisation; checked by
    // `off_node_local::cuda_*_is_refused`).
    let per_node = g
        .chance(25)
        .then(|| {
            let sizes: Vec<usize> = (1..n).filter(|d| n.is_multiple_of(*d)).collect();
            g.pick(&sizes)
        })
        .filter(|_| launcher == Launcher::Threads(Target::Cpu));
    // A few element types per program, so that same-type pairs are common.
    let mut types: Vec<Ty> = Ty::ALL.to_vec();
    while types.len() > 3 {
        types.remove(g.below(types.len()));
    }
    if !types.contains(&Ty::U64) && g.chance(50) {
        types[0] = Ty::U64;
    }
    let mut m = Model {
        seed,
        n,
        nodes: per_node.is_some(),
        blocks: u64::from(blocks),
        bufs: Vec::new(),
        live: 0,
        pending: 0,
    };
    let mut ops = Vec::new();
    let mut expect = Vec::new();
    let mut agreements = Vec::new();
    let steps = g.range(10, 40);
    let mut push = |m: &mut Model, op: Op, ops: &mut Vec<Op>| {
        let tag = ops.len() as u64 + 1;
        // Sums of sums grow: an operation that would leave a value its type does not hold
        // exactly becomes a device barrier.
        let mut trial = m.clone();
        trial.apply(&op, tag);
        let op = if trial.exact() { op } else { Op::DeviceBarrier };
        let (e, agreed) = m.apply(&op, tag);
        expect.push(e);
        agreements.push(agreed);
        ops.push(op);
    };
    // A signal buffer and a few data buffers, agreed.
    for _ in 0..g.range(2, 4) {
        let op = alloc_op(&mut g, &m, &types);
        push(&mut m, op, &mut ops);
    }
    let signal = Op::Alloc {
        slot: m.bufs.len(),
        ty: Ty::U64,
        len: g.range(1, 4),
        fill: false,
    };
    push(&mut m, signal, &mut ops);
    push(&mut m, Op::Barrier, &mut ops);
    while ops.len() < steps {
        let op = next_op(&mut g, &m, &types);
        push(&mut m, op, &mut ops);
    }
    let fault = if g.chance(20) {
        None
    } else {
        // Processes are killed in two faults of five; the rest, and every thread fault,
        // are the threads' kinds alike.
        let kind = if launcher == Launcher::Processes && g.chance(40) {
            FaultKind::Kill
        } else {
            g.pick(&[
                FaultKind::Leave,
                FaultKind::Panic,
                FaultKind::Skip,
                FaultKind::Mismatch,
                FaultKind::Exhaust,
            ])
        };
        let steps: Vec<usize> = (0..ops.len())
            .filter(|&k| match kind {
                FaultKind::Skip => ops[k].is_device_collective(),
                FaultKind::Mismatch => matches!(ops[k], Op::Alloc { .. }),
                _ => true,
            })
            .collect();
        (!steps.is_empty()).then(|| Fault {
            kind,
            rank: g.below(n),
            step: g.pick(&steps),
        })
    };
    Program {
        seed,
        target: match launcher {
            Launcher::Threads(target) => target,
            Launcher::Processes => Target::Cpu,
        },
        world: n,
        per_node,
        blocks,
        ops,
        expect,
        agreements,
        fault,
    }
}

fn alloc_op(g: &mut Gen, m: &Model, types: &[Ty]) -> Op {
    let ty = g.pick(types);
    let len = if g.chance(10) {
        g.range(1000, 10_000)
    } else if g.chance(50) {
        g.range(m.n, 8 * m.n)
    } else {
        g.range(1, 64)
    };
    let len = if m.live + m.pending + bytes_of(ty, len) > BUDGET {
        1
    } else {
        len
    };
    Op::Alloc {
        slot: m.bufs.len(),
        ty,
        len,
        fill: g.chance(50),
    }
}

/// A random valid operation given the model's state (an allocation where the one picked
/// finds no buffers to work on).
fn next_op(g: &mut Gen, m: &Model, types: &[Ty]) -> Op {
    let n = m.n;
    let any = live_slots(m, |_| true);
    match g.below(100) {
        0..8 => alloc_op(g, m, types),
        8..12 if any.len() > 3 => Op::Drop { slot: g.pick(&any) },
        12..18 => Op::Barrier,
        18..22 => Op::DeviceBarrier,
        22..28 if !any.is_empty() => {
            let slot = g.pick(&any);
            let (at, len) = span_in(g, m.buf(slot).len);
            Op::Write { slot, at, len }
        }
        28..32 if !any.is_empty() => Op::Read { slot: g.pick(&any) },
        32..40 if !any.is_empty() => {
            let dst = g.pick(&any);
            let (at, len) = span_in(g, m.buf(dst).len);
            let api = g.pick(&[Api::World, Api::Collectives]);
            Op::Put {
                api,
                dst,
                at,
                len,
                shift: g.below(n),
            }
        }
        40..46 if !any.is_empty() => {
            let src = g.pick(&any);
            let (at, len) = span_in(g, m.buf(src).len);
            let api = g.pick(&[Api::World, Api::Collectives]);
            Op::Get {
                api,
                src,
                at,
                len,
                shift: g.below(n),
            }
        }
        46..52 => {
            // Across emulated nodes this found a SIGSEGV under load (`2f5ec58`, seeds 15
            // and 34 then): a kernel whose wait passed its deadline returned with its put
            // still in the ring, its caller freed the source, and the proxy read it. A
            // poisoned world's transport now disowns the rank's requests (`Link::disown`).
            let signals = live_slots(m, |b| b.ty == Ty::U64);
            if signals.is_empty() {
                return alloc_op(g, m, types);
            }
            let signal = g.pick(&signals);
            let dsts: Vec<usize> = any.iter().copied().filter(|&s| s != signal).collect();
            if dsts.is_empty() {
                return alloc_op(g, m, types);
            }
            let dst = g.pick(&dsts);
            let (at, len) = span_in(g, m.buf(dst).len);
            let index = g.below(m.buf(signal).len);
            let shift = g.below(n);
            let value = g.range(1, 3) as u64;
            // What this rank's signal holds once its sender's put has landed.
            let total = value * m.blocks;
            let wait = (0..n)
                .map(|r| m.buf(signal).data[r][index] as u64 + total)
                .collect();
            Op::PutSignal {
                dst,
                at,
                len,
                signal,
                index,
                value,
                shift,
                wait,
            }
        }
        52..90 => collective(g, m, true).unwrap_or_else(|| alloc_op(g, m, types)),
        90..95 => {
            let mut body = Vec::new();
            for _ in 0..g.range(1, 3) {
                if let Some(op) = collective(g, m, false) {
                    // Across nodes the reductions refuse a capture (`Error::Capturing`,
                    // `off_node_local::a_reduction_across_nodes_refuses_a_capture`).
                    let reduces = matches!(op, Op::AllReduce { .. } | Op::ReduceScatter { .. });
                    if !(m.nodes && reduces) {
                        body.push(op);
                    }
                }
            }
            let Some(input) = body
                .iter()
                .find_map(|op| op.agreed_buffers().last().copied())
            else {
                return alloc_op(g, m, types);
            };
            Op::Graph {
                body,
                input,
                replays: g.range(1, 3),
            }
        }
        95..98 => Op::Refused(g.pick(&[Refusal::OutOfHeap, Refusal::TooLarge, Refusal::ZeroSize])),
        _ => alloc_op(g, m, types),
    }
}

/// A random `at..at + len` inside a buffer of `cap` elements.
fn span_in(g: &mut Gen, cap: usize) -> (usize, usize) {
    let at = g.below(cap);
    let len = g.range(1, (cap - at).min(256));
    (at, len)
}

/// A random collective over live buffers (with a refused barrier-free all-reduce where
/// `refusals`), or `None` if the buffers it picked do not fit.
fn collective(g: &mut Gen, m: &Model, refusals: bool) -> Option<Op> {
    let n = m.n;
    let kind = g.below(6);
    if kind == 0 {
        return Some(Op::DeviceBarrier);
    }
    let reducing = matches!(kind, 1 | 5);
    let dsts = live_slots(m, |b| !reducing || b.ty.reducible());
    if dsts.is_empty() {
        return None;
    }
    let dst = g.pick(&dsts);
    let ty = m.buf(dst).ty;
    let srcs: Vec<usize> = live_slots(m, |b| b.ty == ty)
        .into_iter()
        .filter(|&s| s != dst)
        .collect();
    if srcs.is_empty() {
        return None;
    }
    let src = g.pick(&srcs);
    let (dl, sl) = (m.buf(dst).len, m.buf(src).len);
    let op = g.pick(&[ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max]);
    let count = |g: &mut Gen, most: usize| (most >= 1).then(|| g.range(1, most.min(4096)));
    Some(match kind {
        1 => {
            let count = count(g, dl.min(sl))?;
            let mut algorithm = g.pick(&[
                Algorithm::Auto,
                Algorithm::OneShot,
                Algorithm::TwoShot,
                Algorithm::Lamport,
            ]);
            let bytes = count * ty.size();
            let lamport = matches!(ty, Ty::F32 | Ty::Bf16 | Ty::F16)
                && op == ReduceOp::Sum
                && bytes <= LAMPORT_CAPACITY
                && !m.nodes;
            if algorithm == Algorithm::Lamport && !lamport && !(refusals && g.chance(30)) {
                algorithm = Algorithm::Auto;
            }
            Op::AllReduce {
                dst,
                src,
                count,
                op,
                algorithm,
            }
        }
        2 => Op::AllGather {
            dst,
            src,
            count: count(g, (dl / n).min(sl))?,
        },
        3 => Op::AllToAll {
            dst,
            src,
            count: count(g, (dl / n).min(sl / n))?,
        },
        4 => Op::Broadcast {
            dst,
            src,
            count: count(g, dl.min(sl))?,
            root: g.below(n),
        },
        _ => Op::ReduceScatter {
            dst,
            src,
            count: count(g, dl.min(sl / n))?,
            op,
        },
    })
}

// ---------------------------------------------------------------------------------------
// Running a program.

enum AnyBuf<B: Backend> {
    I32(SymmetricBuffer<i32, B>),
    F32(SymmetricBuffer<f32, B>),
    F64(SymmetricBuffer<f64, B>),
    Bf16(SymmetricBuffer<bf16, B>),
    F16(SymmetricBuffer<f16, B>),
    U64(SymmetricBuffer<u64, B>),
}

/// `$body` with `$b` bound to the buffer, whatever its element type.
macro_rules! each {
    ($buf:expr, $b:ident => $body:expr) => {
        match $buf {
            AnyBuf::I32($b) => $body,
            AnyBuf::F32($b) => $body,
            AnyBuf::F64($b) => $body,
            AnyBuf::Bf16($b) => $body,
            AnyBuf::F16($b) => $body,
            AnyBuf::U64($b) => $body,
        }
    };
}

/// `$body` with two buffers of one element type (the generator pairs them so).
macro_rules! pair {
    ($a:expr, $b:expr, $x:ident, $y:ident => $body:expr) => {
        match ($a, $b) {
            (AnyBuf::I32($x), AnyBuf::I32($y)) => $body,
            (AnyBuf::F32($x), AnyBuf::F32($y)) => $body,
            (AnyBuf::F64($x), AnyBuf::F64($y)) => $body,
            (AnyBuf::Bf16($x), AnyBuf::Bf16($y)) => $body,
            (AnyBuf::F16($x), AnyBuf::F16($y)) => $body,
            (AnyBuf::U64($x), AnyBuf::U64($y)) => $body,
            _ => unreachable!("the generator pairs buffers of one type"),
        }
    };
}

/// As [`pair!`], for the reductions (no `u64`).
macro_rules! pair_reducible {
    ($a:expr, $b:expr, $x:ident, $y:ident => $body:expr) => {
        match ($a, $b) {
            (AnyBuf::I32($x), AnyBuf::I32($y)) => $body,
            (AnyBuf::F32($x), AnyBuf::F32($y)) => $body,
            (AnyBuf::F64($x), AnyBuf::F64($y)) => $body,
            (AnyBuf::Bf16($x), AnyBuf::Bf16($y)) => $body,
            (AnyBuf::F16($x), AnyBuf::F16($y)) => $body,
            _ => unreachable!("the generator reduces buffers of one reducible type"),
        }
    };
}

/// One rank's end of a program.
struct Rank<'w, B: Backend> {
    seed: u64,
    world: &'w World<B>,
    coll: Collectives<B>,
    bufs: Vec<Option<AnyBuf<B>>>,
    /// Each slot's length in the model (a mismatched allocation is longer here).
    lens: Vec<usize>,
}

fn read<T: El, B: Backend>(
    world: &World<B>,
    view: &impl symmem::AsDeviceSlice<T, B>,
) -> symmem::Result<Vec<i64>> {
    Ok(world.read(view)?.into_iter().map(El::val).collect())
}

fn vals<T: El>(seed: u64, tag: u64, rank: usize, len: usize, ty: Ty) -> Vec<T> {
    values(seed, tag, rank, len, ty)
        .into_iter()
        .map(T::of)
        .collect()
}

fn ty_of<B: Backend>(buf: &AnyBuf<B>) -> Ty {
    match buf {
        AnyBuf::I32(_) => Ty::I32,
        AnyBuf::F32(_) => Ty::F32,
        AnyBuf::F64(_) => Ty::F64,
        AnyBuf::Bf16(_) => Ty::Bf16,
        AnyBuf::F16(_) => Ty::F16,
        AnyBuf::U64(_) => Ty::U64,
    }
}

/// A refusal the model predicts leaves the world working: the call's other parts still run.
fn is_refusal(e: &Error) -> bool {
    matches!(
        e,
        Error::NotAgreed { .. }
            | Error::LamportUnavailable { .. }
            | Error::OutOfHeap { .. }
            | Error::TooLarge { .. }
            | Error::ZeroSize
    )
}

impl<'w, B: Backend> Rank<'w, B> {
    fn me(&self) -> usize {
        self.world.rank()
    }

    fn n(&self) -> usize {
        self.world.world_size()
    }

    fn buf(&self, slot: usize) -> &AnyBuf<B> {
        self.bufs[slot].as_ref().expect("a live slot")
    }

    fn alloc(
        &mut self,
        slot: usize,
        ty: Ty,
        len: usize,
        fill: bool,
        tag: u64,
    ) -> symmem::Result<()> {
        fn make<'w, T: El, B: Backend>(
            r: &Rank<'w, B>,
            ty: Ty,
            len: usize,
            fill: bool,
            tag: u64,
        ) -> symmem::Result<SymmetricBuffer<T, B>> {
            if fill {
                r.world.from_slice(&vals::<T>(r.seed, tag, r.me(), len, ty))
            } else {
                r.world.zeros::<T>(len)
            }
        }
        let buf = match ty {
            Ty::I32 => AnyBuf::I32(make(self, ty, len, fill, tag)?),
            Ty::F32 => AnyBuf::F32(make(self, ty, len, fill, tag)?),
            Ty::F64 => AnyBuf::F64(make(self, ty, len, fill, tag)?),
            Ty::Bf16 => AnyBuf::Bf16(make(self, ty, len, fill, tag)?),
            Ty::F16 => AnyBuf::F16(make(self, ty, len, fill, tag)?),
            Ty::U64 => AnyBuf::U64(make(self, ty, len, fill, tag)?),
        };
        assert_eq!(slot, self.bufs.len(), "slots in allocation order");
        self.bufs.push(Some(buf));
        Ok(())
    }

    /// Runs `op` (tag `tag`); `extra` elements more for a mismatched allocation.
    fn run(&mut self, op: &Op, tag: u64, extra: usize) -> symmem::Result<Readouts> {
        let (me, n, seed) = (self.me(), self.n(), self.seed);
        match *op {
            Op::Alloc {
                slot,
                ty,
                len,
                fill,
            } => {
                // A mismatched allocation fills as many elements as the others, zeroes the
                // rest.
                self.alloc(slot, ty, len + extra, fill && extra == 0, tag)?;
                self.lens.push(len);
                if fill && extra > 0 {
                    each!(self.buf(slot), b => self.world.write(b, 0, &vals(seed, tag, me, len, ty)))?;
                }
                Ok(Vec::new())
            }
            Op::Drop { slot } => {
                self.bufs[slot] = None;
                Ok(Vec::new())
            }
            Op::Barrier => self.world.barrier().map(|()| Vec::new()),
            Op::DeviceBarrier => self.coll.barrier().map(|()| Vec::new()),
            Op::Write { slot, at, len } => {
                let ty = ty_of(self.buf(slot));
                each!(self.buf(slot), b => self.world.write(b, at, &vals(seed, tag, me, len, ty)))?;
                Ok(Vec::new())
            }
            Op::Read { slot } => Ok(vec![self.read_slot(slot)?]),
            Op::Put {
                api,
                dst,
                at,
                len,
                shift,
            } => self.fenced(|r| {
                let to = (me + shift) % n;
                let ty = ty_of(r.buf(dst));
                each!(r.buf(dst), b => {
                    let src = r.world.device_from_slice(&vals(seed, tag, me, len, ty))?;
                    match api {
                        Api::Collectives => r.coll.put(b, at, &src, to),
                        Api::World => r.world.put(&b.slice(at..at + len)?, &src, to),
                    }
                })?;
                Ok(Vec::new())
            }),
            Op::Get {
                api,
                src,
                at,
                len,
                shift,
            } => self.fenced(|r| {
                let from = (me + shift) % n;
                let got = each!(r.buf(src), b => {
                    let dst = r.world.device_zeros(len)?;
                    match api {
                        Api::Collectives => r.coll.get(&dst, b, at, from)?,
                        Api::World => r.world.get(&dst, &b.slice(at..at + len)?, from)?,
                    }
                    read(r.world, &dst)?
                });
                Ok(vec![got])
            }),
            Op::PutSignal {
                dst,
                at,
                len,
                signal,
                index,
                value: add,
                shift,
                ref wait,
            } => self.fenced(|r| {
                let (to, from) = ((me + shift) % n, (me + n - shift) % n);
                let Some(AnyBuf::U64(sig)) = &r.bufs[signal] else {
                    unreachable!("signals are u64 buffers")
                };
                let ty = ty_of(r.buf(dst));
                each!(r.buf(dst), b => {
                    let src = r.world.device_from_slice(&vals(seed, tag, me, len, ty))?;
                    r.coll.put_with_signal(b, at, &src, sig, index, add, to)
                })?;
                r.coll
                    .signal_wait_until_from(sig, index, from, Cmp::Ge, wait[me])?;
                Ok(vec![r.read_slot(dst)?])
            }),
            Op::AllReduce {
                dst,
                src,
                count,
                op,
                algorithm,
            } => {
                pair_reducible!(self.buf(dst), self.buf(src), d, s =>
                    self.coll.all_reduce(d, s, count, op, algorithm))?;
                Ok(vec![self.read_slot(dst)?])
            }
            Op::AllGather { dst, src, count } => {
                pair!(self.buf(dst), self.buf(src), d, s => self.coll.all_gather(d, s, count))?;
                Ok(vec![self.read_slot(dst)?])
            }
            Op::AllToAll { dst, src, count } => {
                pair!(self.buf(dst), self.buf(src), d, s => self.coll.all_to_all(d, s, count))?;
                Ok(vec![self.read_slot(dst)?])
            }
            Op::Broadcast {
                dst,
                src,
                count,
                root,
            } => {
                pair!(self.buf(dst), self.buf(src), d, s =>
                    self.coll.broadcast(d, s, count, root))?;
                Ok(vec![self.read_slot(dst)?])
            }
            Op::ReduceScatter {
                dst,
                src,
                count,
                op,
            } => {
                pair_reducible!(self.buf(dst), self.buf(src), d, s =>
                    self.coll.reduce_scatter(d, s, count, op))?;
                Ok(vec![self.read_slot(dst)?])
            }
            Op::Graph {
                ref body,
                input,
                replays,
            } => {
                let graph = self.world.capture(|| {
                    for sub in body {
                        self.launch_only(sub)?;
                    }
                    Ok(())
                })?;
                let mut out = Vec::new();
                let ty = ty_of(self.buf(input));
                for k in 0..replays {
                    let (len, tag) = (self.lens[input], graph_tag(tag, k));
                    each!(self.buf(input), b => self.world.write(b, 0, &vals(seed, tag, me, len, ty)))?;
                    graph.replay()?;
                    for sub in body {
                        if let Some(dst) = sub.destination() {
                            out.push(self.read_slot(dst)?);
                        }
                    }
                }
                Ok(out)
            }
            Op::Refused(refusal) => {
                let len = match refusal {
                    Refusal::OutOfHeap => self.world.heap_len(),
                    Refusal::TooLarge => self.world.heap_len() + 1,
                    Refusal::ZeroSize => 0,
                };
                self.world.zeros::<u8>(len).map(|_| Vec::new())
            }
        }
    }

    /// A collective's launch alone (inside a capture).
    fn launch_only(&self, op: &Op) -> symmem::Result<()> {
        match *op {
            Op::DeviceBarrier => self.coll.barrier(),
            Op::AllReduce {
                dst,
                src,
                count,
                op,
                algorithm,
            } => pair_reducible!(self.buf(dst), self.buf(src), d, s =>
                self.coll.all_reduce(d, s, count, op, algorithm)),
            Op::AllGather { dst, src, count } => {
                pair!(self.buf(dst), self.buf(src), d, s => self.coll.all_gather(d, s, count))
            }
            Op::AllToAll { dst, src, count } => {
                pair!(self.buf(dst), self.buf(src), d, s => self.coll.all_to_all(d, s, count))
            }
            Op::Broadcast {
                dst,
                src,
                count,
                root,
            } => {
                pair!(self.buf(dst), self.buf(src), d, s => self.coll.broadcast(d, s, count, root))
            }
            Op::ReduceScatter {
                dst,
                src,
                count,
                op,
            } => pair_reducible!(self.buf(dst), self.buf(src), d, s =>
                self.coll.reduce_scatter(d, s, count, op)),
            _ => unreachable!("graphs hold collectives only"),
        }
    }

    /// This rank's copy of `slot`, as long as the model's.
    fn read_slot(&self, slot: usize) -> symmem::Result<Vec<i64>> {
        let mut v = each!(self.buf(slot), b => read(self.world, b))?;
        v.truncate(self.lens[slot]);
        Ok(v)
    }

    /// `body` between two device barriers (peers' one-sided calls touch this rank's copy
    /// only between them). A refusal the model predicts still takes the second barrier,
    /// as every rank is refused alike.
    fn fenced(
        &self,
        body: impl FnOnce(&Self) -> symmem::Result<Readouts>,
    ) -> symmem::Result<Readouts> {
        self.coll.barrier()?;
        let result = body(self);
        match result {
            Err(e) if !is_refusal(&e) => Err(e),
            result => {
                self.coll.barrier()?;
                result
            }
        }
    }
}

/// An error as the oracle sees it, made on the rank that got it: an `Error` does not
/// cross a process, this does (in a [`Record`]).
#[derive(Clone, Debug, PartialEq)]
struct Failure {
    /// The error's variant name ([`kind`]).
    kind: String,
    /// The rank a `PeerLost` names, or the peer a `WaitTimedOut` waited for.
    rank: Option<usize>,
    /// The ranks a `CollectiveMismatch` or a `PeerFailed` names.
    ranks: Vec<usize>,
    /// The error's `Debug` text.
    text: String,
}

impl From<&Error> for Failure {
    fn from(e: &Error) -> Self {
        let rank = match *e {
            Error::PeerLost { rank, .. } => rank,
            Error::WaitTimedOut { peer, .. } => peer,
            _ => None,
        };
        let ranks = match e {
            Error::CollectiveMismatch { ranks, .. } | Error::PeerFailed { ranks, .. } => {
                ranks.clone()
            }
            _ => Vec::new(),
        };
        Self {
            kind: kind(e),
            rank,
            ranks,
            text: format!("{e:?}"),
        }
    }
}

impl Failure {
    /// Whether the error is of variant `kind`.
    fn is(&self, kind: &str) -> bool {
        self.kind == kind
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A result as the oracle sees it.
type Plain<T> = Result<T, Failure>;

/// `result`, its error made a [`Failure`].
fn plain<T>(result: symmem::Result<T>) -> Plain<T> {
    result.map_err(|e| Failure::from(&e))
}

/// Now, in nanoseconds of `CLOCK_MONOTONIC`: one clock for every process of the machine,
/// so times taken by different ranks compare, threads or processes alike.
fn now() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// One rank's result of one operation.
#[derive(Debug, PartialEq)]
enum Seen {
    Done {
        result: Plain<Readouts>,
        took: Duration,
        /// When the call returned ([`now`]).
        ended: u64,
    },
    /// The fault, when it was injected ([`now`]): left, panicked, skipped (with what the
    /// barrier after said), exhausted (with what the allocation said), or about to be
    /// killed.
    Injected {
        kind: FaultKind,
        at: u64,
        result: Option<Plain<()>>,
    },
}

/// How the ranks of a program ended, by launcher.
enum Ended {
    /// `spawn_ranks`'s own result (a world that failed to form), when it returned.
    Threads(Option<Result<Vec<String>, String>>),
    /// Every child's end (as `symmem_tests::processes::spawn_ranks` collected it), and
    /// every line a child printed as a record that did not read as one.
    Processes {
        children: Vec<Outcome>,
        unreadable: Vec<(usize, String)>,
    },
}

/// Every rank's results, by rank then step, and each rank's `finalize`.
struct Observed {
    steps: Vec<Vec<(usize, Seen)>>,
    finalized: Vec<Option<Plain<()>>>,
    /// A panic other than the injected one, by rank.
    panics: Vec<Option<String>>,
    ended: Ended,
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".into())
}

fn quiet_injected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if panic_text(info.payload()) != INJECTED {
                default(info);
            }
        }));
    });
}

/// The CPU backend's configuration.
fn config() -> Config {
    config_for(Target::Cpu)
}

/// A world's configuration on `target`: its heap, its timeout and its wait deadline.
fn config_for(target: Target) -> Config {
    let t = target.tuning();
    Config {
        heap_bytes: HEAP,
        timeout: t.timeout,
        wait_deadline: t.wait_deadline,
        ..Config::default()
    }
}

/// The configuration of program `p`'s world: [`config_for`] its backend, split into its
/// nodes.
fn config_of(p: &Program) -> Config {
    Config {
        ranks_per_node: p.per_node,
        ..config_for(p.target)
    }
}

/// Runs `p` with its ranks as threads (on this thread), each on the backend `make` makes
/// for its rank.
fn execute_threads<B: Backend>(
    p: &Program,
    make: impl Fn(usize) -> symmem::Result<B> + Sync,
) -> Observed {
    let n = p.world;
    let steps: Mutex<Vec<Vec<(usize, Seen)>>> = Mutex::new((0..n).map(|_| Vec::new()).collect());
    let finalized: Mutex<Vec<Option<Plain<()>>>> = Mutex::new((0..n).map(|_| None).collect());
    let panics: Mutex<Vec<Option<String>>> = Mutex::new(vec![None; n]);
    let record =
        |rank: usize, step: usize, seen: Seen| steps.lock().unwrap()[rank].push((step, seen));
    let spawned = std::panic::catch_unwind(AssertUnwindSafe(|| {
        symmem::spawn_ranks(n, &config_of(p), make, |world| {
            let me = world.rank();
            let ran = std::panic::catch_unwind(AssertUnwindSafe(|| run_rank(p, &world, &record)));
            match ran {
                // Left: the world is dropped here.
                Ok(Ending::Left) => Ok(String::new()),
                Ok(Ending::Completed | Ending::Stopped) => {
                    finalized.lock().unwrap()[me] = Some(plain(world.finalize()));
                    Ok(String::new())
                }
                Err(payload) => {
                    let text = panic_text(&*payload);
                    if text != INJECTED {
                        panics.lock().unwrap()[me] = Some(text);
                    }
                    // The world is dropped while unwinding: the rank is lost to its peers.
                    std::panic::resume_unwind(payload)
                }
            }
        })
    }));
    let spawn = match spawned {
        Ok(Ok(ranks)) => Some(Ok(ranks
            .into_iter()
            .map(|r| r.err().map(|e| format!("{e:?}")).unwrap_or_default())
            .collect())),
        Ok(Err(e)) => Some(Err(format!("{e:?}"))),
        Err(_) => None,
    };
    Observed {
        steps: steps.into_inner().unwrap(),
        finalized: finalized.into_inner().unwrap(),
        panics: panics.into_inner().unwrap(),
        ended: Ended::Threads(spawn),
    }
}

/// How one rank's program ended.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ending {
    /// It made every operation: it finalizes.
    Completed,
    /// An error stopped it (recorded), or its skip's barrier failed: it finalizes.
    Stopped,
    /// It left (its fault): its world is dropped, not finalized.
    Left,
}

/// One rank's program, every result handed to `record` as it comes.
fn run_rank<B: Backend>(
    p: &Program,
    world: &World<B>,
    record: &impl Fn(usize, usize, Seen),
) -> Ending {
    let me = world.rank();
    let grid = Grid::new(p.blocks, p.target.tuning().threads);
    let coll = match Collectives::with_lamport_capacity(world, grid, LAMPORT_CAPACITY) {
        Ok(coll) => coll,
        Err(e) => {
            record(
                me,
                usize::MAX,
                Seen::Done {
                    result: Err(Failure::from(&e)),
                    took: Duration::ZERO,
                    ended: now(),
                },
            );
            return Ending::Stopped;
        }
    };
    let mut rank = Rank {
        seed: p.seed,
        world,
        coll,
        bufs: Vec::new(),
        lens: Vec::new(),
    };
    for (step, op) in p.ops.iter().enumerate() {
        let tag = step as u64 + 1;
        let mut extra = 0;
        if let Some(f) = p.fault.filter(|f| f.step == step && f.rank == me) {
            let injected = |result| Seen::Injected {
                kind: f.kind,
                at: now(),
                result,
            };
            match f.kind {
                FaultKind::Leave => {
                    record(me, step, injected(None));
                    return Ending::Left;
                }
                FaultKind::Panic => {
                    record(me, step, injected(None));
                    std::panic::panic_any(INJECTED);
                }
                FaultKind::Skip => {
                    // The rank skips the call and asks the world whether all is well (the
                    // call after a skip that the others' kernels wait in, not another
                    // device collective: see
                    // `a_rank_that_skips_a_collective_desynchronises_the_next_ones`).
                    let at = now();
                    let result = plain(world.barrier());
                    let ending = match result {
                        Ok(()) => Ending::Completed,
                        Err(_) => Ending::Stopped,
                    };
                    record(
                        me,
                        step,
                        Seen::Injected {
                            kind: f.kind,
                            at,
                            result: Some(result),
                        },
                    );
                    return ending;
                }
                FaultKind::Exhaust => {
                    let r = world.zeros::<u8>(world.heap_len()).map(drop);
                    record(me, step, injected(Some(plain(r))));
                    return Ending::Left;
                }
                FaultKind::Mismatch => {
                    record(me, step, injected(None));
                    extra = 1 + (p.seed as usize % 64);
                }
                FaultKind::Kill => {
                    // A process (whose `record` prints to its parent): the marker follows
                    // the record, and the rank goes on until the parent's kill lands.
                    record(me, step, injected(None));
                    println!("{KILL_MARKER}");
                    std::io::stdout().flush().expect("stdout");
                }
            }
        }
        let start = Instant::now();
        let result = plain(rank.run(op, tag, extra));
        let took = start.elapsed();
        let stop = match (&result, &p.expect[step][me]) {
            (Err(e), Expect::Refused(name)) => !e.is(name),
            (Err(_), _) => true,
            (Ok(_), _) => false,
        };
        record(
            me,
            step,
            Seen::Done {
                result,
                took,
                ended: now(),
            },
        );
        if stop {
            return Ending::Stopped;
        }
    }
    Ending::Completed
}

/// An error's variant name.
fn kind(e: &Error) -> String {
    let debug = format!("{e:?}");
    debug
        .split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_owned()
}

// ---------------------------------------------------------------------------------------
// Ranks as processes.

/// One line a child of a processes program prints for its parent, after [`RECORD`]: the
/// payload's length in bytes, a space, the payload (words, the last field of a failure or
/// a panic its free text). A line that a kill cut short never reads as a record.
#[derive(Debug, PartialEq)]
enum Record {
    /// What `run_rank` recorded at a step.
    Seen(usize, Seen),
    /// What `World::finalize` said.
    Finalized(Plain<()>),
    /// A panic other than the injected one.
    Panicked(String),
}

/// `text` on one line (a record is a line).
fn one_line(text: &str) -> String {
    text.replace('\n', "\\n")
}

/// A failure's words: its kind, the rank it names (`-` for none), the ranks it names
/// (joined by commas, `-` for none), then its text to the end.
fn encode_failure(f: &Failure) -> String {
    let rank = f.rank.map_or("-".into(), |r| r.to_string());
    let ranks = if f.ranks.is_empty() {
        "-".into()
    } else {
        let ranks: Vec<String> = f.ranks.iter().map(usize::to_string).collect();
        ranks.join(",")
    };
    format!("{} {rank} {ranks} {}", f.kind, one_line(&f.text))
}

/// `ok` and what `ok` makes of the value (if anything), or `err` and the failure.
fn encode_result<T>(result: &Plain<T>, ok: impl FnOnce(&T) -> String) -> String {
    match result {
        Ok(v) => match ok(v) {
            v if v.is_empty() => "ok".into(),
            v => format!("ok {v}"),
        },
        Err(f) => format!("err {}", encode_failure(f)),
    }
}

/// The number of reads, then each read: its values joined by commas, `_` if none.
fn encode_readouts(readouts: &Readouts) -> String {
    let mut out = readouts.len().to_string();
    for read in readouts {
        out.push(' ');
        if read.is_empty() {
            out.push('_');
        } else {
            let vals: Vec<String> = read.iter().map(i64::to_string).collect();
            out += &vals.join(",");
        }
    }
    out
}

/// A cursor over a record's words (what is left of it).
struct Words<'a>(&'a str);

impl<'a> Words<'a> {
    /// The next word, or why there is none.
    fn word(&mut self) -> Result<&'a str, String> {
        let (word, rest) = self.0.split_once(' ').unwrap_or((self.0, ""));
        if word.is_empty() {
            return Err("a word is missing".into());
        }
        self.0 = rest;
        Ok(word)
    }

    /// The next word as a number, or why it is none.
    fn number<T: std::str::FromStr>(&mut self) -> Result<T, String> {
        let word = self.word()?;
        word.parse()
            .map_err(|_| format!("{word:?} is not a number"))
    }

    /// Nothing is left.
    fn end(self) -> Result<(), String> {
        match self.0 {
            "" => Ok(()),
            rest => Err(format!("{rest:?} is left over")),
        }
    }
}

/// The failure [`encode_failure`] wrote (the rest of the record), or why it is none.
fn decode_failure(mut w: Words<'_>) -> Result<Failure, String> {
    let kind = w.word()?.to_owned();
    let rank = match w.word()? {
        "-" => None,
        rank => Some(
            rank.parse()
                .map_err(|_| format!("{rank:?} is not a rank"))?,
        ),
    };
    let ranks = match w.word()? {
        "-" => Vec::new(),
        ranks => ranks
            .split(',')
            .map(|r| r.parse().map_err(|_| format!("{r:?} is not a rank")))
            .collect::<Result<_, _>>()?,
    };
    Ok(Failure {
        kind,
        rank,
        ranks,
        text: w.0.to_owned(),
    })
}

/// The result [`encode_result`] wrote (the rest of the record; `ok` reads the value), or
/// why it is none.
fn decode_result<'a, T>(
    mut w: Words<'a>,
    ok: impl FnOnce(Words<'a>) -> Result<T, String>,
) -> Result<Plain<T>, String> {
    match w.word()? {
        "ok" => Ok(Ok(ok(w)?)),
        "err" => Ok(Err(decode_failure(w)?)),
        other => Err(format!("{other:?} is neither ok nor err")),
    }
}

/// The readouts [`encode_readouts`] wrote (the rest of the record), or why they are none.
fn decode_readouts(mut w: Words<'_>) -> Result<Readouts, String> {
    let reads: usize = w.number()?;
    let readouts = (0..reads)
        .map(|_| match w.word()? {
            "_" => Ok(Vec::new()),
            read => read
                .split(',')
                .map(|v| v.parse().map_err(|_| format!("{v:?} is not a value")))
                .collect(),
        })
        .collect::<Result<_, String>>()?;
    w.end()?;
    Ok(readouts)
}

impl Record {
    /// The record's line, [`RECORD`] first.
    fn encode(&self) -> String {
        let payload = match self {
            Record::Seen(
                step,
                Seen::Done {
                    result,
                    took,
                    ended,
                },
            ) => format!(
                "seen {step} done {} {ended} {}",
                took.as_nanos(),
                encode_result(result, encode_readouts)
            ),
            Record::Seen(step, Seen::Injected { kind, at, result }) => format!(
                "seen {step} injected {} {at} {}",
                kind.name(),
                result
                    .as_ref()
                    .map_or("none".into(), |r| encode_result(r, |()| String::new()))
            ),
            Record::Finalized(result) => {
                format!("finalized {}", encode_result(result, |()| String::new()))
            }
            Record::Panicked(text) => format!("panicked {}", one_line(text)),
        };
        format!("{RECORD}{} {payload}", payload.len())
    }

    /// The record of a line's text after [`RECORD`], or why it is none.
    fn decode(framed: &str) -> Result<Self, String> {
        let (len, payload) = framed.split_once(' ').ok_or("no length")?;
        let len: usize = len
            .parse()
            .map_err(|_| format!("{len:?} is not a length"))?;
        if payload.len() != len {
            return Err(format!("{} bytes of {len}", payload.len()));
        }
        let mut w = Words(payload);
        Ok(match w.word()? {
            "seen" => {
                let step = w.number()?;
                let seen = match w.word()? {
                    "done" => Seen::Done {
                        took: Duration::from_nanos(w.number()?),
                        ended: w.number()?,
                        result: decode_result(w, decode_readouts)?,
                    },
                    "injected" => {
                        let name = w.word()?;
                        let kind = FaultKind::named(name)
                            .ok_or_else(|| format!("{name:?} is no fault"))?;
                        let at = w.number()?;
                        let result = match w.0 {
                            "none" => None,
                            _ => Some(decode_result(w, Words::end)?),
                        };
                        Seen::Injected { kind, at, result }
                    }
                    other => return Err(format!("{other:?} is no result")),
                };
                Record::Seen(step, seen)
            }
            "finalized" => Record::Finalized(decode_result(w, Words::end)?),
            "panicked" => Record::Panicked(w.0.to_owned()),
            other => return Err(format!("{other:?} is no record")),
        })
    }
}

/// Runs `p` with its ranks as processes: children of this test binary (each in
/// [`run_child`]), the kill's victim SIGKILLed on its marker, every child reaped, those
/// left at [`PROGRAM_BOUND`] killed; their records read back.
fn execute_processes(p: &Program) -> Observed {
    let n = p.world;
    let kill = p
        .fault
        .filter(|f| f.kind == FaultKind::Kill)
        .map(|f| (f.rank, KILL_MARKER));
    let children = processes::spawn_ranks(
        CHILD_TEST,
        &format!("soak {}", p.seed),
        n,
        TIMEOUT,
        PROGRAM_BOUND,
        kill,
    );
    let mut steps: Vec<Vec<(usize, Seen)>> = (0..n).map(|_| Vec::new()).collect();
    let mut finalized = vec![None; n];
    let mut panics = vec![None; n];
    let mut unreadable = Vec::new();
    for (rank, child) in children.iter().enumerate() {
        let records: Vec<&str> = child
            .lines
            .iter()
            .filter_map(|line| line.split_once(RECORD).map(|(_, framed)| framed))
            .collect();
        for (i, framed) in records.iter().enumerate() {
            match Record::decode(framed) {
                Ok(Record::Seen(step, seen)) => steps[rank].push((step, seen)),
                Ok(Record::Finalized(result)) => finalized[rank] = Some(result),
                Ok(Record::Panicked(text)) => panics[rank] = Some(text),
                // The kill may cut the victim's last line short.
                Err(_) if child.killed.is_some() && i + 1 == records.len() => {}
                Err(why) => {
                    let start: String = framed.chars().take(200).collect();
                    unreadable.push((rank, format!("{why}: {start}")));
                }
            }
        }
    }
    Observed {
        steps,
        finalized,
        panics,
        ended: Ended::Processes {
            children,
            unreadable,
        },
    }
}

/// What a child process of this file does, by its mode: `soak SEED` ([`run_program`]),
/// or a regression's part (`hub-panics`: [`hub_panics_child`]).
fn run_child(mode: &str) -> ! {
    quiet_injected_panics();
    if mode == "hub-panics" {
        hub_panics_child();
    }
    let seed = mode
        .strip_prefix("soak ")
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| panic!("bad child mode {mode:?}"));
    run_program(seed)
}

/// A rank of the processes program of seed `seed`: regenerates the program, joins its
/// world, runs its rank printing every record, finalizes (unless it left), and exits: 0
/// where it ran to its end or left, [`EXIT_ERROR`] where it ended with an error,
/// [`EXIT_INJECTED_PANIC`] or [`EXIT_PANIC`] where it panicked (its world dropped while
/// unwinding, as a thread rank's is), and as `exit_child` says where its world did not
/// form.
fn run_program(seed: u64) -> ! {
    let p = generate(seed, Launcher::Processes);
    let joined = UnixBootstrap::from_env()
        .and_then(|bootstrap| World::new(Box::new(bootstrap), Cpu::new(), &config_of(&p)));
    let world = match joined {
        Ok(world) => world,
        Err(e) => processes::exit_child(&Err(e)),
    };
    let emit = |record: Record| println!("{}", record.encode());
    let ran = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let ending = run_rank(&p, &world, &|_, step, seen| emit(Record::Seen(step, seen)));
        (ending, world)
    }));
    let code = match ran {
        Ok((Ending::Left, world)) => {
            drop(world);
            0
        }
        Ok((ending, world)) => {
            let finalized = plain(world.finalize());
            let failed = ending == Ending::Stopped || finalized.is_err();
            emit(Record::Finalized(finalized));
            if failed { EXIT_ERROR } else { 0 }
        }
        Err(payload) => match panic_text(&*payload) {
            text if text == INJECTED => EXIT_INJECTED_PANIC,
            text => {
                emit(Record::Panicked(text));
                EXIT_PANIC
            }
        },
    };
    std::io::stdout().flush().expect("stdout");
    std::process::exit(code)
}

// ---------------------------------------------------------------------------------------
// The oracle.

#[derive(Default)]
struct Stats {
    programs: u64,
    ops: u64,
    faults: BTreeMap<&'static str, u64>,
    errors: BTreeMap<String, u64>,
    wrong: u64,
    hangs: u64,
    slow_errors: u64,
    /// Processes: kill victims that died of the parent's SIGKILL (the others ended first).
    kills_landed: u64,
    failures: Vec<String>,
}

impl Stats {
    fn add(&mut self, other: Stats) {
        self.programs += other.programs;
        self.ops += other.ops;
        for (k, v) in other.faults {
            *self.faults.entry(k).or_default() += v;
        }
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.wrong += other.wrong;
        self.hangs += other.hangs;
        self.slow_errors += other.slow_errors;
        self.kills_landed += other.kills_landed;
        self.failures.extend(other.failures);
    }

    fn table(&self, elapsed: Duration) -> String {
        let mut t = format!(
            "fault soak: {} programs, {} operations (rank-calls) in {:.1?}\n",
            self.programs, self.ops, elapsed
        );
        t += "  faults injected:";
        for (k, v) in &self.faults {
            t += &format!(" {k} {v},");
        }
        if let Some(kills) = self.faults.get("kill") {
            t += &format!(
                " ({} of {kills} kills landed before the victim's end)",
                self.kills_landed
            );
        }
        t += "\n  errors by type:";
        for (k, v) in &self.errors {
            t += &format!(" {k} {v},");
        }
        t += &format!(
            "\n  wrong answers: {}\n  hangs: {}\n  slow errors: {}\n  failing programs: {}\n",
            self.wrong,
            self.hangs,
            self.slow_errors,
            self.failures.len()
        );
        t
    }
}

/// An error's name for the table: `PeerLost` says whom it names (the faulty rank, another,
/// or none).
fn label(e: &Failure, fault: Option<Fault>) -> String {
    let named = match (e.rank, fault) {
        (None, _) => "none",
        (Some(r), Some(f)) if r == f.rank => "faulty",
        _ => "other",
    };
    match e.kind.as_str() {
        "PeerLost" | "WaitTimedOut" => format!("{}({named})", e.kind),
        _ => e.kind.clone(),
    }
}

/// The ranks an agreement names when rank `victim`'s ledger differs (the majority's
/// view; in a tie, the group of rank 0 is the reference).
fn mismatch_names(world: usize, victim: usize) -> Vec<usize> {
    if world == 2 { vec![1] } else { vec![victim] }
}

/// Checks `seen` against `p`'s model; returns the statistics and adds a failure line
/// for everything wrong.
fn check(p: &Program, seen: &Observed) -> Stats {
    let mut s = Stats {
        programs: 1,
        ..Stats::default()
    };
    let fail = |s: &mut Stats, why: String| {
        s.failures.push(format!("seed {}: {why}", p.seed));
    };
    if let Some(f) = p.fault {
        *s.faults.entry(f.kind.name()).or_default() += 1;
    }
    for (rank, text) in seen.panics.iter().enumerate() {
        if let Some(text) = text {
            fail(&mut s, format!("rank {rank} panicked: {text}"));
        }
    }
    match &seen.ended {
        Ended::Threads(spawn) => check_threads_ended(p, spawn, &mut s),
        Ended::Processes {
            children,
            unreadable,
        } => {
            for (rank, why) in unreadable {
                fail(
                    &mut s,
                    format!("rank {rank} printed an unreadable record: {why}"),
                );
            }
            check_processes_ended(p, seen, children, &mut s);
        }
    }
    let fault_step = p.fault.map_or(usize::MAX, |f| f.step);
    // A mismatch is reported at the first agreement after it, to every rank.
    let mismatch_at = p
        .fault
        .filter(|f| f.kind == FaultKind::Mismatch)
        .and_then(|f| (f.step..p.ops.len()).find(|&k| p.agreements[k]));
    let mut mismatch_seen = vec![false; p.world];
    // When the fault was injected: no error may come before.
    let injected_at = seen
        .steps
        .iter()
        .flatten()
        .find_map(|(_, seen)| match seen {
            Seen::Injected { at, .. } => Some(*at),
            Seen::Done { .. } => None,
        });
    for (rank, steps) in seen.steps.iter().enumerate() {
        let last = steps.len().saturating_sub(1);
        for (i, (step, seen_here)) in steps.iter().enumerate() {
            let (step, seen_here) = (*step, seen_here);
            let (result, took, ended) = match seen_here {
                Seen::Done {
                    result,
                    took,
                    ended,
                } => (result, took, ended),
                Seen::Injected {
                    kind: FaultKind::Exhaust,
                    result: Some(r),
                    ..
                } => {
                    if !matches!(r, Err(e) if e.is("OutOfHeap")) {
                        fail(
                            &mut s,
                            format!("rank {rank}: exhausting the heap gave {r:?}"),
                        );
                    }
                    continue;
                }
                Seen::Injected {
                    kind: FaultKind::Skip,
                    result: Some(r),
                    ..
                } => {
                    // The skipper's barrier: the others never made the call it skipped.
                    match r {
                        Ok(()) => {
                            fail(&mut s, format!("rank {rank} skipped step {step} unnoticed"))
                        }
                        Err(e) => {
                            *s.errors.entry(label(e, p.fault)).or_default() += 1;
                            let f = p.fault.expect("a skip");
                            let ok = match e.kind.as_str() {
                                "PeerLost" | "PeerFailed" => true,
                                "CollectiveMismatch" => e.ranks == mismatch_names(p.world, f.rank),
                                _ => false,
                            };
                            if !ok {
                                fail(&mut s, format!("rank {rank}'s barrier after its skip: {e}"));
                            }
                        }
                    }
                    continue;
                }
                Seen::Injected { .. } => continue,
            };
            if step == usize::MAX {
                fail(&mut s, format!("rank {rank}: Collectives::new: {result:?}"));
                continue;
            }
            s.ops += 1;
            let expected = &p.expect[step][rank];
            let what = || format!("rank {rank}, step {step} ({:?})", p.ops[step]);
            match (result, expected) {
                (Ok(got), Expect::Ok(want)) if got == want => {}
                (Ok(got), Expect::Ok(want)) => {
                    s.wrong += 1;
                    fail(
                        &mut s,
                        format!("WRONG ANSWER at {}: got {got:?}, model {want:?}", what()),
                    );
                }
                (Ok(got), Expect::Refused(name)) => {
                    s.wrong += 1;
                    fail(
                        &mut s,
                        format!("{} succeeded ({got:?}), model says {name}", what()),
                    );
                }
                (Err(e), expected) => {
                    *s.errors.entry(label(e, p.fault)).or_default() += 1;
                    if matches!(expected, Expect::Refused(name) if e.is(name)) {
                        continue;
                    }
                    // A sudden fault reaches its peers wherever they are (even a step
                    // behind); the others act in program order.
                    let before = match p.fault {
                        None => true,
                        Some(f) => {
                            injected_at.is_none_or(|at| *ended < at)
                                || (!f.kind.is_sudden() && step < fault_step)
                        }
                    };
                    if before {
                        fail(&mut s, format!("{} failed before the fault: {e}", what()));
                        continue;
                    }
                    if i != last {
                        fail(&mut s, format!("{} went on after {e}", what()));
                    }
                    if *took > p.target.tuning().error_bound {
                        s.slow_errors += 1;
                        fail(&mut s, format!("{} took {took:?} to fail with {e}", what()));
                    }
                    let f = p.fault.expect("an error after a fault");
                    let allowed = match f.kind {
                        FaultKind::Mismatch => {
                            let ok = e.is("CollectiveMismatch")
                                && e.ranks == mismatch_names(p.world, f.rank)
                                && Some(step) == mismatch_at;
                            mismatch_seen[rank] |= ok;
                            ok
                        }
                        FaultKind::Leave
                        | FaultKind::Panic
                        | FaultKind::Exhaust
                        | FaultKind::Kill => {
                            (e.is("PeerLost") && e.rank == Some(f.rank))
                            // A barrier wait that saw a survivor give up because of the
                            // fault, before this rank heard of the fault itself.
                                || (e.is("PeerFailed") && !e.ranks.contains(&rank))
                        }
                        // The others wait for the skipper on the device, or agree with
                        // its barrier (a collective's first use of new buffers).
                        FaultKind::Skip => match e.kind.as_str() {
                            "PeerLost" | "WaitTimedOut" | "PeerFailed" => true,
                            "CollectiveMismatch" => e.ranks == mismatch_names(p.world, f.rank),
                            _ => false,
                        },
                    };
                    if !allowed {
                        fail(
                            &mut s,
                            format!("{} after fault {f:?}: unexpected {e}", what()),
                        );
                    }
                }
            }
        }
        // A rank that ran to the end finalizes; in a healthy program, without error.
        if let Some(Some(Err(e))) = seen.finalized.get(rank)
            && p.fault.is_none()
        {
            fail(&mut s, format!("rank {rank}: finalize: {e}"));
        }
    }
    if let Some(at) = mismatch_at {
        let f = p.fault.expect("a mismatch");
        for (rank, seen) in mismatch_seen.iter().enumerate() {
            if !seen {
                fail(
                    &mut s,
                    format!(
                        "rank {rank} was not told of rank {}'s mismatch at step {at}",
                        f.rank
                    ),
                );
            }
        }
    }
    s
}

/// The threads launcher's end: every world formed and `spawn_ranks` returned, unless the
/// injected panic went through it.
fn check_threads_ended(p: &Program, spawn: &Option<Result<Vec<String>, String>>, s: &mut Stats) {
    let mut fail = |why: String| s.failures.push(format!("seed {}: {why}", p.seed));
    match spawn {
        Some(Err(e)) => fail(format!("spawn_ranks failed: {e}")),
        Some(Ok(ranks)) => {
            for (rank, e) in ranks.iter().enumerate() {
                if !e.is_empty() {
                    fail(format!("rank {rank}'s world failed: {e}"));
                }
            }
        }
        None if p.fault.is_none_or(|f| f.kind != FaultKind::Panic) => {
            fail("spawn_ranks panicked with no injected panic".into());
        }
        None => {}
    }
}

/// The processes launcher's end: every child exited by itself before [`PROGRAM_BOUND`]
/// (else it hung) and was reaped, or was the kill's victim and died of its SIGKILL; its
/// status is 0, or says it ended with an error (its records or finalize show one), or
/// its injected panic. A rank that reached its kill printed the marker; one that died of
/// the parent's SIGKILL counts as a kill landed.
fn check_processes_ended(p: &Program, seen: &Observed, children: &[Outcome], s: &mut Stats) {
    for (rank, child) in children.iter().enumerate() {
        let faulty = p.fault.filter(|f| f.rank == rank).map(|f| f.kind);
        let reached_kill = seen.steps[rank].iter().any(|(_, x)| {
            matches!(
                x,
                Seen::Injected {
                    kind: FaultKind::Kill,
                    ..
                }
            )
        });
        if reached_kill && !child.lines.iter().any(|line| line.contains(KILL_MARKER)) {
            s.failures.push(format!(
                "seed {}: rank {rank} reached its kill and printed no marker",
                p.seed
            ));
        }
        let killed = child.killed.is_some() && child.status.and_then(|st| st.signal()) == Some(9);
        if faulty == Some(FaultKind::Kill) && killed {
            s.kills_landed += 1;
        }
        // An error that stopped it (not a refusal the model predicts), or finalize's.
        let stopped = |(step, seen): &(usize, Seen)| match seen {
            Seen::Done { result: Err(e), .. } => p
                .expect
                .get(*step)
                .is_none_or(|expect| !matches!(&expect[rank], Expect::Refused(name) if e.is(name))),
            Seen::Injected { result, .. } => matches!(result, Some(Err(_))),
            Seen::Done { .. } => false,
        };
        let ended_with_error = seen.steps[rank].last().is_some_and(stopped)
            || matches!(seen.finalized[rank], Some(Err(_)));
        let why = match child.status {
            None => {
                s.hangs += 1;
                Some(format!("HANG: ran past {PROGRAM_BOUND:?} (killed then)"))
            }
            Some(status) => match (status.code(), status.signal()) {
                (Some(0), _) => None,
                (Some(EXIT_ERROR), _) if ended_with_error => None,
                (Some(EXIT_INJECTED_PANIC), _) if faulty == Some(FaultKind::Panic) => None,
                _ if faulty == Some(FaultKind::Kill) && killed => None,
                _ => Some(format!("ended with {status}")),
            },
        };
        if let Some(why) = why {
            // What it printed besides its records (a panic's message, `CHILD-ERROR`).
            let said: Vec<&str> = child
                .lines
                .iter()
                .filter(|line| !line.contains(RECORD))
                .map(String::as_str)
                .collect();
            s.failures.push(format!(
                "seed {}: rank {rank} (a process) {why} after {:?}; it said:\n{}",
                p.seed,
                child.after,
                said.join("\n")
            ));
        }
    }
}

/// Runs `p` with `launcher`, bounded by its backend's `program_bound` ([`Tuning`]):
/// threads on a thread of their own (`None` for a hang), processes as children killed at
/// [`PROGRAM_BOUND`] (a hang shows in their ends).
fn run_bounded(p: &Program, launcher: Launcher) -> Option<Observed> {
    let target = match launcher {
        Launcher::Processes => return Some(execute_processes(p)),
        Launcher::Threads(target) => target,
    };
    let (tx, rx) = mpsc::channel();
    let program = p.clone();
    std::thread::Builder::new()
        .name(format!("soak-{}", p.seed))
        .spawn(move || {
            let seen = match target {
                Target::Cpu => execute_threads(&program, |_| Ok(Cpu::new())),
                Target::Cuda => execute_threads(&program, Cuda::for_rank),
            };
            let _ = tx.send(seen);
        })
        .expect("a program thread");
    rx.recv_timeout(target.tuning().program_bound).ok()
}

/// A tiny healthy program on `target`, after a faulty one: a new world works.
fn healthy_world_works(target: Target) -> Result<(), String> {
    fn run<B: Backend>(target: Target, make: impl Fn(usize) -> symmem::Result<B> + Sync) -> String {
        let r = symmem::spawn_ranks(2, &config_for(target), make, |world: World<B>| {
            let coll = Collectives::new(&world)?;
            let src = world.from_slice(&[world.rank() as i32 + 1; 8])?;
            let dst = world.zeros::<i32>(8)?;
            coll.all_reduce(&dst, &src, 8, ReduceOp::Sum, Algorithm::Auto)?;
            world.read(&dst)
        });
        format!("{r:?}")
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = match target {
            Target::Cpu => run(target, |_| Ok(Cpu::new())),
            Target::Cuda => run(target, Cuda::for_rank),
        };
        let _ = tx.send(r);
    });
    match rx.recv_timeout(target.tuning().healthy_bound) {
        Ok(r) if r == "Ok([Ok([3, 3, 3, 3, 3, 3, 3, 3]), Ok([3, 3, 3, 3, 3, 3, 3, 3])])" => Ok(()),
        Ok(r) => Err(format!("a healthy world after it gave {r}")),
        Err(_) => Err("a healthy world after it hung".into()),
    }
}

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
