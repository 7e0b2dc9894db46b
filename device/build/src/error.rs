//! Why a build failed: [`BuildError`], and the message each case prints (what to
//! install or set, where the fix is known).

use std::fmt;
use std::path::PathBuf;

#[cfg(doc)]
use crate::KernelCrate;
use crate::toolchain::rustup_add;
use crate::{DEFAULT_TARGETS, PINNED_NIGHTLY, nvshmem};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_display() {
        let e = BuildError::Failed {
            what: "building x for sm_90".into(),
            stderr: "error: expected one of `!` or `::`\n --> src/lib.rs:3:1\n  |\n".into(),
        };
        assert_eq!(format!("{e:?}"), format!("{e}"));
        assert!(format!("{e:?}").contains("\n --> src/lib.rs:3:1\n"));
    }
}
