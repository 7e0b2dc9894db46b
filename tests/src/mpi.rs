//! Programs under `mpirun`: whether it is there, building a binary with the `mpi`
//! feature, and running it with a deadline.

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_owned()
}

/// `true` when MPI tests should run; `false` after printing why they are skipped.
/// Without `mpirun` on PATH this panics, unless `SYMMEM_SKIP_MPI=1`.
pub fn mpirun_available() -> bool {
    let found = Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if found {
        return true;
    }
    if std::env::var("SYMMEM_SKIP_MPI").as_deref() == Ok("1") {
        println!("skipped: mpirun is not on PATH (SYMMEM_SKIP_MPI=1)");
        return false;
    }
    panic!(
        "mpirun is not on PATH: install OpenMPI (apt-get install -y libopenmpi-dev openmpi-bin \
         libclang-dev) or set SYMMEM_SKIP_MPI=1 to skip the MPI tests"
    );
}

/// Builds binary `bin` of `package` with `features` into `<target>/mpi/<bin>`, once per
/// test process and binary; returns its path.
///
/// Built in the test build's own target directory, which `cargo test` does not lock while
/// tests run, so the dependencies and the GPU code objects are the ones the tests were
/// built with (a target directory of its own compiled every dependency again: 45 s of
/// CI's 2 cores). The binary cargo leaves in `<target>/debug` is moved out, and the one
/// that was there before (a build without the features, which tests of other packages run)
/// is put back.
pub fn build(package: &str, features: &str, bin: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, Result<PathBuf, String>)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, r)) = built.iter().find(|(b, _)| b == bin) {
        return r.clone().unwrap_or_else(|e| panic!("{e}"));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), PathBuf::from);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let args = ["build", "-p", package, "--features", features, "--bin", bin];
    let uplifted = target.join("debug").join(bin);
    let aside = target.join("debug").join(format!(".{bin}.before-mpi"));
    let put_aside = std::fs::rename(&uplifted, &aside).is_ok();
    let result = Command::new(cargo)
        .current_dir(workspace())
        .args(args)
        .arg("--target-dir")
        .arg(&target)
        .output()
        .map_err(|e| format!("running cargo: {e}"))
        .and_then(|output| {
            if !output.status.success() {
                return Err(format!(
                    "cargo {} failed ({}):\n{}",
                    args.join(" "),
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            let exe = target.join("mpi").join(bin);
            std::fs::create_dir_all(target.join("mpi"))
                .and_then(|()| std::fs::rename(&uplifted, &exe))
                .map_err(|e| format!("moving {} to {}: {e}", uplifted.display(), exe.display()))
                .map(|()| exe)
        });
    if put_aside {
        std::fs::rename(&aside, &uplifted)
            .unwrap_or_else(|e| panic!("putting {} back: {e}", uplifted.display()));
    }
    built.push((bin.to_owned(), result.clone()));
    result.unwrap_or_else(|e| panic!("{e}"))
}

/// What one `mpirun` printed.
pub struct Run {
    /// Its exit status.
    pub status: ExitStatus,
    /// Everything the ranks printed to stdout.
    pub stdout: String,
    /// Everything the ranks and `mpirun` printed to stderr.
    pub stderr: String,
}

impl Run {
    /// Both streams, for a failure message.
    pub fn all(&self) -> String {
        format!("--- stdout\n{}\n--- stderr\n{}", self.stdout, self.stderr)
    }
}

/// Runs `exe args` under `mpirun -np NP mpirun_args`, within `deadline` (a run that
/// outlives it is killed and fails the test). One `mpirun` at a time: OpenMPI 4's
/// launchers race to create their shared session directory (`mkdir /tmp/ompi.HOST.UID:
/// File exists`, then `orte_init failed`), seen once in 20 runs of three at once.
pub fn mpirun(
    np: usize,
    mpirun_args: &[&str],
    exe: &std::path::Path,
    args: &[&str],
    deadline: Duration,
) -> Run {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut child = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            &np.to_string(),
        ])
        .args(mpirun_args)
        .arg(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning mpirun");
    // Read both pipes on threads so a chatty mpirun cannot block on a full pipe.
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).map(|_| s)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for mpirun") {
            break Some(status);
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out.join().expect("reader").unwrap_or_default();
    let stderr = err.join().expect("reader").unwrap_or_default();
    match status {
        Some(status) => Run {
            status,
            stdout,
            stderr,
        },
        None => panic!(
            "mpirun -np {np} {} did not finish in {deadline:?}:\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            exe.display()
        ),
    }
}
