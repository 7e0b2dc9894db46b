//! Running a program: one rank's operations over symmem's public API, each result made
//! plain ([`Failure`]) and timed.

use super::*;

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

    pub(crate) fn buf(&self, slot: usize) -> &AnyBuf<B> {
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
pub(crate) struct Failure {
    /// The error's variant name ([`kind`]).
    pub(crate) kind: String,
    /// The rank a `PeerLost` names, or the peer a `WaitTimedOut` waited for.
    pub(crate) rank: Option<usize>,
    /// The ranks a `CollectiveMismatch` or a `PeerFailed` names.
    pub(crate) ranks: Vec<usize>,
    /// The error's `Debug` text.
    pub(crate) text: String,
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
    pub(crate) fn is(&self, kind: &str) -> bool {
        self.kind == kind
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A result as the oracle sees it.
pub(crate) type Plain<T> = Result<T, Failure>;

/// `result`, its error made a [`Failure`].
pub(crate) fn plain<T>(result: symmem::Result<T>) -> Plain<T> {
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
pub(crate) enum Seen {
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
pub(crate) enum Ended {
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
pub(crate) struct Observed {
    pub(crate) steps: Vec<Vec<(usize, Seen)>>,
    pub(crate) finalized: Vec<Option<Plain<()>>>,
    /// A panic other than the injected one, by rank.
    pub(crate) panics: Vec<Option<String>>,
    pub(crate) ended: Ended,
}

pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".into())
}

pub(crate) fn quiet_injected_panics() {
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
pub(crate) fn config() -> Config {
    config_for(Target::Cpu)
}

/// A world's configuration on `target`: its heap, its timeout and its wait deadline.
pub(crate) fn config_for(target: Target) -> Config {
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
pub(crate) fn config_of(p: &Program) -> Config {
    Config {
        ranks_per_node: p.per_node,
        ..config_for(p.target)
    }
}

/// Runs `p` with its ranks as threads (on this thread), each on the backend `make` makes
/// for its rank.
pub(crate) fn execute_threads<B: Backend>(
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
pub(crate) enum Ending {
    /// It made every operation: it finalizes.
    Completed,
    /// An error stopped it (recorded), or its skip's barrier failed: it finalizes.
    Stopped,
    /// It left (its fault): its world is dropped, not finalized.
    Left,
}

/// One rank's program, every result handed to `record` as it comes.
pub(crate) fn run_rank<B: Backend>(
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
