//! Only members join (issue 42): a process that is no member of a group gets no frame, no
//! byte of a contribution and no file descriptor, and does not stop the members from
//! forming the group.
//!
//! Ranks are processes of this test binary started by `bootstrap::unix::spawn` (see
//! `symmem_tests::processes`), or `mpi-members` under `mpirun`; the attacks come from this
//! process (same user, no secret)
//! or, where the tests run as root, from a child dropped to uid 65534 (`nobody`). Every
//! attack records what it received, as [`Got`], and each test asserts it equal to what a
//! stranger may see: nothing, or the hub's challenge alone (24 random bytes).

use std::io::{IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use symmem::backend::cpu::Cpu;
use symmem::bootstrap::auth::Secret;
use symmem::bootstrap::unix::{self, UnixBootstrap};
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, Error, World};
use symmem_tests::mpi::{self, mpirun_available};
use symmem_tests::processes::{
    as_nobody, child_mode, exit_child, form_checked_cpu_world, hub_address, root, this_binary,
    wait_for_path,
};

/// What a stranger received over a connection: bytes, file descriptors, and whether the
/// bytes were exactly one handshake challenge.
#[derive(Debug, PartialEq, Eq)]
struct Got {
    bytes: usize,
    fds: usize,
    challenge_only: bool,
}

/// A stranger may receive the hub's challenge and nothing else.
const CHALLENGE_ONLY: Got = Got {
    bytes: 24,
    fds: 0,
    challenge_only: true,
};

/// A stranger of another user receives nothing.
const NOTHING: Got = Got {
    bytes: 0,
    fds: 0,
    challenge_only: false,
};

/// Everything `stream` delivers until its end or `for_at_most`, writing `answer` once a
/// challenge has arrived (a stranger's attempt to pass as a rank).
fn receive_all(stream: &UnixStream, answer: &[u8], for_at_most: Duration) -> Got {
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let start = Instant::now();
    let (mut bytes, mut fds, mut answered) = (Vec::new(), 0, false);
    while start.elapsed() < for_at_most {
        let mut buf = [0u8; 4096];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
        match rustix::net::recvmsg(
            stream.as_fd(),
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            rustix::net::RecvFlags::empty(),
        ) {
            Ok(got) if got.bytes == 0 => break,
            Ok(got) => {
                bytes.extend_from_slice(&buf[..got.bytes]);
                for message in control.drain() {
                    if let rustix::net::RecvAncillaryMessage::ScmRights(received) = message {
                        fds += received.count();
                    }
                }
            }
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
        if !answered && bytes.len() >= 24 && !answer.is_empty() {
            answered = true;
            let _ = (&*stream).write_all(answer);
        }
    }
    Got {
        bytes: bytes.len(),
        fds,
        challenge_only: bytes.len() == 24 && bytes.starts_with(b"symmem1C"),
    }
}

/// A handshake answer claiming rank 1, with a MAC made without the secret.
fn forged_answer() -> Vec<u8> {
    let mut answer = b"symmem1A".to_vec();
    answer.extend_from_slice(&1u64.to_le_bytes());
    answer.extend_from_slice(&[0x5a; 16 + 32]);
    answer
}

// ---------------------------------------------------------------------------------------
// Children.

/// Environment variable: the path whose existence lets rank 1 join (so that the stranger
/// reaches the hub first).
const RANK1_AFTER: &str = "SYMMEM_TEST_RANK1_AFTER";
/// Environment variable: the group a stranger child attacks, and how.
const ATTACK: &str = "SYMMEM_TEST_ATTACK";

/// A member: joins (rank 1 once [`RANK1_AFTER`] exists), forms a CPU world and checks an
/// all-gather of every rank's number; exits 0 only if all of it held.
fn member() -> ! {
    let result = (|| -> symmem::Result<()> {
        if std::env::var(unix::ENV_RANK).as_deref() == Ok("1")
            && let Ok(path) = std::env::var(RANK1_AFTER)
        {
            wait_for_path(Path::new(&path), Duration::from_secs(20));
        }
        form_checked_cpu_world(Box::new(UnixBootstrap::from_env()?))?.barrier()
    })();
    exit_child(&result)
}

/// A stranger (run as another user): connects to the group's hub, tries to pass as rank 1,
/// and prints what it received as `got <bytes> <fds> <challenge_only>`.
fn stranger() -> ! {
    let group = std::env::var(ATTACK).expect("group");
    let stream = UnixStream::connect_addr(&hub_address(&group)).expect("connect to the hub");
    let got = receive_all(&stream, &forged_answer(), Duration::from_secs(2));
    println!("got {} {} {}", got.bytes, got.fds, got.challenge_only);
    std::process::exit(0)
}

/// A squatter (run as another user): binds the group's name first, accepts one
/// connection, and prints what it received.
fn squatter() -> ! {
    let group = std::env::var(ATTACK).expect("group");
    let listener = UnixListener::bind_addr(&hub_address(&group)).expect("bind the name first");
    println!("bound");
    // Gone after 10 s whatever happens, so that a failed test leaves no process behind.
    listener.set_nonblocking(true).expect("non-blocking");
    let start = Instant::now();
    let stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("no spoke came: {e}"),
        }
    };
    stream.set_nonblocking(false).expect("blocking");
    // A squatter's own challenge: a member that checked the squatter's user sends no byte.
    let _ = (&stream).write_all(b"symmem1C0123456789abcdef");
    let got = receive_all(&stream, &[], Duration::from_secs(2));
    println!("got {} {} {}", got.bytes, got.fds, got.challenge_only);
    std::process::exit(0)
}

/// A member of a world of 3 that forges: once the world has formed, rank 0 sends "rank 1
/// left" through every datagram socket it holds (every peer's departure sender among
/// them, as any member holds them), then every rank all-reduces, rank 1 last, after 300 ms.
/// Had a peer believed the notice, its wait for rank 1 would end in `PeerLost`. Exits 0
/// only if the all-reduce held on every rank; rank 0 prints `forged N`.
fn forger() -> ! {
    let result = (|| -> symmem::Result<()> {
        let bootstrap = Box::new(UnixBootstrap::from_env()?);
        let world = World::new(bootstrap, Cpu::new(), &Config::default())?;
        let collectives = Collectives::new(&world)?;
        let src = world.full::<f32>(64, world.rank() as f32)?;
        let dst = world.zeros::<f32>(64)?;
        world.barrier()?;
        if world.rank() == 0 {
            println!("forged {}", forge_departure_of(1));
        }
        world.barrier()?;
        if world.rank() == 1 {
            std::thread::sleep(Duration::from_millis(300));
        }
        collectives.all_reduce(&dst, &src, 64, ReduceOp::Sum, Algorithm::OneShot)?;
        assert_eq!(world.read(&dst)?, vec![3.0; 64], "rank {}", world.rank());
        world.barrier()?;
        collectives.finalize()
    })();
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("forger's world: {e}");
            std::process::exit(4)
        }
    }
}

/// Sends a departure notice in `rank`'s name (left, no cause: 12 bytes) through every
/// datagram socket of this process; returns how many took it.
fn forge_departure_of(rank: u32) -> usize {
    let mut notice = rank.to_le_bytes().to_vec();
    notice.extend_from_slice(&0u32.to_le_bytes());
    notice.extend_from_slice(&u32::MAX.to_le_bytes());
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    fds.into_iter()
        .filter(|&fd| {
            // SAFETY: `fd` is one of this process's open descriptors, and nothing closes
            // descriptors while the world's threads are idle between its barriers.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            rustix::net::sockopt::socket_type(fd) == Ok(rustix::net::SocketType::DGRAM)
                && rustix::net::send(fd, &notice, rustix::net::SendFlags::DONTWAIT).is_ok()
        })
        .count()
}

fn run_child_if_any() {
    match child_mode().as_deref() {
        Some("member") => member(),
        Some("forger") => forger(),
        Some("stranger") => stranger(),
        Some("squatter") => squatter(),
        _ => {}
    }
}

/// Parses a child's `got ...` line.
fn parse_got(output: &str) -> Got {
    // The child's test harness may have begun the line ("test name ... got ...").
    let line = output
        .lines()
        .find_map(|l| l.split_once("got ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no report in {output:?}"));
    let mut words = line.split(' ');
    let mut next = || words.next().expect("a field");
    Got {
        bytes: next().parse().expect("bytes"),
        fds: next().parse().expect("fds"),
        challenge_only: next().parse().expect("challenge_only"),
    }
}

// ---------------------------------------------------------------------------------------
// Tests.

/// A world of 3 member processes whose rank 1 joins only once `attack` (given the group's
/// name) has run; returns what the attack returned, and asserts that every member exited
/// 0 (the world formed and its all-gather held) within `within`.
fn world_under_attack<T>(test: &str, within: Duration, attack: impl FnOnce(&str) -> T) -> T {
    let flag = std::env::temp_dir().join(format!("symmem-strangers-{}-{test}", std::process::id()));
    let _ = std::fs::remove_file(&flag);
    let mut command = this_binary(test, "member");
    command.env(RANK1_AFTER, &flag);
    let start = Instant::now();
    let ranks = unix::spawn(&mut command, 3, Duration::from_secs(10)).expect("spawn");
    let group = ranks.group().to_owned();
    // The hub is up once its name answers.
    while UnixStream::connect_addr(&hub_address(&group)).is_err() {
        assert!(start.elapsed() < Duration::from_secs(10), "no hub");
        std::thread::sleep(Duration::from_millis(2));
    }
    let got = attack(&group);
    std::fs::write(&flag, b"").expect("flag");
    let statuses = ranks.wait().expect("wait");
    let _ = std::fs::remove_file(&flag);
    assert!(
        statuses.iter().all(|s| s.success()),
        "the members did not form the world: {statuses:?}"
    );
    assert!(
        start.elapsed() < within,
        "the world formed only after {:?}",
        start.elapsed()
    );
    got
}

#[test]
fn a_stranger_that_claims_a_rank_first_gets_nothing_and_the_world_forms() {
    run_child_if_any();
    let test = "a_stranger_that_claims_a_rank_first_gets_nothing_and_the_world_forms";
    // Same user, no secret: the challenge, then nothing for its forged answer.
    let got = world_under_attack(test, Duration::from_secs(10), |group| {
        let stream = UnixStream::connect_addr(&hub_address(group)).expect("connect");
        receive_all(&stream, &forged_answer(), Duration::from_secs(1))
    });
    assert_eq!(got, CHALLENGE_ONLY);
    if !root() {
        println!("the other-user stranger is skipped: it needs root to drop to uid 65534");
        return;
    }
    // Another user: not even a challenge.
    let got = world_under_attack(test, Duration::from_secs(10), |group| {
        let out = as_nobody(&mut this_binary(test, "stranger"))
            .env(ATTACK, group)
            .output()
            .expect("the stranger");
        assert!(out.status.success(), "{out:?}");
        parse_got(&String::from_utf8_lossy(&out.stdout))
    });
    assert_eq!(got, NOTHING);
}

#[test]
fn silent_garbage_and_trickling_connections_leave_the_world_forming_in_time() {
    run_child_if_any();
    let test = "silent_garbage_and_trickling_connections_leave_the_world_forming_in_time";
    // The group's timeout is 10 s; each attack would hold a one-at-a-time hub for most of
    // it. All three stay connected while rank 1 joins.
    let mut held = Vec::new();
    world_under_attack(test, Duration::from_secs(8), |group| {
        let silent = UnixStream::connect_addr(&hub_address(group)).expect("connect");
        let mut garbage = UnixStream::connect_addr(&hub_address(group)).expect("connect");
        garbage.write_all(&[0xff; 200]).expect("garbage");
        let trickle = UnixStream::connect_addr(&hub_address(group)).expect("connect");
        let answer = forged_answer();
        let trickler = std::thread::spawn(move || {
            // One byte a second, the first 5 of an answer: still going when rank 1 joins.
            for b in &answer[..5] {
                if (&trickle).write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        held.extend([silent, garbage]);
        held.push(UnixStream::connect_addr(&hub_address(group)).expect("connect"));
        trickler
    })
    .join()
    .expect("trickler");
}

#[test]
fn a_squatter_on_the_name_gets_no_descriptor_and_spokes_refuse_it() {
    run_child_if_any();
    let secret = Secret::random().expect("secret");
    let timeout = Duration::from_secs(5);
    // Same user, no secret: the spoke answers its challenge (which proves nothing) and
    // refuses its garbage proof; the squatter got the answer alone (64 bytes), no frame
    // and no descriptor.
    let group = format!("strangers-squat-{}", *Secret::random().unwrap().to_hex());
    let listener = UnixListener::bind_addr(&hub_address(&group)).expect("squat");
    let spoke = {
        let (group, secret) = (group.clone(), secret.clone());
        std::thread::spawn(move || UnixBootstrap::connect(1, 2, &group, &secret, timeout).map(drop))
    };
    let (stream, _) = listener.accept().expect("the spoke");
    (&stream)
        .write_all(b"symmem1C0123456789abcdef")
        .expect("challenge");
    let mut proof = b"symmem1P".to_vec();
    proof.extend_from_slice(&[7; 32]);
    let got = {
        let reading = stream.try_clone().expect("dup");
        let reader = std::thread::spawn(move || receive_all(&reading, &[], Duration::from_secs(1)));
        std::thread::sleep(Duration::from_millis(100));
        (&stream).write_all(&proof).expect("proof");
        reader.join().expect("reader")
    };
    assert_eq!(
        got,
        Got {
            bytes: 64,
            fds: 0,
            challenge_only: false
        }
    );
    let refused = spoke.join().expect("the spoke panicked");
    assert!(
        matches!(
            refused,
            Err(Error::StrangerRefused { what, why, .. }) if what.contains("hub") && why.contains("secret")
        ),
        "{refused:?}"
    );
    // The real hub cannot take the name while the squatter holds it.
    let hub = UnixBootstrap::connect(0, 2, &group, &secret, timeout).map(drop);
    assert!(
        matches!(&hub, Err(Error::Os { what, .. }) if what.contains("another process holds")),
        "{hub:?}"
    );
    drop(listener);
    if !root() {
        println!("the other-user squatter is skipped: it needs root to drop to uid 65534");
        return;
    }
    // Another user: the spoke refuses it before it sends a byte.
    let test = "a_squatter_on_the_name_gets_no_descriptor_and_spokes_refuse_it";
    let group = format!("strangers-squat-{}", *Secret::random().unwrap().to_hex());
    let mut squatter = as_nobody(&mut this_binary(test, "squatter"))
        .env(ATTACK, &group)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the squatter");
    let mut output = std::io::BufReader::new(squatter.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.contains("bound") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut output, &mut line).expect("squatter");
        assert!(n > 0, "the squatter ended before it bound the name");
    }
    let refused = UnixBootstrap::connect(1, 2, &group, &secret, timeout).map(drop);
    assert!(
        matches!(
            &refused,
            Err(Error::StrangerRefused { uid: Some(65534), why, .. }) if why.contains("another user")
        ),
        "{refused:?}"
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut output, &mut rest).expect("squatter");
    assert!(squatter.wait().expect("the squatter").success());
    assert_eq!(parse_got(&rest), NOTHING);
}

/// The abstract socket names (without the `@`) that `/proc/net/unix` lists and that start
/// with `prefix`.
fn abstract_names(prefix: &str) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
    let mut names: Vec<String> = table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter_map(|n| n.strip_prefix('@'))
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn under_mpirun_a_stranger_at_a_ranks_socket_gets_nothing_and_the_world_forms() {
    run_child_if_any();
    if !mpirun_available() {
        return;
    }
    let exe = mpi::build("symmem-tests", "mpi", "mpi-members");
    let flag = std::env::temp_dir().join(format!("symmem-strangers-mpi-{}", std::process::id()));
    let _ = std::fs::remove_file(&flag);
    let before = abstract_names("symmem-mpi-");
    let run = {
        let (exe, flag) = (exe.clone(), flag.clone());
        std::thread::spawn(move || {
            let flag = flag.to_str().expect("a UTF-8 path").to_owned();
            mpi::mpirun(2, &[], &exe, &["--after", &flag], Duration::from_secs(60))
        })
    };
    // Both ranks' sockets, once bound: each rank waits for the flag before it forms the
    // world, so the stranger is first at both.
    let start = Instant::now();
    let names = loop {
        let names: Vec<String> = abstract_names("symmem-mpi-")
            .into_iter()
            .filter(|n| !before.contains(n))
            .collect();
        if names.len() == 2 {
            break names;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no rank sockets: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let strangers: Vec<_> = names
        .iter()
        .map(|name| {
            let addr = SocketAddr::from_abstract_name(name).expect("name");
            let stream = UnixStream::connect_addr(&addr).expect("connect to a rank's socket");
            std::thread::spawn(move || {
                receive_all(&stream, &forged_answer(), Duration::from_secs(3))
            })
        })
        .collect();
    // Where the tests run as root, a stranger of another user at rank 0's socket too.
    let test = "under_mpirun_a_stranger_at_a_ranks_socket_gets_nothing_and_the_world_forms";
    let other_user = root().then(|| {
        let group = names[0].strip_prefix("symmem-").expect("a symmem socket");
        as_nobody(&mut this_binary(test, "stranger"))
            .env(ATTACK, group)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the stranger")
    });
    std::thread::sleep(Duration::from_millis(200));
    std::fs::write(&flag, b"").expect("flag");
    let got: Vec<Got> = strangers
        .into_iter()
        .map(|s| s.join().expect("stranger"))
        .collect();
    let run = run.join().expect("mpirun");
    let _ = std::fs::remove_file(&flag);
    assert!(run.status.success(), "{}", run.all());
    assert_eq!(run.stdout.matches(": ok").count(), 2, "{}", run.all());
    assert_eq!(got, [CHALLENGE_ONLY, CHALLENGE_ONLY]);
    match other_user {
        Some(child) => {
            let out = child.wait_with_output().expect("the stranger");
            assert!(out.status.success(), "{out:?}");
            assert_eq!(parse_got(&String::from_utf8_lossy(&out.stdout)), NOTHING);
        }
        None => println!("the other-user stranger is skipped: it needs root to drop to uid 65534"),
    }
}

#[test]
fn a_departure_forged_by_a_member_in_another_ranks_name_is_not_believed() {
    run_child_if_any();
    let test = "a_departure_forged_by_a_member_in_another_ranks_name_is_not_believed";
    let mut command = this_binary(test, "forger");
    command.stdout(Stdio::piped());
    let mut ranks = unix::spawn(&mut command, 3, Duration::from_secs(10)).expect("spawn");
    let mut out = String::new();
    std::io::Read::read_to_string(
        ranks.children_mut()[0].stdout.as_mut().expect("stdout"),
        &mut out,
    )
    .expect("rank 0's output");
    let statuses = ranks.wait().expect("wait");
    // Rank 0 holds ranks 1's and 2's senders (and its own socket pair's two ends).
    let forged: usize = out
        .split_once("forged ")
        .and_then(|(_, n)| n.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no forgery reported: {out:?}"));
    assert!(forged >= 2, "{out}");
    assert!(
        statuses.iter().all(|s| s.success()),
        "a rank believed the forged departure: {statuses:?}"
    );
}
