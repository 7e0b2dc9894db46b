//! The barrier-free (Lamport) all-reduce against the one-shot all-reduce, bit for bit,
//! over random sizes (most not a multiple of the 16-byte vector) and random inputs that
//! contain its sentinel (`-0.0`, in every lane position), NaNs and infinities, in f32,
//! bf16 and f16, at 2 to 4 ranks: CPU backend, ranks as threads, several calls per world so
//! the workspace rotates and clears lengths of earlier calls.

use proptest::prelude::*;
use symmem::backend::cpu::Cpu;
use symmem::collectives::{
    Algorithm, Collectives, Element, LAMPORT_MAX_BYTES, ReduceOp, bf16, f16,
};
use symmem::{Config, World};

/// One call: element count and a seed for every rank's inputs.
#[derive(Clone, Debug)]
struct Call {
    count: usize,
    seed: u64,
}

/// Counts from 1 to the handle's capacity in f32, small ones most often.
fn call() -> impl Strategy<Value = Call> {
    let max = LAMPORT_MAX_BYTES / 4;
    (
        prop_oneof![4 => 1usize..64, 2 => 64usize..2048, 1 => 2048usize..=max],
        any::<u64>(),
    )
        .prop_map(|(count, seed)| Call { count, seed })
}

/// A deterministic bit pattern: one in four elements special (`-0.0`, `+0.0`, NaN, inf).
fn bits(seed: u64, rank: usize, i: usize) -> u32 {
    let mut x = seed ^ (rank as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64) << 20;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 29;
    match x % 16 {
        0 => 0x8000_0000,
        1 => 0,
        2 => 0x7fc0_0001 | (x as u32 & 0x8000_0000),
        3 => 0x7f80_0000,
        _ => (x >> 32) as u32 & 0xc7ff_ffff,
    }
}

trait Elem: Element {
    fn make(bits: u32) -> Self;
    fn raw(self) -> u32;
}

impl Elem for f32 {
    fn make(bits: u32) -> Self {
        f32::from_bits(bits)
    }
    fn raw(self) -> u32 {
        self.to_bits()
    }
}

impl Elem for bf16 {
    fn make(bits: u32) -> Self {
        bf16::from_bits((bits >> 16) as u16)
    }
    fn raw(self) -> u32 {
        u32::from(self.to_bits())
    }
}

/// The upper half of an f32 pattern: `-0.0`, `+0.0`, a NaN and an infinity map to f16's
/// own (`0x8000`, `0`, a NaN, `0x7c00`), the rest to finite values, subnormals among them.
impl Elem for f16 {
    fn make(bits: u32) -> Self {
        let hi = (bits >> 16) as u16;
        f16::from_bits(match hi & 0x7fff {
            0x7f80 => hi & 0x8000 | 0x7c00,
            _ => hi,
        })
    }
    fn raw(self) -> u32 {
        u32::from(self.to_bits())
    }
}

/// Every rank runs every call, one-shot and barrier-free, and returns the bits of both
/// results of every call.
fn run<T: Elem>(world: usize, calls: &[Call]) -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
    let config = Config {
        heap_bytes: 8 << 20,
        ..Config::default()
    };
    symmem::spawn_ranks(
        world,
        &config,
        |_| Ok(Cpu::new()),
        |w: World<Cpu>| {
            let c = Collectives::new(&w)?;
            let max = LAMPORT_MAX_BYTES / size_of::<T>();
            let (src, one, lamport) = (w.zeros::<T>(max)?, w.zeros::<T>(max)?, w.zeros::<T>(max)?);
            w.barrier()?;
            let mut out = Vec::new();
            for call in calls {
                let count = call.count.min(max);
                let mine: Vec<T> = (0..count)
                    .map(|i| T::make(bits(call.seed, w.rank(), i)))
                    .collect();
                w.write(&src, 0, &mine)?;
                c.all_reduce(&one, &src, count, ReduceOp::Sum, Algorithm::OneShot)?;
                c.all_reduce(&lamport, &src, count, ReduceOp::Sum, Algorithm::Lamport)?;
                let raw = |v: Vec<T>| v[..count].iter().map(|&x| x.raw()).collect::<Vec<_>>();
                out.push((raw(w.read(&one)?), raw(w.read(&lamport)?)));
            }
            Ok(out)
        },
    )
    .expect("launch")
    .into_iter()
    .map(|r| r.expect("rank"))
    .collect()
}

fn check<T: Elem>(world: usize, calls: &[Call]) -> Result<(), TestCaseError> {
    for (rank, results) in run::<T>(world, calls).into_iter().enumerate() {
        for (k, (one, lamport)) in results.into_iter().enumerate() {
            prop_assert_eq!(
                &lamport,
                &one,
                "{} world {} rank {} call {} ({:?})",
                std::any::type_name::<T>(),
                world,
                rank,
                k,
                calls[k]
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn lamport_equals_one_shot(world in 2usize..=4, calls in prop::collection::vec(call(), 1..5)) {
        check::<f32>(world, &calls)?;
        check::<bf16>(world, &calls)?;
        check::<f16>(world, &calls)?;
    }
}
