//! Peer liveness: a watchdog per world that ends this rank's device waits the moment a
//! peer process ends or a peer leaves.
//!
//! A device wait on a peer that was killed or has left would otherwise spin until its
//! deadline (`Config::wait_deadline`, minutes by default). When a world forms, its ranks
//! exchange who they are (boot id, PID namespace, process id) and a departure socket
//! each: a datagram socket whose sending end every peer on this machine receives (as a
//! file descriptor, over the bootstrap).
//!
//! - **A lost peer.** For every peer that is another process on this machine, in this
//!   PID namespace, this rank opens a pidfd (Linux 5.3+), which becomes readable when
//!   that process ends, however it ends (exit, crash, SIGKILL). The first that ends has
//!   its rank written into the abort word of this rank's control block
//!   (`symmem_rma::watch::Control::abort`, as rank + 1), and every wait of this rank's
//!   kernels gives up at its next look, so the host reports
//!   [`Error::PeerLost`](crate::Error::PeerLost) naming that rank. A rank whose thread
//!   panics tells its peers it is lost (a departure notice of kind lost), with the same
//!   effect.
//! - **A departed peer.** A rank that leaves its world (drops or finalizes it) tells every
//!   peer on this machine, once its own device work is complete. Their watchdogs set its
//!   bit in the departed bitmask of their control block
//!   (`symmem_rma::watch::Control::departed`): every wait that names it gives up within
//!   two looks unless the peer's last writes satisfy it, and the host reports
//!   [`Error::PeerLost`](crate::Error::PeerLost) naming it. A departure does not poison
//!   the world: reads, writes and waits that do not need the departed rank go on. Its
//!   process ending afterwards is not a loss.
//!
//! **Who is believed.** A peer's process is watched only where the pid it gives in its
//! identity is the one its bootstrap verified for its rank
//! ([`Bootstrap::verified_pids`]: the kernel's credentials of its connection, or what MPI
//! carried). A departure notice names the rank it comes from, and the kernel stamps it
//! with the sending process's credentials (`SO_PASSCRED`): a notice is believed only from
//! the process verified for the rank it names, so a process holding one rank's sending
//! end (any member holds every peer's) cannot announce another rank's departure or loss.
//! Ranks that are threads of one process share its pid and trust each other.
//!
//! Peers on other machines or in other PID namespaces are not watched: their loss is
//! seen by the bootstrap at the next host collective (which also sets the abort word),
//! and a device wait on them is bounded by the deadline.
//!
//! A world stops its watchdog when it leaves, after its device work has completed, it has
//! told its peers, and before it leaves the group.

use crate::backend::Shareable;
use crate::bootstrap::Bootstrap;
use crate::control::{AbortWord, Departures};
use crate::error::{Error, Result};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags, SocketFlags,
    SocketType,
};
use rustix::process::{Pid, PidfdFlags};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

/// Who this process is: ranks whose identities share `machine` and `namespace` can watch
/// each other's `pid`.
struct Identity {
    machine: [u8; 36],
    namespace: u64,
    pid: u32,
}

impl Identity {
    const BYTES: usize = 36 + 8 + 4;

    /// This process, or `None` where `/proc` does not say.
    fn of_this_process() -> Option<Self> {
        let boot = std::fs::read("/proc/sys/kernel/random/boot_id").ok()?;
        let machine = boot.get(..36)?.try_into().ok()?;
        let namespace = std::fs::metadata("/proc/self/ns/pid").ok()?.ino();
        Some(Self {
            machine,
            namespace,
            pid: std::process::id(),
        })
    }

    fn encode(this: Option<&Self>) -> Vec<u8> {
        match this {
            None => Vec::new(),
            Some(i) => [
                &i.machine[..],
                &i.namespace.to_le_bytes(),
                &i.pid.to_le_bytes(),
            ]
            .concat(),
        }
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != Self::BYTES {
            return None;
        }
        let (machine, rest) = bytes.split_first_chunk::<36>()?;
        let (namespace, pid) = rest.split_first_chunk::<8>()?;
        Some(Self {
            machine: *machine,
            namespace: u64::from_le_bytes(*namespace),
            pid: u32::from_le_bytes(pid.try_into().ok()?),
        })
    }
}

/// Decodes `bytes` from a peer as its identity, checking that one that decodes re-encodes
/// to the very bytes it came from (anything else is no identity: the peer is not
/// watched). The oracle of the property tests below and of the `liveness` fuzz target.
///
/// # Panics
/// Where the decode breaks that.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_identity(bytes: &[u8]) {
    if let Some(identity) = Identity::decode(bytes) {
        assert_eq!(Identity::encode(Some(&identity)), bytes);
    }
}

/// A departure socket pair (receiving end, sending end): datagrams, and the kernel's
/// credentials of each one's sender delivered with it (`SO_PASSCRED` on the receiving end).
fn departure_socket() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (notices, sender) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::sockopt::set_socket_passcred(&notices, true)?;
    Ok((notices, sender))
}

/// The next notice on `notices` and the pid of the process that sent it (`None` where the
/// kernel gave no credentials); `None` when none is waiting.
fn next_notice(notices: &OwnedFd, buf: &mut [u8]) -> Option<(usize, Option<u32>)> {
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        notices,
        &mut [std::io::IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::DONTWAIT,
    )
    .ok()?;
    let pid = control.drain().find_map(|message| match message {
        RecvAncillaryMessage::ScmCredentials(cred) => Some(cred.pid.as_raw_nonzero().get() as u32),
        _ => None,
    });
    Some((got.bytes, pid))
}

/// A pidfd of process `pid`, or `None` if the kernel has none (before Linux 5.3) or the
/// process is gone.
fn pidfd(pid: u32) -> Option<OwnedFd> {
    let pid = Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok()
}

/// How a rank ends, as it tells its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Departure {
    /// It left its world in good order: its device work is complete.
    Left,
    /// It left after its own work failed (a wait of its gave up): its device work is
    /// complete, but its failure, not its departure, is the cause to name: `cause`, the
    /// rank it found lost or gone, where it knows one (the processes soak found a
    /// survivor naming a rank that had stopped because of a killed one, whose notice
    /// reached it before the kill did).
    Failed {
        /// The rank whose loss or departure failed it.
        cause: Option<usize>,
    },
    /// Its thread panicked: like a process that ended, it is lost.
    Lost,
}

impl Departure {
    /// A notice: the rank, the kind, the cause (`u32::MAX` for none), each a
    /// little-endian `u32`.
    const BYTES: usize = 12;

    fn encode(self, rank: usize) -> [u8; Self::BYTES] {
        let (kind, cause): (u32, Option<usize>) = match self {
            Departure::Left => (0, None),
            Departure::Lost => (1, None),
            Departure::Failed { cause } => (2, cause),
        };
        let cause = cause.map_or(u32::MAX, |c| c as u32);
        let mut out = [0; Self::BYTES];
        out[..4].copy_from_slice(&(rank as u32).to_le_bytes());
        out[4..8].copy_from_slice(&kind.to_le_bytes());
        out[8..].copy_from_slice(&cause.to_le_bytes());
        out
    }

    /// The rank and kind of a notice; `None` for anything else (a notice from or naming a
    /// rank outside a world of `world` ranks, a length, kind or cause no rank sends).
    fn decode(bytes: &[u8], world: usize) -> Option<(usize, Self)> {
        let words: &[u8; Self::BYTES] = bytes.try_into().ok()?;
        let word = |i: usize| {
            let at = 4 * i;
            u32::from_le_bytes([words[at], words[at + 1], words[at + 2], words[at + 3]])
        };
        let rank = usize::try_from(word(0)).ok()?;
        let cause = match word(2) {
            u32::MAX => None,
            c => Some(usize::try_from(c).ok().filter(|&c| c < world)?),
        };
        let kind = match (word(1), cause) {
            (0, None) => Departure::Left,
            (1, None) => Departure::Lost,
            (2, cause) => Departure::Failed { cause },
            _ => return None,
        };
        (rank < world).then_some((rank, kind))
    }
}

/// A world's watchdog thread, and the peers it tells when this rank leaves; dropping it
/// stops the thread.
pub(crate) struct Watchdog {
    rank: usize,
    /// The sending ends of the peers' departure sockets (those on this machine).
    peers: Vec<OwnedFd>,
    /// Some peer is a rank of this very process (ranks as threads).
    peer_in_process: bool,
    /// Every peer is a rank of this very process, as verified by the bootstrap.
    all_in_process: bool,
    /// Closing it wakes the thread, which then returns.
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Collective (every rank calls it at the same point): exchanges identities and
    /// departure sockets over `bootstrap`, and watches every peer that is another process
    /// on this machine and every peer's departure notice, believing a peer's identity only
    /// where it names the process `verified` (the bootstrap's
    /// [`Bootstrap::verified_pids`], by rank) gives for its rank. A lost peer has its rank
    /// written to `abort`; a departed one, its bit set in `departures` (`healthy` too
    /// where it left in good order). `None` in a world
    /// of one rank.
    ///
    /// # Errors
    /// The bootstrap's; [`Error::Os`] where the socket or the thread cannot be
    /// made.
    pub(crate) fn start(
        bootstrap: &mut dyn Bootstrap,
        verified: Vec<Option<u32>>,
        abort: AbortWord,
        departures: Departures,
    ) -> Result<Option<Self>> {
        let (rank, world) = (bootstrap.rank(), bootstrap.world_size());
        if world == 1 {
            return Ok(None);
        }
        let me = Identity::of_this_process();
        let (notices, sender) = departure_socket().map_err(|e| Error::Os {
            what: "departure socket pair",
            source: e,
        })?;
        let all = bootstrap.all_gather_shareable(Shareable {
            bytes: Identity::encode(me.as_ref()),
            fd: Some(sender),
        })?;
        let mut peers = Vec::with_capacity(world - 1);
        let mut watched: Vec<(usize, OwnedFd)> = Vec::new();
        let mut peer_in_process = false;
        let mut all_in_process = me.is_some();
        for (peer, share) in all.into_iter().enumerate() {
            if peer == rank {
                continue;
            }
            // A peer on another machine (MPI) sends no descriptor: it is not told.
            peers.extend(share.fd);
            let identity = Identity::decode(&share.bytes);
            all_in_process &= identity.is_some();
            if let (Some(me), Some(identity)) = (&me, identity) {
                let same_machine =
                    identity.machine == me.machine && identity.namespace == me.namespace;
                all_in_process &= same_machine && verified[peer] == Some(me.pid);
                if same_machine && verified[peer] != Some(identity.pid) {
                    tracing::warn!(
                        peer,
                        claimed = identity.pid,
                        verified = verified[peer],
                        "a peer's identity names a process its bootstrap did not verify: \
                         it is not watched, and its departure notices are not believed"
                    );
                    continue;
                }
                if same_machine && identity.pid != me.pid {
                    watched.extend(pidfd(identity.pid).map(|fd| (peer, fd)));
                }
                peer_in_process |= same_machine && identity.pid == me.pid;
            }
        }
        let (stop, wake) = UnixStream::pair().map_err(|source| Error::Os {
            what: "watchdog socket pair",
            source,
        })?;
        let thread = std::thread::Builder::new()
            .name("symmem-watchdog".into())
            .spawn(move || watch(wake, &notices, &verified, watched, abort, departures))
            .map_err(|source| Error::Os {
                what: "watchdog thread",
                source,
            })?;
        Ok(Some(Self {
            rank,
            peers,
            peer_in_process,
            all_in_process,
            stop: Some(stop),
            thread: Some(thread),
        }))
    }

    /// Whether some peer is a rank of this very process (ranks as threads).
    pub(crate) fn peer_in_process(&self) -> bool {
        self.peer_in_process
    }

    /// Whether every peer is a rank of this very process (ranks as threads), each one's
    /// process verified by the bootstrap, not only claimed.
    pub(crate) fn all_in_process(&self) -> bool {
        self.all_in_process
    }

    /// Tells every peer on this machine that this rank ends (`how`). Call it once this
    /// rank's device work is complete. A peer that has already stopped listening is
    /// skipped; nothing here blocks.
    pub(crate) fn announce(&self, how: Departure) {
        let notice = how.encode(self.rank);
        for peer in &self.peers {
            // Non-blocking, and no SIGPIPE where a peer's end is closed: a peer that
            // stopped listening has left already.
            let _ = rustix::net::send(peer, &notice, SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The watchdog thread: waits until `wake` closes (the world stops it) or one of the
/// `watched` processes ends or a peer's notice says it was lost (its rank goes to
/// `abort`, and the thread returns). A peer's notice that it left sets its bit in
/// `departures`, and its process is no longer watched (it may now end). A notice is
/// believed only from the process `senders` names for the rank it names (by rank, the
/// world's verified pids); any other is logged and ignored.
fn watch(
    wake: UnixStream,
    notices: &OwnedFd,
    senders: &[Option<u32>],
    mut watched: Vec<(usize, OwnedFd)>,
    abort: AbortWord,
    departures: Departures,
) {
    let world = senders.len();
    loop {
        let mut fds: Vec<PollFd<'_>> = [PollFd::new(&wake, PollFlags::IN)]
            .into_iter()
            .chain([PollFd::new(notices, PollFlags::IN)])
            .chain(watched.iter().map(|(_, fd)| PollFd::new(fd, PollFlags::IN)))
            .collect();
        match rustix::event::poll(&mut fds, None) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(_) => return,
        }
        if !fds[0].revents().is_empty() {
            // Closed (or, never, written): the world is stopping the watchdog.
            let _ = (&wake).read(&mut [0]);
            return;
        }
        let ended = watched
            .iter()
            .zip(&fds[2..])
            .find(|(_, fd)| !fd.revents().is_empty())
            .map(|((rank, _), _)| *rank);
        let noticed = !fds[1].revents().is_empty();
        drop(fds);
        if noticed {
            let mut buf = [0u8; Departure::BYTES + 1];
            while let Some((len, sender)) = next_notice(notices, &mut buf) {
                let notice = Departure::decode(&buf[..len], world);
                if let Some((rank, how)) = notice
                    && (sender.is_none() || senders[rank] != sender)
                {
                    tracing::warn!(
                        rank,
                        ?how,
                        sender,
                        expected = senders[rank],
                        "a departure notice for a rank from another process was ignored"
                    );
                    continue;
                }
                match notice {
                    Some((rank, how @ (Departure::Left | Departure::Failed { .. }))) => {
                        tracing::debug!(peer = rank, ?how, "a peer left the world");
                        match how {
                            Departure::Left => departures.healthy.set(rank),
                            Departure::Failed { cause: Some(cause) } => {
                                departures.causes.set(rank, cause);
                            }
                            _ => {}
                        }
                        departures.all.set(rank);
                        watched.retain(|(r, _)| *r != rank);
                    }
                    Some((rank, Departure::Lost)) => {
                        abort.abort(Some(rank));
                        return;
                    }
                    None => tracing::warn!(len, "an unreadable departure notice was ignored"),
                }
            }
            continue;
        }
        if let Some(rank) = ended {
            abort.abort(Some(rank));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::DepartedMask;

    #[test]
    fn identities_round_trip_and_reject_other_lengths() {
        let me = Identity::of_this_process().expect("/proc on Linux");
        let bytes = Identity::encode(Some(&me));
        let back = Identity::decode(&bytes).expect("decodes");
        assert_eq!(
            (back.machine, back.namespace, back.pid),
            (me.machine, me.namespace, me.pid)
        );
        assert!(Identity::decode(&bytes[1..]).is_none());
        assert!(Identity::decode(&Identity::encode(None)).is_none());
    }

    /// A departure socket pair (receiving end, sending end) and bitmasks of 8 ranks over
    /// `words` (every departure, the healthy ones).
    fn notices(words: &mut [u64; 10]) -> (OwnedFd, OwnedFd, Departures) {
        let (rx, tx) = departure_socket().expect("socketpair");
        let (masks, causes) = words.split_at_mut(2);
        // SAFETY: local words that outlive every use in the test, used atomically.
        let departures = unsafe {
            Departures {
                all: DepartedMask::new(&raw mut masks[0], 8),
                healthy: DepartedMask::new(&raw mut masks[1], 8),
                causes: crate::control::Causes::new(causes.as_mut_ptr(), 8),
            }
        };
        (rx, tx, departures)
    }

    #[test]
    fn a_child_that_ends_is_seen_and_named() {
        let (mut word, mut bits) = (0u64, [0u64; 10]);
        // SAFETY: a local word, used atomically until the end of the test.
        let abort = unsafe { AbortWord::new(&raw mut word) };
        let (rx, _tx, departed) = notices(&mut bits);
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .expect("sleep");
        let fd = pidfd(child.id()).expect("pidfd_open");
        let (stop, wake) = UnixStream::pair().expect("pair");
        let start = std::time::Instant::now();
        watch(wake, &rx, &this_process(), vec![(5, fd)], abort, departed);
        assert_eq!(abort.read(), Some(Some(5)));
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        let _ = child.wait();
        drop(stop);
        // A second abort does not replace the first rank.
        abort.abort(Some(1));
        assert_eq!(abort.read(), Some(Some(5)));
    }

    #[test]
    fn a_departure_sets_its_bit_and_its_process_ending_is_no_loss() {
        let (mut word, mut bits) = (0u64, [0u64; 10]);
        // SAFETY: as above.
        let abort = unsafe { AbortWord::new(&raw mut word) };
        let (rx, tx, departed) = notices(&mut bits);
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .expect("sleep");
        let fd = pidfd(child.id()).expect("pidfd_open");
        let (stop, wake) = UnixStream::pair().expect("pair");
        // Garbage first (ignored), then rank 3's departure.
        rustix::net::send(&tx, b"no", SendFlags::empty()).expect("send");
        rustix::net::send(&tx, &Departure::Left.encode(9), SendFlags::empty()).expect("send");
        rustix::net::send(&tx, &Departure::Left.encode(3), SendFlags::empty()).expect("send");
        let thread = std::thread::spawn(move || {
            watch(wake, &rx, &this_process(), vec![(3, fd)], abort, departed)
        });
        let start = std::time::Instant::now();
        while !departed.all.is_set(3) {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(5),
                "departure not seen"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Rank 3's process ends after it left: not a loss.
        let _ = child.wait();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(abort.read(), None);
        assert_eq!(bits_of(departed.all), [3]);
        assert_eq!(bits_of(departed.healthy), [3]);
        // A rank that left after its own failure is departed, not healthy, and the
        // cause it names is kept.
        let failed = Departure::Failed { cause: Some(2) };
        rustix::net::send(&tx, &failed.encode(5), SendFlags::empty()).expect("send");
        while !departed.all.is_set(5) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(bits_of(departed.healthy), [3]);
        assert_eq!(departed.causes.get(5), Some(2));
        assert_eq!(departed.causes.get(3), None);
        // A peer whose thread panicked is lost.
        rustix::net::send(&tx, &Departure::Lost.encode(6), SendFlags::empty()).expect("send");
        thread.join().expect("watchdog");
        assert_eq!(abort.read(), Some(Some(6)));
        drop(stop);
    }

    /// The senders of a world of 8 ranks that are all threads of this process.
    fn this_process() -> Vec<Option<u32>> {
        vec![Some(std::process::id()); 8]
    }

    /// Run as a child by the test below (with `FORGER` set): sends rank 1's departure
    /// on its stdin, a departure socket's sending end. Does nothing otherwise.
    #[test]
    fn forged_notice_child() {
        if std::env::var_os(FORGER).is_some() {
            let notice = Departure::Left.encode(1);
            rustix::net::send(std::io::stdin(), &notice, SendFlags::empty()).expect("send");
        }
    }

    const FORGER: &str = "SYMMEM_TEST_FORGE_A_NOTICE";

    #[test]
    fn a_notice_from_another_process_than_the_rank_it_names_is_ignored() {
        let (mut word, mut bits) = (0u64, [0u64; 10]);
        // SAFETY: as above.
        let abort = unsafe { AbortWord::new(&raw mut word) };
        let (rx, tx, departed) = notices(&mut bits);
        // Another process that holds this rank's sending end (as every member holds every
        // peer's) announces rank 1's departure; rank 1 is a thread of this process.
        let forger = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["liveness::tests::forged_notice_child", "--exact", "--quiet"])
            .env(FORGER, "1")
            .stdin(std::process::Stdio::from(tx.try_clone().expect("dup")))
            .stdout(std::process::Stdio::null())
            .status()
            .expect("the forger");
        assert!(forger.success());
        // Then rank 2's own notice, from this process.
        rustix::net::send(&tx, &Departure::Left.encode(2), SendFlags::empty()).expect("send");
        let (stop, wake) = UnixStream::pair().expect("pair");
        let thread = std::thread::spawn(move || {
            watch(wake, &rx, &this_process(), Vec::new(), abort, departed);
        });
        let start = std::time::Instant::now();
        while !departed.all.is_set(2) {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(5),
                "rank 2 not seen"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Notices are read in order: the forged one came first and was ignored.
        assert_eq!(bits_of(departed.all), [2]);
        assert_eq!(abort.read(), None);
        drop(stop);
        thread.join().expect("watchdog");
    }

    fn bits_of(mask: crate::control::DepartedMask) -> Vec<usize> {
        (0..8).filter(|&r| mask.is_set(r)).collect()
    }

    #[test]
    fn departure_notices_round_trip_and_reject_the_rest() {
        for how in [
            Departure::Left,
            Departure::Lost,
            Departure::Failed { cause: None },
            Departure::Failed { cause: Some(0) },
        ] {
            assert_eq!(Departure::decode(&how.encode(7), 8), Some((7, how)));
            assert_eq!(Departure::decode(&how.encode(8), 8), None);
        }
        // A cause outside the world.
        let far = Departure::Failed { cause: Some(8) }.encode(1);
        assert_eq!(Departure::decode(&far, 8), None);
        // A cause on a kind that has none, and an unknown kind.
        let mut bad = Departure::Left.encode(1);
        bad[8..].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(Departure::decode(&bad, 8), None);
        let mut bad = Departure::Left.encode(1);
        bad[4] = 3;
        assert_eq!(Departure::decode(&bad, 8), None);
        assert_eq!(Departure::decode(&bad[..11], 8), None);
        assert_eq!(Departure::decode(&[0; 13], 8), None);
        assert_eq!(Departure::decode(&[], 8), None);
    }

    #[test]
    fn stopping_the_watchdog_returns_without_an_abort() {
        let (mut word, mut bits) = (0u64, [0u64; 10]);
        // SAFETY: as above.
        let abort = unsafe { AbortWord::new(&raw mut word) };
        let (rx, _tx, departed) = notices(&mut bits);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let fd = pidfd(child.id()).expect("pidfd_open");
        let (stop, wake) = UnixStream::pair().expect("pair");
        let thread = std::thread::spawn(move || {
            watch(wake, &rx, &this_process(), vec![(1, fd)], abort, departed)
        });
        drop(stop);
        thread.join().expect("watchdog");
        assert_eq!(abort.read(), None);
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[cfg(test)]
mod identity_properties {
    use super::*;
    use crate::bad_bytes::bytes_near;
    use proptest::prelude::*;

    fn identity() -> impl Strategy<Value = Vec<u8>> {
        any::<([u8; 32], [u8; 4], u64, u32)>().prop_map(|(a, b, namespace, pid)| {
            let mut machine = [0; 36];
            machine[..32].copy_from_slice(&a);
            machine[32..].copy_from_slice(&b);
            Identity::encode(Some(&Identity {
                machine,
                namespace,
                pid,
            }))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_bytes_are_an_identity_that_round_trips_or_none(bytes in bytes_near(identity())) {
            check_identity(&bytes);
        }
    }
}
