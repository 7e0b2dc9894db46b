//! Running the tools a build needs, and telling the outer cargo things through
//! `cargo:` lines.

use std::io::Write as _;
use std::process::Command;

use crate::BuildError;

/// Prints `cargo:<line>` for the calling build script's cargo.
pub(crate) fn cargo_line(line: &str) {
    // A closed stdout only loses the hint; the build itself goes on.
    let _ = writeln!(std::io::stdout(), "cargo:{line}");
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
