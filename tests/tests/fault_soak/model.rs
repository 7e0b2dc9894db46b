//! The model: every rank's memory as the program's operations leave it, and what each
//! operation reads back.

use super::*;

#[derive(Clone)]
pub(crate) struct MBuf {
    pub(crate) ty: Ty,
    pub(crate) len: usize,
    /// Every rank's copy.
    pub(crate) data: Vec<Vec<i64>>,
    agreed: bool,
}

#[derive(Clone)]
pub(crate) struct Model {
    pub(crate) seed: u64,
    pub(crate) n: usize,
    /// The world spans several (emulated) nodes: the barrier-free all-reduce is refused.
    pub(crate) nodes: bool,
    pub(crate) blocks: u64,
    pub(crate) bufs: Vec<Option<MBuf>>,
    /// Bytes of live buffers, and of dropped ones no barrier has released yet.
    pub(crate) live: usize,
    pub(crate) pending: usize,
}

pub(crate) fn bytes_of(ty: Ty, len: usize) -> usize {
    (ty.size() * len).next_multiple_of(256)
}

impl Model {
    pub(crate) fn buf(&self, slot: usize) -> &MBuf {
        self.bufs[slot].as_ref().expect("a live slot")
    }

    fn buf_mut(&mut self, slot: usize) -> &mut MBuf {
        self.bufs[slot].as_mut().expect("a live slot")
    }

    /// Every value of every buffer is held exactly by its element type.
    pub(crate) fn exact(&self) -> bool {
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
    pub(crate) fn apply(&mut self, op: &Op, tag: u64) -> (Vec<Expect>, bool) {
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

pub(crate) fn graph_tag(tag: u64, replay: usize) -> u64 {
    (tag << 8) | 0x80 | replay as u64
}
