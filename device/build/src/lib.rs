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
mod manifest;
pub mod nvshmem;
mod toolchain;

pub use toolchain::{LLVM_TOOLS, PINNED_NIGHTLY, TOOLCHAIN_ENV};

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use toolchain::{Toolchain, rustup_add};

/// The environment variable that, when set, replaces the target list of every
/// [`KernelCrate`]: comma-separated processor names (`gfx942,sm_80`), or [`ALL_DEFAULTS`]
/// for [`DEFAULT_TARGETS`]. Set but empty, no code object is built (the table is empty).
/// See [Targets](crate#targets).
pub const TARGETS_ENV: &str = "SYMMEM_GPU_TARGETS";

/// The value of [`TARGETS_ENV`] that builds every one of [`DEFAULT_TARGETS`], whatever
/// GPUs the build machine has: for binaries shipped to other machines, and for symmem's
/// own CI, which checks every default target's code.
pub const ALL_DEFAULTS: &str = "default";

/// The environment variable that, when set (and not empty), is the nested area of every
/// [`KernelCrate`] that does not set [`KernelCrate::nested_dir`]: builds of several target
/// directories (a second profile, a build with other features in a target directory of
/// its own) that name one area build `core` and each kernel crate once per GPU target
/// between them.
pub const NESTED_DIR_ENV: &str = "SYMMEM_DEVICE_BUILD_DIR";

/// Set by docs.rs while it documents a crate: no code object is built then.
const DOCS_RS_ENV: &str = "DOCS_RS";

/// The targets a [`KernelCrate`] is built for unless [`KernelCrate::targets`] or
/// [`TARGETS_ENV`] says otherwise (see [Targets](crate#targets)): every processor whose
/// code symmem's codegen checks (`tests/tests/codegen*.rs`) prove, each for a reason.
///
/// * `sm_80`, PTX ISA 7.0: every NVIDIA GPU from the A100 on (sm_86, sm_89, sm_90,
///   sm_100, sm_120 JIT it); the PTX loads on any driver from CUDA 11.0 (r450) on, and
///   symmem's CUDA backend needs CUDA 11.4 for its own calls (see the README). No kernel needs
///   more: the newest instructions in them are the scoped, ordered memory operations of
///   the atomics, signals and bounded waits (`atom`/`red`/`ld`/`st` with
///   `.relaxed`/`.acquire`/`.release` and `.cta`/`.gpu`/`.sys`, `fence.sc`,
///   `fence.acq_rel`: sm_70, PTX 6.0), `%globaltimer` (PTX 3.1) and `brx.idx` (PTX
///   6.0); bf16 is converted with integer operations and reduced in f32; no multimem,
///   cluster, `fence.proxy`, `st.async` or `cp.async` appears (the codegen checks fail
///   on those for a target older than sm_90). 7.0 is the oldest ISA llc accepts for sm_80 and
///   rustc's floor for nvptx64; CUDA 11.8's ptxas assembles every kernel crate's sm_80
///   PTX for sm_80, sm_86, sm_89 and sm_90.
/// * No separate `sm_90`: built for sm_90 (ISA 7.8, the oldest llc accepts for it) the
///   PTX of every kernel crate is the sm_80 PTX line for line but for `.target`,
///   `.version` and the spelling of a discarded half in `mov.b64 {lo, hi}` (a scoped
///   `.reg` before ISA 7.1, `_` from 7.1); ptxas (CUDA 11.8) compiles the two to the same
///   sm_90 machine code but for the 64-bit division helper of three bf16 reductions (48
///   to 80 bytes; measured with LLVM 23.1.1, December 2026). So it would cost a nested
///   build of `core` and the kernels per kernel crate build and change nothing that
///   matters. A kernel that needs Hopper (multimem for NVLink SHARP, TMA, clusters)
///   brings it back, and the CUDA backend then loads it on sm_90 devices and the sm_80
///   PTX on older ones.
/// * `gfx942`, `gfx950` (MI300, MI350): release and acquire are `buffer_wbl2`/
///   `buffer_inv` with scope bits, every write-back waited for (`s_waitcnt vmcnt(0)`).
/// * `gfx90a` (MI200): a memory model of its own (LLVM's AMDGPUUsage, "Memory Model
///   GFX90A"): no scope bits in the instructions; a system-scope release is
///   `buffer_wbl2` (no bits) then `s_waitcnt vmcnt(0)`, an acquire `buffer_invl2;
///   buffer_wbinvl1_vol`; at agent scope the L2 is coherent already (a release only
///   waits, an acquire is `buffer_wbinvl1_vol`). Served correctly: every `buffer_wbl2`
///   is waited for in every object (the codegen checks walk them; the deleted wait of
///   llvm/llvm-project#178316 does not occur with [`PINNED_NIGHTLY`]), and the relaxed
///   system-scope stores and loads of the barrier-free all-reduce (plain stores, `glc`
///   loads there, where gfx94x has `sc0 sc1`) reach a peer because the HIP backend's
///   heap is fine-grained memory: local pages write through to DRAM (MTYPE CC) and are
///   invalidated by a peer's writes (probes), a peer's pages bypass the L2 (MTYPE UC).
///
/// AMD ISAs are not forward-compatible: another AMD processor needs its own target, and
/// the codegen checks must know its memory model first.
pub const DEFAULT_TARGETS: [&str; 4] = ["gfx90a", "gfx942", "gfx950", "sm_80"];

/// The folder under `OUT_DIR` that holds the code objects and the tables.
pub const OUTPUT_FOLDER: &str = "symmem-kernels";

/// The amdgcn linker script (a shell script, run as `-Clinker=`).
const AMDGPU_LLD: &str = include_str!("link/amdgpu-lld");
/// The nvptx64 linker script (a shell script, run as `-Clinker=`).
const NVPTX_LINK: &str = include_str!("link/nvptx-link");

/// The GPU instruction-set families symmem builds for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// AMD GPUs, `amdgcn-amd-amdhsa`; code objects are ELF `.hsaco` files.
    Amdgpu,
    /// NVIDIA GPUs, `nvptx64-nvidia-cuda`; code objects are PTX text.
    Nvptx,
}

/// One GPU target: a family and a processor name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// The instruction-set family.
    pub family: Family,
    /// The processor (`gfx942`, `sm_80`): the code object runs on it (PTX also on newer
    /// NVIDIA GPUs).
    pub cpu: String,
}

impl Target {
    /// The target for processor `cpu`: a name starting with `gfx` is amdgcn, one
    /// starting with `sm_` nvptx64 (the rest of the name letters and digits); anything
    /// else is [`BuildError::UnknownTarget`].
    pub fn new(cpu: &str) -> Result<Self, BuildError> {
        let cpu = cpu.trim();
        let unknown = || BuildError::UnknownTarget {
            name: cpu.to_owned(),
        };
        let (family, rest) = if let Some(rest) = cpu.strip_prefix("gfx") {
            (Family::Amdgpu, rest)
        } else if let Some(rest) = cpu.strip_prefix("sm_") {
            (Family::Nvptx, rest)
        } else {
            return Err(unknown());
        };
        if rest.is_empty() || !rest.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(unknown());
        }
        Ok(Self {
            family,
            cpu: cpu.to_owned(),
        })
    }

    /// The rustc target triple.
    pub fn triple(&self) -> &'static str {
        match self.family {
            Family::Amdgpu => "amdgcn-amd-amdhsa",
            Family::Nvptx => "nvptx64-nvidia-cuda",
        }
    }

    /// The code object's file extension.
    pub fn extension(&self) -> &'static str {
        match self.family {
            Family::Amdgpu => "hsaco",
            Family::Nvptx => "ptx",
        }
    }

    /// The file name of crate `crate_name`'s code object for this target, e.g.
    /// `my_kernels-gfx942.hsaco`.
    pub fn file_name(&self, crate_name: &str) -> String {
        format!("{crate_name}-{}.{}", self.cpu, self.extension())
    }
}

impl FromStr for Target {
    type Err = BuildError;

    fn from_str(cpu: &str) -> Result<Self, BuildError> {
        Self::new(cpu)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.cpu)
    }
}

/// A built code object on disk.
#[derive(Clone, Debug)]
pub struct CodeObject {
    /// The target it was built for.
    pub target: Target,
    /// Where it is: `$OUT_DIR/symmem-kernels/<crate_name>-<cpu>.<hsaco|ptx>`.
    pub path: PathBuf,
}

/// What [`KernelCrate::build`] made.
#[derive(Clone, Debug)]
pub struct Built {
    /// The kernel crate's name: its package name with `-` as `_`. The stem of every
    /// file below, and the name `symmem::include_kernels!` takes.
    pub crate_name: String,
    /// The code objects, in the order of the target list.
    pub objects: Vec<CodeObject>,
    /// `$OUT_DIR/symmem-kernels/<crate_name>.rs`: one Rust expression of type
    /// `&'static [(&'static str, &'static [u8])]`, `(cpu, code object)` per target.
    pub table: PathBuf,
    /// Every file and folder the code objects depend on, each printed as
    /// `cargo:rerun-if-changed`: the kernel crate's `Cargo.toml` and `src`, every
    /// source file of it and of its path dependencies, and those packages' manifests.
    pub sources: Vec<PathBuf>,
}

/// Why a build failed.
///
/// `Debug` prints the same text as `Display`, so `.expect()` in a build script shows the
/// nested compiler's messages as they were written.
pub enum BuildError {
    /// A target name is neither `gfx…` (amdgcn) nor `sm_…` (nvptx64).
    UnknownTarget {
        /// The name.
        name: String,
    },
    /// [`KernelCrate::build`] ran outside a build script (`OUT_DIR` is not set).
    NotInBuildScript,
    /// The kernel crate's folder or its `Cargo.toml` does not exist.
    KernelCrateNotFound {
        /// The path looked at.
        path: PathBuf,
    },
    /// The kernel crate's `Cargo.toml` has no `[package] name` (a virtual manifest?).
    NotAPackage {
        /// The manifest.
        manifest: PathBuf,
    },
    /// The toolchain is not a nightly.
    NotNightly {
        /// The `rustc` asked.
        rustc: PathBuf,
        /// Its `release:` line.
        release: String,
        /// Its rustup name, if known.
        toolchain: Option<String>,
    },
    /// rustup does not have the toolchain for device code.
    MissingToolchain {
        /// Its name ([`PINNED_NIGHTLY`] unless `SYMMEM_DEVICE_TOOLCHAIN` says otherwise).
        toolchain: String,
        /// What rustup said.
        detail: String,
    },
    /// The toolchain has no `rust-src` component.
    MissingRustSrc {
        /// Its rustup name, if known.
        toolchain: Option<String>,
        /// The folder that is missing (`core`'s source).
        missing: PathBuf,
    },
    /// The toolchain has no (or not all of the) `llvm-tools` component.
    MissingLlvmTools {
        /// Its rustup name, if known.
        toolchain: Option<String>,
        /// The tools that are missing.
        missing: Vec<PathBuf>,
    },
    /// A tool could not be started.
    Spawn {
        /// The command.
        program: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// A tool ran and failed.
    Failed {
        /// What ran.
        what: String,
        /// Its standard error (then standard output), unchanged.
        stderr: String,
    },
    /// A kernel crate built with NVSHMEM ([`KernelCrate::nvshmem`]) found no NVSHMEM
    /// device library.
    NvshmemNotFound {
        /// The bitcode looked for, or `None` where no install was named.
        looked: Option<PathBuf>,
    },
    /// NVSHMEM's device bitcode is another version than its host library (the headers
    /// of the same install).
    NvshmemVersionMismatch {
        /// The bitcode.
        bitcode: PathBuf,
        /// Its version (`nvshmemi_device_lib_version_d`).
        bitcode_version: nvshmem::Version,
        /// The header that gave the host library's version.
        header: PathBuf,
        /// That version.
        host_version: nvshmem::Version,
    },
    /// A file could not be read, written or copied.
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
}

// Written by hand, not derived with thiserror: this crate is a build-dependency, on the
// critical path of every user's cold build (the nested GPU builds start only once it is
// built), and thiserror's proc-macro (proc-macro2, quote, syn, thiserror-impl) would come
// before it. Measured on 2 cores: a cold `cargo build -p symmem-build` took 5.6-5.9 s with
// thiserror against 1.1-1.6 s without (about 4.5 s more before any nested build starts).
impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let toolchain = |t: &Option<String>| match t {
            Some(name) => format!("toolchain {name}"),
            None => "the toolchain in use".to_owned(),
        };
        match self {
            Self::UnknownTarget { name } => write!(
                f,
                "unknown GPU target `{name}`: a target is an AMD processor `gfx…` or an \
                 NVIDIA one `sm_…` (the defaults: {})",
                DEFAULT_TARGETS.join(", ")
            ),
            Self::NotInBuildScript => write!(
                f,
                "symmem_build::KernelCrate::build must run from a build script (build.rs): \
                 OUT_DIR is not set; elsewhere use KernelCrate::build_in(out_dir)"
            ),
            Self::KernelCrateNotFound { path } => write!(
                f,
                "no kernel crate at {}: the folder or its Cargo.toml does not exist \
                 (a relative path is taken from the calling crate's CARGO_MANIFEST_DIR)",
                path.display()
            ),
            Self::NotAPackage { manifest } => write!(
                f,
                "{} has no [package] name: the kernel crate must be a package (a no_std lib)",
                manifest.display()
            ),
            Self::NotNightly {
                rustc,
                release,
                toolchain: t,
            } => write!(
                f,
                "GPU kernels need a nightly Rust toolchain (-Zbuild-std and the gpu-kernel ABI \
                 are unstable), but {} ({}) is release `{release}`. Pin the nightly symmem \
                 is tested with: put a rust-toolchain.toml next to the Cargo.toml you build \
                 with\n\n[toolchain]\nchannel = \"{PINNED_NIGHTLY}\"\n\
                 components = [\"rust-src\", \"llvm-tools\"]\n",
                toolchain(t),
                rustc.display()
            ),
            Self::MissingToolchain { toolchain, detail } => write!(
                f,
                "GPU kernels are built with the nightly {toolchain} (whatever toolchain builds \
                 the rest of the program), which rustup does not have ({detail}). Install it \
                 with:\n    rustup toolchain install {toolchain} --profile minimal \
                 --component rust-src,llvm-tools"
            ),
            Self::MissingRustSrc {
                toolchain: t,
                missing,
            } => write!(
                f,
                "GPU kernels need the rust-src component (the source of `core`, built for each \
                 GPU target with -Zbuild-std), and {} has none ({} is missing). Install it \
                 with:\n    {}",
                toolchain(t),
                missing.display(),
                rustup_add("rust-src", t.as_deref())
            ),
            Self::MissingLlvmTools {
                toolchain: t,
                missing,
            } => {
                let names: Vec<_> = missing
                    .iter()
                    .map(|m| m.file_name().unwrap_or(m.as_os_str()).to_string_lossy())
                    .collect();
                let dir = missing.first().and_then(|m| m.parent());
                write!(
                    f,
                    "GPU kernels need the llvm-tools component (the code objects are linked with \
                     its tools), and {} lacks {} (in {}). Install it with:\n    {}",
                    toolchain(t),
                    names.join(", "),
                    dir.map_or_else(String::new, |d| d.display().to_string()),
                    rustup_add("llvm-tools", t.as_deref())
                )
            }
            Self::NvshmemNotFound { looked: None } => write!(
                f,
                "this kernel crate is built with NVSHMEM, but no install is named: set {} \
                 (or NVSHMEM_HOME) to NVSHMEM's folder with lib/libnvshmem_device.bc (an \
                 NVSHMEM 3.2 or newer release, or the nvidia/nvshmem folder of the \
                 nvidia-nvshmem Python wheel)",
                nvshmem::NVSHMEM_HOME_ENV
            ),
            Self::NvshmemNotFound { looked: Some(path) } => write!(
                f,
                "this kernel crate is built with NVSHMEM, but {} does not exist (nor a \
                 libnvshmem_device_sm_NN.bc for an older processor, nor \
                 libnvshmem_device.bc): NVSHMEM ships its device bitcode from 3.2 on; point \
                 {} (or NVSHMEM_HOME) at an install that has it",
                path.display(),
                nvshmem::NVSHMEM_HOME_ENV
            ),
            Self::NvshmemVersionMismatch {
                bitcode,
                bitcode_version,
                header,
                host_version,
            } => write!(
                f,
                "NVSHMEM's device bitcode {} is version {bitcode_version}, but its host \
                 library is {host_version} ({}): nvshmemx_cumodule_init would refuse the \
                 modules; use the bitcode and the host library of one release",
                bitcode.display(),
                header.display()
            ),
            Self::Spawn { program, error } => write!(f, "cannot run {program}: {error}"),
            Self::Failed { what, stderr } => write!(f, "{what} failed:\n{stderr}"),
            Self::Io { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl fmt::Debug for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Spawn { error, .. } | Self::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A kernel crate to build into code objects: see the [crate] docs.
#[derive(Clone, Debug)]
pub struct KernelCrate {
    path: PathBuf,
    /// `None`: the build machine's GPUs ([`detected_targets`]).
    targets: Option<Vec<String>>,
    nested_dir: Option<PathBuf>,
    variant: Option<Variant>,
    /// Linked with NVSHMEM's device library: `Some(None)` from the environment's install,
    /// `Some(Some(home))` from `home`.
    nvshmem: Option<Option<PathBuf>>,
}

/// A second build of a kernel crate: with cargo feature `feature` of the kernel crate
/// enabled, code objects named `name`.
#[derive(Clone, Debug)]
struct Variant {
    name: String,
    feature: String,
}

impl KernelCrate {
    /// The kernel crate at `path`: relative to the calling crate's `CARGO_MANIFEST_DIR`
    /// (or, where that is unset, the current directory); absolute paths are taken as
    /// they are. Its targets are the build machine's GPUs' ([`detected_targets`]; see
    /// [Targets](crate#targets)).
    pub fn new(path: impl AsRef<Path>) -> Self {
        Self {
            path: path.as_ref().to_owned(),
            targets: None,
            nested_dir: None,
            variant: None,
            nvshmem: None,
        }
    }

    /// Links NVSHMEM's device library into the `sm_…` code objects, so the kernels can
    /// call NVSHMEM's device functions (declared `extern "C"`; symmem-device's `nvshmem`
    /// feature declares them): the install is the one [`nvshmem::NVSHMEM_HOME_ENV`]
    /// (else `NVSHMEM_HOME`) names, its device bitcode for each target
    /// (`lib/libnvshmem_device_sm_NN.bc`, or `lib/libnvshmem_device.bc` before 3.5)
    /// linked with `llvm-link --only-needed` before `llc`, its device-state globals kept. The build
    /// fails with [`BuildError::NvshmemNotFound`] without an install,
    /// [`BuildError::NvshmemVersionMismatch`] where the bitcode's version is not the
    /// host library's (its headers beside it), and [`BuildError::Failed`] naming every
    /// function the PTX still declares but does not define. `gfx…` targets are built as
    /// without it (rocSHMEM is not linked). Without this call, nothing changes.
    pub fn nvshmem(mut self) -> Self {
        self.nvshmem = Some(None);
        self
    }

    /// [`nvshmem`](Self::nvshmem) from the install at `home` (the folder with `lib/`
    /// and `include/`), whatever the environment says.
    pub fn nvshmem_at(mut self, home: impl Into<PathBuf>) -> Self {
        self.nvshmem = Some(Some(home.into()));
        self
    }

    /// Builds a variant of the crate instead of the crate as it is: the kernel crate's
    /// cargo feature `feature` is enabled (so code can differ under
    /// `#[cfg(feature = "...")]`, and the feature can enable its dependencies' features),
    /// and the code objects and their table are named `name` (`include_kernels!` with the
    /// crate name and `name` embeds them).
    ///
    /// A variant is a feature, not a `--cfg` flag, so that it changes only the crates it
    /// reaches: `core` and every crate the feature leaves alone are built once per GPU
    /// target and shared with the crate's other builds. Its wrapper package is its own, so
    /// the builds do not rebuild each other.
    pub fn variant(mut self, name: &str, feature: &str) -> Self {
        self.variant = Some(Variant {
            name: name.to_owned(),
            feature: feature.to_owned(),
        });
        self
    }

    /// Builds for processors `cpus` (`gfx…` or `sm_…`, in this order, repeats
    /// ignored) instead of the build machine's GPUs' ([`DEFAULT_TARGETS`] for all of
    /// them); [`TARGETS_ENV`], when set, still overrides.
    /// A name that is no target makes [`build`](Self::build) fail with
    /// [`BuildError::UnknownTarget`].
    pub fn targets<I, S>(mut self, cpus: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.targets = Some(cpus.into_iter().map(|c| c.as_ref().to_owned()).collect());
        self
    }

    /// Puts the nested builds under `dir` instead of `<outer target dir>/symmem-device`
    /// (see [`build_in`](Self::build_in)).
    pub fn nested_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.nested_dir = Some(dir.into());
        self
    }

    /// Builds every target, from a build script: [`build_in`](Self::build_in) with
    /// cargo's `OUT_DIR`, or [`BuildError::NotInBuildScript`] where that is unset.
    pub fn build(self) -> Result<Built, BuildError> {
        let out_dir = std::env::var_os("OUT_DIR").ok_or(BuildError::NotInBuildScript)?;
        self.build_in(out_dir)
    }

    /// Builds every target, writing the code objects and the table under
    /// `<out_dir>/symmem-kernels/`, and prints the `cargo:rerun-if-…` lines.
    ///
    /// The nested builds run in the nested area (by default `<target>/symmem-device`,
    /// where `<target>` is the folder holding the profile folder `OUT_DIR` is in, or
    /// `<out_dir>/symmem-device` when `out_dir` is not a cargo `OUT_DIR`):
    ///
    /// * `<cpu>/`: one cargo target directory per GPU target, shared by every kernel
    ///   crate, with the wrapper's `<triple>/release/<wrapper>.{elf,ptx,d}`;
    /// * `wrappers/<crate_name>-<hash of its path>/`: the cdylib wrapper package;
    /// * `tools/`: the linker scripts and the amdgcn IR library, named by a hash of
    ///   their contents.
    pub fn build_in(self, out_dir: impl Into<PathBuf>) -> Result<Built, BuildError> {
        let out_dir: PathBuf = out_dir.into();
        cargo_line(&format!("rerun-if-env-changed={TARGETS_ENV}"));
        cargo_line(&format!("rerun-if-env-changed={TOOLCHAIN_ENV}"));
        cargo_line(&format!("rerun-if-env-changed={NESTED_DIR_ENV}"));
        cargo_line(&format!("rerun-if-env-changed={DOCS_RS_ENV}"));
        // docs.rs documents crates with a toolchain of its own and no network, so no
        // nested build can run there: no code objects (the tables are empty).
        let names = if std::env::var_os(DOCS_RS_ENV).is_some() {
            Vec::new()
        } else {
            match std::env::var(TARGETS_ENV) {
                Ok(list) if list.trim() == ALL_DEFAULTS => {
                    DEFAULT_TARGETS.map(str::to_owned).to_vec()
                }
                Ok(list) => split_targets(&list),
                Err(_) => match &self.targets {
                    Some(targets) => targets.clone(),
                    None => {
                        // Detection reads the tools on PATH and the GPUs the kernel has:
                        // a change of either builds again.
                        cargo_line("rerun-if-env-changed=PATH");
                        for gpus in GPU_LISTS.iter().map(Path::new).filter(|p| p.exists()) {
                            cargo_line(&format!("rerun-if-changed={}", gpus.display()));
                        }
                        detected_targets()
                    }
                },
            }
        };
        let mut targets: Vec<Target> = Vec::new();
        for name in &names {
            let target = Target::new(name)?;
            if !targets.contains(&target) {
                targets.push(target);
            }
        }
        let kernel_dir = self.kernel_dir()?;
        let manifest = kernel_dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).map_err(|error| BuildError::Io {
            path: manifest.clone(),
            error,
        })?;
        let names = manifest::names(&text).ok_or_else(|| BuildError::NotAPackage {
            manifest: manifest.clone(),
        })?;
        let crate_name = manifest::crate_name(&names.package);
        let output_name = self
            .variant
            .as_ref()
            .map_or_else(|| crate_name.clone(), |v| v.name.clone());
        let mut sources = vec![manifest.clone(), kernel_dir.join("src")];
        for path in &sources {
            cargo_line(&format!("rerun-if-changed={}", path.display()));
        }
        let out = out_dir.join(OUTPUT_FOLDER);
        create_dir(&out)?;
        let mut objects = Vec::new();
        if !targets.is_empty() {
            let toolchain = Toolchain::device()?;
            let nested = match self.nested_dir {
                Some(dir) => dir,
                None => match std::env::var_os(NESTED_DIR_ENV) {
                    Some(dir) if !dir.is_empty() => PathBuf::from(dir),
                    _ => nested_dir_for(&out_dir),
                },
            };
            let mut tools = Tools::install(&nested.join("tools"), &toolchain, &targets)?;
            if let Some(home) = &self.nvshmem
                && targets.iter().any(|t| t.family == Family::Nvptx)
            {
                let install = nvshmem::find(home.as_deref())?;
                for target in targets.iter().filter(|t| t.family == Family::Nvptx) {
                    let (bitcode, version) =
                        nvshmem::bitcode_for(&install, &target.cpu, &toolchain)?;
                    let staged = nvshmem::staged_copy(&nested.join("tools"), &bitcode, version)?;
                    tools.nvshmem.push((target.cpu.clone(), staged));
                }
            }
            let wrapper = Wrapper::write(
                &nested.join("wrappers"),
                &out_dir,
                &kernel_dir,
                &names,
                self.variant.as_ref(),
            )?;
            // The targets side by side: each has a nested target directory of its own, and
            // most of each build is one crate at a time (`core`, then the kernel crate's
            // dependency chain), so on several cores they overlap instead of queueing.
            let built: Vec<Result<PathBuf, BuildError>> = std::thread::scope(|scope| {
                let builds: Vec<_> = targets
                    .iter()
                    .map(|target| {
                        let (wrapper, toolchain, tools, nested) =
                            (&wrapper, &toolchain, &tools, &nested);
                        scope.spawn(move || wrapper.build(toolchain, tools, nested, target))
                    })
                    .collect();
                builds
                    .into_iter()
                    .map(|b| {
                        b.join()
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                    })
                    .collect()
            });
            let mut deps = Vec::new();
            for (target, built) in targets.iter().zip(built) {
                let built = built?;
                let path = out.join(target.file_name(&output_name));
                copy(&built, &path)?;
                if let Ok(d) = std::fs::read_to_string(built.with_extension("d")) {
                    deps.extend(depinfo::parse(&d));
                }
                objects.push(CodeObject {
                    target: target.clone(),
                    path,
                });
            }
            let excluded = [
                toolchain.sysroot.clone(),
                cargo_home().join("registry"),
                cargo_home().join("git"),
                nested.clone(),
            ];
            let mut more = depinfo::user_sources(&deps, &excluded);
            more.extend(package_manifests(&more));
            for path in more {
                if !sources.contains(&path) {
                    cargo_line(&format!("rerun-if-changed={}", path.display()));
                    sources.push(path);
                }
            }
        }
        let table = out.join(format!("{output_name}.rs"));
        write_if_changed(&table, table_source(&objects)?.as_bytes())?;
        Ok(Built {
            crate_name,
            objects,
            table,
            sources,
        })
    }

    /// The kernel crate's folder, absolute and checked to hold a `Cargo.toml`.
    fn kernel_dir(&self) -> Result<PathBuf, BuildError> {
        let base = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_default();
        let path = base.join(&self.path);
        if !path.join("Cargo.toml").is_file() {
            return Err(BuildError::KernelCrateNotFound { path });
        }
        path.canonicalize()
            .map_err(|error| BuildError::Io { path, error })
    }
}

/// Where the kernel lists a machine's GPUs (NVIDIA's driver, AMD's KFD): a build that
/// detected its targets runs again when one of them changes.
const GPU_LISTS: [&str; 2] = [
    "/proc/driver/nvidia/gpus",
    "/sys/class/kfd/kfd/topology/nodes",
];

/// The targets the GPUs of this build machine need: `sm_XY` for each NVIDIA GPU of compute
/// capability X.Y (8.0 or newer; older ones have no target) that `nvidia-smi` lists, each
/// AMD processor of [`DEFAULT_TARGETS`] that `rocm_agent_enumerator` lists (others have
/// no target whose memory model the codegen checks prove), in that order, each once; none
/// where neither tool is on `PATH` or answers.
pub fn detected_targets() -> Vec<String> {
    detect_on(std::env::var_os("PATH"))
}

/// [`detected_targets`] with the tools looked up on `path` (the build's `PATH` when
/// `None`).
fn detect_on(path: Option<std::ffi::OsString>) -> Vec<String> {
    let run = |tool: &str, args: &[&str]| -> Option<String> {
        let mut command = Command::new(tool);
        command.args(args);
        if let Some(path) = &path {
            command.env("PATH", path);
        }
        let output = command.output().ok().filter(|o| o.status.success())?;
        Some(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let mut targets: Vec<String> = Vec::new();
    let nvidia = run(
        "nvidia-smi",
        &["--query-gpu=compute_cap", "--format=csv,noheader"],
    );
    for cap in nvidia.iter().flat_map(|out| out.lines()) {
        let sm = cap
            .trim()
            .split_once('.')
            .and_then(|(major, minor)| {
                Some(major.parse::<u32>().ok()? * 10 + minor.parse::<u32>().ok()?)
            })
            .filter(|&sm| sm >= 80);
        targets.extend(sm.map(|sm| format!("sm_{sm}")));
    }
    let amd = run("rocm_agent_enumerator", &[]);
    targets.extend(
        amd.iter()
            .flat_map(|out| out.split_whitespace())
            .filter(|name| name.starts_with("gfx") && DEFAULT_TARGETS.contains(name))
            .map(str::to_owned),
    );
    let mut seen = Vec::new();
    targets.retain(|t| {
        let new = !seen.contains(t);
        seen.push(t.clone());
        new
    });
    targets
}

/// The processor names in a [`TARGETS_ENV`] value: comma-separated, blanks ignored.
fn split_targets(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The default nested area for a build whose `OUT_DIR` is `out_dir`:
/// `<target>/symmem-device`, `<target>` being the folder that holds the profile folder.
///
/// `OUT_DIR` is `<target>/<profile>/build/<pkg>-<hash>/out`, or with cargo's newer
/// build-dir layout `<target>/<profile>/build/<pkg>/<hash>/out`. Where neither shape
/// fits, `<out_dir>/symmem-device`.
fn nested_dir_for(out_dir: &Path) -> PathBuf {
    // `ancestors().nth(k)`: k = 0 is `out`; the `build` folder is k = 2 (old layout) or
    // k = 3 (new layout). Checking k = 3 first gets a package named `build` right.
    let build = [3, 2]
        .into_iter()
        .filter_map(|k| out_dir.ancestors().nth(k))
        .find(|dir| out_dir.ends_with("out") && dir.file_name().is_some_and(|n| n == "build"));
    match build.and_then(|b| b.parent()).and_then(Path::parent) {
        Some(target) if !target.as_os_str().is_empty() => target.join("symmem-device"),
        _ => out_dir.join("symmem-device"),
    }
}

/// The `Cargo.toml` of the package each of `sources` belongs to (the nearest one in a
/// folder above it), without repeats.
fn package_manifests(sources: &[PathBuf]) -> Vec<PathBuf> {
    let mut manifests = Vec::new();
    for source in sources {
        let found = source
            .ancestors()
            .skip(1)
            .map(|dir| dir.join("Cargo.toml"))
            .find(|m| m.is_file());
        if let Some(m) = found
            && !manifests.contains(&m)
        {
            manifests.push(m);
        }
    }
    manifests
}

/// The table file's text: one expression of type
/// `&'static [(&'static str, &'static [u8])]`, whatever the context it is included in.
fn table_source(objects: &[CodeObject]) -> Result<String, BuildError> {
    let mut s = String::from(
        "// Generated by symmem-build: (cpu, code object) per GPU target.\n{\n    \
         const CODE_OBJECTS: &[(&str, &[u8])] = &[\n",
    );
    for o in objects {
        let path = o.path.to_str().ok_or_else(|| BuildError::Io {
            path: o.path.clone(),
            error: std::io::Error::new(std::io::ErrorKind::InvalidData, "path is not UTF-8"),
        })?;
        s.push_str(&format!(
            "        ({:?}, include_bytes!({path:?})),\n",
            o.target.cpu
        ));
    }
    s.push_str("    ];\n    CODE_OBJECTS\n}\n");
    Ok(s)
}

/// The linker scripts and the amdgcn IR library, written to the nested area's `tools`
/// folder under names carrying a hash of their contents: the names reach the nested
/// build's flags (`-Clinker=`, `-Clink-arg=`), which cargo fingerprints, so a changed
/// script or library relinks the kernels (cargo does not look at the contents of a
/// linker or of a file named in a link argument).
struct Tools {
    amdgpu_lld: PathBuf,
    nvptx_link: PathBuf,
    /// The assembled IR library, if an amdgcn target is built.
    amdgpu_ir: Option<PathBuf>,
    /// NVSHMEM's device bitcode per `sm_…` target, for crates built with it
    /// ([`KernelCrate::nvshmem`]).
    nvshmem: Vec<(String, PathBuf)>,
}

impl Tools {
    fn install(dir: &Path, toolchain: &Toolchain, targets: &[Target]) -> Result<Self, BuildError> {
        create_dir(dir)?;
        let script = |name: &str, text: &str| -> Result<PathBuf, BuildError> {
            let path = dir.join(format!("{name}-{:016x}", fnv1a(text.as_bytes())));
            write_executable(&path, text.as_bytes())?;
            Ok(path)
        };
        let amdgpu_lld = script("amdgpu-lld", AMDGPU_LLD)?;
        let nvptx_link = script("nvptx-link", NVPTX_LINK)?;
        let amdgpu_ir = if targets.iter().any(|t| t.family == Family::Amdgpu) {
            let layout = data_layout_of(&toolchain.rustc, "amdgcn-amd-amdhsa")?;
            let text = amdgpu_ir::library(&layout);
            // The toolchain is part of the name: its llvm-as made the bitcode.
            let hash = fnv1a(format!("{text}\n{}", toolchain.verbose_version).as_bytes());
            let stem = dir.join(format!("symmem_amdgpu-{hash:016x}"));
            let bc = stem.with_extension("bc");
            if !bc.is_file() {
                let ll = stem.with_extension("ll");
                write_if_changed(&ll, text.as_bytes())?;
                let tmp = temp_name(&bc);
                let mut as_ = Command::new(toolchain.llvm_bin().join("llvm-as"));
                as_.arg(&ll).arg("-o").arg(&tmp);
                run(as_, "llvm-as of the amdgpu IR library")?;
                rename(&tmp, &bc)?;
            }
            Some(bc)
        } else {
            None
        };
        Ok(Self {
            amdgpu_lld,
            nvptx_link,
            amdgpu_ir,
            nvshmem: Vec::new(),
        })
    }
}

/// The generated cdylib package that links a kernel crate (a plain lib) into a code
/// object: the kernel crate's `#[no_mangle]` entry points, plus a `#[panic_handler]`.
struct Wrapper {
    dir: PathBuf,
    /// The wrapper's library name: the stem of the built files.
    lib: String,
    crate_name: String,
    /// Held while the wrapper is written and built: builds of one kernel crate from
    /// concurrent build scripts take turns (the second finds everything fresh).
    _lock: std::fs::File,
}

impl Wrapper {
    fn write(
        wrappers: &Path,
        out_dir: &Path,
        kernel_dir: &Path,
        names: &manifest::Names,
        variant: Option<&Variant>,
    ) -> Result<Self, BuildError> {
        let crate_name = manifest::crate_name(&names.package);
        // Two kernel crates of one name (two apps' `kernels`) get wrappers of their own,
        // and so does each variant of one.
        let hash = fnv1a(kernel_dir.as_os_str().as_encoded_bytes()) as u32;
        let id = match variant {
            Some(v) => format!("{crate_name}-{hash:08x}-{}", v.name),
            None => format!("{crate_name}-{hash:08x}"),
        };
        let dir = wrappers.join(&id);
        create_dir(&dir.join("src"))?;
        let lock_path = wrappers.join(format!("{id}.lock"));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|error| BuildError::Io {
                path: lock_path.clone(),
                error,
            })?;
        lock.lock().map_err(|error| BuildError::Io {
            path: lock_path,
            error,
        })?;
        let package = format!("symmem-gpu-{id}");
        let lib = package.replace('-', "_");
        let manifest = format!(
            "# Generated by symmem-build: links kernel crate `{kernel}` into a GPU code object.\n\
             [package]\n\
             name = \"{package}\"\n\
             version = \"0.0.0\"\n\
             edition = \"2024\"\n\
             publish = false\n\
             \n\
             [lib]\n\
             path = \"src/lib.rs\"\n\
             crate-type = [\"cdylib\"]\n\
             \n\
             [dependencies]\n\
             {kernel_key} = {{ path = {kernel_path}{features} }}\n\
             \n\
             [profile.release]\n\
             panic = \"abort\"\n\
             opt-level = 3\n\
             codegen-units = 1\n\
             debug = false\n\
             \n\
             [profile.dev]\n\
             panic = \"abort\"\n\
             \n\
             [workspace]\n",
            kernel = names.package,
            kernel_key = toml_string(&names.package),
            kernel_path = toml_string(&kernel_dir.to_string_lossy()),
            features = variant.map_or_else(String::new, |v| format!(
                ", features = [{}]",
                toml_string(&v.feature)
            )),
        );
        let source = format!(
            "// Generated by symmem-build.\n\
             #![no_std]\n\
             \n\
             // Links the kernel crate: its `#[no_mangle]` entry points are the code object's.\n\
             extern crate {lib_name};\n\
             \n\
             #[panic_handler]\n\
             fn panic(_: &core::panic::PanicInfo<'_>) -> ! {{\n    loop {{}}\n}}\n",
            lib_name = names.lib,
        );
        write_if_changed(&dir.join("Cargo.toml"), manifest.as_bytes())?;
        write_if_changed(&dir.join("src/lib.rs"), source.as_bytes())?;
        seed_lockfile(&dir, out_dir, kernel_dir)?;
        Ok(Self {
            dir,
            lib,
            crate_name,
            _lock: lock,
        })
    }

    /// Builds the wrapper for `target`; returns the built code object (in the nested
    /// target directory; its dep-info file is beside it, extension `.d`).
    fn build(
        &self,
        toolchain: &Toolchain,
        tools: &Tools,
        nested: &Path,
        target: &Target,
    ) -> Result<PathBuf, BuildError> {
        let target_dir = nested.join(&target.cpu);
        let mut cargo = Command::new(&toolchain.cargo);
        scrub_outer_environment(&mut cargo);
        // Every kernel keeps a body of its own: merged functions become aliases, and
        // AMDGPU emits no kernel descriptor (`.kd`) or metadata for an alias, so two
        // identical kernels would leave one that no runtime can launch.
        let mut flags = vec![
            format!("-Ctarget-cpu={}", target.cpu),
            "-Zmerge-functions=disabled".to_owned(),
        ];
        match target.family {
            Family::Amdgpu => {
                flags.extend([
                    "-Clinker-plugin-lto".to_owned(),
                    format!("-Clinker={}", tools.amdgpu_lld.display()),
                ]);
                if let Some(ir) = &tools.amdgpu_ir {
                    flags.push(format!("-Clink-arg={}", ir.display()));
                }
            }
            Family::Nvptx => {
                flags.push(format!("-Clinker={}", tools.nvptx_link.display()));
                // rustc's own fat LTO hands nvptx-link one complete bitcode module.
                // (amdgcn does its LTO in the linker, and must not get this.)
                cargo.env("CARGO_PROFILE_RELEASE_LTO", "fat");
            }
        }
        cargo
            .current_dir(&self.dir)
            .env("RUSTC", &toolchain.rustc)
            .env(
                "RUSTUP_TOOLCHAIN",
                toolchain.name.as_deref().unwrap_or(PINNED_NIGHTLY),
            )
            .env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"))
            .env("SYMMEM_LLVM_BIN", toolchain.llvm_bin())
            .env("SYMMEM_PTX_CPU", &target.cpu);
        // NVSHMEM's library is the wrapper's link argument alone (`cargo rustc` passes
        // flags after `--` to the final crate only): in RUSTFLAGS it would change every
        // crate's hash, `core`'s included, and build them all again.
        let library = tools.nvshmem.iter().find(|(cpu, _)| *cpu == target.cpu);
        cargo.arg(if library.is_some() { "rustc" } else { "build" });
        cargo
            .args(["--release", "--quiet", "-Zbuild-std=core", "--target"])
            .arg(target.triple())
            .arg("--manifest-path")
            .arg(self.dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir);
        if let Some((_, bitcode)) = library {
            cargo.args([
                "--lib".to_owned(),
                "--".to_owned(),
                format!("-Clink-arg=--nvshmem-bitcode={}", bitcode.display()),
                format!(
                    "-Clink-arg=--nvshmem-keep={}",
                    nvshmem::DEVICE_GLOBALS.join(",")
                ),
            ]);
        }
        run(
            cargo,
            &format!(
                "building kernel crate {} for {} (nested cargo in {})",
                self.crate_name,
                target.cpu,
                self.dir.display()
            ),
        )?;
        let file = match target.family {
            Family::Amdgpu => format!("{}.elf", self.lib),
            Family::Nvptx => format!("{}.ptx", self.lib),
        };
        Ok(target_dir.join(target.triple()).join("release").join(file))
    }
}

/// Starts the wrapper's `Cargo.lock` from the lock file of the build that runs this one,
/// so the kernel crate's dependencies (`symmem-device`, `symmem-rma`, ...) get the
/// versions the application's host code uses, and resolve without a registry update.
///
/// That lock file is the nearest `Cargo.lock` above `out_dir` (a target directory inside
/// the application's workspace); where there is none (a target directory elsewhere), the
/// nearest above the kernel crate (its workspace's, or the one a packaged crate ships in
/// the registry's cache). Done again only when that lock file changes (its last copy is
/// kept as `Cargo.lock.seed`); cargo prunes what the wrapper does not use.
fn seed_lockfile(wrapper: &Path, out_dir: &Path, kernel_dir: &Path) -> Result<(), BuildError> {
    let Some(source) = out_dir
        .ancestors()
        .chain(kernel_dir.ancestors())
        .map(|dir| dir.join("Cargo.lock"))
        .find(|l| l.is_file())
    else {
        return Ok(());
    };
    let Ok(text) = std::fs::read(&source) else {
        return Ok(());
    };
    let seed = wrapper.join("Cargo.lock.seed");
    if std::fs::read(&seed).is_ok_and(|old| old == text) {
        return Ok(());
    }
    write_if_changed(&wrapper.join("Cargo.lock"), &text)?;
    write_if_changed(&seed, &text)
}

/// Removes from `cmd`'s environment what describes the *outer* build (its target,
/// profile, flags, wrappers, features), which must not leak into the nested one.
fn scrub_outer_environment(cmd: &mut Command) {
    for (var, _) in std::env::vars_os() {
        if let Some(name) = var.to_str()
            && is_outer_build_variable(name)
        {
            cmd.env_remove(&var);
        }
    }
}

/// Whether environment variable `name` describes the outer build. Kept: `CARGO_HOME`,
/// cargo's network and registry settings, `RUSTUP_*` (`RUSTUP_TOOLCHAIN` is then set to
/// the device toolchain, so anything the nested build runs through rustup runs the
/// same toolchain) and everything else.
fn is_outer_build_variable(name: &str) -> bool {
    const KEEP: [&str; 5] = [
        "CARGO_HOME",
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRIES_",
        "CARGO_REGISTRY_",
    ];
    const OUTER: [&str; 10] = [
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "TARGET",
        "HOST",
        "OPT_LEVEL",
        "PROFILE",
        "DEBUG",
        "NUM_JOBS",
        "OUT_DIR",
        "CARGO",
    ];
    if name.starts_with("CARGO_") {
        return !KEEP.iter().any(|k| name.starts_with(k));
    }
    name.starts_with("RUSTC") || name.starts_with("__CARGO") || OUTER.contains(&name)
}

/// `CARGO_HOME`, or its default `~/.cargo`.
fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from(".cargo"))
}

/// Prints `cargo:<line>` for the calling build script's cargo.
fn cargo_line(line: &str) {
    // A closed stdout only loses the hint; the build itself goes on.
    let _ = writeln!(std::io::stdout(), "cargo:{line}");
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// 64-bit FNV-1a: a stable hash for file names (the same on every toolchain).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The LLVM data layout `rustc` uses for `triple`, read from its target spec: one string
/// value found by its key in rustc's JSON (not with `serde_json`: see the `manifest`
/// module for what a parser would cost every user's cold build).
fn data_layout_of(rustc: &Path, triple: &str) -> Result<String, BuildError> {
    let mut cmd = Command::new(rustc);
    cmd.args([
        "-Zunstable-options",
        "--print",
        "target-spec-json",
        "--target",
        triple,
    ]);
    let spec = run(cmd, "rustc --print target-spec-json")?;
    let key = "\"data-layout\": \"";
    spec.find(key)
        .and_then(|at| spec[at + key.len()..].split('"').next())
        .map(str::to_owned)
        .ok_or_else(|| BuildError::Failed {
            what: format!("finding the data layout of {triple}"),
            stderr: spec.clone(),
        })
}

/// llvm-tools' bin folder of the device toolchain (what the code objects are linked
/// with, and what reads them: `llvm-objdump`, `llvm-readobj`), whatever toolchain runs
/// the caller. Errors: as the toolchain checks of [`KernelCrate::build`].
pub fn llvm_tools_bin() -> Result<PathBuf, BuildError> {
    Ok(Toolchain::device()?.llvm_bin())
}

/// Runs `cmd`; its standard output, or [`BuildError::Failed`] with its standard error
/// (then standard output) if it fails.
pub(crate) fn run(mut cmd: Command, what: &str) -> Result<String, BuildError> {
    let program = format!("{:?}", cmd.get_program());
    let out = cmd
        .output()
        .map_err(|error| BuildError::Spawn { program, error })?;
    if !out.status.success() {
        let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        stderr.push_str(&String::from_utf8_lossy(&out.stdout));
        return Err(BuildError::Failed {
            what: what.to_owned(),
            stderr,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn create_dir(dir: &Path) -> Result<(), BuildError> {
    std::fs::create_dir_all(dir).map_err(|error| BuildError::Io {
        path: dir.to_owned(),
        error,
    })
}

/// A name beside `path` no other process uses.
fn temp_name(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(".tmp-{}-{n}", std::process::id()));
    path.with_file_name(name)
}

fn rename(from: &Path, to: &Path) -> Result<(), BuildError> {
    std::fs::rename(from, to).map_err(|error| BuildError::Io {
        path: to.to_owned(),
        error,
    })
}

/// Writes `bytes` to `path` unless it already holds them (keeping its mtime), through a
/// temporary file and a rename, so a concurrent reader sees the old or the new file,
/// never a part.
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    write_file(path, bytes, 0o644)
}

/// [`write_if_changed`] for a script to run: mode 0755 on Unix.
fn write_executable(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    write_file(path, bytes, 0o755)
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), BuildError> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let tmp = temp_name(path);
    let io = |error| BuildError::Io {
        path: tmp.clone(),
        error,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    let mut file = options.open(&tmp).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    drop(file);
    rename(&tmp, path)
}

fn copy(from: &Path, to: &Path) -> Result<(), BuildError> {
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|error| BuildError::Io {
            path: from.to_owned(),
            error,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names() {
        let t = Target::new("gfx942").unwrap();
        assert_eq!(
            (t.family, t.triple(), t.extension()),
            (Family::Amdgpu, "amdgcn-amd-amdhsa", "hsaco")
        );
        assert_eq!(t.file_name("my_kernels"), "my_kernels-gfx942.hsaco");
        let t: Target = "sm_90a".parse().unwrap();
        assert_eq!(
            (t.family, t.triple(), t.extension()),
            (Family::Nvptx, "nvptx64-nvidia-cuda", "ptx")
        );
        assert_eq!(t.to_string(), "sm_90a");
        assert_eq!(Target::new(" gfx950 ").unwrap().cpu, "gfx950");
        for bad in [
            "",
            "gfx",
            "sm_",
            "sm90",
            "x86-64",
            "gfx9 42",
            "sm_90/../x",
            "compute_90",
        ] {
            let e = Target::new(bad).unwrap_err();
            assert!(
                matches!(&e, BuildError::UnknownTarget { name } if name == bad.trim()),
                "{bad}: {e}"
            );
        }
        // The message names the defaults as they are.
        let e = Target::new("tpu_v5").unwrap_err().to_string();
        assert!(e.contains(&DEFAULT_TARGETS.join(", ")), "{e}");
    }

    #[test]
    fn default_targets_are_targets_of_both_families() {
        let targets: Vec<Target> = DEFAULT_TARGETS
            .iter()
            .map(|t| Target::new(t).unwrap())
            .collect();
        for family in [Family::Amdgpu, Family::Nvptx] {
            assert!(targets.iter().any(|t| t.family == family), "{family:?}");
        }
        // The oldest NVIDIA GPU symmem supports is the A100 (sm_80): PTX runs on newer ones.
        assert!(DEFAULT_TARGETS.contains(&"sm_80"));
    }

    #[test]
    fn unknown_target_fails_the_build_before_anything_runs() {
        let e = KernelCrate::new("/nonexistent")
            .targets(["gfx942", "tpu_v5"])
            .build_in("/nonexistent/out");
        if std::env::var_os(TARGETS_ENV).is_none() {
            assert!(matches!(e, Err(BuildError::UnknownTarget { name }) if name == "tpu_v5"));
        }
    }

    #[test]
    fn targets_env_list() {
        assert_eq!(split_targets("gfx942, sm_90,,"), ["gfx942", "sm_90"]);
        assert!(split_targets("").is_empty());
        assert!(split_targets(" , ").is_empty());
    }

    #[test]
    // `&[...]` is the form build scripts write.
    #[allow(clippy::needless_borrows_for_generic_args)]
    fn defaults() {
        let k = KernelCrate::new("kernels");
        assert_eq!(k.targets, None, "the build machine's GPUs by default");
        let k = k.targets(&["gfx942", "sm_90"]);
        assert_eq!(
            k.targets.as_deref(),
            Some(&["gfx942".into(), "sm_90".into()][..])
        );
        let k = k.targets(vec![String::from("gfx950")]);
        assert_eq!(k.targets.as_deref(), Some(&["gfx950".into()][..]));
        let k = k.targets(DEFAULT_TARGETS);
        assert_eq!(k.targets.as_deref().map(<[String]>::len), Some(4));
    }

    /// A folder of stand-ins for the detection tools: `nvidia-smi` printing `nvidia`'s
    /// lines, `rocm_agent_enumerator` printing `amd`'s (each left out where `None`).
    fn fake_tools(name: &str, nvidia: Option<&str>, amd: Option<&str>) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("symmem-build-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (tool, lines) in [("nvidia-smi", nvidia), ("rocm_agent_enumerator", amd)] {
            if let Some(lines) = lines {
                let script = dir.join(tool);
                std::fs::write(&script, format!("#!/bin/sh\nprintf '{lines}'\n")).unwrap();
                std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        dir
    }

    #[test]
    fn detection_builds_what_the_machine_runs() {
        // An H100 and an A100: their own PTX each.
        let nvidia = fake_tools("nvidia", Some("9.0\\n8.0\\n9.0\\n"), None);
        assert_eq!(
            detect_on(Some(nvidia.clone().into_os_string())),
            ["sm_90", "sm_80"]
        );
        // A V100 (7.0) has no target; an MI300X and the CPU agent (gfx000).
        let mixed = fake_tools(
            "mixed",
            Some("7.0\\n"),
            Some("gfx000\\ngfx942\\ngfx1100\\n"),
        );
        assert_eq!(detect_on(Some(mixed.clone().into_os_string())), ["gfx942"]);
        // No tool answers: no GPU, no code object.
        let none = fake_tools("none", None, None);
        assert!(detect_on(Some(none.clone().into_os_string())).is_empty());
        // A tool that fails (a driver not loaded) counts as none.
        let failing = fake_tools("failing", Some("x"), None);
        std::fs::write(failing.join("nvidia-smi"), "#!/bin/sh\nexit 9\n").unwrap();
        assert!(detect_on(Some(failing.clone().into_os_string())).is_empty());
        for dir in [nvidia, mixed, none, failing] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn missing_kernel_crate_is_named() {
        let dir = std::env::temp_dir().join(format!("symmem-build-missing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A folder without a Cargo.toml, then no folder at all.
        for path in [dir.clone(), dir.join("nope")] {
            let e = KernelCrate::new(&path)
                .targets(["sm_90"])
                .build_in(dir.join("out"));
            match e {
                Err(BuildError::KernelCrateNotFound { path: p }) => assert_eq!(p, path),
                other => panic!("{other:?}"),
            }
        }
        std::fs::write(dir.join("Cargo.toml"), "[workspace]\n").unwrap();
        let e = KernelCrate::new(&dir)
            .targets(["sm_90"])
            .build_in(dir.join("out"))
            .unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(e, BuildError::NotAPackage { .. }), "{e}");
        assert!(e.to_string().contains("has no [package] name"), "{e}");
    }

    #[test]
    fn build_outside_a_build_script() {
        if std::env::var_os("OUT_DIR").is_none() {
            let e = KernelCrate::new("kernels").build().unwrap_err();
            assert!(matches!(e, BuildError::NotInBuildScript));
            assert!(e.to_string().contains("build script"), "{e}");
        }
    }

    #[test]
    fn debug_is_display() {
        let e = BuildError::Failed {
            what: "building x for sm_90".into(),
            stderr: "error: expected one of `!` or `::`\n --> src/lib.rs:3:1\n  |\n".into(),
        };
        assert_eq!(format!("{e:?}"), format!("{e}"));
        assert!(format!("{e:?}").contains("\n --> src/lib.rs:3:1\n"));
    }

    #[test]
    fn nested_dir_from_out_dir() {
        let cases = [
            (
                "/p/target/debug/build/app-0123abcd/out",
                "/p/target/symmem-device",
            ),
            (
                "/p/target/debug/build/app/0123abcd/out",
                "/p/target/symmem-device",
            ),
            (
                "/p/target/release/build/build/0123abcd/out",
                "/p/target/symmem-device",
            ),
            (
                "/p/target/release/build/build-0123/out",
                "/p/target/symmem-device",
            ),
            (
                "/p/target/x86_64-unknown-linux-gnu/release/build/app-01/out",
                "/p/target/x86_64-unknown-linux-gnu/symmem-device",
            ),
            ("/tmp/somewhere", "/tmp/somewhere/symmem-device"),
            ("/build/x/out", "/build/x/out/symmem-device"),
        ];
        for (out, nested) in cases {
            assert_eq!(nested_dir_for(Path::new(out)), Path::new(nested), "{out}");
        }
    }

    #[test]
    fn table_is_one_typed_expression() {
        let objects = [
            CodeObject {
                target: Target::new("gfx942").unwrap(),
                path: "/o/k-gfx942.hsaco".into(),
            },
            CodeObject {
                target: Target::new("sm_90").unwrap(),
                path: "/o/a \"quoted\" dir/k-sm_90.ptx".into(),
            },
        ];
        let text = table_source(&objects).unwrap();
        assert!(
            text.contains("(\"gfx942\", include_bytes!(\"/o/k-gfx942.hsaco\")),"),
            "{text}"
        );
        assert!(
            text.contains("(\"sm_90\", include_bytes!(\"/o/a \\\"quoted\\\" dir/k-sm_90.ptx\")),"),
            "{text}"
        );
        assert!(table_source(&[]).unwrap().contains("&[\n    ];"));
    }

    #[test]
    fn outer_environment_is_scrubbed() {
        for outer in [
            "CARGO",
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_CFG_TARGET_ARCH",
            "CARGO_FEATURE_STD",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "CARGO_PROFILE_RELEASE_LTO",
            "CARGO_MAKEFLAGS",
            "RUSTC",
            "RUSTC_WRAPPER",
            "RUSTC_WORKSPACE_WRAPPER",
            "RUSTFLAGS",
            "TARGET",
            "HOST",
            "PROFILE",
            "OPT_LEVEL",
            "DEBUG",
            "NUM_JOBS",
            "OUT_DIR",
            "__CARGO_DEFAULT_LIB_METADATA",
        ] {
            assert!(is_outer_build_variable(outer), "{outer}");
        }
        for kept in [
            "CARGO_HOME",
            "CARGO_NET_OFFLINE",
            "CARGO_HTTP_PROXY",
            "CARGO_REGISTRIES_CRATES_IO_PROTOCOL",
            "RUSTUP_TOOLCHAIN",
            "RUSTUP_HOME",
            "PATH",
            "HOME",
            "SYMMEM_GPU_TARGETS",
        ] {
            assert!(!is_outer_build_variable(kept), "{kept}");
        }
    }

    #[test]
    fn toml_strings_and_hashes() {
        assert_eq!(toml_string("/a b/\"c\"\\d"), "\"/a b/\\\"c\\\"\\\\d\"");
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn writes_are_whole_and_skipped_when_unchanged() {
        let dir = std::env::temp_dir().join(format!("symmem-build-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("script");
        write_executable(&file, b"#!/bin/sh\n").unwrap();
        let before = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        write_executable(&file, b"#!/bin/sh\n").unwrap();
        assert_eq!(
            std::fs::metadata(&file).unwrap().modified().unwrap(),
            before
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o111, 0o111, "{mode:o}");
        }
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(leftovers, 1);
    }

    #[test]
    fn manifests_of_sources() {
        let dir =
            std::env::temp_dir().join(format!("symmem-build-manifests-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("k/src/m")).unwrap();
        std::fs::write(dir.join("k/Cargo.toml"), "").unwrap();
        let found = package_manifests(&[dir.join("k/src/lib.rs"), dir.join("k/src/m/x.rs")]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, [dir.join("k/Cargo.toml")]);
    }
}
