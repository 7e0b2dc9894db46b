//! Guides: one per way of running symmem, each a complete program and what to know.
//!
//! | guide | how the ranks run | its program, as CI runs it |
//! |-------|-------------------|----------------------------|
//! | [`threads`] | threads of one process (CPU, or GPUs; ranks may share one) | this doctest, on the CPU |
//! | [`processes`] | processes of one machine, started by the program itself | this doctest, on the CPU |
//! | [`mpirun`] | one process per rank under `mpirun`, on one machine or several | the `fused-allreduce-rmsnorm` example's `--mpi` path under `mpirun -np 2` (`symmem-tests`' `engine_mpi`) |
//! | [`cudarc`] | a cudarc application: its streams, memory and cuBLAS | this doctest (skips without CUDA); `suite_cuda`'s `cudarc_app` on a GPU |
//! | [`graphs`] | small messages: captured graphs, the barrier-free all-reduce | this doctest, on the CPU |
//! | [`nvshmem`] | off-node traffic through NVSHMEM | `engine-ranks` over NVSHMEM on a GPU; CI checks the build and the host's errors |
//!
//! Your own kernel crate: the README's *Write your own kernel*, whose crate CI builds and
//! runs from scratch on stable Rust (`.ci/user-crate`).

#[doc = include_str!("threads.md")]
pub mod threads {}

#[doc = include_str!("processes.md")]
pub mod processes {}

#[doc = include_str!("mpirun.md")]
pub mod mpirun {}

#[doc = include_str!("cudarc.md")]
pub mod cudarc {}

#[doc = include_str!("graphs.md")]
pub mod graphs {}

#[doc = include_str!("nvshmem.md")]
pub mod nvshmem {}
