//! Files written whole: through a temporary file and a rename, and not at all where the
//! contents are already there; copies; and the stable hash that names files by their
//! contents.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::BuildError;

/// 64-bit FNV-1a: a stable hash for file names (the same on every toolchain).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

pub(crate) fn create_dir(dir: &Path) -> Result<(), BuildError> {
    std::fs::create_dir_all(dir).map_err(|error| BuildError::Io {
        path: dir.to_owned(),
        error,
    })
}

/// A name beside `path` no other process uses.
pub(crate) fn temp_name(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(".tmp-{}-{n}", std::process::id()));
    path.with_file_name(name)
}

pub(crate) fn rename(from: &Path, to: &Path) -> Result<(), BuildError> {
    std::fs::rename(from, to).map_err(|error| BuildError::Io {
        path: to.to_owned(),
        error,
    })
}

/// Writes `bytes` to `path` unless it already holds them (keeping its mtime), through a
/// temporary file and a rename, so a concurrent reader sees the old or the new file,
/// never a part.
pub(crate) fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    write_file(path, bytes, 0o644)
}

/// [`write_if_changed`] for a script to run: mode 0755 on Unix.
pub(crate) fn write_executable(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
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

pub(crate) fn copy(from: &Path, to: &Path) -> Result<(), BuildError> {
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
    fn hashes() {
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
}
