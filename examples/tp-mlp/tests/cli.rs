//! The command line, as clap gives it, and the run itself: on the CPU backend (always
//! here) the block is checked against one rank computing it whole, at several world
//! sizes; `--bench` without a GPU says why and succeeds.

use std::process::{Command, Output};

fn tp_mlp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tp-mlp"))
        .args(args)
        .output()
        .expect("running tp-mlp")
}

#[test]
fn help_names_the_options() {
    let out = tp_mlp(&["--help"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for flag in [
        "--ranks",
        "--backend",
        "--batch",
        "--hidden",
        "--bench",
        "--iters",
    ] {
        assert!(stdout.contains(flag), "{flag} not in:\n{stdout}");
    }
}

#[test]
fn a_hidden_size_the_ranks_cannot_share_is_refused() {
    let out = tp_mlp(&["--backend", "cpu", "--ranks", "3", "--hidden", "100"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hidden 100"));
}

#[test]
fn the_block_matches_one_rank_on_the_cpu() {
    for (ranks, batch) in [("1", "1"), ("2", "4"), ("3", "5"), ("4", "8")] {
        let out = tp_mlp(&[
            "--backend",
            "cpu",
            "--ranks",
            ranks,
            "--batch",
            batch,
            "--hidden",
            "192",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{ranks} ranks: {out:?}");
        let elements = 2 * 192 * batch.parse::<usize>().unwrap() * ranks.parse::<usize>().unwrap();
        assert!(
            stdout.contains(&format!("{elements} elements checked")),
            "{ranks} ranks: {stdout}"
        );
    }
}

#[test]
fn bench_without_a_gpu_says_why() {
    let out = tp_mlp(&["--backend", "cpu", "--bench"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("--bench skipped"));
}
