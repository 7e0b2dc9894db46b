//! The command line, as clap gives it: `--help` prints to stdout and exits 0; a bad flag
//! or value exits 2 with an error on stderr that names the flag and what it accepts.

use std::process::{Command, Output};

fn demo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_symmem-demo"))
        .args(args)
        .output()
        .expect("running symmem-demo")
}

#[test]
fn help_is_on_stdout_and_succeeds() {
    let out = demo(&["--help"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for flag in ["--ranks", "--bytes", "--backend", "--launcher"] {
        assert!(stdout.contains(flag), "{flag} not in:\n{stdout}");
    }
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[test]
fn a_bad_value_names_the_flag_and_the_accepted_values() {
    for (args, names) in [
        (
            &["--launcher", "thread"][..],
            &["--launcher", "threads, processes"][..],
        ),
        (&["--backend", "rocm"], &["--backend", "auto, cpu, cuda"]),
        (&["--bytes", "12Q"], &["--bytes", "K, M or G"]),
        (&["--ranks", "0"], &["--ranks", "0"]),
        (&["--rank", "2"], &["--rank"]),
    ] {
        let out = demo(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        for name in names {
            assert!(
                stderr.contains(name),
                "{args:?}: `{name}` not in:\n{stderr}"
            );
        }
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
}
