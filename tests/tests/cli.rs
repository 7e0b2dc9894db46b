//! The test programs' command lines, as clap gives them (`engine-ranks`, `engine-kill`,
//! `mpi-split`, built with the `mpi` feature as `engine_mpi.rs` builds them, and run without
//! `mpirun`): `--help` prints to stdout and exits 0, before any MPI; a bad flag or value
//! exits 2 with an error on stderr that names it and what it accepts.
//!
//! Without `mpirun` on PATH these tests fail, unless `SYMMEM_SKIP_MPI=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use symmem_tests::mpi::{self, mpirun_available};

fn run(exe: &Path, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()))
}

/// `engine-ranks`, `engine-kill` and `mpi-split`, or `None` where the MPI tests are
/// skipped.
fn programs() -> Option<(PathBuf, PathBuf, PathBuf)> {
    mpirun_available().then(|| {
        (
            mpi::build("symmem-tests", "mpi", "engine-ranks"),
            mpi::build("symmem-tests", "mpi", "engine-kill"),
            mpi::build("symmem-tests", "mpi", "mpi-split"),
        )
    })
}

#[test]
fn help_is_on_stdout_and_succeeds() {
    let Some((engine_ranks, engine_kill, mpi_split)) = programs() else {
        return;
    };
    for (exe, words) in [
        (&engine_ranks, &["--cuda"][..]),
        (&engine_kill, &["[DEADLINE]", "[default: 5]"]),
        (&mpi_split, &["--threading", "multiple", "funneled"]),
    ] {
        let out = run(exe, &["--help"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{exe:?}: {out:?}");
        for word in words {
            assert!(stdout.contains(word), "{exe:?}: {word} not in:\n{stdout}");
        }
        assert!(out.stderr.is_empty(), "{exe:?}: {out:?}");
    }
}

#[test]
fn a_bad_value_names_the_flag_and_the_accepted_values() {
    let Some((engine_ranks, engine_kill, mpi_split)) = programs() else {
        return;
    };
    for (exe, args, names) in [
        (
            &mpi_split,
            &["--threading", "serialized"][..],
            &["--threading", "multiple, funneled"][..],
        ),
        (&engine_ranks, &["--cuda=yes"], &["--cuda", "yes"]),
        (&engine_ranks, &["--hip"], &["--hip"]),
        (
            &engine_kill,
            &["five"],
            &["DEADLINE", "five", "positive number of seconds"],
        ),
        (
            &engine_kill,
            &["0"],
            &["DEADLINE", "positive number of seconds"],
        ),
    ] {
        let out = run(exe, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{exe:?} {args:?}: {out:?}");
        for name in names {
            assert!(
                stderr.contains(name),
                "{exe:?} {args:?}: `{name}` not in:\n{stderr}"
            );
        }
        assert!(out.stdout.is_empty(), "{exe:?} {args:?}: {out:?}");
    }
}
