//! The nested area's `tools` folder: the linker scripts shipped in `src/link/` and the
//! amdgcn IR library assembled from [`amdgpu_ir`], written under names that carry a
//! hash of their contents; and [`llvm_tools_bin`], the folder of the tools they run.

use std::path::{Path, PathBuf};
use std::process::Command;

#[cfg(doc)]
use crate::KernelCrate;
use crate::files::{create_dir, fnv1a, rename, temp_name, write_executable, write_if_changed};
use crate::process::run;
use crate::toolchain::Toolchain;
use crate::{BuildError, Family, Target, amdgpu_ir};

/// The amdgcn linker script (a shell script, run as `-Clinker=`).
const AMDGPU_LLD: &str = include_str!("link/amdgpu-lld");
/// The nvptx64 linker script (a shell script, run as `-Clinker=`).
const NVPTX_LINK: &str = include_str!("link/nvptx-link");

/// The linker scripts and the amdgcn IR library, written to the nested area's `tools`
/// folder under names carrying a hash of their contents: the names reach the nested
/// build's flags (`-Clinker=`, `-Clink-arg=`), which cargo fingerprints, so a changed
/// script or library relinks the kernels (cargo does not look at the contents of a
/// linker or of a file named in a link argument).
pub(crate) struct Tools {
    pub(crate) amdgpu_lld: PathBuf,
    pub(crate) nvptx_link: PathBuf,
    /// The assembled IR library, if an amdgcn target is built.
    pub(crate) amdgpu_ir: Option<PathBuf>,
    /// NVSHMEM's device bitcode per `sm_…` target, for crates built with it
    /// ([`KernelCrate::nvshmem`]).
    pub(crate) nvshmem: Vec<(String, PathBuf)>,
}

impl Tools {
    pub(crate) fn install(
        dir: &Path,
        toolchain: &Toolchain,
        targets: &[Target],
    ) -> Result<Self, BuildError> {
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
