//! Point operations (load/store of scalars and 16-byte vectors) and every atomic (op x
//! type x order x scope, fetch and non-fetch, cas) on a remote element, at every world
//! size, checked against a host model.
#![allow(clippy::needless_range_loop)] // rank-indexed loops read best in tests

mod rma_common;
use rma_common::*;
use symmem::Grid;
use symmem_rma::{AtomicInt, AtomicOp, Order, Scope, Team, U32x4};

const ONE: Grid = Grid {
    blocks: 1,
    threads: 1,
};

const ORDERS: [Order; 5] = [
    Order::Relaxed,
    Order::Acquire,
    Order::Release,
    Order::AcqRel,
    Order::SeqCst,
];
const SCOPES: [Scope; 3] = [Scope::Block, Scope::Device, Scope::System];

/// Rank r stores (r, peer) markers of every width into every peer at its own slot, then
/// every rank loads them all back.
fn load_store(world: usize) {
    // Slots per writer: u8 at +1 (unaligned heap offset), u32 at +4, u64 at +8, U32x4 at +16.
    let slot = 32;
    let w = World::new(world, slot * world + 64);
    w.run(ONE, |_, team, r| {
        let h = w.heap_ptr(r);
        for to in 0..world {
            let s = slot * r;
            // SAFETY: aligned slots owned by writer r on every rank.
            unsafe {
                team.store(h.add(s + 1), (r * 16 + to) as u8, to);
                team.store(
                    h.add(s + 4).cast::<u32>(),
                    0xdead_0000 | (r * 256 + to) as u32,
                    to,
                );
                team.store(
                    h.add(s + 8).cast::<u64>(),
                    u64::MAX - (r * 1000 + to) as u64,
                    to,
                );
                let v: U32x4 = bytemuck::cast([r as u32, to as u32, 7, !(r as u32)]);
                team.store(h.add(s + 16).cast::<U32x4>(), v, to);
            }
        }
    });
    w.run(ONE, |_, team, r| {
        let h = w.heap_ptr(r);
        for from in 0..world {
            for writer in 0..world {
                let s = slot * writer;
                // SAFETY: as above; the writers finished (the previous launch joined).
                unsafe {
                    assert_eq!(team.load(h.add(s + 1), from), (writer * 16 + from) as u8);
                    assert_eq!(
                        team.load(h.add(s + 4).cast::<u32>(), from),
                        0xdead_0000 | (writer * 256 + from) as u32
                    );
                    assert_eq!(
                        team.load(h.add(s + 8).cast::<u64>(), from),
                        u64::MAX - (writer * 1000 + from) as u64
                    );
                    let v = team.load(h.add(s + 16).cast::<U32x4>(), from).to_array();
                    assert_eq!(v, [writer as u32, from as u32, 7, !(writer as u32)]);
                }
            }
        }
    });
}

/// The model of `op`.
fn model<T: Copy + Ord + num::Wrapping>(op: AtomicOp, old: T, v: T) -> T {
    match op {
        AtomicOp::Add => old.wadd(v),
        AtomicOp::Sub => old.wsub(v),
        AtomicOp::Xchg => v,
        AtomicOp::And => old.and(v),
        AtomicOp::Or => old.or(v),
        AtomicOp::Xor => old.xor(v),
        AtomicOp::Min => old.min(v),
        AtomicOp::Max => old.max(v),
    }
}

mod num {
    pub trait Wrapping {
        fn wadd(self, v: Self) -> Self;
        fn wsub(self, v: Self) -> Self;
        fn and(self, v: Self) -> Self;
        fn or(self, v: Self) -> Self;
        fn xor(self, v: Self) -> Self;
    }
    macro_rules! imp {
        ($($t:ty)*) => {$(
            impl Wrapping for $t {
                fn wadd(self, v: Self) -> Self { self.wrapping_add(v) }
                fn wsub(self, v: Self) -> Self { self.wrapping_sub(v) }
                fn and(self, v: Self) -> Self { self & v }
                fn or(self, v: Self) -> Self { self | v }
                fn xor(self, v: Self) -> Self { self ^ v }
            }
        )*};
    }
    imp!(u32 i32 u64 i64);
}

/// Every (op, order, scope) on a `T` at rank `to`'s word at `p`, fetch and non-fetch,
/// against the model; values chosen to cross sign and wrap boundaries.
///
/// # Safety
/// `p` symmetric, aligned, touched by this thread only.
unsafe fn exercise<T>(team: &Team<'_>, p: *mut T, to: usize, vals: &[T]) -> usize
where
    T: AtomicInt + Ord + num::Wrapping + std::fmt::Debug,
{
    let mut checks = 0;
    for order in ORDERS {
        for scope in SCOPES {
            for op in AtomicOp::ALL {
                for &a in vals {
                    for &b in vals {
                        // SAFETY: forwarded from the caller.
                        unsafe {
                            team.atomic_store(p, a, to, order, scope);
                            let old = team.atomic_fetch(op, p, b, to, order, scope);
                            assert_eq!(old, a, "{op:?} {order:?} {scope:?} fetch returned");
                            let want = model(op, a, b);
                            assert_eq!(
                                team.atomic_load(p, to, order, scope),
                                want,
                                "{op:?} {a:?} {b:?}"
                            );
                            team.atomic(op, p, b, to, order, scope);
                            assert_eq!(team.atomic_load(p, to, order, scope), model(op, want, b));
                        }
                        checks += 2;
                    }
                }
            }
            for &a in vals {
                for &b in vals {
                    // SAFETY: forwarded from the caller.
                    unsafe {
                        team.atomic_store(p, a, to, order, scope);
                        assert_eq!(
                            team.atomic_compare_exchange(p, b, a.wadd(b), to, order, scope),
                            a
                        );
                        let want = if a == b { a.wadd(b) } else { a };
                        assert_eq!(
                            team.atomic_load(p, to, order, scope),
                            want,
                            "cas {a:?} {b:?}"
                        );
                    }
                    checks += 1;
                }
            }
        }
    }
    checks
}

/// Every rank runs every atomic on its own word in every peer's heap.
fn atomics(world: usize) {
    let slot = 32;
    let w = World::new(world, slot * world + 64);
    w.run(ONE, |_, team, r| {
        let h = w.heap_ptr(r);
        let s = slot * r;
        for to in 0..world {
            // SAFETY: slot r is rank r's own on every heap; aligned.
            unsafe {
                exercise::<u32>(team, h.add(s).cast(), to, &[0, 1, 7, 0x8000_0000, u32::MAX]);
                exercise::<i32>(
                    team,
                    h.add(s + 4).cast(),
                    to,
                    &[0, -1, 5, i32::MIN, i32::MAX],
                );
                exercise::<u64>(team, h.add(s + 8).cast(), to, &[0, 3, 1 << 40, u64::MAX]);
                exercise::<i64>(team, h.add(s + 16).cast(), to, &[-7, 0, i64::MIN, i64::MAX]);
                // The shorthands (AcqRel, Device).
                let p = h.add(s + 24).cast::<u64>();
                team.atomic_set(p, 10, to);
                assert_eq!(team.atomic_fetch_add(p, 5, to), 10);
                team.atomic_add(p, 1, to);
                assert_eq!(team.atomic_fetch_sub(p, 6, to), 16);
                team.atomic_sub(p, 1, to);
                assert_eq!(team.atomic_swap(p, 0xf0, to), 9);
                assert_eq!(team.atomic_fetch_and(p, 0x3c, to), 0xf0);
                team.atomic_and(p, 0xff, to);
                assert_eq!(team.atomic_fetch_or(p, 1, to), 0x30);
                team.atomic_or(p, 2, to);
                assert_eq!(team.atomic_fetch_xor(p, 0xff, to), 0x33);
                team.atomic_xor(p, 0x0f, to);
                assert_eq!(team.atomic_fetch_min(p, 0x100, to), 0xc3);
                team.atomic_min(p, 0x10, to);
                assert_eq!(team.atomic_fetch_max(p, 3, to), 0x10);
                team.atomic_max(p, 0x20, to);
                assert_eq!(team.atomic_cas(p, 0x20, 77, to), 0x20);
                assert_eq!(team.atomic_cas(p, 0x20, 78, to), 77);
            }
        }
    });
    // Every rank's heap: slot r holds rank r's last values.
    for t in 0..world {
        for r in 0..world {
            let s = slot * r;
            assert_eq!(w.read::<u64>(t, s + 24, 1), [77]);
        }
    }
}

per_world! {
    load_store => super::load_store;
    atomics => super::atomics;
}
