//! Which all-reduce kernel serves a call: the [`Algorithm`] a caller asks for, the
//! thresholds [`Algorithm::Auto`] chooses by, and the [`Route`] chosen from them (the same
//! on every rank: it depends on the call and the world alone).

use super::{Collectives, Element, LamportParams, ReduceOp, ReductionParams};
use crate::backend::Backend;
use crate::error::{Error, LamportRefusal, Result};
use symmem_device::UnsafeKernel;

#[cfg(doc)]
use super::{bf16, f16};

/// Which all-reduce kernel to run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Chosen by size, op and type: [`Algorithm::Lamport`] for sums of `f32`, [`bf16`] or
    /// [`f16`](struct@f16) of
    /// at most [`LAMPORT_AUTO_BYTES`] (and the handle's capacity), [`Algorithm::OneShot`]
    /// up to [`ONE_SHOT_MAX_BYTES`], [`Algorithm::TwoShot`] above (thresholds measured on
    /// the H200: `BENCHMARKS.md`, issue 16).
    #[default]
    Auto,
    /// Every rank reads every rank's whole `src` (`world²` reads in all): the
    /// latency choice for small counts.
    OneShot,
    /// Reduce-scatter then all-gather, fused: each rank reduces `1/world` of the data and
    /// writes it into every rank's `dst` (`world` reads and writes of each element in
    /// all): the bandwidth choice for large counts.
    TwoShot,
    /// Barrier-free (`symmem_rma::lamport`): every rank writes its `src` into every
    /// rank's slot of a rotating workspace and reads spin on the data; no barrier on
    /// entry or exit. Sums of `f32`, [`bf16`] and [`f16`](struct@f16) only, of at most the handle's
    /// [`Collectives::lamport_capacity`]; the same bits as [`Algorithm::OneShot`]. (Not
    /// `f64`: its data can hold every 32-bit word, so no word can mark "not yet arrived";
    /// `symmem_rma::lamport` says more.)
    Lamport,
}

/// The largest all-reduce (bytes per rank) [`Algorithm::Auto`] runs barrier-free: up to
/// it the barrier-free all-reduce was faster than the one-shot on the H200
/// (graph-replayed, ranks sharing the GPU) at 2, 4 and 8 ranks; the crossover lies
/// between 64 and 128 KiB at 2 and 8 ranks, and between 128 and 256 KiB at 4
/// (`BENCHMARKS.md`, issue 16).
pub const LAMPORT_AUTO_BYTES: usize = 64 << 10;

/// The largest all-reduce (bytes per rank) [`Algorithm::Auto`] runs one-shot: from
/// 128 KiB the two-shot was faster at every world size on the H200 (and within 4% at
/// 64 KiB).
pub const ONE_SHOT_MAX_BYTES: usize = 64 << 10;

/// The largest two-shot all-reduce (bytes per rank) on memory peers cannot reach that
/// stages inside its kernel (`symmem_all_reduce_staged_*`); above it the source is
/// copied into the scratch and the result out with the backend's copies, which use the
/// whole GPU where the kernel's copies use the handle's few blocks. On an H100 (ranks
/// sharing it) the kernel staged 256 KiB in 0.89-0.92 of the copies' time at 2, 4 and 8
/// ranks, and 1-4 MiB in 0.85-1.36 of it, the most at 2 ranks, where each rank's copies
/// have the GPU to themselves (`BENCHMARKS.md`, issue 43).
pub const STAGED_KERNEL_MAX_BYTES: usize = 256 << 10;

impl<B: Backend> Collectives<B> {
    /// Which all-reduce serves `bytes` of `T` under `op` for `algorithm` (the same on every
    /// rank: it depends on the call and the world alone).
    ///
    /// # Errors
    /// [`Error::LamportUnavailable`].
    pub(super) fn reduce_route<T: Element>(
        &self,
        algorithm: Algorithm,
        op: ReduceOp,
        bytes: usize,
    ) -> Result<Route<T>> {
        let nodes = self.world.topology().nodes();
        if nodes > 1 && algorithm != Algorithm::Lamport {
            return Ok(Route::AcrossNodes);
        }
        // The barrier-free kernel stores into every peer's workspace directly: on one
        // node only.
        let lamport =
            T::all_reduce_lamport(op).filter(|_| bytes <= self.lamport_capacity && nodes == 1);
        Ok(match (algorithm, lamport) {
            (Algorithm::Lamport, Some(kernel)) => Route::Lamport(kernel),
            (Algorithm::Auto, Some(kernel)) if bytes <= LAMPORT_AUTO_BYTES => {
                Route::Lamport(kernel)
            }
            (Algorithm::Lamport, None) => {
                let why = if T::all_reduce_lamport(op).is_none() {
                    LamportRefusal::NoKernel
                } else if nodes > 1 {
                    LamportRefusal::SeveralNodes { nodes }
                } else {
                    LamportRefusal::OverCapacity {
                        capacity: self.lamport_capacity,
                    }
                };
                return Err(Error::LamportUnavailable {
                    rank: self.world.rank(),
                    element: element_name::<T>(),
                    op,
                    bytes,
                    why,
                });
            }
            (Algorithm::OneShot, _) => Route::OneShot(T::all_reduce_one_shot(op)),
            (Algorithm::Auto, _) if bytes <= ONE_SHOT_MAX_BYTES => {
                Route::OneShot(T::all_reduce_one_shot(op))
            }
            (Algorithm::TwoShot | Algorithm::Auto, _) => Route::TwoShot(T::all_reduce_two_shot(op)),
        })
    }
}

/// The all-reduce kernel that serves a call ([`Collectives::all_reduce`]).
pub(super) enum Route<T: Element> {
    Lamport(UnsafeKernel<LamportParams<T>>),
    OneShot(UnsafeKernel<ReductionParams<T>>),
    TwoShot(UnsafeKernel<ReductionParams<T>>),
    AcrossNodes,
}

/// The element type's name without its path (`f32`, `bf16`), for errors.
fn element_name<T>() -> &'static str {
    let name = std::any::type_name::<T>();
    name.rsplit("::").next().unwrap_or(name)
}
