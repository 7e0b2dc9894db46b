//! The command line, as clap gives it, and the run itself: on a GPU the example checks
//! its sums; without one it says why on stdout and succeeds (CI runs every example).

use std::process::{Command, Output};

fn cudarc_interop(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cudarc-interop"))
        .args(args)
        .output()
        .expect("running cudarc-interop")
}

#[test]
fn help_names_the_options() {
    let out = cudarc_interop(&["--help"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for flag in ["--ranks", "--count"] {
        assert!(stdout.contains(flag), "{flag} not in:\n{stdout}");
    }
}

#[test]
fn a_bad_rank_count_names_the_flag() {
    let out = cudarc_interop(&["--ranks", "1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--ranks"));
}

#[test]
fn runs_or_says_why_not() {
    let out = cudarc_interop(&["--ranks", "2", "--count", "4096"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        stdout.contains("bytes verified") || stdout.contains("skipped: no CUDA device"),
        "{stdout}"
    );
}
