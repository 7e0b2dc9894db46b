//! NVSHMEM's device library for kernel crates built with it ([`KernelCrate::nvshmem`]):
//! where it is, which version it is, and that it matches the host library's.
//!
//! NVSHMEM ships its device functions as LLVM bitcode for compilers other than nvcc: one
//! `lib/libnvshmem_device.bc` in 3.2-3.4, one `lib/libnvshmem_device_sm_NN.bc` per
//! processor from 3.5 on (3.8.0's wheel: sm_70, sm_80, sm_89, sm_90, sm_100). The nvptx linker links it into each `sm_…`
//! object with `llvm-link --only-needed` before `llc`, keeps NVSHMEM's device-state
//! globals (which `nvshmemx_cumodule_init` fills in at load time), and fails if the PTX
//! still declares a function it does not define.
//!
//! [`KernelCrate::nvshmem`]: crate::KernelCrate::nvshmem

use crate::BuildError;
use crate::files::{fnv1a, rename, temp_name};
use crate::process::cargo_line;
use crate::toolchain::Toolchain;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable naming NVSHMEM's install prefix (the folder with `lib/` and
/// `include/`: an NVSHMEM release, or the `nvidia/nvshmem` folder of the `nvidia-nvshmem`
/// Python wheel). Unset, NVSHMEM's own `NVSHMEM_HOME` is read.
pub const NVSHMEM_HOME_ENV: &str = "SYMMEM_NVSHMEM_HOME";

/// NVSHMEM's own name for its install prefix, read where [`NVSHMEM_HOME_ENV`] is unset.
const NVSHMEM_OWN_HOME_ENV: &str = "NVSHMEM_HOME";

/// The globals of NVSHMEM's device library that the host library fills in
/// (`nvshmemx_cumodule_init`), kept through internalisation.
pub(crate) const DEVICE_GLOBALS: [&str; 3] = [
    "nvshmemi_device_state_d",
    "nvshmemi_ibgda_device_state_d",
    "nvshmemi_device_lib_version_d",
];

/// A version of NVSHMEM: major, minor, patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version(pub u32, pub u32, pub u32);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The install found: its folder, and the host library's version where its headers
/// are there (`include/non_abi/nvshmem_version.h`).
#[derive(Debug)]
pub(crate) struct Install {
    home: PathBuf,
    host: Option<(Version, PathBuf)>,
}

/// Finds NVSHMEM under `home` ([`NVSHMEM_HOME_ENV`], else `NVSHMEM_HOME`, where `home`
/// is `None`) and reads the host library's version from its headers, if it has them.
pub(crate) fn find(home: Option<&Path>) -> Result<Install, BuildError> {
    cargo_line(&format!("rerun-if-env-changed={NVSHMEM_HOME_ENV}"));
    cargo_line(&format!("rerun-if-env-changed={NVSHMEM_OWN_HOME_ENV}"));
    let home = match home {
        Some(home) => home.to_owned(),
        None => [NVSHMEM_HOME_ENV, NVSHMEM_OWN_HOME_ENV]
            .iter()
            .find_map(|var| std::env::var_os(var).filter(|v| !v.is_empty()))
            .map(PathBuf::from)
            .ok_or(BuildError::NvshmemNotFound { looked: None })?,
    };
    let header = home
        .join("include")
        .join("non_abi")
        .join("nvshmem_version.h");
    let host = match std::fs::read_to_string(&header) {
        Ok(text) => {
            cargo_line(&format!("rerun-if-changed={}", header.display()));
            let version = header_version(&text).ok_or_else(|| BuildError::Failed {
                what: format!("reading NVSHMEM's version from {}", header.display()),
                stderr: "no NVSHMEM_VENDOR_{MAJOR,MINOR,PATCH}_VERSION defines".to_owned(),
            })?;
            Some((version, header))
        }
        Err(_) => None,
    };
    Ok(Install { home, host })
}

/// The install's device bitcode for processor `cpu` (`sm_90`): the per-processor library
/// NVSHMEM ships from 3.5 on (`lib/libnvshmem_device_sm_NN.bc`), the newest one not newer
/// than `cpu`, else the single `lib/libnvshmem_device.bc` of 3.2-3.4; and its version,
/// checked against the host library's (the same major and minor version, as
/// `nvshmemx_cumodule_init` requires at load time).
pub(crate) fn bitcode_for(
    install: &Install,
    cpu: &str,
    toolchain: &Toolchain,
) -> Result<(PathBuf, Version), BuildError> {
    let lib = install.home.join("lib");
    let arch = |name: &str| -> Option<u32> {
        name.strip_prefix("libnvshmem_device_sm_")?
            .strip_suffix(".bc")?
            .parse()
            .ok()
    };
    let wanted = cpu.strip_prefix("sm_").and_then(|a| {
        a.trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .parse::<u32>()
            .ok()
    });
    let per_processor = std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((arch(e.file_name().to_str()?)?, e.path())))
        .filter(|(a, _)| wanted.is_some_and(|w| *a <= w))
        .max_by_key(|(a, _)| *a)
        .map(|(_, path)| path);
    let single = lib.join("libnvshmem_device.bc");
    let bitcode = match per_processor {
        Some(path) => path,
        None if single.is_file() => single,
        None => {
            return Err(BuildError::NvshmemNotFound {
                looked: Some(lib.join(format!("libnvshmem_device_{cpu}.bc"))),
            });
        }
    };
    cargo_line(&format!("rerun-if-changed={}", bitcode.display()));
    let version = bitcode_version(&bitcode, toolchain)?;
    match &install.host {
        Some((host, header)) if (host.0, host.1) != (version.0, version.1) => {
            return Err(BuildError::NvshmemVersionMismatch {
                bitcode,
                bitcode_version: version,
                header: header.clone(),
                host_version: *host,
            });
        }
        Some(_) => {}
        None => cargo_line(&format!(
            "warning=NVSHMEM {version}'s device bitcode has no headers beside it (in {}): \
             its version is checked against the host library's only when a module is loaded",
            install.home.display()
        )),
    }
    Ok((bitcode, version))
}

/// The version in the bitcode's `nvshmemi_device_lib_version_d` initialiser
/// (`{ i32 major, i32 minor, i32 patch }`), read with llvm-dis.
fn bitcode_version(bitcode: &Path, toolchain: &Toolchain) -> Result<Version, BuildError> {
    use std::io::BufRead;
    let program = toolchain.llvm_bin().join("llvm-dis");
    let what = format!("llvm-dis of {}", bitcode.display());
    // Read as it comes and stopped at the global, which comes early (line 520 of 3.8.0's
    // sm_90 library, whose whole text is 460 MB): not held in memory.
    let mut dis = Command::new(&program)
        .arg(bitcode)
        .args(["-o", "-"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|error| BuildError::Spawn {
            program: program.display().to_string(),
            error,
        })?;
    let version = dis.stdout.take().and_then(|out| {
        std::io::BufReader::new(out)
            .lines()
            .map_while(|line| line.ok())
            .find(|l| l.starts_with("@nvshmemi_device_lib_version_d "))
            .and_then(|line| ir_version(&line))
    });
    // Done with it either way (it may still be writing the rest).
    let _ = dis.kill();
    let _ = dis.wait();
    version.ok_or_else(|| BuildError::Failed {
        what,
        stderr: "it defines no nvshmemi_device_lib_version_d = { i32, i32, i32 }: not \
                 NVSHMEM's device library (lib/libnvshmem_device.bc), or llvm-dis could not \
                 read it"
            .to_owned(),
    })
}

/// The three `i32` constants of the global's initialiser in an IR line.
fn ir_version(line: &str) -> Option<Version> {
    let start = line.find('{')?;
    let end = start + line[start..].find('}')?;
    let numbers: Vec<u32> = line[start + 1..end]
        .split(',')
        .map(|field| field.trim().strip_prefix("i32 ")?.trim().parse().ok())
        .collect::<Option<_>>()?;
    match numbers[..] {
        [major, minor, patch] => Some(Version(major, minor, patch)),
        _ => None,
    }
}

/// The host library's version from `nvshmem_version.h`'s vendor defines.
fn header_version(text: &str) -> Option<Version> {
    let define = |name: &str| {
        text.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("#define") && words.next() == Some(name))
                .then(|| words.next()?.parse().ok())
                .flatten()
        })
    };
    Some(Version(
        define("NVSHMEM_VENDOR_MAJOR_VERSION")?,
        define("NVSHMEM_VENDOR_MINOR_VERSION")?,
        define("NVSHMEM_VENDOR_PATCH_VERSION")?,
    ))
}

/// A copy of the install's bitcode in the tools folder `dir`, named by a hash of its
/// bytes: the linker argument that names it changes with its contents, so cargo relinks
/// the kernels when the library changes (it does not look at a named file's contents).
pub(crate) fn staged_copy(
    dir: &Path,
    bitcode: &Path,
    version: Version,
) -> Result<PathBuf, BuildError> {
    let bytes = std::fs::read(bitcode).map_err(|error| BuildError::Io {
        path: bitcode.to_owned(),
        error,
    })?;
    let path = dir.join(format!(
        "libnvshmem_device-{version}-{:016x}.bc",
        fnv1a(&bytes)
    ));
    if !path.is_file() {
        let tmp = temp_name(&path);
        std::fs::write(&tmp, &bytes).map_err(|error| BuildError::Io {
            path: tmp.clone(),
            error,
        })?;
        rename(&tmp, &path)?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_ir_and_headers() {
        let line = "@nvshmemi_device_lib_version_d = addrspace(4) externally_initialized \
                    global %struct.nvshmemi_version_t { i32 3, i32 4, i32 5 }, align 4";
        assert_eq!(ir_version(line), Some(Version(3, 4, 5)));
        assert_eq!(ir_version("@x = global { i32 3, i64 4 }"), None);
        assert_eq!(ir_version("@x = global i32 0"), None);
        let header = "#ifndef V\n#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n\
                      #define NVSHMEM_VENDOR_MINOR_VERSION 4\n\
                      #define NVSHMEM_VENDOR_PATCH_VERSION 5\n#endif\n";
        assert_eq!(header_version(header), Some(Version(3, 4, 5)));
        assert_eq!(
            header_version("#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n"),
            None
        );
    }
}
