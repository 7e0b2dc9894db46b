//! symmem: symmetric memory for multi-GPU programs.
//!
//! Every rank owns memory that every other rank can address; kernels translate a local
//! pointer into a peer's with a device-resident table of per-rank base addresses
//! (see `symmem-translate`).
#![deny(missing_docs)]

pub mod code_objects;
pub mod cpu_launch;
