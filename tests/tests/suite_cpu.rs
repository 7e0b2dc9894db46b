//! The backend-parameterized suite on the CPU backend (always runs).

use symmem::backend::BackendKind;
use symmem::backend::cpu::Cpu;

type TestBackend = Cpu;
const KIND: BackendKind = BackendKind::Cpu;

fn make_backend(_rank: usize) -> symmem::Result<Cpu> {
    Ok(Cpu::new())
}

/// The CPU backend is always there.
fn skip() -> bool {
    false
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
