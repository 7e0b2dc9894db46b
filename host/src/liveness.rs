//! Peer liveness: a watchdog per world that ends this rank's device waits the moment a
//! peer process ends.
//!
//! A device wait on a peer that was killed would otherwise spin until its deadline
//! (`Config::wait_deadline`, minutes by default). When a world forms, its ranks exchange
//! who they are (boot id, PID namespace, process id). For every peer that is another
//! process on this machine, in this PID namespace, this rank opens a pidfd (Linux 5.3+),
//! which becomes readable when that process ends, however it ends (exit, crash,
//! SIGKILL). A watchdog thread polls them; the first that ends has its rank written into
//! the abort word of this rank's control block (`symmem_rma::watch::Control::abort`, as
//! rank + 1), and every wait of this rank's kernels gives up at its next look, so the
//! host reports [`Error::PeerLost`](crate::Error::PeerLost) naming that rank.
//!
//! Ranks that are threads of this process are not watched (they cannot end alone), nor
//! are peers on other machines or in other PID namespaces: their loss is seen by the
//! bootstrap at the next host collective (which also sets the abort word), and a device
//! wait on them is bounded by the deadline.
//!
//! A world stops its watchdog when it leaves, after its device work has completed and
//! before it leaves the group, so a peer that exits after the group ended is not
//! mistaken for a lost one.

use crate::bootstrap::Bootstrap;
use crate::control::AbortWord;
use crate::error::Result;
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
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

/// A pidfd of process `pid`, or `None` if the kernel has none (before Linux 5.3) or the
/// process is gone.
fn pidfd(pid: u32) -> Option<OwnedFd> {
    let pid = Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok()
}

/// A world's watchdog thread; dropping it stops the thread.
pub(crate) struct Watchdog {
    /// Closing it wakes the thread, which then returns.
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Collective (every rank calls it at the same point): exchanges identities over
    /// `bootstrap` and watches every peer that is another process on this machine. The
    /// first to end has its rank written to `abort`. `None` when there is no such peer.
    ///
    /// Errors: the bootstrap's.
    pub(crate) fn start(bootstrap: &mut dyn Bootstrap, abort: AbortWord) -> Result<Option<Self>> {
        let me = Identity::of_this_process();
        let all = bootstrap.all_gather(&Identity::encode(me.as_ref()))?;
        let Some(me) = me else { return Ok(None) };
        let watched: Vec<(usize, OwnedFd)> = all
            .iter()
            .enumerate()
            .filter_map(|(rank, bytes)| {
                let peer = Identity::decode(bytes)?;
                let same_machine = peer.machine == me.machine && peer.namespace == me.namespace;
                (same_machine && peer.pid != me.pid).then_some((rank, peer.pid))
            })
            .filter_map(|(rank, pid)| Some((rank, pidfd(pid)?)))
            .collect();
        if watched.is_empty() {
            return Ok(None);
        }
        let (stop, wake) = UnixStream::pair().map_err(|source| crate::error::Error::Os {
            what: "watchdog socket pair",
            source,
        })?;
        let thread = std::thread::Builder::new()
            .name("symmem-watchdog".into())
            .spawn(move || watch(wake, &watched, abort))
            .map_err(|source| crate::error::Error::Os {
                what: "watchdog thread",
                source,
            })?;
        Ok(Some(Self {
            stop: Some(stop),
            thread: Some(thread),
        }))
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
/// `watched` processes ends (its rank goes to `abort`).
fn watch(wake: UnixStream, watched: &[(usize, OwnedFd)], abort: AbortWord) {
    let mut fds: Vec<PollFd<'_>> = std::iter::once(PollFd::new(&wake, PollFlags::IN))
        .chain(watched.iter().map(|(_, fd)| PollFd::new(fd, PollFlags::IN)))
        .collect();
    loop {
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
        if let Some(((rank, _), _)) = watched
            .iter()
            .zip(&fds[1..])
            .find(|(_, fd)| !fd.revents().is_empty())
        {
            abort.abort(Some(*rank));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_child_that_ends_is_seen_and_named() {
        let mut word = 0u64;
        // SAFETY: a local word, used atomically until the end of the test.
        let abort = unsafe { AbortWord::new(&raw mut word) };
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .expect("sleep");
        let fd = pidfd(child.id()).expect("pidfd_open");
        let (stop, wake) = UnixStream::pair().expect("pair");
        let start = std::time::Instant::now();
        watch(wake, &[(5, fd)], abort);
        assert_eq!(abort.read(), Some(Some(5)));
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        let _ = child.wait();
        drop(stop);
        // A second abort does not replace the first rank.
        abort.abort(Some(1));
        assert_eq!(abort.read(), Some(Some(5)));
    }

    #[test]
    fn stopping_the_watchdog_returns_without_an_abort() {
        let mut word = 0u64;
        // SAFETY: as above.
        let abort = unsafe { AbortWord::new(&raw mut word) };
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let fd = pidfd(child.id()).expect("pidfd_open");
        let (stop, wake) = UnixStream::pair().expect("pair");
        let thread = std::thread::spawn(move || watch(wake, &[(1, fd)], abort));
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
