//! The backend-parameterized suite on the HIP backend (`--features hip`): every rank a
//! thread with its own `Hip` instance on GPU 0. Skips, printing why, where no AMD GPU
//! answers.
#![cfg(feature = "hip")]

use std::sync::OnceLock;
use symmem::backend::BackendKind;
use symmem::backend::hip::Hip;

type TestBackend = Hip;
const KIND: BackendKind = BackendKind::Hip;

fn make_backend(_rank: usize) -> symmem::Result<Hip> {
    Hip::new(0)
}

/// True (after printing the reason) when no AMD GPU answers; a backend that fails for
/// another reason fails the test ([`symmem_tests::unavailable`]).
fn skip() -> bool {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    let why = WHY.get_or_init(|| symmem_tests::unavailable(Hip::new(0)));
    if let Some(why) = why {
        eprintln!("skipped: HIP backend unavailable: {why}");
    }
    why.is_some()
}

#[macro_use]
#[path = "suite/per_world.rs"]
mod per_world;

#[path = "suite/app_memory.rs"]
mod app_memory;
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
