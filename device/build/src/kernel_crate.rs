//! The public builder, [`KernelCrate`], and its options (targets, nested area, variant,
//! NVSHMEM), and [`KernelCrate::build_in`], which runs one build's steps in order: the
//! target list, the kernel crate's names, the tools, the wrapper, the nested builds side
//! by side, the code objects and the table, the `cargo:rerun-if-…` lines.

use std::path::{Path, PathBuf};

use crate::files::{copy, create_dir, write_if_changed};
use crate::output::table_source;
use crate::process::cargo_line;
use crate::targets::{GPU_LISTS, split_targets};
use crate::toolchain::Toolchain;
use crate::tools::Tools;
use crate::wrapper::Wrapper;
use crate::{
    ALL_DEFAULTS, BuildError, Built, CodeObject, DEFAULT_TARGETS, Family, OUTPUT_FOLDER,
    TARGETS_ENV, TOOLCHAIN_ENV, Target, depinfo, detected_targets, manifest, nvshmem,
};

/// The environment variable that, when set (and not empty), is the nested area of every
/// [`KernelCrate`] that does not set [`KernelCrate::nested_dir`]: builds of several target
/// directories (a second profile, a build with other features in a target directory of
/// its own) that name one area build `core` and each kernel crate once per GPU target
/// between them.
pub const NESTED_DIR_ENV: &str = "SYMMEM_DEVICE_BUILD_DIR";

/// Set by docs.rs while it documents a crate: no code object is built then.
const DOCS_RS_ENV: &str = "DOCS_RS";

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
pub(crate) struct Variant {
    pub(crate) name: String,
    pub(crate) feature: String,
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

/// `CARGO_HOME`, or its default `~/.cargo`.
fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from(".cargo"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
