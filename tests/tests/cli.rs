//! The test programs' command lines, as clap gives them (`engine-ranks`, `engine-kill`;
//! built with `--features mpi`): `--help` prints to stdout and exits 0, before any MPI;
//! a bad flag or value exits 2 with an error on stderr that names it and what it accepts.
#![cfg(feature = "mpi")]

use std::process::{Command, Output};

fn run(exe: &str, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {exe}: {e}"))
}

const ENGINE_RANKS: &str = env!("CARGO_BIN_EXE_engine-ranks");
const ENGINE_KILL: &str = env!("CARGO_BIN_EXE_engine-kill");

#[test]
fn help_is_on_stdout_and_succeeds() {
    for (exe, words) in [
        (ENGINE_RANKS, &["--cuda"][..]),
        (ENGINE_KILL, &["[DEADLINE]", "[default: 5]"]),
    ] {
        let out = run(exe, &["--help"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{exe}: {out:?}");
        for word in words {
            assert!(stdout.contains(word), "{exe}: {word} not in:\n{stdout}");
        }
        assert!(out.stderr.is_empty(), "{exe}: {out:?}");
    }
}

#[test]
fn a_bad_value_names_the_flag_and_the_accepted_values() {
    for (exe, args, names) in [
        (ENGINE_RANKS, &["--cuda=yes"][..], &["--cuda", "yes"][..]),
        (ENGINE_RANKS, &["--hip"], &["--hip"]),
        (
            ENGINE_KILL,
            &["five"],
            &["DEADLINE", "five", "positive number of seconds"],
        ),
        (
            ENGINE_KILL,
            &["0"],
            &["DEADLINE", "positive number of seconds"],
        ),
    ] {
        let out = run(exe, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{exe} {args:?}: {out:?}");
        for name in names {
            assert!(
                stderr.contains(name),
                "{exe} {args:?}: `{name}` not in:\n{stderr}"
            );
        }
        assert!(out.stdout.is_empty(), "{exe} {args:?}: {out:?}");
    }
}
