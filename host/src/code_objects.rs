//! The code objects of symmem's own kernels (`symmem-kernels`), built by `host/build.rs`
//! with `symmem-build` exactly as an application's `build.rs` builds its kernel crate.

use crate::launch::CodeObjects;

/// `symmem-kernels` for every GPU target (`gfx942`, `gfx950`, `sm_90`): what a world
/// that spans nodes loads for its own operations ([`crate::World::kernels`]), and the
/// engine's proxy for its atomics.
pub static KERNELS: CodeObjects = crate::include_kernels!("symmem_kernels");

/// The same kernels built without the off-node engine (`--cfg symmem_on_node`): what a
/// world on one node loads. No RMA path there calls into the engine, so each kernel's
/// registers are its own on-node code's.
pub static KERNELS_ON_NODE: CodeObjects =
    crate::include_kernels!("symmem_kernels", "symmem_kernels_on_node");
