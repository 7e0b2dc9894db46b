//! The backend-parameterized suite on the CUDA backend: every rank a thread with its own
//! `Cuda` instance on GPU `rank % device_count` ([`Cuda::for_rank`]: one GPU per rank on
//! a machine with enough of them, all on GPU 0 on a machine with one), each mapping every
//! peer's VMM heap at its own address (over NVLink/PCIe peer access across GPUs).
//! Skips, printing why, where there is no usable GPU.

use std::sync::OnceLock;
use symmem::backend::BackendKind;
use symmem::backend::cuda::Cuda;

type TestBackend = Cuda;
const KIND: BackendKind = BackendKind::Cuda;

fn make_backend(rank: usize) -> symmem::Result<Cuda> {
    Cuda::for_rank(rank)
}

/// True (after printing the reason once per test) when no GPU answers; a backend that
/// fails for another reason fails the test ([`symmem_tests::unavailable`]).
fn skip() -> bool {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    let why = WHY.get_or_init(|| symmem_tests::unavailable(Cuda::new(0)));
    if let Some(why) = why {
        eprintln!("skipped: CUDA backend unavailable: {why}");
    }
    why.is_some()
}

#[macro_use]
#[path = "suite/per_world.rs"]
mod per_world;

#[path = "suite/app_memory.rs"]
mod app_memory;
#[path = "suite/cudarc_app.rs"]
mod cudarc_app;
#[path = "suite/determinism.rs"]
mod determinism;
#[path = "suite/host_api.rs"]
mod host_api;
#[path = "suite/lifetimes.rs"]
mod lifetimes;
#[path = "suite/owned.rs"]
mod owned;
#[path = "suite/registered.rs"]
mod registered;
#[path = "suite/rma.rs"]
mod rma;
#[path = "suite/small.rs"]
mod small;
#[path = "suite/waits.rs"]
mod waits;
