//! The code objects of symmem's own kernels (`symmem-kernels`), built by `host/build.rs`
//! with `symmem-build` exactly as an application's `build.rs` builds its kernel crate.

use crate::launch::CodeObjects;

/// `symmem-kernels` for every GPU target (`gfx942`, `gfx950`, `sm_90`): what every
/// world loads for its own operations ([`crate::World::kernels`]).
pub static KERNELS: CodeObjects = crate::include_kernels!("symmem_kernels");
