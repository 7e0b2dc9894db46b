//! The demo under `mpirun -np 2` and `-np 4`, built with `--features mpi`: every rank
//! forms the world from `MPI_COMM_WORLD`, puts into every peer and checks every byte.
//! And under an MPI that provides only `MPI_THREAD_FUNNELED` (a PMPI shim, built with
//! `mpicc` and preloaded into the ranks), where forming the world must fail with an error
//! that names both thread levels.
//!
//! And an application that initialised MPI itself (`mpi-split`, built with `--features
//! mpi`) forms two worlds from a split of its communicator at `-np 4`, uses MPI after
//! they are gone, and is refused with `Error::MpiThreadLevel` when it initialised MPI
//! with `MPI_THREAD_FUNNELED`; with `--leave`, a rank of each world leaves while its peer
//! waits for it on the device, and the peer gets `PeerLost` naming it within 2 s.
//!
//! Without `mpirun` on PATH these tests fail, unless `SYMMEM_SKIP_MPI=1` (then they print
//! `skipped: ...` and pass). The MPI demo is built as `<target>/mpi/symmem-demo`
//! ([`mpi::build`]), so the default build's `symmem-demo` is left alone.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use symmem_tests::mpi::{self, Run, mpirun_available};

const BYTES: usize = 256 << 10;

/// Builds `symmem-demo` with the `mpi` feature once per test process.
fn mpi_demo() -> PathBuf {
    mpi::build("symmem-demo", "mpi", "symmem-demo")
}

/// An `MPI_Init_thread` that provides at most `MPI_THREAD_FUNNELED`, as an MPI library
/// built without thread support does, over the real one (the standard PMPI interface).
const FUNNELED_SHIM: &str = r#"
#include <mpi.h>
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    (void)required;
    return PMPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, provided);
}
"#;

/// Builds [`FUNNELED_SHIM`] with `mpicc` into a shared library next to the MPI demo.
fn funneled_shim(demo: &std::path::Path) -> PathBuf {
    let dir = demo.parent().expect("the demo's folder");
    let (source, library) = (dir.join("funneled.c"), dir.join("libfunneled.so"));
    std::fs::write(&source, FUNNELED_SHIM).expect("writing the shim");
    let output = Command::new("mpicc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("mpicc (from libopenmpi-dev) is needed here: {e}"));
    assert!(
        output.status.success(),
        "mpicc failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    library
}

/// Runs the MPI demo under `mpirun -np NP` with `mpirun_args` before it, within 60 s.
fn mpirun_demo(np: usize, mpirun_args: &[&str]) -> Run {
    let bytes = format!("{}K", BYTES >> 10);
    mpi::mpirun(
        np,
        mpirun_args,
        &mpi_demo(),
        &["--bytes", &bytes],
        Duration::from_secs(60),
    )
}

fn run_demo_under_mpirun(np: usize) {
    if !mpirun_available() {
        return;
    }
    let run = mpirun_demo(np, &[]);
    let (status, stdout, all) = (run.status, &run.stdout, run.all());
    assert!(
        status.success(),
        "mpirun -np {np} exited with {status}:\n{all}"
    );
    let expected = format!(
        "verified {} bytes on {np} ranks: every byte matched",
        np * np * BYTES
    );
    assert!(stdout.contains(&expected), "no `{expected}` line:\n{all}");
    assert!(
        stdout.contains(&format!("symmem demo: {np} ranks, cpu backend")),
        "{all}"
    );
    // One table row per rank.
    for rank in 0..np {
        let verified = format!("{:>4}  ", rank);
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&verified) && l.contains(&(np * BYTES).to_string())),
            "no row for rank {rank}:\n{all}"
        );
    }
}

#[test]
fn mpirun_np2_demo() {
    run_demo_under_mpirun(2);
}

#[test]
fn mpirun_np4_demo() {
    run_demo_under_mpirun(4);
}

#[test]
fn mpirun_thread_level_below_serialized_is_an_error() {
    if !mpirun_available() {
        return;
    }
    let shim = funneled_shim(&mpi_demo());
    let preload = format!("LD_PRELOAD={}", shim.display());
    let run = mpirun_demo(2, &["-x", &preload]);
    let (status, stderr, all) = (run.status, &run.stderr, run.all());
    assert!(!status.success(), "the world formed anyway:\n{all}");
    let named = "the MPI library provides MPI_THREAD_FUNNELED; symmem needs MPI_THREAD_SERIALIZED";
    assert!(stderr.contains(named), "no `{named}`:\n{all}");
    let fix = "use an MPI built with thread support";
    assert!(stderr.contains(fix), "no `{fix}`:\n{all}");
}

/// Runs `mpi-split` under `mpirun -np 4` with `args`; asserts it succeeded and that every
/// rank printed the line `line(rank)` begins.
fn mpi_split(args: &[&str], line: impl Fn(usize) -> String) {
    if !mpirun_available() {
        return;
    }
    let exe = mpi::build("symmem-tests", "mpi", "mpi-split");
    let run = mpi::mpirun(4, &[], &exe, args, Duration::from_secs(60));
    let all = run.all();
    assert!(
        run.status.success(),
        "mpirun -np 4 mpi-split {args:?}: {}:\n{all}",
        run.status
    );
    for rank in 0..4 {
        let want = line(rank);
        assert!(
            run.stdout.lines().any(|l| l.starts_with(&want)),
            "no `{want}...`:\n{all}"
        );
    }
}

#[test]
fn worlds_from_a_split_of_the_applications_communicator() {
    // Even application ranks form world 0, odd ones world 1, in order.
    mpi_split(&[], |rank| {
        format!(
            "mpi-split: rank {rank} of 4: world {} rank {} of 2: ok",
            rank % 2,
            rank / 2
        )
    });
}

#[test]
fn a_rank_that_leaves_ends_its_peers_device_wait_under_mpirun() {
    // In each world of the split, world rank 1 leaves while world rank 0 waits for it in
    // a device barrier (default 10-minute deadline): PeerLost within 2 s of the leave.
    mpi_split(&["--leave"], |rank| {
        format!(
            "mpi-split: rank {rank} of 4: world {} rank {} of 2: {}",
            rank % 2,
            rank / 2,
            if rank / 2 == 1 {
                "left: ok"
            } else {
                "PeerLost from world rank 1 after"
            }
        )
    });
}

#[test]
fn an_application_mpi_below_serialized_is_refused() {
    mpi_split(&["--threading", "funneled"], |rank| {
        format!(
            "mpi-split: rank {rank}: refused: the MPI library provides MPI_THREAD_FUNNELED; \
             symmem needs MPI_THREAD_SERIALIZED"
        )
    });
}
