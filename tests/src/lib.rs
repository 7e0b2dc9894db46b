//! What the integration tests share: ranks as processes of the test binary, llvm-tools
//! run on embedded code objects ([`llvm`]), and every kernel crate's code objects
//! ([`objects`]).
//!
//! A test re-executes its own binary (`--exact <test> --nocapture`) through
//! `symmem::bootstrap::unix::spawn`, with [`CHILD`](processes::CHILD) saying what the
//! child does; the child joins with `UnixBootstrap::from_env()`, runs its part and ends
//! through [`exit_child`](processes::exit_child). The parent collects every child's
//! output and exit with a deadline ([`spawn_ranks`](processes::spawn_ranks)), killing
//! leftovers, so a hung rank fails the test instead of hanging it.

/// Why a GPU test cannot run here, if it cannot: only where no GPU or driver answers
/// ([`symmem::Error::is_device_missing`]). Any other error of the backend's initialisation
/// is a regression on a machine that has the device, and fails the test (a panic), so a
/// broken backend never reads as a skip.
pub fn unavailable<T>(init: symmem::Result<T>) -> Option<String> {
    match init {
        Ok(_) => None,
        Err(e) if e.is_device_missing() => Some(e.to_string()),
        Err(e) => {
            panic!("the backend failed to initialise, and not for want of a device: {e} ({e:?})")
        }
    }
}

pub mod determinism;
pub mod mpi;
pub mod objects;
pub mod off_node;
pub mod waits;

/// Spawning ranks as child processes, collecting their outcomes, ending a child.
pub mod processes {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::process::CommandExt;
    use std::process::{Command, ExitStatus, Stdio};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    use symmem::Error;
    use symmem::bootstrap::unix;

    /// Environment variable that marks a child and says what it does.
    pub const CHILD: &str = "SYMMEM_TEST_CHILD";
    /// Exit status of a child that ended with `PeerLost`.
    pub const EXIT_PEER_LOST: i32 = 3;
    /// Exit status of a child that ended with any other error.
    pub const EXIT_ERROR: i32 = 4;

    /// What this process does as a child (the value of [`CHILD`], which each test file
    /// defines), or `None` in the parent.
    pub fn child_mode() -> Option<String> {
        std::env::var(CHILD).ok()
    }

    /// This test binary as a child running test `test` alone (`--exact`) in child mode
    /// `mode`, its stdin closed.
    pub fn this_binary(test: &str, mode: &str) -> Command {
        let mut command = Command::new(std::env::current_exe().expect("current_exe"));
        command
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD, mode)
            .stdin(Stdio::null());
        command
    }

    /// Group `group`'s hub socket address ([`unix::hub_address`]).
    pub fn hub_address(group: &str) -> std::os::unix::net::SocketAddr {
        unix::hub_address(group).expect("the hub's socket name")
    }

    /// Waits until `path` exists, at most `within` (then goes on regardless).
    pub fn wait_for_path(path: &std::path::Path, within: Duration) {
        let start = Instant::now();
        while !path.exists() && start.elapsed() < within {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A member of a group under attack: forms a CPU world over `bootstrap` and checks
    /// that an all-gather of every rank's number holds, which shows that the group formed.
    ///
    /// # Panics
    /// Where the all-gather gives other bytes.
    pub fn form_checked_cpu_world(
        bootstrap: Box<dyn symmem::bootstrap::Bootstrap>,
    ) -> symmem::Result<symmem::World<symmem::backend::cpu::Cpu>> {
        let world = symmem::World::new(
            bootstrap,
            symmem::backend::cpu::Cpu::new(),
            &symmem::Config::default(),
        )?;
        let me = world.rank() as u64;
        let all = world.all_gather_bytes(&me.to_le_bytes())?;
        let want: Vec<Vec<u8>> = (0..world.world_size() as u64)
            .map(|r| r.to_le_bytes().to_vec())
            .collect();
        assert_eq!(all, want, "rank {me}: all-gather");
        Ok(world)
    }

    /// Whether the tests run as root, so that a child can drop to another user.
    pub fn root() -> bool {
        rustix::process::getuid().is_root()
    }

    /// `command` run as uid and gid 65534 (`nobody`): another user.
    pub fn as_nobody(command: &mut Command) -> &mut Command {
        command.uid(65534).gid(65534)
    }

    /// How one child ended.
    #[derive(Debug)]
    pub struct Outcome {
        /// `None` if the parent had to kill it at the deadline.
        pub status: Option<ExitStatus>,
        /// When it exited, from the spawn.
        pub after: Duration,
        /// When the parent killed it (on its marker line), from the spawn.
        pub killed: Option<Duration>,
        /// Its stdout and stderr lines.
        pub lines: Vec<String>,
    }

    impl Outcome {
        /// Its output, one line per line.
        pub fn text(&self) -> String {
            self.lines.join("\n")
        }
        /// Its exit code, if it exited.
        pub fn code(&self) -> Option<i32> {
            self.status.and_then(|s| s.code())
        }
    }

    /// Spawns `n` ranks of this test binary running test `test` in child mode `mode`, with
    /// bootstrap timeout `timeout`; waits for all until `deadline` (then kills the rest), and
    /// kills rank `kill.0` as soon as it prints a line containing `kill.1`.
    pub fn spawn_ranks(
        test: &str,
        mode: &str,
        n: usize,
        timeout: Duration,
        deadline: Duration,
        kill: Option<(usize, &str)>,
    ) -> Vec<Outcome> {
        let mut command = this_binary(test, mode);
        command
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let start = Instant::now();
        let mut ranks = unix::spawn(&mut command, n, timeout).expect("spawn ranks");
        let children = ranks.children_mut();
        let (tx, rx) = mpsc::channel::<(usize, String)>();
        let mut readers = Vec::new();
        for (rank, child) in children.iter_mut().enumerate() {
            let out = child.stdout.take().expect("piped stdout");
            let err = child.stderr.take().expect("piped stderr");
            for stream in [
                Box::new(out) as Box<dyn std::io::Read + Send>,
                Box::new(err),
            ] {
                let tx = tx.clone();
                readers.push(std::thread::spawn(move || {
                    for line in BufReader::new(stream).lines().map_while(Result::ok) {
                        let _ = tx.send((rank, line));
                    }
                }));
            }
        }
        drop(tx);
        let mut outcomes: Vec<Outcome> = (0..n)
            .map(|_| Outcome {
                status: None,
                after: Duration::ZERO,
                killed: None,
                lines: Vec::new(),
            })
            .collect();
        let mut done = vec![false; n];
        while done.iter().any(|d| !d) && start.elapsed() < deadline {
            while let Ok((rank, line)) = rx.recv_timeout(Duration::from_millis(5)) {
                if let Some((victim, marker)) = kill
                    && rank == victim
                    && line.contains(marker)
                    && outcomes[victim].killed.is_none()
                {
                    children[victim].kill().expect("kill");
                    outcomes[victim].killed = Some(start.elapsed());
                }
                outcomes[rank].lines.push(line);
            }
            for (rank, child) in children.iter_mut().enumerate() {
                if !done[rank]
                    && let Some(status) = child.try_wait().expect("try_wait")
                {
                    done[rank] = true;
                    outcomes[rank].status = Some(status);
                    outcomes[rank].after = start.elapsed();
                }
            }
        }
        for (rank, child) in children.iter_mut().enumerate() {
            if !done[rank] {
                let _ = child.kill();
                let _ = child.wait();
                outcomes[rank].after = start.elapsed();
            }
        }
        // Every child is reaped (also if this function panicked above: `ranks` owns them).
        drop(ranks);
        for reader in readers {
            reader.join().expect("reader");
        }
        while let Ok((rank, line)) = rx.try_recv() {
            outcomes[rank].lines.push(line);
        }
        outcomes
    }

    /// Why CUDA tests cannot run here (no driver, or no device), if they cannot; any
    /// other failure of the driver's initialisation panics ([`crate::unavailable`]).
    pub fn cuda_missing() -> Option<String> {
        match symmem::backend::cuda::Cuda::device_count() {
            Ok(0) => Some("no CUDA device".into()),
            init => crate::unavailable(init),
        }
    }

    /// Every rank's outcome and output, for a failure message.
    pub fn report(outcomes: &[Outcome]) -> String {
        outcomes
            .iter()
            .enumerate()
            .map(|(rank, o)| {
                format!(
                    "--- rank {rank}: {:?} after {:?}\n{}",
                    o.status,
                    o.after,
                    o.text()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Asserts no `symmem*` file is left in `/dev/shm`.
    pub fn assert_no_shm_leftovers() {
        let leftovers: Vec<String> = std::fs::read_dir("/dev/shm")
            .expect("/dev/shm")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("symmem"))
            .collect();
        assert!(
            leftovers.is_empty(),
            "left behind in /dev/shm: {leftovers:?}"
        );
    }

    /// Ends a child: prints `CHILD-ERROR` with the error, flushes, and exits with 0,
    /// [`EXIT_PEER_LOST`] or [`EXIT_ERROR`].
    pub fn exit_child(result: &symmem::Result<()>) -> ! {
        let code = match result {
            Ok(()) => 0,
            Err(Error::PeerLost { .. }) => EXIT_PEER_LOST,
            Err(_) => EXIT_ERROR,
        };
        if let Err(e) = result {
            println!("CHILD-ERROR {e:?} ({e})");
        }
        std::io::stdout().flush().ok();
        std::process::exit(code)
    }
}

/// llvm-tools (the `llvm-tools` rustup component of the pinned toolchain) run on code
/// objects, for the codegen and ABI tests.
pub mod llvm {
    use std::path::PathBuf;
    use std::process::Command;

    /// The path of llvm-tools' `name` (`llvm-objdump`, `llvm-readobj`).
    pub fn tool(name: &str) -> PathBuf {
        symmem_build::llvm_tools_bin()
            .expect("llvm-tools are installed (rustup component llvm-tools)")
            .join(name)
    }

    /// The standard output of `name args FILE`, where FILE holds `bytes` (a temporary
    /// file of its own, so tests may call this in parallel). Panics if the tool fails.
    pub fn run_on(name: &str, args: &[&str], bytes: &[u8]) -> String {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file =
            std::env::temp_dir().join(format!("symmem-tests-{}-{n}.object", std::process::id()));
        std::fs::write(&file, bytes).expect("temp dir is writable");
        let out = Command::new(tool(name)).args(args).arg(&file).output();
        let _ = std::fs::remove_file(&file);
        let out = out.unwrap_or_else(|e| panic!("{name} does not run: {e}"));
        assert!(
            out.status.success(),
            "{name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// The instructions of function `name` in the AMD code object `bytes` for `cpu`,
    /// comments cut. Disassembled by symbol: the linker may give identical functions one
    /// address, and a listing prints one label per address. Panics if it is missing.
    pub fn amd_function(bytes: &[u8], cpu: &str, name: &str) -> Vec<String> {
        let (mcpu, symbol) = (
            format!("--mcpu={cpu}"),
            format!("--disassemble-symbols={name}"),
        );
        let text = run_on("llvm-objdump", &["-d", &mcpu, &symbol], bytes);
        let header = format!("<{name}>:");
        let mut lines = text.lines().skip_while(|l| !l.ends_with(&header));
        assert!(
            lines.next().is_some(),
            "{name} is not in the {cpu} code object"
        );
        lines
            .take_while(|l| !l.trim().is_empty())
            .map(|l| l.split("//").next().unwrap_or("").trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// The body of the PTX function (`.func`) whose name contains `name` (a mangled
    /// Rust name's tail), one trimmed line each, comments cut. Panics if no function of
    /// the PTX defines it.
    pub fn ptx_function(ptx: &[u8], name: &str) -> Vec<String> {
        let text = std::str::from_utf8(ptx).expect("PTX is text");
        // A definition's header ends with its parameter list's "("; a declaration's
        // (`.extern`, or a prototype) ends with ";" on a later line and has no body.
        let mut lines = text
            .lines()
            .skip_while(|l| !(l.starts_with(".func") && l.contains(name) && l.ends_with('(')));
        assert!(
            lines.next().is_some(),
            "no function of the PTX is named like {name}"
        );
        lines
            .skip_while(|l| *l != "{")
            .take_while(|l| *l != "}")
            .map(|l| l.split("//").next().unwrap_or("").trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// The body of PTX entry `name`, one trimmed line each, comments cut. Panics if it
    /// is not a visible entry.
    pub fn ptx_entry(ptx: &[u8], name: &str) -> Vec<String> {
        let text = std::str::from_utf8(ptx).expect("PTX is text");
        let header = format!(".visible .entry {name}(");
        let mut lines = text.lines().skip_while(|l| !l.starts_with(&header));
        assert!(
            lines.next().is_some(),
            "{name} is not a visible entry of the PTX"
        );
        lines
            .take_while(|l| *l != "}")
            .map(|l| l.split("//").next().unwrap_or("").trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    }
}
