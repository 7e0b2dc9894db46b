//! A stranger cannot stop a world either, and the secret stays secret (issue 55): one test
//! per attack on a forming world.
//!
//! * a listener whose backlog a stranger filled: a rank's connect gives up at its deadline
//!   with a typed error instead of blocking without end;
//! * a member that trickles a frame a byte at a time, each just inside the read timeout:
//!   the hub ends the group at the frame's deadline, naming it;
//! * 10,000 connections from another user while a 4-rank world forms: it forms within its
//!   timeout, and the hub's log holds counts, not a line per connection;
//! * a process a rank starts: it inherits nothing of the group's secret;
//! * under `mpirun`, ranks' socket names squatted: every rank's name is its own random
//!   one, so nothing derived from the names a squatter sees stops the world.
//!
//! Ranks are processes of this test binary started by `bootstrap::unix::spawn` (see
//! `symmem_tests::processes`), or `mpi-members` under `mpirun`. Attacks of another user
//! run where the tests run as root (as CI does), from a child dropped to uid 65534.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use symmem::Error;
use symmem::bootstrap::Bootstrap;
use symmem::bootstrap::auth::{self, Secret};
use symmem::bootstrap::unix::{self, UnixBootstrap};
use symmem_tests::mpi::{self, mpirun_available};
use symmem_tests::processes::{
    as_nobody, child_mode, exit_child, form_checked_cpu_world, hub_address, root, this_binary,
    wait_for_path,
};

/// Environment variable: the group (or, under `mpirun`, nothing) a child attacks.
const ATTACK: &str = "SYMMEM_TEST_ATTACK";
/// Environment variable: the path whose existence lets the ranks other than 0 join.
const JOIN_AFTER: &str = "SYMMEM_TEST_JOIN_AFTER";
/// Environment variable: set, a member starts a child of its own and checks what it sees.
const CHECK_CHILD: &str = "SYMMEM_TEST_CHECK_CHILD";

/// Connections the flood makes.
const FLOOD: usize = 10_000;

/// Whether `text` holds a run of 64 hexadecimal digits: what a secret written out looks
/// like.
fn holds_a_secret(text: &[u8]) -> bool {
    text.split(|b| !b.is_ascii_hexdigit())
        .any(|run| run.len() >= 64)
}

// ---------------------------------------------------------------------------------------
// Children.

/// A member: logs symmem's warnings to stderr, joins (ranks other than 0 once
/// [`JOIN_AFTER`] exists, when set), forms a CPU world and checks an all-gather; with
/// [`CHECK_CHILD`], also checks that neither its environment nor a child it starts holds
/// the secret. Exits 0 only if all of it held.
fn member() -> ! {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
        .with_ansi(false)
        .init();
    let result = (|| -> symmem::Result<()> {
        if std::env::var(unix::ENV_RANK).as_deref() != Ok("0")
            && let Ok(path) = std::env::var(JOIN_AFTER)
        {
            wait_for_path(Path::new(&path), Duration::from_secs(20));
        }
        let world = form_checked_cpu_world(Box::new(UnixBootstrap::from_env()?))?;
        if std::env::var_os(CHECK_CHILD).is_some() {
            let me = world.rank();
            let environ = std::fs::read("/proc/self/environ").expect("/proc/self/environ");
            assert!(
                !holds_a_secret(&environ),
                "rank {me}: the secret in its environment"
            );
            let test = "a_process_a_rank_starts_does_not_see_the_secret";
            let out = this_binary(test, "grandchild")
                .output()
                .expect("the rank's child");
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && said.contains("sees no secret"),
                "rank {me}'s child: {said}"
            );
        }
        world.barrier()
    })();
    exit_child(&result)
}

/// A process a rank started: looks for the secret in its environment and in the
/// descriptor its parent read it from (named in the environment it inherited), and
/// prints what it found.
fn grandchild() -> ! {
    let environ = std::fs::read("/proc/self/environ").expect("/proc/self/environ");
    let named = std::env::var(unix::ENV_SECRET_FD).expect("the parent's variables");
    let (fd, inode) = named.split_once(':').expect("fd:inode");
    let pipe = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|target| target.to_string_lossy() == format!("pipe:[{inode}]"))
        .unwrap_or(false);
    if holds_a_secret(&environ) || pipe {
        println!(
            "sees the secret: in its environment {}, its pipe {pipe}",
            holds_a_secret(&environ)
        );
    } else {
        println!("sees no secret");
    }
    std::process::exit(0)
}

/// A flood (run as another user): [`FLOOD`] connections to the group's hub, one after
/// another, each dropped at once; prints `half N` halfway and `flooded N` at the end (N:
/// how many had connected by then; a connect may fail, and those after the hub's
/// socket went away do).
fn flooder() -> ! {
    let group = std::env::var(ATTACK).expect("group");
    let addr = hub_address(&group);
    let mut connected = 0;
    for i in 0..FLOOD {
        if i == FLOOD / 2 {
            println!("half {connected}");
            std::io::stdout().flush().expect("stdout");
        }
        if UnixStream::connect_addr(&addr).is_ok() {
            connected += 1;
        }
    }
    println!("flooded {connected}");
    std::process::exit(0)
}

/// A squatter of ranks' socket names under `mpirun`: binds every name it can derive
/// from the ranks' names (in [`ATTACK`], comma-separated: what `/proc/net/unix` shows
/// anyone), each with `-0` to `-7` appended (as the names of ranks were once their
/// job's with the rank appended) and each with its last digit changed, prints `squatted
/// N`, and holds them for 20 s.
fn mpi_squatter() -> ! {
    let names: Vec<String> = std::env::var(ATTACK)
        .expect("names")
        .split(',')
        .map(str::to_owned)
        .collect();
    let held = squat_derived(&names);
    println!("squatted {} names", held.len());
    std::io::stdout().flush().expect("stdout");
    std::thread::sleep(Duration::from_secs(20));
    std::process::exit(0)
}

fn run_child_if_any() {
    match child_mode().as_deref() {
        Some("member") => member(),
        Some("grandchild") => grandchild(),
        Some("flooder") => flooder(),
        Some("mpi-squatter") => mpi_squatter(),
        _ => {}
    }
}

/// The MPI ranks' socket names (without the `@`) in `/proc/net/unix` that are not in
/// `before`, once there are `n`.
fn new_rank_names(before: &[String], n: usize, within: Duration) -> Vec<String> {
    let start = Instant::now();
    loop {
        let table = std::fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
        let mut names: Vec<String> = table
            .lines()
            .filter_map(|l| l.split_whitespace().nth(7)?.strip_prefix('@'))
            .filter(|n| n.starts_with("symmem-mpi-") && !before.iter().any(|b| b == n))
            .map(str::to_owned)
            .collect();
        names.sort();
        names.dedup();
        if names.len() >= n {
            return names;
        }
        assert!(start.elapsed() < within, "no rank sockets: {names:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Binds every name derivable from `names` (see [`mpi_squatter`]); returns the listeners.
fn squat_derived(names: &[String]) -> Vec<std::os::unix::net::UnixListener> {
    let mut derived = Vec::new();
    for name in names {
        derived.extend((0..8).map(|r| format!("{name}-{r}")));
        let (head, last) = name.split_at(name.len() - 1);
        derived.extend(
            "0123456789abcdef"
                .chars()
                .filter(|c| !last.contains(*c))
                .map(|c| format!("{head}{c}")),
        );
    }
    derived
        .iter()
        .filter_map(|n| {
            std::os::unix::net::UnixListener::bind_addr(
                &SocketAddr::from_abstract_name(n).expect("a name"),
            )
            .ok()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Tests.

#[test]
fn a_full_backlog_gives_a_typed_error_within_the_timeout() {
    run_child_if_any();
    // A hub's socket whose backlog a stranger filled: a listener of backlog 0 that never
    // accepts, and connections that fill it.
    let group = format!("denial-backlog-{}", *Secret::random().unwrap().to_hex());
    let listener = rustix::net::socket(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        None,
    )
    .expect("socket");
    let name = hub_address(&group);
    let addr =
        rustix::net::SocketAddrUnix::new_abstract_name(name.as_abstract_name().expect("abstract"))
            .expect("name");
    rustix::net::bind(&listener, &addr).expect("bind");
    rustix::net::listen(&listener, 0).expect("listen");
    let mut filled = Vec::new();
    loop {
        let socket = rustix::net::socket_with(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::NONBLOCK,
            None,
        )
        .expect("socket");
        if rustix::net::connect(&socket, &addr).is_err() {
            break;
        }
        filled.push(socket);
        assert!(filled.len() < 1000, "the backlog never filled");
    }
    let secret = Secret::random().expect("secret");
    let timeout = Duration::from_millis(500);
    let start = Instant::now();
    // On a thread, so that a connect that blocks fails the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let joined = UnixBootstrap::connect(1, 2, &group, &secret, timeout).map(drop);
        let _ = tx.send(joined);
    });
    let joined = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the spoke's connect did not return within 10 s");
    let took = start.elapsed();
    assert!(
        matches!(joined, Err(Error::PeerLost { rank: Some(0), .. })),
        "{joined:?}"
    );
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(1),
        "{took:?}"
    );
    drop((filled, listener));
}

#[test]
fn a_member_trickling_a_frame_is_lost_at_the_frames_deadline() {
    run_child_if_any();
    let group = format!("denial-trickle-{}", *Secret::random().unwrap().to_hex());
    let secret = Secret::random().expect("secret");
    let timeout = Duration::from_secs(1);
    let hub = {
        let (group, secret) = (group.clone(), secret.clone());
        std::thread::spawn(move || {
            let mut hub = UnixBootstrap::connect(0, 2, &group, &secret, timeout)?;
            let start = Instant::now();
            let gathered = hub.all_gather(b"the hub's");
            Ok::<_, Error>((gathered.map(drop), start.elapsed()))
        })
    };
    // A member (it holds the secret) that joins as rank 1, then sends its contribution's
    // header and trickles the payload a byte every 200 ms, each well inside the hub's
    // one-second read timeout, for 5 s.
    let start = Instant::now();
    let mut stream = loop {
        match UnixStream::connect_addr(&hub_address(&group)) {
            Ok(stream) => break stream,
            Err(_) if start.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("no hub: {e}"),
        }
    };
    auth::join(&mut stream, &secret, &group, 2, 1, Instant::now() + timeout).expect("join");
    let mut header = vec![0u8];
    header.extend_from_slice(&1000u64.to_le_bytes());
    stream.write_all(&header).expect("the header");
    let trickle_start = Instant::now();
    while trickle_start.elapsed() < Duration::from_secs(5) {
        if stream.write_all(&[7]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let (gathered, took) = hub
        .join()
        .expect("the hub panicked")
        .expect("the hub formed");
    assert!(
        matches!(gathered, Err(Error::PeerLost { rank: Some(1), .. })),
        "{gathered:?}"
    );
    assert!(
        took < timeout + Duration::from_millis(500),
        "the hub was held {took:?} by a trickled frame"
    );
    // It told the member why, and closed: whatever it had sent, then the end.
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
}

#[test]
fn ten_thousand_connections_of_another_user_leave_a_world_forming_and_a_short_log() {
    run_child_if_any();
    if !root() {
        println!("skipped: the other-user flood needs root to drop to uid 65534");
        return;
    }
    let test = "ten_thousand_connections_of_another_user_leave_a_world_forming_and_a_short_log";
    let flag = std::env::temp_dir().join(format!("symmem-denial-{}-flood", std::process::id()));
    let _ = std::fs::remove_file(&flag);
    let mut command = this_binary(test, "member");
    command.env(JOIN_AFTER, &flag).stderr(Stdio::piped());
    let timeout = Duration::from_secs(10);
    let start = Instant::now();
    let mut ranks = unix::spawn(&mut command, 4, timeout).expect("spawn");
    let logs: Vec<_> = ranks
        .children_mut()
        .iter_mut()
        .map(|child| {
            let mut stderr = child.stderr.take().expect("stderr");
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = stderr.read_to_string(&mut text);
                text
            })
        })
        .collect();
    let group = ranks.group().to_owned();
    let mut flood = as_nobody(&mut this_binary(test, "flooder"))
        .env(ATTACK, &group)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the flood");
    // The other ranks join once half the flood has reached the hub.
    let mut said = std::io::BufReader::new(flood.stdout.take().expect("stdout"));
    let mut line = String::new();
    let before_members: u64 = loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut said, &mut line).expect("the flood");
        assert!(n > 0, "the flood ended before half");
        if let Some((_, count)) = line.split_once("half ") {
            break count.trim().parse().expect("the flood's half count");
        }
    };
    // The attack happened: nearly every connect of the first half reached the hub's
    // queue (a few may fail while it is full).
    assert!(
        before_members >= (FLOOD / 2 * 9 / 10) as u64,
        "only {before_members} of the first {} connections were made",
        FLOOD / 2
    );
    std::fs::write(&flag, b"").expect("flag");
    let statuses = ranks.wait().expect("wait");
    let formed = start.elapsed();
    let _ = std::fs::remove_file(&flag);
    let mut rest = String::new();
    said.read_to_string(&mut rest).expect("the flood");
    assert!(flood.wait().expect("the flood").success());
    let logs: Vec<String> = logs.into_iter().map(|l| l.join().expect("log")).collect();
    assert!(
        statuses.iter().all(|s| s.success()),
        "the world did not form under the flood: {statuses:?}\n{}",
        logs.join("\n")
    );
    assert!(formed < timeout, "the world formed only after {formed:?}");
    // The hub's log: a line for the first refusal of each second, one with the count of
    // the rest; every refusal counted. The connections made before the members joined
    // were all ahead of them in the hub's accept queue, so the hub refused every one of
    // them before the world could form; no more than connected can have been refused.
    let hub = &logs[0];
    let lines: Vec<&str> = hub.lines().filter(|l| l.contains("refused")).collect();
    let counted: u64 = lines
        .iter()
        .map(|l| {
            l.split_once("count=")
                .and_then(|(_, n)| n.split_whitespace().next()?.parse().ok())
                .unwrap_or(1)
        })
        .sum();
    let connected: u64 = rest
        .split_once("flooded ")
        .and_then(|(_, n)| n.trim().parse().ok())
        .expect("the flood's count");
    println!(
        "{connected} connections reached the hub, {counted} refusals logged in {} lines; \
         the world formed in {formed:?}",
        lines.len()
    );
    assert!(
        lines.len() < 100,
        "{} log lines for {counted} refusals:\n{hub}",
        lines.len()
    );
    assert!(
        (before_members..=connected).contains(&counted),
        "{counted} refusals counted of {before_members} connections made before the \
         members joined ({connected} in all):\n{hub}"
    );
}

#[test]
fn a_process_a_rank_starts_does_not_see_the_secret() {
    run_child_if_any();
    let test = "a_process_a_rank_starts_does_not_see_the_secret";
    let mut command = this_binary(test, "member");
    command.env(CHECK_CHILD, "1");
    let statuses = unix::spawn(&mut command, 2, Duration::from_secs(10))
        .expect("spawn")
        .wait()
        .expect("wait");
    assert!(
        statuses.iter().all(|s| s.success()),
        "a rank, or a process it started, saw the secret: {statuses:?}"
    );
    // Nor does the launcher's command keep it.
    let debug = format!("{command:?}");
    assert!(!holds_a_secret(debug.as_bytes()), "{debug}");
}

#[test]
fn under_mpirun_names_of_ranks_are_random_and_squatting_them_stops_nothing() {
    run_child_if_any();
    if !mpirun_available() {
        return;
    }
    let test = "under_mpirun_names_of_ranks_are_random_and_squatting_them_stops_nothing";
    let exe = mpi::build("symmem-tests", "mpi", "mpi-members");
    let flag = std::env::temp_dir().join(format!("symmem-denial-mpi-{}", std::process::id()));
    let _ = std::fs::remove_file(&flag);
    let before = new_rank_names(&[], 0, Duration::ZERO);
    let run = {
        let (exe, flag) = (exe.clone(), flag.clone());
        std::thread::spawn(move || {
            let flag = flag.to_str().expect("a UTF-8 path").to_owned();
            mpi::mpirun(4, &[], &exe, &["--after", &flag], Duration::from_secs(60))
        })
    };
    // Every rank's socket is bound before any name is published; the ranks then wait for
    // the flag before they form the world, so the squatter has every name to work from.
    let names = new_rank_names(&before, 4, Duration::from_secs(30));
    // The squatter: another user where the tests run as root, else this process.
    let mut held_here = Vec::new();
    let squatter = if root() {
        let mut child = as_nobody(&mut this_binary(test, "mpi-squatter"))
            .env(ATTACK, names.join(","))
            .stdout(Stdio::piped())
            .spawn()
            .expect("the squatter");
        let mut said = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        while !line.contains("squatted") {
            line.clear();
            let n = std::io::BufRead::read_line(&mut said, &mut line).expect("the squatter");
            assert!(n > 0, "the squatter ended before it squatted");
        }
        println!("the other-user squatter: {}", line.trim());
        Some(child)
    } else {
        held_here = squat_derived(&names);
        println!(
            "the squatter (this process): squatted {} names",
            held_here.len()
        );
        None
    };
    // No name is derived from another: past the prefix, each is its own random digits.
    let randoms: Vec<&str> = names
        .iter()
        .map(|n| n.strip_prefix("symmem-mpi-").expect("the prefix"))
        .collect();
    for (i, a) in randoms.iter().enumerate() {
        for b in &randoms[i + 1..] {
            assert_ne!(
                a[..8],
                b[..8],
                "two ranks' names share their start: {names:?}"
            );
        }
    }
    std::fs::write(&flag, b"").expect("flag");
    let run = run.join().expect("mpirun");
    let _ = std::fs::remove_file(&flag);
    if let Some(mut child) = squatter {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(held_here);
    assert!(run.status.success(), "{}", run.all());
    assert_eq!(run.stdout.matches(": ok").count(), 4, "{}", run.all());
}
