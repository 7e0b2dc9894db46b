//! The toolchain the nested builds run with, and the checks that it can build GPU
//! kernels at all: a nightly `rustc`, the `rust-src` component (for `-Zbuild-std`) and
//! the `llvm-tools` component (the linkers' tools).
//!
//! Device code builds with [`PINNED_NIGHTLY`] whatever toolchain builds the application
//! (stable, a `rust-toolchain.toml`, `cargo +toolchain`, `RUSTUP_TOOLCHAIN`): rustup is
//! asked for that toolchain's own `cargo` and `rustc` (`rustup which --toolchain`, never
//! installing anything by itself). `SYMMEM_DEVICE_TOOLCHAIN` names another toolchain.
//! Without rustup, the outer build's own toolchain is used if it is a nightly.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::BuildError;
use crate::process::run;

/// The nightly device code is built with, whatever toolchain builds the host code: the
/// one place that names it (symmem's own `rust-toolchain.toml` and `.ci/setup` are
/// checked against it).
pub const PINNED_NIGHTLY: &str = "nightly-2026-09-15";

/// The environment variable that names another toolchain for device code.
pub const TOOLCHAIN_ENV: &str = "SYMMEM_DEVICE_TOOLCHAIN";

/// The tools the link steps run, in `<sysroot>/lib/rustlib/<host>/bin`.
pub const LLVM_TOOLS: [&str; 5] = ["llvm-link", "opt", "llc", "llvm-as", "rust-lld"];

/// A Rust toolchain: its `cargo` and `rustc`, what `rustc -vV` says, and its sysroot.
#[derive(Clone, Debug)]
pub(crate) struct Toolchain {
    pub cargo: PathBuf,
    pub rustc: PathBuf,
    /// The whole `rustc -vV` text (part of the IR library's hash).
    pub verbose_version: String,
    pub host: String,
    pub sysroot: PathBuf,
    /// Its rustup name, if known (what the nested build's `RUSTUP_TOOLCHAIN` is).
    pub name: Option<String>,
}

impl Toolchain {
    /// The toolchain for device code: [`PINNED_NIGHTLY`] (or `$SYMMEM_DEVICE_TOOLCHAIN`)
    /// through rustup; without rustup, the running build's own. Checked with
    /// [`check_nightly`] and [`check_components`].
    ///
    /// Errors: [`BuildError::MissingToolchain`] with the `rustup toolchain install`
    /// command when rustup does not have it; the checks' errors.
    pub fn device() -> Result<Self, BuildError> {
        let wanted = std::env::var(TOOLCHAIN_ENV)
            .ok()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| PINNED_NIGHTLY.to_owned());
        match rustup() {
            Some(rustup) => {
                let cargo = rustup_which(&rustup, &wanted, "cargo")?;
                let rustc = rustup_which(&rustup, &wanted, "rustc")?;
                Self::at(cargo, rustc, Some(wanted))
            }
            None => {
                let cargo = std::env::var_os("CARGO").map_or_else(|| "cargo".into(), PathBuf::from);
                let rustc = std::env::var_os("RUSTC")
                    .filter(|r| !r.is_empty())
                    .map_or_else(|| rustc_beside(&cargo), PathBuf::from);
                Self::at(cargo, rustc, None)
            }
        }
    }

    /// The toolchain of `cargo` and `rustc`, checked; `name` is its rustup name if known.
    fn at(cargo: PathBuf, rustc: PathBuf, name: Option<String>) -> Result<Self, BuildError> {
        let mut vv = Command::new(&rustc);
        vv.arg("-vV");
        let verbose_version = run(vv, "rustc -vV")?;
        let mut sysroot = Command::new(&rustc);
        sysroot.args(["--print", "sysroot"]);
        let sysroot = PathBuf::from(run(sysroot, "rustc --print sysroot")?.trim());
        let name = toolchain_name(&sysroot, name);
        let host = check_nightly(&verbose_version, &rustc, name.as_deref())?;
        check_components(&sysroot, &host, name.as_deref())?;
        Ok(Self {
            cargo,
            rustc,
            verbose_version,
            host,
            sysroot,
            name,
        })
    }

    /// llvm-tools' bin folder.
    pub fn llvm_bin(&self) -> PathBuf {
        llvm_bin(&self.sysroot, &self.host)
    }
}

/// The rustup executable: `$RUSTUP`, `$CARGO_HOME/bin/rustup` (default `~/.cargo`), or
/// `rustup` on `PATH`; `None` where there is none.
fn rustup() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    std::env::var_os("RUSTUP")
        .map(PathBuf::from)
        .into_iter()
        .chain(home.map(|h| h.join("bin/rustup")))
        .find(|p| p.exists())
        .or_else(|| {
            Command::new("rustup")
                .arg("--version")
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|_| PathBuf::from("rustup"))
        })
}

/// The path of `tool` (`cargo`, `rustc`) of rustup toolchain `toolchain`, without
/// installing it. Errors: [`BuildError::MissingToolchain`].
fn rustup_which(rustup: &Path, toolchain: &str, tool: &str) -> Result<PathBuf, BuildError> {
    let out = Command::new(rustup)
        .args(["which", "--toolchain", toolchain, tool])
        .env("RUSTUP_AUTO_INSTALL", "0")
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .map_err(|error| BuildError::Spawn {
            program: rustup.display().to_string(),
            error,
        })?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && path.exists() {
        Ok(path)
    } else {
        Err(BuildError::MissingToolchain {
            toolchain: toolchain.to_owned(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// `<sysroot>/lib/rustlib/<host>/bin`.
pub(crate) fn llvm_bin(sysroot: &Path, host: &str) -> PathBuf {
    sysroot.join("lib/rustlib").join(host).join("bin")
}

/// The `rustc` in the folder of `cargo`, if there is one, else `rustc` from `PATH`.
pub(crate) fn rustc_beside(cargo: &Path) -> PathBuf {
    let rustc = cargo.with_file_name("rustc");
    if rustc.exists() {
        rustc
    } else {
        PathBuf::from("rustc")
    }
}

/// The rustup name of the toolchain at `sysroot` (rustup keeps each in
/// `toolchains/<name>`), else `rustup_toolchain` (`$RUSTUP_TOOLCHAIN`).
pub(crate) fn toolchain_name(sysroot: &Path, rustup_toolchain: Option<String>) -> Option<String> {
    let in_rustup = sysroot
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|p| p == "toolchains");
    in_rustup
        .then(|| sysroot.file_name()?.to_str().map(str::to_owned))
        .flatten()
        .or(rustup_toolchain.filter(|t| !t.is_empty()))
}

/// The host triple in `rustc -vV` text `vv`, or [`BuildError::NotNightly`] if the
/// release is not a nightly (or a local `-dev` build).
pub(crate) fn check_nightly(
    vv: &str,
    rustc: &Path,
    toolchain: Option<&str>,
) -> Result<String, BuildError> {
    let field = |key: &str| {
        vv.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_owned())
    };
    let release = field("release:").unwrap_or_default();
    if !(release.contains("-nightly") || release.contains("-dev")) {
        return Err(BuildError::NotNightly {
            rustc: rustc.to_owned(),
            release,
            toolchain: toolchain.map(str::to_owned),
        });
    }
    field("host:").ok_or_else(|| BuildError::Failed {
        what: format!("reading the host triple from `{} -vV`", rustc.display()),
        stderr: vv.to_owned(),
    })
}

/// [`BuildError::MissingRustSrc`] or [`BuildError::MissingLlvmTools`] if the toolchain
/// at `sysroot` lacks `core`'s source or one of [`LLVM_TOOLS`].
pub(crate) fn check_components(
    sysroot: &Path,
    host: &str,
    toolchain: Option<&str>,
) -> Result<(), BuildError> {
    let core = sysroot.join("lib/rustlib/src/rust/library/core");
    if !core.join("Cargo.toml").exists() {
        return Err(BuildError::MissingRustSrc {
            toolchain: toolchain.map(str::to_owned),
            missing: core,
        });
    }
    let bin = llvm_bin(sysroot, host);
    let missing: Vec<PathBuf> = LLVM_TOOLS
        .iter()
        .map(|tool| bin.join(tool))
        .filter(|tool| !tool.exists())
        .collect();
    if !missing.is_empty() {
        return Err(BuildError::MissingLlvmTools {
            toolchain: toolchain.map(str::to_owned),
            missing,
        });
    }
    Ok(())
}

/// `rustup component add <component>` for `toolchain` (the active one if unknown).
pub(crate) fn rustup_add(component: &str, toolchain: Option<&str>) -> String {
    match toolchain {
        Some(t) => format!("rustup component add {component} --toolchain {t}"),
        None => format!("rustup component add {component}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "x86_64-unknown-linux-gnu";

    fn vv(release: &str) -> String {
        format!(
            "rustc {release} (574ff7d98 2026-09-14)\nbinary: rustc\nhost: {HOST}\nrelease: {release}\nLLVM version: 23.1.1\n"
        )
    }

    /// A fake sysroot under `toolchains/<name>` with `core`'s manifest if `rust_src`
    /// and the tools in `tools`.
    fn fake_sysroot(tag: &str, rust_src: bool, tools: &[&str]) -> PathBuf {
        let root = std::env::temp_dir()
            .join(format!(
                "symmem-build-toolchain-{}-{tag}",
                std::process::id()
            ))
            .join("toolchains/nightly-2026-09-15-x86_64-unknown-linux-gnu");
        let _ = std::fs::remove_dir_all(&root);
        let bin = llvm_bin(&root, HOST);
        std::fs::create_dir_all(&bin).unwrap();
        if rust_src {
            let core = root.join("lib/rustlib/src/rust/library/core");
            std::fs::create_dir_all(&core).unwrap();
            std::fs::write(core.join("Cargo.toml"), "").unwrap();
        }
        for tool in tools {
            std::fs::write(bin.join(tool), "").unwrap();
        }
        root
    }

    #[test]
    fn a_toolchain_rustup_lacks_is_an_install_command() {
        let Some(rustup) = rustup() else {
            println!("skipped: no rustup on this machine");
            return;
        };
        let e = rustup_which(&rustup, "nightly-1999-01-01", "cargo").unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, BuildError::MissingToolchain { .. }), "{text}");
        assert!(
            text.contains(
                "rustup toolchain install nightly-1999-01-01 --profile minimal --component rust-src,llvm-tools"
            ),
            "{text}"
        );
        // The pinned one is what this repository's own builds use: rustup has it.
        assert!(rustup_which(&rustup, PINNED_NIGHTLY, "rustc").is_ok());
    }

    #[test]
    fn the_workspace_pins_the_same_nightly() {
        // symmem's own rust-toolchain.toml (its development toolchain: Miri, codegen
        // tests) must be the nightly device code is built with.
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rust-toolchain.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.contains(&format!("channel = \"{PINNED_NIGHTLY}\"")),
            "{} does not pin {PINNED_NIGHTLY}",
            file.display()
        );
    }

    #[test]
    fn nightly_and_dev_pass_stable_and_beta_do_not() {
        let rustc = Path::new("/x/rustc");
        assert_eq!(
            check_nightly(&vv("1.100.0-nightly"), rustc, None).unwrap(),
            HOST
        );
        assert_eq!(
            check_nightly(&vv("1.100.0-dev"), rustc, None).unwrap(),
            HOST
        );
        for release in ["1.95.0", "1.96.0-beta.3"] {
            let e = check_nightly(&vv(release), rustc, Some("stable-x86_64-unknown-linux-gnu"))
                .unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, BuildError::NotNightly { .. }), "{text}");
            assert!(text.contains(release), "{text}");
            assert!(text.contains("channel = \"nightly-2026-09-15\""), "{text}");
            assert!(
                text.contains("components = [\"rust-src\", \"llvm-tools\"]"),
                "{text}"
            );
            assert!(text.contains("rust-toolchain.toml"), "{text}");
        }
    }

    #[test]
    fn missing_rust_src_says_what_to_install() {
        let sysroot = fake_sysroot("src", false, &LLVM_TOOLS);
        let name = toolchain_name(&sysroot, None);
        let e = check_components(&sysroot, HOST, name.as_deref()).unwrap_err();
        std::fs::remove_dir_all(sysroot.ancestors().nth(2).unwrap()).unwrap();
        assert!(matches!(e, BuildError::MissingRustSrc { .. }), "{e}");
        assert!(
            e.to_string().contains(
                "rustup component add rust-src --toolchain nightly-2026-09-15-x86_64-unknown-linux-gnu"
            ),
            "{e}"
        );
    }

    #[test]
    fn missing_llvm_tools_names_them_and_says_what_to_install() {
        let sysroot = fake_sysroot("tools", true, &["rust-lld", "llvm-as"]);
        let e = check_components(&sysroot, HOST, Some("my-nightly")).unwrap_err();
        let ok = check_components(&fake_sysroot("all", true, &LLVM_TOOLS), HOST, None);
        for tag in ["tools", "all"] {
            let dir = std::env::temp_dir().join(format!(
                "symmem-build-toolchain-{}-{tag}",
                std::process::id()
            ));
            std::fs::remove_dir_all(dir).unwrap();
        }
        ok.unwrap();
        let BuildError::MissingLlvmTools { missing, .. } = &e else {
            panic!("{e}");
        };
        let names: Vec<_> = missing.iter().map(|m| m.file_name().unwrap()).collect();
        assert_eq!(names, ["llvm-link", "opt", "llc"]);
        let text = e.to_string();
        assert!(
            text.contains("rustup component add llvm-tools --toolchain my-nightly"),
            "{text}"
        );
        assert!(text.contains("llvm-link, opt, llc"), "{text}");
    }

    #[test]
    fn toolchain_names() {
        let rustup =
            Path::new("/home/u/.rustup/toolchains/nightly-2026-09-15-x86_64-unknown-linux-gnu");
        assert_eq!(
            toolchain_name(rustup, Some("other".into())).as_deref(),
            Some("nightly-2026-09-15-x86_64-unknown-linux-gnu")
        );
        let plain = Path::new("/opt/rust");
        assert_eq!(
            toolchain_name(plain, Some("nightly".into())).as_deref(),
            Some("nightly")
        );
        assert_eq!(toolchain_name(plain, None), None);
        assert_eq!(
            rustup_add("rust-src", None),
            "rustup component add rust-src"
        );
    }

    #[test]
    fn pinned_nightly_matches_the_workspace_toolchain_file() {
        // Only inside symmem's own repository; the crate may be built elsewhere.
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rust-toolchain.toml");
        if let Ok(text) = std::fs::read_to_string(file) {
            assert!(
                text.contains(&format!("channel = \"{PINNED_NIGHTLY}\"")),
                "rust-toolchain.toml and PINNED_NIGHTLY disagree:\n{text}"
            );
        }
    }
}
