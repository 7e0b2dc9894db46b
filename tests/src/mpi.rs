//! Programs under `mpirun`: whether it is there, building a binary with the `mpi`
//! feature into its own target directory, and running it with a deadline.

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

/// Builds binary `bin` of `package` with `features` into `<target>/mpi` (so the default
/// build's binaries are left alone), once per test process and binary; returns its path.
pub fn build(package: &str, features: &str, bin: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, Result<PathBuf, String>)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, r)) = built.iter().find(|(b, _)| b == bin) {
        return r.clone().unwrap_or_else(|e| panic!("{e}"));
    }
    let outer = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), PathBuf::from);
    let target = outer.join("mpi");
    // The GPU code objects of this build are the default build's: one nested area for
    // both, so `core` and the kernel crates are built once per GPU target.
    let nested = std::env::var_os(symmem_build::NESTED_DIR_ENV)
        .unwrap_or_else(|| outer.join("symmem-device").into_os_string());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let args = ["build", "-p", package, "--features", features, "--bin", bin];
    let result = Command::new(cargo)
        .current_dir(workspace())
        .args(args)
        .arg("--target-dir")
        .arg(&target)
        .env(symmem_build::NESTED_DIR_ENV, &nested)
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
            let exe = target.join("debug").join(bin);
            exe.is_file()
                .then_some(exe.clone())
                .ok_or_else(|| format!("{} was not built", exe.display()))
        });
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
