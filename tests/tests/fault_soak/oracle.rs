//! The oracle: every rank's results against the model, and what every process and thread
//! left behind.

use super::*;

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) programs: u64,
    pub(crate) ops: u64,
    pub(crate) faults: BTreeMap<&'static str, u64>,
    pub(crate) errors: BTreeMap<String, u64>,
    pub(crate) wrong: u64,
    pub(crate) hangs: u64,
    pub(crate) slow_errors: u64,
    /// Processes: kill victims that died of the parent's SIGKILL (the others ended first).
    pub(crate) kills_landed: u64,
    pub(crate) failures: Vec<String>,
}

impl Stats {
    pub(crate) fn add(&mut self, other: Stats) {
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

    pub(crate) fn table(&self, elapsed: Duration) -> String {
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
pub(crate) fn check(p: &Program, seen: &Observed) -> Stats {
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
pub(crate) fn run_bounded(p: &Program, launcher: Launcher) -> Option<Observed> {
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
pub(crate) fn healthy_world_works(target: Target) -> Result<(), String> {
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
