//! Element types and values: the types a program's buffers hold, and the small
//! integers every rank writes, so that every sum is exact in any order.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    I32,
    F32,
    F64,
    Bf16,
    F16,
    U64,
}

impl Ty {
    pub(crate) const ALL: [Ty; 6] = [Ty::I32, Ty::F32, Ty::F64, Ty::Bf16, Ty::F16, Ty::U64];

    pub(crate) fn size(self) -> usize {
        match self {
            Ty::I32 | Ty::F32 => 4,
            Ty::F64 | Ty::U64 => 8,
            Ty::Bf16 | Ty::F16 => 2,
        }
    }

    pub(crate) fn reducible(self) -> bool {
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

pub(crate) fn exact(x: f64) -> i64 {
    if x.is_finite() && x.fract() == 0.0 {
        x as i64
    } else {
        NOT_AN_INTEGER
    }
}

/// An element type of the soak: model values (integers) in and out, exactly.
pub(crate) trait El: bytemuck::Pod + Send + Sync + 'static {
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

pub(crate) fn values(seed: u64, tag: u64, rank: usize, len: usize, ty: Ty) -> Vec<i64> {
    (0..len).map(|i| value(seed, tag, rank, i, ty)).collect()
}

pub(crate) fn fold(op: ReduceOp, xs: impl Iterator<Item = i64>) -> i64 {
    let f = match op {
        ReduceOp::Sum => |a: i64, b: i64| a + b,
        ReduceOp::Min => |a: i64, b: i64| a.min(b),
        ReduceOp::Max => |a: i64, b: i64| a.max(b),
    };
    xs.reduce(f).expect("at least one rank")
}
