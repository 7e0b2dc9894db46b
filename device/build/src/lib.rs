//! Builds GPU kernel crates into code objects, from any crate's `build.rs`.
//!
//! A kernel crate is an ordinary `#![no_std]` library whose entry points are
//! `#[unsafe(no_mangle)] pub unsafe extern "gpu-kernel" fn`s. An application's build
//! script builds it for every GPU target:
//!
//! ```no_run
//! // build.rs
//! # #[allow(clippy::needless_doctest_main)]
//! fn main() {
//!     symmem_build::KernelCrate::new("kernels")
//!         .build()
//!         .expect("building the GPU kernels");
//! }
//! ```
//!
//! and embeds the result with `symmem::include_kernels!("<crate_name>")`, which includes
//! `$OUT_DIR/symmem-kernels/<crate_name>.rs`: one expression of type
//! `&'static [(&'static str, &'static [u8])]`, a `(cpu, code object)` pair per target.
//!
//! # Targets
//!
//! A target is a processor name: `gfx…` builds an AMD code object (`amdgcn-amd-amdhsa`,
//! an ELF `.hsaco` that runs on exactly that processor), `sm_…` NVIDIA PTX
//! (`nvptx64-nvidia-cuda`, which the driver compiles for any GPU of that compute
//! capability or newer). The list is, in this order of precedence:
//!
//! 1. the environment variable [`SYMMEM_GPU_TARGETS`](TARGETS_ENV) of the build
//!    (comma-separated, `SYMMEM_GPU_TARGETS=sm_80 cargo build`; [`ALL_DEFAULTS`],
//!    `SYMMEM_GPU_TARGETS=default`, for every one of [`DEFAULT_TARGETS`]; set but empty,
//!    nothing is built and the table is empty), which overrides every kernel crate of the
//!    build;
//! 2. [`KernelCrate::targets`] in the build script
//!    (`KernelCrate::new("kernels").targets(["gfx942", "sm_80"])`, or
//!    `.targets(DEFAULT_TARGETS)` for a binary shipped to other machines);
//! 3. the GPUs of the build machine ([`detected_targets`]): `sm_XY` for each NVIDIA GPU
//!    that `nvidia-smi` lists (compute capability X.Y, 8.0 or newer), each AMD processor of
//!    [`DEFAULT_TARGETS`] that `rocm_agent_enumerator` lists, and nothing where neither
//!    tool answers: a machine with no GPU builds no code object (the CPU backend runs the
//!    kernels as host code, and needs none), a machine with one builds what it runs.
//!
//! A program built for other GPUs than the one it runs on fails at `World::new` with
//! `Error::NoCodeObject`, which names the GPU, the targets the program has and this
//! variable. [`DEFAULT_TARGETS`] are `gfx90a`, `gfx942`, `gfx950` (MI200, MI300, MI350)
//! and `sm_80`, which covers every NVIDIA GPU from the A100 on (see there for why these
//! and what each needs).
//!
//! A name that is neither is [`BuildError::UnknownTarget`], before anything is built.
//! At run time the CUDA backend loads the newest `sm_NN` object not newer than the
//! device (sm_80 PTX on an sm_89 or sm_90 GPU when it is the only one); the HIP backend
//! loads exactly the device's processor. Each extra target costs a nested build of
//! `core` and the kernels: measured on two busy cores for symmem's own kernel crate,
//! about 20 s for an `sm_…` target and 45 s for a `gfx…` one.
//!
//! # How
//!
//! For each target, a nested `cargo build --release -Zbuild-std=core --target <triple>`
//! of a generated cdylib *wrapper* package that links the kernel crate and supplies the
//! `#[panic_handler]` (see [`KernelCrate::build_in`] for the layout on disk). All kernel
//! crates of one outer build share one nested target directory per GPU target, so `core`
//! is built once per target. The linkers ship inside this crate:
//!
//! * amdgcn (`gfx…`): rust-lld under `-Clinker-plugin-lto`, linking the LLVM IR library
//!   from [`amdgpu_ir`] (dispatch-packet reads and scoped fences that Rust cannot spell
//!   on amdgcn) into the kernels;
//! * nvptx64 (`sm_…`): llvm-link, opt and llc from llvm-tools, in place of the
//!   llvm-bitcode-linker rustc would want; the PTX ISA version is llc's oldest for the
//!   processor, at least 7.0 (see [`DEFAULT_TARGETS`]).
//!
//! Device code builds with rustup's [`PINNED_NIGHTLY`], whatever toolchain builds the
//! application (stable included; [`TOOLCHAIN_ENV`] names another nightly; without rustup,
//! the outer build's own toolchain if it is a nightly), with its `rust-src` and
//! `llvm-tools` components, and [`KernelCrate::build`] says exactly what to install when
//! something is missing.
//!
//! A kernel crate can call NVSHMEM's device functions: [`KernelCrate::nvshmem`] links
//! NVSHMEM's device bitcode into the `sm_…` objects (see [`nvshmem`]).

pub mod amdgpu_ir;
mod depinfo;
mod error;
mod files;
mod kernel_crate;
mod manifest;
pub mod nvshmem;
mod output;
mod process;
mod targets;
mod toolchain;
mod tools;
mod wrapper;

pub use error::BuildError;
pub use kernel_crate::{KernelCrate, NESTED_DIR_ENV};
pub use output::{Built, CodeObject, OUTPUT_FOLDER};
pub use targets::{ALL_DEFAULTS, DEFAULT_TARGETS, Family, TARGETS_ENV, Target, detected_targets};
pub use toolchain::{LLVM_TOOLS, PINNED_NIGHTLY, TOOLCHAIN_ENV};
pub use tools::llvm_tools_bin;
