//! The listening end of the handshake: a [`Doorman`] runs the handshakes of all of a
//! socket's pending connections at once, so a silent or slow stranger never delays a
//! member, accepts a bounded batch a round, so a flood cannot keep it accepting, and counts
//! every refusal (the first of each kind in a second logged at once, the rest as a count).

use super::{
    Answer, Challenge, Context, NONCE_BYTES, Nonces, Peer, Proof, Refusal, Role, Secret, poll,
    random_bytes, stranger_error, wait_readable,
};
use crate::bootstrap::credentials::{my_uid, peer_of};
use crate::error::{Error, Result};
use rustix::event::{PollFd, PollFlags};
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// The connections a [`Doorman`] handshakes with at once; beyond that one is dropped for
/// a newer, the oldest that has not begun its answer first (so strangers cannot exhaust
/// this process's descriptors, and a member, which answers at once, is not the one
/// dropped).
const MAX_PENDING: usize = 64;

/// The connections a [`Doorman`] accepts in one round, before it moves the pending
/// handshakes on and checks their deadlines: a flood of connections cannot keep it
/// accepting.
const ACCEPT_BATCH: usize = 32;

/// How often a [`Doorman`] logs its count of refused connections (the first of each kind
/// at once, the rest as one line per kind and interval): a flood is a few lines, not one
/// per connection.
const TALLY_INTERVAL: Duration = Duration::from_secs(1);

/// A connection a [`Doorman`] handshakes with.
struct Pending {
    stream: UnixStream,
    peer: Peer,
    nonce: [u8; NONCE_BYTES],
    /// The answer's bytes so far.
    got: Vec<u8>,
    deadline: Instant,
}

/// A member admitted through the handshake: the rank it proved, its connection (in
/// blocking mode) and its credentials.
#[derive(Debug)]
pub struct Admitted {
    /// The rank its answer claims (the caller checks that it is one it waits for).
    pub rank: usize,
    /// The connection, in blocking mode.
    pub stream: UnixStream,
    /// The kernel's credentials of the member's process.
    pub peer: Peer,
}

/// The listening end's handshakes, every pending connection's at once.
pub(crate) struct Doorman<'a> {
    secret: &'a Secret,
    context: Context<'a>,
    /// How long a connection has for its whole handshake.
    limit: Duration,
    pending: Vec<Pending>,
    /// The refusals not logged yet.
    tally: std::cell::RefCell<Tally>,
}

/// Refused connections counted by their user and why, logged per interval.
struct Tally {
    /// When the interval began.
    since: Instant,
    /// Per (user, why): this interval's refusals.
    counts: std::collections::BTreeMap<(Option<u32>, Refusal), Refused>,
}

/// One kind's refusals in a [`Tally`]'s interval.
#[derive(Default)]
struct Refused {
    /// How many.
    count: u64,
    /// How many of them were logged one by one (the first).
    logged: u64,
    /// The last one's process.
    last_pid: Option<u32>,
}

impl<'a> Doorman<'a> {
    /// A doorman for `context`'s group that admits holders of `secret`, each within
    /// `limit` of its arrival.
    pub(crate) fn new(secret: &'a Secret, context: Context<'a>, limit: Duration) -> Self {
        Self {
            secret,
            context,
            limit,
            pending: Vec::new(),
            tally: std::cell::RefCell::new(Tally {
                since: Instant::now(),
                counts: std::collections::BTreeMap::new(),
            }),
        }
    }

    /// Counts a refused connection (dropping it closes it): the first of its kind (user
    /// and why) in an interval is logged at once, naming its process; the others of the
    /// interval as one line with their count ([`TALLY_INTERVAL`]).
    fn refuse(&self, peer: Option<Peer>, why: Refusal) {
        let mut tally = self.tally.borrow_mut();
        let refused = tally.counts.entry((peer.map(|p| p.uid), why)).or_default();
        refused.count += 1;
        refused.last_pid = peer.map(|p| p.pid);
        if refused.count == 1 {
            refused.logged = 1;
            match peer {
                Some(p) => tracing::warn!(
                    group = %String::from_utf8_lossy(self.context.group),
                    pid = p.pid,
                    uid = p.uid,
                    why = why.why(),
                    "refused a connection to the group's socket"
                ),
                None => tracing::warn!(
                    group = %String::from_utf8_lossy(self.context.group),
                    why = why.why(),
                    "refused a connection to the group's socket (its credentials unreadable)"
                ),
            }
        }
        if tally.since.elapsed() >= TALLY_INTERVAL {
            self.log_tally(&mut tally);
        }
    }

    /// Logs the refusals of the interval not logged yet, one line per kind, and starts a
    /// new interval.
    fn log_tally(&self, tally: &mut Tally) {
        let seconds = tally.since.elapsed().as_secs_f64();
        for ((uid, why), refused) in std::mem::take(&mut tally.counts) {
            if refused.count > refused.logged {
                tracing::warn!(
                    group = %String::from_utf8_lossy(self.context.group),
                    uid,
                    last_pid = refused.last_pid,
                    count = refused.count - refused.logged,
                    seconds,
                    why = why.why(),
                    "refused more connections to the group's socket"
                );
            }
        }
        tally.since = Instant::now();
    }

    /// Starts the handshake of a connection just accepted: a process of another user is
    /// refused at once; any other is sent a challenge.
    pub(crate) fn arrive(&mut self, stream: UnixStream) {
        let Ok(peer) = peer_of(&stream) else {
            return self.refuse(None, Refusal::Io);
        };
        if peer.uid != my_uid() {
            return self.refuse(Some(peer), Refusal::OtherUser);
        }
        let Ok(nonce) = random_bytes() else {
            return self.refuse(Some(peer), Refusal::Io);
        };
        // A fresh socket's buffer takes the challenge whole without blocking.
        let sent = stream
            .set_nonblocking(true)
            .and_then(|()| (&stream).write_all(&Challenge { nonce }.encode()));
        if sent.is_err() {
            return self.refuse(Some(peer), Refusal::Io);
        }
        if self.pending.len() == MAX_PENDING {
            // The oldest that has sent nothing of its answer: a member answers as soon as
            // it has the challenge.
            let victim = self
                .pending
                .iter()
                .position(|p| p.got.is_empty())
                .unwrap_or(0);
            let dropped = self.pending.remove(victim);
            self.refuse(Some(dropped.peer), Refusal::Crowded);
        }
        self.pending.push(Pending {
            stream,
            peer,
            nonce,
            got: Vec::with_capacity(Answer::BYTES),
            deadline: Instant::now() + self.limit,
        });
    }

    /// Accepts the connections waiting on `listener` (non-blocking; at most
    /// [`ACCEPT_BATCH`] of them), then waits until a connection is waiting or a pending
    /// one has sent something, at most until `until` or the next handshake's deadline, and
    /// moves every handshake on ([`progress`](Self::progress)), refusing those past their
    /// deadlines. Returns the members admitted meanwhile (often none).
    ///
    /// # Errors
    /// [`Error::Os`] where accepting or polling fails.
    pub(crate) fn members_at(
        &mut self,
        listener: &UnixListener,
        until: Instant,
    ) -> Result<Vec<Admitted>> {
        let os = |what| move |source| Error::Os { what, source };
        for _ in 0..ACCEPT_BATCH {
            match listener.accept() {
                Ok((stream, _)) => self.arrive(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(os("accept on a group's socket")(e)),
            }
        }
        let until = self
            .pending
            .iter()
            .map(|p| p.deadline)
            .fold(until, Instant::min);
        let readable = {
            let mut fds = vec![PollFd::new(listener, PollFlags::IN)];
            fds.extend(
                self.pending
                    .iter()
                    .map(|p| PollFd::new(&p.stream, PollFlags::IN)),
            );
            poll(&mut fds, until.saturating_duration_since(Instant::now()))
                .map_err(os("poll of a group's socket"))?;
            fds[1..]
                .iter()
                .map(|fd| !fd.revents().is_empty())
                .collect::<Vec<_>>()
        };
        Ok(self.progress(&readable))
    }

    /// Reads what the pending connections that `readable` (one flag each, in order)
    /// marks have sent, finishes each handshake whose answer is whole, refuses those that
    /// failed or are past their deadline, and returns the members admitted.
    fn progress(&mut self, readable: &[bool]) -> Vec<Admitted> {
        let now = Instant::now();
        let mut admitted = Vec::new();
        let mut keep = Vec::with_capacity(self.pending.len());
        let pending = std::mem::take(&mut self.pending);
        for (i, mut p) in pending.into_iter().enumerate() {
            if readable.get(i).copied().unwrap_or(false) {
                match self.read_answer(&mut p) {
                    Ok(None) => {}
                    Ok(Some(member)) => {
                        admitted.push(member);
                        continue;
                    }
                    Err(why) => {
                        self.refuse(Some(p.peer), why);
                        continue;
                    }
                }
            }
            if now >= p.deadline {
                self.refuse(Some(p.peer), Refusal::Silent);
                continue;
            }
            keep.push(p);
        }
        self.pending = keep;
        admitted
    }

    /// Reads what `p` has sent; once its answer is whole, checks it and sends the proof.
    fn read_answer(&self, p: &mut Pending) -> std::result::Result<Option<Admitted>, Refusal> {
        let mut buf = [0u8; Answer::BYTES];
        let want = Answer::BYTES - p.got.len();
        match (&p.stream).read(&mut buf[..want]) {
            Ok(0) => return Err(Refusal::Silent),
            Ok(n) => p.got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                return Ok(None);
            }
            Err(_) => return Err(Refusal::Io),
        }
        if p.got.len() < Answer::BYTES {
            return Ok(None);
        }
        let answer = Answer::decode(&p.got).ok_or(Refusal::Malformed)?;
        let nonces = Nonces {
            listener: p.nonce,
            connector: answer.nonce,
        };
        let expected = self
            .secret
            .mac(Role::Connector, &self.context, &nonces, answer.rank);
        // `Hash`'s equality is constant-time.
        if expected != blake3::Hash::from(answer.mac) {
            return Err(Refusal::BadProof);
        }
        let rank = usize::try_from(answer.rank).map_err(|_| Refusal::Malformed)?;
        let proof = Proof {
            mac: *self
                .secret
                .mac(Role::Listener, &self.context, &nonces, answer.rank)
                .as_bytes(),
        };
        // The connector waits for the proof without sending: the buffer takes it whole.
        (&p.stream)
            .write_all(&proof.encode())
            .map_err(|_| Refusal::Io)?;
        let stream = p.stream.try_clone().map_err(|_| Refusal::Io)?;
        stream.set_nonblocking(false).map_err(|_| Refusal::Io)?;
        Ok(Some(Admitted {
            rank,
            stream,
            peer: p.peer,
        }))
    }

    /// Records that a member it admitted is refused after all (a rank the caller does not
    /// wait for, or one that joined already).
    pub(crate) fn refuse_member(&self, member: &Admitted, why: &'static str) {
        tracing::warn!(
            group = %String::from_utf8_lossy(self.context.group),
            pid = member.peer.pid,
            uid = member.peer.uid,
            rank = member.rank,
            why,
            "refused a member's connection"
        );
    }
}

impl Drop for Doorman<'_> {
    fn drop(&mut self) {
        let mut tally = self.tally.borrow_mut();
        self.log_tally(&mut tally);
    }
}

/// The listening end's handshake with one connection, `stream`, to the socket of group
/// `group` (of `world` ranks), finished by `deadline`: what a hub does with each
/// connection (all of them at once), for a program that listens on a group's socket
/// itself. Returns the member: the rank it proved, the connection and its process's
/// credentials; a connection that fails is sent nothing more, and is logged.
///
/// # Errors
/// [`Error::StrangerRefused`] naming the connecting process and why.
pub fn admit(
    stream: UnixStream,
    secret: &Secret,
    group: &str,
    world: usize,
    deadline: Instant,
) -> Result<Admitted> {
    let context = Context {
        group: group.as_bytes(),
        world,
    };
    let peer = peer_of(&stream).ok();
    let refused = |why: Refusal| stranger_error("the connecting process", (why, peer));
    let mut doorman = Doorman::new(secret, context, Duration::ZERO);
    doorman.arrive(stream);
    let Some(mut p) = doorman.pending.pop() else {
        // `arrive` refused it (and logged why): another user, or its socket failed.
        return Err(refused(match peer {
            Some(p) if p.uid != my_uid() => Refusal::OtherUser,
            _ => Refusal::Io,
        }));
    };
    let why = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Refusal::Silent;
        }
        match wait_readable(&p.stream, left) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(_) => break Refusal::Io,
        }
        match doorman.read_answer(&mut p) {
            Ok(None) => {}
            Ok(Some(member)) => return Ok(member),
            Err(why) => break why,
        }
    };
    doorman.refuse(Some(p.peer), why);
    Err(refused(why))
}

#[cfg(test)]
mod tests {
    use super::super::{SECRET_BYTES, connect_as};
    use super::*;

    /// Runs a listener (a doorman over one socket pair) against a connector with
    /// `connector_secret` claiming `rank`; returns what each end concluded.
    fn handshake(
        connector_secret: &Secret,
        rank: usize,
    ) -> (Option<usize>, std::result::Result<Peer, Refusal>) {
        let secret = Secret::from_bytes([1; SECRET_BYTES]);
        let context = Context {
            group: b"test",
            world: 4,
        };
        let (listener_end, mut connector_end) = UnixStream::pair().unwrap();
        let connector = {
            let secret = connector_secret.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(5);
                connect_as(&mut connector_end, &secret, &context, rank, deadline)
                    .map_err(|(r, _)| r)
            })
        };
        let mut doorman = Doorman::new(&secret, context, Duration::from_secs(5));
        doorman.arrive(listener_end);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut admitted = None;
        while doorman.pending.len() == 1 && Instant::now() < deadline {
            let ready =
                wait_readable(&doorman.pending[0].stream, Duration::from_millis(50)).unwrap();
            admitted = doorman.progress(&[ready]).pop().map(|m| m.rank);
        }
        (admitted, connector.join().unwrap())
    }

    #[test]
    fn members_are_admitted_with_their_rank_and_strangers_refused_both_ways() {
        let secret = Secret::from_bytes([1; SECRET_BYTES]);
        let (admitted, connector) = handshake(&secret, 3);
        assert_eq!(admitted, Some(3));
        assert_eq!(connector.map(|p| p.pid), Ok(std::process::id()));
        // A connector without the secret is refused, and learns nothing: the listener
        // sends it no proof, so it sees the listener go silent.
        let stranger = Secret::from_bytes([2; SECRET_BYTES]);
        let (admitted, connector) = handshake(&stranger, 1);
        assert_eq!((admitted, connector), (None, Err(Refusal::Silent)));
    }
}
