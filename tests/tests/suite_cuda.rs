//! The backend-parameterized suite on the CUDA backend: every rank a thread with its own
//! `Cuda` instance on GPU 0 (each mapping every peer's VMM heap at its own address).
//! Skips, printing why, where there is no usable GPU.

use std::sync::OnceLock;
use symmem::backend::BackendKind;
use symmem::backend::cuda::Cuda;

type TestBackend = Cuda;
const KIND: BackendKind = BackendKind::Cuda;

fn make_backend(_rank: usize) -> symmem::Result<Cuda> {
    Cuda::new(0)
}

/// True (after printing the reason once per test) when no GPU answers.
fn skip() -> bool {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    let why = WHY.get_or_init(|| Cuda::new(0).err().map(|e| e.to_string()));
    if let Some(why) = why {
        eprintln!("skipped: CUDA backend unavailable: {why}");
    }
    why.is_some()
}

#[path = "suite/host_api.rs"]
mod host_api;
#[path = "suite/rma.rs"]
mod rma;
