//! The generator: a random program of operations every rank makes in the same order,
//! with at most one fault.

use super::*;

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
pub(crate) fn generate(seed: u64, launcher: Launcher) -> Program {
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
