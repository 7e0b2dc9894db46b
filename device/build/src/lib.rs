//! Builds the kernel crate in `device/kernels` into one code object per GPU target.
//!
//! Used from `host/build.rs`, so a plain `cargo build` of the host crate produces and
//! embeds every code object. Each target is a nested `cargo build -Zbuild-std=core` in
//! its own target directory (no lock contention with the outer build), with the target's
//! linker from `device/link/`:
//!
//! * amdgcn (`gfx942`, `gfx950`): rust-lld under `-Clinker-plugin-lto`, linking the
//!   LLVM IR library from [`amdgpu_ir`] (dispatch-packet reads and scoped fences that
//!   Rust cannot spell on amdgcn) into the kernels;
//! * nvptx64 (`sm_90`): llvm-link, opt and llc from llvm-tools, in place of the
//!   llvm-bitcode-linker rustc would want.

pub mod amdgpu_ir;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The GPU instruction-set families symmem builds for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// AMD GPUs, `amdgcn-amd-amdhsa`; code objects are ELF `.hsaco` files.
    Amdgpu,
    /// NVIDIA GPUs, `nvptx64-nvidia-cuda`; code objects are PTX text.
    Nvptx,
}

/// One GPU target: a family and a processor name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// The instruction-set family.
    pub family: Family,
    /// The processor (`gfx942`, `gfx950`, `sm_90`): the code object runs on it.
    pub cpu: &'static str,
}

/// Every target symmem ships code objects for.
pub const TARGETS: [Target; 3] = [
    Target {
        family: Family::Amdgpu,
        cpu: "gfx942",
    },
    Target {
        family: Family::Amdgpu,
        cpu: "gfx950",
    },
    Target {
        family: Family::Nvptx,
        cpu: "sm_90",
    },
];

impl Target {
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

    /// The file name of module `module`'s code object for this target, e.g.
    /// `symmem_device-gfx942.hsaco`.
    pub fn file_name(&self, module: &str) -> String {
        format!("{module}-{}.{}", self.cpu, self.extension())
    }
}

/// A built code object on disk.
#[derive(Clone, Debug)]
pub struct CodeObject {
    /// The target it was built for.
    pub target: Target,
    /// Where it is.
    pub path: PathBuf,
}

/// Why a build failed; the nested build's output is kept.
#[derive(Debug)]
pub enum BuildError {
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
        /// Its standard error.
        stderr: String,
    },
    /// A file could not be written or copied.
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Spawn { program, error } => write!(f, "cannot run {program}: {error}"),
            Self::Failed { what, stderr } => write!(f, "{what} failed:\n{stderr}"),
            Self::Io { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for BuildError {}

/// Where the project's pieces are and which tools to use.
#[derive(Clone, Debug)]
pub struct Builder {
    workspace: PathBuf,
    target_dir: PathBuf,
    cargo: PathBuf,
}

/// The kernel crate's module name: the stem of every code object file.
pub const DEVICE_MODULE: &str = "symmem_device";

impl Builder {
    /// A builder for the workspace at `workspace`, putting nested builds and code objects
    /// under `target_dir` (`<target_dir>/device/<cpu>/` and `<target_dir>/code-objects/`).
    pub fn new(workspace: impl Into<PathBuf>, target_dir: impl Into<PathBuf>) -> Self {
        let cargo = std::env::var_os("CARGO").map_or_else(|| "cargo".into(), PathBuf::from);
        Self {
            workspace: workspace.into(),
            target_dir: target_dir.into(),
            cargo,
        }
    }

    /// The folder the finished code objects are copied to.
    pub fn code_object_dir(&self) -> PathBuf {
        self.target_dir.join("code-objects")
    }

    /// The folders whose contents the code objects depend on (for `rerun-if-changed`).
    pub fn inputs(&self) -> Vec<PathBuf> {
        [
            "crates",
            "device/kernels",
            "device/link",
            "device/build/src",
            "rust-toolchain.toml",
        ]
        .iter()
        .map(|p| self.workspace.join(p))
        .collect()
    }

    /// Builds every target in [`TARGETS`], returning the code objects in that order.
    pub fn build_all(&self) -> Result<Vec<CodeObject>, BuildError> {
        let llvm_bin = llvm_tools_bin(&self.cargo)?;
        let ir_library = self.amdgpu_ir_library(&llvm_bin)?;
        TARGETS
            .iter()
            .map(|t| self.build(*t, &llvm_bin, &ir_library))
            .collect()
    }

    /// Writes and assembles the IR library. Its file name carries a hash of its text:
    /// the name reaches the nested build's flags (`-Clink-arg=`), which cargo
    /// fingerprints, so a changed library relinks the kernels (cargo does not look at
    /// the contents of a file named in a link argument).
    fn amdgpu_ir_library(&self, llvm_bin: &Path) -> Result<PathBuf, BuildError> {
        use std::hash::{Hash, Hasher};
        let dir = self.target_dir.join("device");
        create_dir(&dir)?;
        let layout = data_layout(&self.cargo, "amdgcn-amd-amdhsa")?;
        let text = amdgpu_ir::library(&layout);
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        let stem = format!("symmem_amdgpu-{:016x}", hasher.finish());
        let ll = dir.join(format!("{stem}.ll"));
        let bc = dir.join(format!("{stem}.bc"));
        write_if_changed(&ll, &text)?;
        let mut as_ = Command::new(llvm_bin.join("llvm-as"));
        as_.arg(&ll).arg("-o").arg(&bc);
        run(as_, "llvm-as of the amdgpu IR library")?;
        Ok(bc)
    }

    fn build(&self, target: Target, llvm_bin: &Path, ir: &Path) -> Result<CodeObject, BuildError> {
        let target_dir = self.target_dir.join("device").join(target.cpu);
        let link = self.workspace.join("device/link");
        let mut cargo = Command::new(&self.cargo);
        let mut flags = vec![format!("-Ctarget-cpu={}", target.cpu)];
        match target.family {
            Family::Amdgpu => flags.extend([
                "-Clinker-plugin-lto".to_owned(),
                format!("-Clinker={}", link.join("amdgpu-lld").display()),
                format!("-Clink-arg={}", ir.display()),
            ]),
            Family::Nvptx => {
                flags.push(format!("-Clinker={}", link.join("nvptx-link").display()));
                // rustc's own fat LTO hands nvptx-link one complete bitcode module.
                // (amdgcn does its LTO in the linker, and must not get this.)
                cargo.env("CARGO_PROFILE_RELEASE_LTO", "fat");
            }
        }
        // A build script's environment describes the *outer* build (its target, profile,
        // flags, wrappers); none of it may leak into the nested one.
        for (var, _) in std::env::vars_os() {
            let name = var.to_string_lossy();
            let outer = (name.starts_with("CARGO_") && name != "CARGO_HOME")
                || name.starts_with("RUSTC")
                || [
                    "RUSTFLAGS",
                    "RUSTDOCFLAGS",
                    "TARGET",
                    "HOST",
                    "OPT_LEVEL",
                    "PROFILE",
                    "DEBUG",
                    "NUM_JOBS",
                    "OUT_DIR",
                ]
                .contains(&name.as_ref());
            if outer {
                cargo.env_remove(&var);
            }
        }
        cargo
            .current_dir(&self.workspace)
            .env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"))
            .env("SYMMEM_LLVM_BIN", llvm_bin)
            .env("SYMMEM_PTX_CPU", target.cpu)
            .args([
                "build",
                "--release",
                "--quiet",
                "-Zbuild-std=core",
                "--target",
            ])
            .arg(target.triple())
            .arg("--manifest-path")
            .arg(self.workspace.join("device/kernels/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir);
        run(
            cargo,
            &format!("building {DEVICE_MODULE} for {}", target.cpu),
        )?;
        let built_name = match target.family {
            Family::Amdgpu => format!("{DEVICE_MODULE}.elf"),
            Family::Nvptx => format!("{DEVICE_MODULE}.ptx"),
        };
        let built = target_dir
            .join(target.triple())
            .join("release")
            .join(built_name);
        let dir = self.code_object_dir();
        create_dir(&dir)?;
        let path = dir.join(target.file_name(DEVICE_MODULE));
        std::fs::copy(&built, &path).map_err(|error| BuildError::Io { path: built, error })?;
        Ok(CodeObject { target, path })
    }
}

/// The LLVM data layout rustc uses for `triple`, read from its target spec.
pub fn data_layout(cargo: &Path, triple: &str) -> Result<String, BuildError> {
    let mut cmd = Command::new(rustc_beside(cargo));
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

fn rustc_beside(cargo: &Path) -> PathBuf {
    let rustc = cargo.with_file_name("rustc");
    if rustc.exists() {
        rustc
    } else {
        PathBuf::from("rustc")
    }
}

/// llvm-tools' bin folder of the toolchain `cargo` belongs to.
pub fn llvm_tools_bin(cargo: &Path) -> Result<PathBuf, BuildError> {
    let rustc = rustc_beside(cargo);
    let mut cmd = Command::new(&rustc);
    cmd.args(["--print", "sysroot"]);
    let sysroot = run(cmd, "rustc --print sysroot")?;
    let mut cmd = Command::new(&rustc);
    cmd.args(["--print", "host-tuple"]);
    let host = run(cmd, "rustc --print host-tuple")?;
    Ok(PathBuf::from(sysroot.trim())
        .join("lib/rustlib")
        .join(host.trim())
        .join("bin"))
}

fn run(mut cmd: Command, what: &str) -> Result<String, BuildError> {
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

fn write_if_changed(path: &Path, text: &str) -> Result<(), BuildError> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    std::fs::write(path, text).map_err(|error| BuildError::Io {
        path: path.to_owned(),
        error,
    })
}
