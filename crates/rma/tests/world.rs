//! The crate's own multi-rank tests, small enough for Miri: a tiny launcher (one OS
//! thread per GPU thread, a `std::sync::Barrier` per block) and heaps carved from one
//! allocation, so translation stays inside the pointer's provenance.
//!
//! `cargo miri test -p symmem-rma` runs these with world sizes 1..=3 and short
//! buffers; natively they also run at world 4 and 8 with longer ones.
#![allow(clippy::needless_range_loop)] // rank-indexed loops read best in tests

use std::sync::Barrier;
use symmem_arch::Arch;
use symmem_arch::host::{BlockBarrier, HostThread};
use symmem_rma::collectives::{self, ReduceOp, Reducible};
use symmem_rma::{AtomicOp, Cmp, Order, PeerBases, Scope, SignalOp, Team, U32x4, bf16, f16};

struct StdBarrier(Barrier);
impl BlockBarrier for StdBarrier {
    fn wait(&self) {
        self.0.wait();
    }
}

fn launch(blocks: u32, threads: u32, body: &(dyn Fn(&HostThread<'_>) + Sync)) {
    let barriers: Vec<StdBarrier> = (0..blocks)
        .map(|_| StdBarrier(Barrier::new(threads as usize)))
        .collect();
    std::thread::scope(|s| {
        for (b, barrier) in barriers.iter().enumerate() {
            for t in 0..threads {
                s.spawn(move || {
                    // SAFETY: each (block, thread) once, in range, all concurrent.
                    let arch = unsafe { HostThread::new(t, b as u32, threads, blocks, barrier) };
                    body(&arch);
                });
            }
        }
    });
}

#[derive(Clone, Copy)]
struct P(*mut u8);
// SAFETY: the tests partition or synchronise every access.
unsafe impl Send for P {}
// SAFETY: as above.
unsafe impl Sync for P {}
impl P {
    fn at(self, off: usize) -> *mut u8 {
        self.0.wrapping_add(off)
    }
}

struct World {
    ranks: usize,
    heap: usize,
    base: P,
    bases: Vec<u64>,
    _mem: Vec<U32x4>,
}

impl World {
    fn new(ranks: usize, heap: usize) -> Self {
        let heap = heap.next_multiple_of(16);
        let stride = heap + 32;
        let mut mem = vec![U32x4::splat(0); (stride * ranks + 16 * ranks) / 16 + 1];
        let base = mem.as_mut_ptr().cast::<u8>();
        // Rank r at r * stride + 16 r: distinct, uneven deltas.
        let bases = (0..ranks)
            .map(|r| base.wrapping_add(r * stride + 16 * r).addr() as u64)
            .collect();
        Self {
            ranks,
            heap,
            base: P(base),
            bases,
            _mem: mem,
        }
    }
    fn heap(&self, r: usize) -> P {
        P(self.base.at(self.bases[r] as usize - self.base.0.addr()))
    }
    #[allow(clippy::mut_from_ref)]
    fn bytes(&self, r: usize) -> &mut [u8] {
        // SAFETY: inside `_mem`; called only while no kernel runs.
        unsafe { std::slice::from_raw_parts_mut(self.heap(r).0, self.heap) }
    }
    fn run(
        &self,
        blocks: u32,
        threads: u32,
        body: &(dyn Fn(&HostThread<'_>, &Team<'_>, usize) + Sync),
    ) {
        std::thread::scope(|s| {
            for rank in 0..self.ranks {
                let bases = &self.bases;
                s.spawn(move || {
                    let team = Team::new(PeerBases::new(bases), rank).unwrap();
                    launch(blocks, threads, &|arch| body(arch, &team, rank));
                });
            }
        });
    }
}

fn worlds() -> &'static [usize] {
    if cfg!(miri) {
        // Miri interprets every thread: one rank, and three (a peer on each side, a world
        // that is not a power of two), cover what two would.
        &[1, 3]
    } else {
        &[1, 2, 3, 4, 8]
    }
}

fn pat(r: usize, i: usize) -> u8 {
    (i * 7 + r * 29 + 1) as u8
}

#[test]
fn put_get_head_tail_and_relative_alignments() {
    let sizes: &[usize] = if cfg!(miri) {
        &[0, 1, 15, 16, 17, 37]
    } else {
        &[0, 1, 15, 16, 17, 4095]
    };
    for &world in worlds() {
        for &n in sizes {
            for (dof, sof) in [(0, 0), (3, 3), (4, 12), (2, 6), (0, 2), (1, 6)] {
                let reg = n + 32;
                let w = World::new(world, 2 * reg);
                for r in 0..world {
                    for i in 0..n {
                        w.bytes(r)[sof + i] = pat(r, i);
                    }
                }
                w.run(1, 3, &|arch, team, r| {
                    let h = w.heap(r);
                    // SAFETY: in range; each destination written by one rank.
                    unsafe { team.put_block(arch, h.at(reg + dof), h.at(sof), n, (r + 1) % world) };
                });
                for t in 0..world {
                    let from = (t + world - 1) % world;
                    for i in 0..n {
                        assert_eq!(
                            w.bytes(t)[reg + dof + i],
                            pat(from, i),
                            "world {world} n {n} +{dof}/{sof} byte {i}"
                        );
                    }
                    assert_eq!(w.bytes(t)[reg + dof + n], 0);
                    if dof > 0 {
                        assert_eq!(w.bytes(t)[reg + dof - 1], 0);
                    }
                }
            }
        }
    }
}

#[test]
fn atomics_every_op_type_order_scope() {
    let w = World::new(2, 64);
    let orders = [
        Order::Relaxed,
        Order::Acquire,
        Order::Release,
        Order::AcqRel,
        Order::SeqCst,
    ];
    let scopes = [Scope::Block, Scope::Device, Scope::System];
    w.run(1, 1, &|_, team, r| {
        if r != 0 {
            return;
        }
        let p = w.heap(0).at(0).cast::<i64>();
        let q = w.heap(0).at(8).cast::<u32>();
        for order in orders {
            for scope in scopes {
                for op in AtomicOp::ALL {
                    // SAFETY: aligned words in rank 1's heap; only this thread touches them.
                    unsafe {
                        team.atomic_store(p, -5, 1, order, scope);
                        let old = team.atomic_fetch(op, p, 3, 1, order, scope);
                        assert_eq!(old, -5);
                        let want = match op {
                            AtomicOp::Add => -2,
                            AtomicOp::Sub => -8,
                            AtomicOp::Xchg => 3,
                            AtomicOp::And => -5 & 3,
                            AtomicOp::Or => -5 | 3,
                            AtomicOp::Xor => -5 ^ 3,
                            AtomicOp::Min => -5,
                            AtomicOp::Max => 3,
                        };
                        assert_eq!(team.atomic_load(p, 1, order, scope), want);
                        team.atomic_store(q, u32::MAX - 1, 1, order, scope);
                        team.atomic(op, q, 3, 1, order, scope);
                        let want = match op {
                            AtomicOp::Add => 1,
                            AtomicOp::Sub => u32::MAX - 4,
                            AtomicOp::Xchg => 3,
                            AtomicOp::And => (u32::MAX - 1) & 3,
                            AtomicOp::Or => u32::MAX,
                            AtomicOp::Xor => (u32::MAX - 1) ^ 3,
                            AtomicOp::Min => 3,
                            AtomicOp::Max => u32::MAX - 1,
                        };
                        assert_eq!(team.atomic_load(q, 1, order, scope), want);
                    }
                }
                // SAFETY: as above.
                unsafe {
                    team.atomic_store(q, 7, 1, order, scope);
                    assert_eq!(team.atomic_compare_exchange(q, 6, 9, 1, order, scope), 7);
                    assert_eq!(team.atomic_compare_exchange(q, 7, 9, 1, order, scope), 7);
                    assert_eq!(team.atomic_load(q, 1, order, scope), 9);
                }
            }
        }
    });
    // Rank 1's heap holds the last values; rank 0's is untouched.
    assert_eq!(&w.bytes(0)[..16], &[0; 16]);
    assert_eq!(u32::from_ne_bytes(w.bytes(1)[8..12].try_into().unwrap()), 9);
}

#[test]
fn contended_counters_on_every_peer() {
    let (threads, reps) = if cfg!(miri) { (2, 3) } else { (4, 200) };
    for &world in worlds() {
        let w = World::new(world, 64);
        w.run(1, threads, &|_, team, r| {
            for to in 0..world {
                for _ in 0..reps {
                    // SAFETY: an aligned counter in every heap, accessed only atomically.
                    unsafe {
                        team.atomic_add(w.heap(r).at(0).cast::<u64>(), 1, to);
                        team.atomic_fetch_sub(w.heap(r).at(8).cast::<i32>(), 2, to);
                    }
                }
            }
        });
        for t in 0..world {
            let b = w.bytes(t);
            let n = (world * threads as usize * reps) as u64;
            assert_eq!(u64::from_ne_bytes(b[..8].try_into().unwrap()), n);
            assert_eq!(
                i32::from_ne_bytes(b[8..12].try_into().unwrap()),
                -2 * n as i32
            );
        }
    }
}

#[test]
fn put_with_signal_then_wait_and_barrier() {
    let n = if cfg!(miri) { 40 } else { 4000 };
    for &world in worlds() {
        let w = World::new(world, 2 * n + 64 + 8 * world);
        let sig_at = 2 * n + 32;
        for r in 0..world {
            for i in 0..n {
                w.bytes(r)[i] = pat(r, i);
            }
        }
        w.run(1, 3, &|arch, team, r| {
            let h = w.heap(r);
            let to = (r + 1) % world;
            let sig = h.at(sig_at).cast::<u64>();
            // SAFETY: in range; the signal is an aligned word in every heap.
            unsafe {
                team.put_with_signal_block(
                    arch,
                    h.at(n + 3),
                    h.at(0),
                    n,
                    sig,
                    SignalOp::Set,
                    7,
                    to,
                );
                if arch.thread_id() == 0 {
                    assert_eq!(team.signal_wait_until(sig, Cmp::Eq, 7), 7);
                }
                arch.sync_block();
                // Every thread sees the data its predecessor put.
                let from = (r + world - 1) % world;
                for i in 0..n {
                    assert_eq!(h.at(n + 3 + i).read(), pat(from, i));
                }
                // Two barriers over the words after the signal.
                let bar = h.at(sig_at + 8).cast::<u64>();
                assert!(team.barrier_block(arch, bar));
                team.signal(sig, SignalOp::Add, 1, to);
                assert!(team.barrier_block(arch, bar));
                if arch.thread_id() == 0 {
                    // 7 + the three threads of the predecessor's block.
                    assert_eq!(team.signal_wait_until(sig, Cmp::Ge, 10), 10);
                }
            }
        });
        for t in 0..world {
            let b = w.bytes(t);
            for r in 0..world {
                let at = sig_at + 8 + 8 * r;
                assert_eq!(
                    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap()),
                    2,
                    "barrier word"
                );
            }
        }
    }
}

fn reduce_case<T: Reducible + PartialEq + std::fmt::Debug + bytemuck::Pod>(
    world: usize,
    op: ReduceOp,
    count: usize,
    value: impl Fn(usize, usize) -> T + Sync,
) {
    let bytes = count * size_of::<T>();
    let w = World::new(world, 3 * bytes + 64 + 8 * world * 2);
    let sig_at = (3 * bytes + 16).next_multiple_of(16);
    for r in 0..world {
        let b = w.bytes(r);
        for i in 0..count {
            b[i * size_of::<T>()..(i + 1) * size_of::<T>()]
                .copy_from_slice(bytemuck::bytes_of(&value(r, i)));
        }
    }
    w.run(2, 2, &|arch, team, r| {
        let h = w.heap(r);
        let sig = h.at(sig_at).cast::<u64>();
        // SAFETY: buffers in range, symmetric, aligned; the signal array has
        // world * blocks words.
        unsafe {
            collectives::all_reduce_one_shot(
                arch,
                team,
                op,
                h.at(bytes).cast::<T>(),
                h.at(0).cast::<T>(),
                count,
                sig,
            );
            collectives::all_reduce_two_shot(
                arch,
                team,
                op,
                h.at(2 * bytes).cast::<T>(),
                h.at(0).cast::<T>(),
                count,
                sig,
            );
        }
    });
    for t in 0..world {
        for i in 0..count {
            let mut acc = value(0, i).widen();
            for r in 1..world {
                acc = T::combine(op, acc, value(r, i).widen());
            }
            let want = T::narrow(acc);
            let b = w.bytes(t);
            let one: T =
                bytemuck::pod_read_unaligned(&b[bytes + i * size_of::<T>()..][..size_of::<T>()]);
            let two: T = bytemuck::pod_read_unaligned(
                &b[2 * bytes + i * size_of::<T>()..][..size_of::<T>()],
            );
            assert_eq!(
                one, want,
                "one-shot {op:?} world {world} rank {t} element {i}"
            );
            assert_eq!(
                two, want,
                "two-shot {op:?} world {world} rank {t} element {i}"
            );
        }
    }
}

#[test]
fn all_reduce_small() {
    let count = if cfg!(miri) { 9 } else { 1000 };
    for &world in worlds() {
        for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
            reduce_case::<i32>(world, op, count, |r, i| {
                (i as i32 * 13 - r as i32 * 1001) ^ 0x55
            });
            if !cfg!(miri) {
                reduce_case::<f32>(world, op, count, |r, i| (i as f32 * 0.25) - r as f32 * 1.5);
                reduce_case::<bf16>(world, op, count, |r, i| {
                    bf16::from_f32(i as f32 - r as f32 * 3.0)
                });
                reduce_case::<f16>(world, op, count, |r, i| {
                    f16::from_f32(i as f32 * 0.125 - r as f32 * 3.0)
                });
                reduce_case::<f64>(world, op, count, |r, i| (i as f64 / 3.0) - r as f64 * 1.5);
            }
        }
    }
}

/// The reductions' rounding of their `f32` accumulator to `bf16` and `f16`: to nearest,
/// ties to even, NaN and infinity kept.
#[test]
fn half_rounding() {
    let b = |v: f32| <bf16 as Reducible>::narrow(v).to_bits();
    assert_eq!(b(1.0), 0x3f80);
    assert_eq!(<bf16 as Reducible>::narrow(-2.0).widen(), -2.0);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
    assert_eq!(b(1.0 + 1.0 / 256.0), 0x3f80);
    // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (upper).
    assert_eq!(b(1.0 + 3.0 / 256.0), 0x3f82);
    assert!(<bf16 as Reducible>::narrow(f32::NAN).widen().is_nan());
    assert_eq!(
        <bf16 as Reducible>::narrow(f32::INFINITY).widen(),
        f32::INFINITY
    );
    let h = |v: f32| <f16 as Reducible>::narrow(v).to_bits();
    assert_eq!(h(1.0), 0x3c00);
    // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
    assert_eq!(h(1.0 + 1.0 / 2048.0), 0x3c00);
    // 1 + 3 * 2^-11: ties to even (upper, 1 + 2^-9).
    assert_eq!(h(1.0 + 3.0 / 2048.0), 0x3c02);
    // The smallest subnormal, and past the largest finite value.
    assert_eq!(h(2f32.powi(-24)), 0x0001);
    assert_eq!(h(65520.0), 0x7c00);
    assert!(<f16 as Reducible>::narrow(f32::NAN).widen().is_nan());
    assert_eq!(<f16 as Reducible>::narrow(-0.0).to_bits(), 0x8000);
}

/// A peer that gave up at a barrier poisons its arrival word and arrives no more: a wait
/// for an arrival it made before is satisfied, a wait for a later one gives up, and the
/// rank that gave up arrives at no later barrier. Found by the soak: a rank that lagged
/// one barrier behind failed it on the poison alone, though every peer had arrived. Every
/// thread of the block returns the same answer, the one whose wait passed too (the soak
/// found a collective whose entry barrier gave up still writing into its peers).
#[test]
fn a_poisoned_arrival_word_stands_for_the_arrivals_made_before_it() {
    use symmem_rma::watch::POISON;
    let w = World::new(2, 64);
    let sig = w.heap(0);
    let word = |r: usize, of: usize| {
        u64::from_le_bytes(w.bytes(r)[of * 8..of * 8 + 8].try_into().unwrap())
    };
    // Rank 1 arrived once, then gave up and poisoned its word on rank 0.
    w.bytes(0)[8..16].copy_from_slice(&(POISON | 1).to_le_bytes());
    let team = Team::new(PeerBases::new(&w.bases), 0).unwrap();
    let barrier = |passes: bool| {
        launch(1, 2, &|arch| {
            // SAFETY: `sig` is rank 0's copy of a 2-word symmetric array; one block uses
            // it.
            let passed = unsafe { team.barrier_block(arch, sig.at(0).cast()) };
            assert_eq!(passed, passes, "thread {}", arch.thread_id());
        })
    };
    barrier(true);
    assert_eq!(
        word(1, 0),
        1,
        "arrival 1 was satisfied: rank 0 did not poison its word"
    );
    // Thread 0's wait (for rank 0) passes, thread 1's gives up: both return false.
    barrier(false);
    assert_eq!(word(1, 0), POISON | 2, "arrival 2 gave up on the poison");
    assert_eq!(word(0, 0), POISON | 2);
    barrier(false);
    assert_eq!(
        word(1, 0),
        POISON | 2,
        "a rank that gave up arrives no more"
    );
}
