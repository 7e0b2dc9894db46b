//! Host faults (issue 18): each must end as a typed error, not a hang, a crash, a zombie
//! or the wrong rank's name.
//!
//! * CPU launch: a kernel thread the OS refuses to start (in a child process under a
//!   lowered `RLIMIT_AS`), and a kernel body that panics.
//! * UNIX-socket bootstrap: every child process reaped; a frame longer than the limit;
//!   the ranks that never joined; a survivor that arrives after the hub gave up names the
//!   lost rank, not the hub. The local bootstrap's survivors name the first rank lost.
//! * CPU backend: an import checks the memfd's real size and seals; 10,000 live
//!   allocations on one rank, and the error past the hard `RLIMIT_NOFILE` (child
//!   processes with lowered limits).
//!
//! Tests that start processes hold [`PROCESSES`], so that counting this process's
//! children sees only their own.

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::process::{Resource, Rlimit};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};
use symmem::Error;
use symmem::Grid;
use symmem::backend::cpu::Cpu;
use symmem::backend::cpu::threads;
use symmem::backend::{Backend, Sender, Shareable};
use symmem::bootstrap::auth::{self, Secret};
use symmem::bootstrap::local::LocalBootstrap;
use symmem::bootstrap::unix::{self, UnixBootstrap};
use symmem::bootstrap::{Bootstrap, DEFAULT_MAX_FRAME_BYTES};
use symmem_arch::Arch;
use symmem_tests::processes::{
    CHILD, EXIT_ERROR, EXIT_PEER_LOST, Outcome, child_mode, exit_child, hub_address, report,
    spawn_ranks,
};

/// Held by every test that starts processes.
static PROCESSES: Mutex<()> = Mutex::new(());

fn processes() -> MutexGuard<'static, ()> {
    PROCESSES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the child named by [`CHILD`], if this process is one, and exits.
fn run_child_if_any() {
    let Some(mode) = child_mode() else { return };
    let mut words = mode.split_whitespace();
    match words.next() {
        Some("thread-refused") => child_thread_refused(),
        Some("late") => child_late(),
        Some("allocs") => child_allocs(words.next() == Some("hard")),
        _ => panic!("bad {CHILD}={mode}"),
    }
}

/// Spawns one child process of test `test` in mode `mode` and returns how it ended.
fn one_child(test: &str, mode: &str, deadline: Duration) -> Outcome {
    let mut outcomes = spawn_ranks(test, mode, 1, deadline, deadline, None);
    outcomes.pop().expect("one outcome")
}

// ---------------------------------------------------------------------------------------
// CPU launch.

fn rlimit(resource: Resource) -> Rlimit {
    rustix::process::getrlimit(resource)
}

fn set_rlimit(resource: Resource, limit: Rlimit) {
    rustix::process::setrlimit(resource, limit).expect("setrlimit");
}

/// A limit as `struct rlimit` holds it: `RLIM_INFINITY` (`u64::MAX`) for none.
fn rlim(limit: Option<u64>) -> u64 {
    limit.unwrap_or(u64::MAX)
}

/// This process's address space in bytes (`VmSize`).
fn vm_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmSize");
    kib << 10
}

/// A launch of 16 threads in one block whose address space has room for four and a
/// half thread stacks (2 MiB each): the fifth thread cannot start. Every body would wait
/// at the block barrier for all 16.
fn child_thread_refused() -> ! {
    let stack: u64 = 2 << 20;
    let saved = rlimit(Resource::As);
    let bodies = AtomicUsize::new(0);
    set_rlimit(
        Resource::As,
        Rlimit {
            current: Some(vm_size() + 4 * stack + stack / 2),
            maximum: saved.maximum,
        },
    );
    let result = threads::run(
        Grid {
            blocks: 1,
            threads: 16,
        },
        |arch| {
            bodies.fetch_add(1, Ordering::Relaxed);
            arch.sync_block();
        },
    );
    set_rlimit(Resource::As, saved);
    println!("BODIES-RUN {}", bodies.load(Ordering::Relaxed));
    exit_child(&result)
}

#[test]
fn launch_with_a_thread_refused_is_an_error() {
    run_child_if_any();
    let _guard = processes();
    let o = one_child(
        "launch_with_a_thread_refused_is_an_error",
        "thread-refused",
        Duration::from_secs(20),
    );
    let all = report(std::slice::from_ref(&o));
    assert!(o.status.is_some(), "the launch hung:\n{all}");
    assert_eq!(o.code(), Some(EXIT_ERROR), "{all}");
    assert!(
        o.text()
            .contains("CHILD-ERROR Os { what: \"starting a kernel thread\""),
        "{all}"
    );
    // All or nothing: no thread ran the body.
    assert!(o.text().contains("BODIES-RUN 0"), "{all}");
    assert!(o.after < Duration::from_secs(10), "{all}");
}

#[test]
fn launch_with_a_panicking_thread_reraises() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let grid = Grid {
            blocks: 2,
            threads: 4,
        };
        let launched = std::panic::catch_unwind(|| {
            threads::run(grid, |arch| {
                if arch.block_id() == 1 && arch.thread_id() == 2 {
                    panic!("kernel body panic");
                }
                arch.sync_block();
            })
        });
        let message = launched
            .err()
            .and_then(|p| p.downcast_ref::<&str>().map(|s| s.to_string()));
        let _ = tx.send(message);
    });
    let message = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the launch hung: the panicking thread's siblings wait at its block barrier");
    assert_eq!(message.as_deref(), Some("kernel body panic"));
}

// ---------------------------------------------------------------------------------------
// UNIX-socket bootstrap: children.

/// This process's children (pid, state letter), zombies included.
fn children() -> Vec<(u32, char)> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // A process that is gone by now has no stat to read.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold anything, so split at its last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next());
        let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
        if let (Some(state), Some(ppid)) = (state, ppid)
            && ppid == me
        {
            found.push((pid, state));
        }
    }
    found
}

/// This process's children once none is running any more (zombies only, or none),
/// or after 3 s, whatever they are then.
fn settled_children() -> Vec<(u32, char)> {
    let start = Instant::now();
    loop {
        let found = children();
        if found.iter().all(|&(_, state)| state == 'Z') || start.elapsed() > Duration::from_secs(3)
        {
            return found;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn spawned_ranks_are_reaped() {
    run_child_if_any();
    let _guard = processes();
    let timeout = Duration::from_secs(1);
    // Waited for: every rank's status, and no child left.
    let ranks = unix::spawn(&mut Command::new("true"), 3, timeout).expect("spawn");
    let statuses = ranks.wait().expect("wait");
    assert_eq!(statuses.len(), 3);
    assert!(statuses.iter().all(|s| s.success()), "{statuses:?}");
    assert_eq!(settled_children(), [], "children left after Ranks::wait");
    // Dropped while running: killed and reaped.
    let ranks = unix::spawn(Command::new("sleep").arg("30"), 3, timeout).expect("spawn");
    assert_eq!(ranks.len(), 3);
    drop(ranks);
    assert_eq!(settled_children(), [], "children left after dropping Ranks");
    // The third rank cannot start: the two started before it are killed and reaped. Each
    // child takes one byte from a pipe before exec, and the third finds it empty.
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    writer.write_all(&[1, 1]).expect("write");
    drop(writer);
    let mut command = Command::new("sleep");
    command.arg("30");
    // SAFETY: the closure only reads from a pipe (read(2) is async-signal-safe) and
    // builds an io::Error from a kind (no allocation).
    unsafe {
        command.pre_exec(move || {
            let mut byte = [0u8];
            match (&reader).read(&mut byte) {
                Ok(1) => Ok(()),
                _ => Err(std::io::ErrorKind::Other.into()),
            }
        })
    };
    let spawned = unix::spawn(&mut command, 4, timeout);
    assert!(spawned.is_err(), "the third rank started");
    assert_eq!(settled_children(), [], "children left after a failed spawn");
}

// ---------------------------------------------------------------------------------------
// UNIX-socket bootstrap: frames, missing ranks, blame.

/// A frame header as the bootstrap sends it: kind (0 data, 1 verdict), payload length.
fn header(kind: u8, len: u64) -> [u8; 9] {
    let mut h = [kind; 9];
    h[1..].copy_from_slice(&len.to_le_bytes());
    h
}

/// The secret of the hand-made groups below.
fn secret() -> Secret {
    Secret::from_bytes([3; 32])
}

/// Connects to group `group`'s hub (of 2 ranks) as a hand-made rank 1, through the
/// handshake.
fn fake_spoke(group: &str) -> UnixStream {
    let start = Instant::now();
    let mut stream = loop {
        match UnixStream::connect_addr(&hub_address(group)) {
            Ok(stream) => break stream,
            Err(e) if start.elapsed() < Duration::from_secs(5) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("no hub: {e}"),
        }
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    auth::join(&mut stream, &secret(), group, 2, 1, deadline).expect("the hub's proof");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream
}

/// Reads one frame; returns its kind and payload.
fn read_frame(stream: &mut UnixStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 9];
    stream.read_exact(&mut h).expect("frame header");
    let len = u64::from_le_bytes(h[1..].try_into().expect("8 bytes"));
    let mut payload = vec![0u8; usize::try_from(len).expect("small frame")];
    stream.read_exact(&mut payload).expect("frame payload");
    (h[0], payload)
}

#[test]
fn hub_refuses_a_frame_over_the_limit() {
    // A length just over a lowered limit (with its payload), and the largest length
    // there is (without one): both refused before anything is allocated.
    for (case, (limit, len, payload)) in [
        (1024, 1025, true),
        (DEFAULT_MAX_FRAME_BYTES, u64::MAX, false),
    ]
    .into_iter()
    .enumerate()
    {
        let group = format!("faults-hub-frame-{}-{case}", std::process::id());
        let hub_group = group.clone();
        let hub = std::thread::spawn(move || {
            let mut hub =
                UnixBootstrap::connect(0, 2, &hub_group, &secret(), Duration::from_secs(5))?;
            hub.set_max_frame_bytes(limit);
            hub.all_gather(b"hub")
        });
        let mut spoke = fake_spoke(&group);
        spoke.write_all(&header(0, len)).expect("frame");
        if payload {
            // The hub may have closed already.
            let _ = spoke.write_all(&vec![7u8; len as usize]);
        }
        let got = hub.join().expect("the hub panicked");
        assert!(
            matches!(&got, Err(Error::FrameTooLarge { rank: Some(1), bytes, limit: l })
                if *bytes == len && *l == limit),
            "limit {limit}, length {len}: {got:?}"
        );
        // The message names the setting that raises the limit.
        let message = got.unwrap_err().to_string();
        assert!(message.contains("SYMMEM_MAX_FRAME_BYTES"), "{message}");
        // The hub told the spoke before it closed.
        assert_eq!(read_frame(&mut spoke).0, 1, "no verdict for the spoke");
    }
}

#[test]
fn spoke_refuses_a_frame_over_the_limit() {
    let group = format!("faults-spoke-frame-{}", std::process::id());
    let listener = UnixListener::bind_addr(&hub_address(&group)).expect("bind");
    let spoke_group = group.clone();
    let spoke = std::thread::spawn(move || {
        let mut spoke =
            UnixBootstrap::connect(1, 2, &spoke_group, &secret(), Duration::from_secs(2))?;
        spoke.all_gather(b"spoke")
    });
    let (hub, _) = listener.accept().expect("accept");
    let deadline = Instant::now() + Duration::from_secs(5);
    let member = auth::admit(hub, &secret(), &group, 2, deadline).expect("the spoke's proof");
    assert_eq!(member.rank, 1);
    let mut hub = member.stream;
    hub.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    assert_eq!(read_frame(&mut hub), (0, b"spoke".to_vec()));
    // Rank 0's contribution, one byte over the default limit, and no payload.
    let len = DEFAULT_MAX_FRAME_BYTES as u64 + 1;
    hub.write_all(&header(0, len)).expect("frame");
    let got = spoke.join().expect("the spoke panicked");
    assert!(
        matches!(got, Err(Error::FrameTooLarge { rank: Some(0), bytes, limit })
            if bytes == len && limit == DEFAULT_MAX_FRAME_BYTES),
        "{got:?}"
    );
    // The spoke says why it leaves.
    assert_eq!(read_frame(&mut hub).0, 1, "no verdict from the spoke");
}

#[test]
fn hub_names_every_rank_that_never_joined() {
    let group = format!("faults-never-joined-{}", std::process::id());
    let timeout = Duration::from_millis(500);
    let spoke_group = group.clone();
    // Rank 2 of 4 joins; ranks 1 and 3 never do.
    let spoke = std::thread::spawn(move || {
        let mut spoke = UnixBootstrap::connect(2, 4, &spoke_group, &secret(), timeout)?;
        spoke.barrier()
    });
    let hub = UnixBootstrap::connect(0, 4, &group, &secret(), timeout).map(drop);
    let spoke = spoke.join().expect("the spoke panicked");
    for (who, got) in [("hub", hub), ("rank 2", spoke)] {
        assert!(
            matches!(&got, Err(Error::NeverJoined { ranks, .. }) if ranks == &[1, 3]),
            "{who}: {got:?}"
        );
        let message = got.unwrap_err().to_string();
        assert!(
            message.contains("raise Config::timeout"),
            "{who}: {message}"
        );
    }
}

/// All four ranks meet once; then rank 2 aborts and rank 3 reaches the next barrier
/// only after the hub has given up on rank 2 and closed.
fn child_late() -> ! {
    let result = UnixBootstrap::from_env().and_then(|mut bootstrap| {
        bootstrap.barrier()?;
        match bootstrap.rank() {
            2 => std::process::abort(),
            3 => std::thread::sleep(Duration::from_millis(500)),
            _ => {}
        }
        bootstrap.barrier()
    });
    exit_child(&result)
}

#[test]
fn late_survivor_names_the_lost_rank() {
    run_child_if_any();
    let _guard = processes();
    let outcomes = spawn_ranks(
        "late_survivor_names_the_lost_rank",
        "late",
        4,
        Duration::from_secs(20),
        Duration::from_secs(30),
        None,
    );
    let all = report(&outcomes);
    for rank in [0, 1, 3] {
        let o = &outcomes[rank];
        assert_eq!(o.code(), Some(EXIT_PEER_LOST), "rank {rank}:\n{all}");
        assert!(
            o.text().contains("CHILD-ERROR PeerLost { rank: Some(2)"),
            "rank {rank} should name rank 2:\n{all}"
        );
    }
}

#[test]
fn local_survivors_name_the_first_rank_lost() {
    // Rank 0 gives up on a slow rank 2 and leaves; rank 2 then arrives, so the round
    // completes for the others, and the next one finds rank 0 gone: it left because of
    // rank 2, and every survivor says so.
    let timeout = Duration::from_secs(2);
    let mut ends = LocalBootstrap::group(4, timeout).into_iter();
    let (mut zero, one, mut two, three) = (
        ends.next().expect("rank 0"),
        ends.next().expect("rank 1"),
        ends.next().expect("rank 2"),
        ends.next().expect("rank 3"),
    );
    // Ranks 1 and 3 arrive halfway through rank 0's wait, so theirs ends later.
    let late = [one, three].map(|mut end| {
        std::thread::spawn(move || {
            std::thread::sleep(timeout / 2);
            let first = end.barrier();
            (first, end.barrier())
        })
    });
    let got = zero.barrier();
    assert!(
        matches!(got, Err(Error::PeerLost { rank: Some(2), .. })),
        "rank 0: {got:?}"
    );
    drop(zero);
    two.barrier()
        .expect("rank 2 completes the round rank 0 gave up on");
    let got = two.barrier();
    assert!(
        matches!(got, Err(Error::PeerLost { rank: Some(2), .. })),
        "rank 2: {got:?}"
    );
    for (rank, thread) in [1, 3].into_iter().zip(late) {
        let (first, second) = thread.join().expect("rank thread");
        first.unwrap_or_else(|e| panic!("rank {rank}'s first barrier: {e:?}"));
        assert!(
            matches!(second, Err(Error::PeerLost { rank: Some(2), .. })),
            "rank {rank}: {second:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// CPU backend: memfds.

/// A memfd of `len` bytes with `seals` added.
fn memfd(len: u64, seals: SealFlags) -> OwnedFd {
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    let fd = rustix::fs::memfd_create(c"faults", flags).expect("memfd_create");
    rustix::fs::ftruncate(&fd, len).expect("ftruncate");
    if !seals.is_empty() {
        rustix::fs::fcntl_add_seals(&fd, seals).expect("F_ADD_SEALS");
    }
    fd
}

/// A CPU-backend handle that claims `claimed` bytes.
fn handle(fd: OwnedFd, claimed: u64) -> Shareable {
    Shareable {
        bytes: claimed.to_le_bytes().to_vec(),
        fd: Some(fd),
    }
}

const SIZE_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

#[test]
fn import_checks_the_memfd_not_the_peers_word() {
    let cpu = Cpu::new();
    let len: usize = 1 << 20;
    // A sealed memfd of 4 KiB that claims 1 MiB: a mapping would fault past 4 KiB.
    for device_memory in [false, true] {
        let h = handle(memfd(4096, SIZE_SEALS), len as u64);
        let got = if device_memory {
            cpu.import_device_memory(h, len, Sender::Elsewhere)
        } else {
            cpu.import_heap(h, len, Sender::Elsewhere)
        };
        assert!(
            matches!(&got, Err(Error::BadPeerMemory { needed, size: 4096, .. }) if *needed == len),
            "{got:?}"
        );
        let message = got.unwrap_err().to_string();
        assert!(message.contains("from the same build"), "{message}");
    }
    // The right size, but the peer could shrink it under the mapping later.
    let got = cpu.import_heap(
        handle(memfd(len as u64, SealFlags::empty()), len as u64),
        len,
        Sender::Elsewhere,
    );
    assert!(
        matches!(got, Err(Error::BadPeerMemory { needed, size, .. })
            if needed == len && size == len as u64),
        "{got:?}"
    );
    // Sealed at the right size: imports.
    cpu.import_heap(
        handle(memfd(len as u64, SIZE_SEALS), len as u64),
        len,
        Sender::Elsewhere,
    )
    .expect("a sealed memfd of the right size imports");
}

#[test]
fn exported_memfds_are_sealed() {
    let cpu = Cpu::new();
    let heap = cpu.create_heap(1 << 20).expect("heap");
    let memory = cpu.alloc_device(4096).expect("allocation");
    for shared in [cpu.export_heap(&heap), cpu.export_device_memory(&memory)] {
        let fd = shared.expect("export").fd.expect("an fd");
        let seals = rustix::fs::fcntl_get_seals(&fd).expect("F_GET_SEALS");
        assert!(seals.contains(SIZE_SEALS), "seals {seals:?}");
        // The seals make this fail without any effect.
        let shrunk = rustix::fs::ftruncate(&fd, 0);
        assert!(shrunk.is_err(), "a peer could shrink the memory");
    }
}

// ---------------------------------------------------------------------------------------
// CPU backend: descriptors.

/// Live allocations the test keeps.
const ALLOCATIONS: usize = 10_000;

/// Lowers the soft `RLIMIT_NOFILE` to 1024 (and the hard one too, with `hard`), then
/// keeps up to [`ALLOCATIONS`] allocations live.
fn child_allocs(hard: bool) -> ! {
    let mut limit = rlimit(Resource::Nofile);
    limit.current = Some(1024);
    if hard {
        limit.maximum = Some(1024);
    }
    set_rlimit(Resource::Nofile, limit);
    let cpu = Cpu::new();
    let mut live = Vec::with_capacity(ALLOCATIONS);
    let result = (0..ALLOCATIONS).try_for_each(|_| {
        live.push(cpu.alloc_device(64)?);
        Ok(())
    });
    println!(
        "ALLOCATIONS {} NOFILE {}",
        live.len(),
        rlim(rlimit(Resource::Nofile).current)
    );
    exit_child(&result)
}

#[test]
fn ten_thousand_allocations_on_one_rank() {
    run_child_if_any();
    let _guard = processes();
    let hard = rlim(rlimit(Resource::Nofile).maximum);
    let o = one_child(
        "ten_thousand_allocations_on_one_rank",
        "allocs",
        Duration::from_secs(60),
    );
    let all = report(std::slice::from_ref(&o));
    if hard >= ALLOCATIONS as u64 + 100 {
        // The soft limit is raised to the hard one.
        assert_eq!(o.code(), Some(0), "{all}");
        assert!(
            o.text()
                .contains(&format!("ALLOCATIONS {ALLOCATIONS} NOFILE {hard}")),
            "{all}"
        );
    } else {
        assert_eq!(o.code(), Some(EXIT_ERROR), "{all}");
        let named = format!("FdLimit {{ what: \"memfd_create\", limit: {hard} }}");
        assert!(o.text().contains(&named), "{all}");
    }
}

#[test]
fn allocations_past_the_hard_fd_limit_are_an_error() {
    run_child_if_any();
    let _guard = processes();
    let o = one_child(
        "allocations_past_the_hard_fd_limit_are_an_error",
        "allocs hard",
        Duration::from_secs(60),
    );
    let all = report(std::slice::from_ref(&o));
    assert_eq!(o.code(), Some(EXIT_ERROR), "{all}");
    assert!(
        o.text()
            .contains("CHILD-ERROR FdLimit { what: \"memfd_create\", limit: 1024 }"),
        "{all}"
    );
}
