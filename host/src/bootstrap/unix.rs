//! Ranks as processes on one machine, over UNIX stream sockets.
//!
//! Rank 0 is the hub: it listens on an abstract-namespace socket (no file is created)
//! and every other rank, a spoke, connects to it. A collective sends each contribution to
//! the hub, which answers every rank with all of them, file descriptors attached.
//!
//! The hub also judges every failure, and tells every rank its verdict before it closes,
//! so that all ranks name the same cause:
//!
//! * a rank that vanishes (end of stream) or has not contributed within the timeout is
//!   lost: every rank returns [`Error::PeerLost`] naming it (the first one lost, not a
//!   rank that left after it);
//! * ranks that have not joined the group within the timeout: every rank that did join
//!   returns [`Error::NeverJoined`] naming all of them;
//! * a contribution longer than the limit
//!   ([`ENV_MAX_FRAME_BYTES`](super::ENV_MAX_FRAME_BYTES)): every rank returns
//!   [`Error::FrameTooLarge`] naming its rank, and nothing is allocated for it.
//!
//! A spoke that gives up on its own (the hub went silent, or sent a frame over this
//! rank's limit) tells the hub why on its way out, so the hub passes on that cause
//! instead of blaming the spoke. A spoke waits for the hub's answer for twice the
//! timeout: the hub names a missing rank within one timeout of reaching the round, and
//! may reach it later than the spoke; a hub silent for longer is lost itself. Once a
//! group has failed, every later call on it returns the same error at once.
//!
//! [`spawn`] starts the ranks as child processes of a command and hands them back as
//! [`Ranks`], which reaps every one; each child joins with [`UnixBootstrap::from_env`].
//!
//! **Only members join.** Every connection to the hub passes [`auth`]'s
//! handshake before anything else crosses it: the process at the other end must run as
//! this user (`SO_PEERCRED`, checked by both ends) and prove that it holds the group's
//! [`Secret`] (which never crosses the socket). `spawn` makes a new secret and a new
//! random group name for every group and hands the secret to its children only, each
//! through a pipe it alone inherits and reads once (`handoff`); [`UnixBootstrap::connect`]
//! takes them from its caller. The hub runs every pending connection's handshake at once,
//! each bounded by one deadline, accepting a bounded batch a round; it drops and logs
//! (tracing `warn`: the first of each kind with the process's pid and uid, then counts)
//! every connection that fails it, claims a rank the hub does not wait for, or stays
//! silent, and keeps accepting: a stranger gets no frame, no byte of a contribution and no
//! descriptor, and does not stop the real ranks from forming the group. A spoke connects
//! within its deadline even where a stranger filled the hub's backlog, and every frame
//! has one deadline, so no wait is unbounded. A spoke that reaches a process that is no
//! member (a squatter that bound the name first) returns [`Error::StrangerRefused`] having
//! sent it nothing but its half of the handshake.

use super::auth::{self, Context, Doorman, Secret};
use super::scm::{self, Kind, RecvError};
use super::{Bootstrap, DEFAULT_MAX_FRAME_BYTES, DEFAULT_TIMEOUT, max_frame_from_env};
use super::{dial, handoff};
use crate::backend::Shareable;
use crate::error::{Error, Result};
use rustix::event::{PollFd, PollFlags};
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Who [`Error::StrangerRefused`] names when the hub's socket fails the handshake.
const HUB_SOCKET: &str = "the process at the hub's socket";

/// Environment variable naming this process's rank.
pub const ENV_RANK: &str = "SYMMEM_RANK";
/// Environment variable naming the world size.
pub const ENV_WORLD: &str = "SYMMEM_WORLD_SIZE";
/// Environment variable naming the group's socket.
pub const ENV_GROUP: &str = "SYMMEM_UNIX_GROUP";
/// Environment variable naming the pipe that holds the group's secret for a rank
/// [`spawn`] started (`fd:inode`, no secret itself): the rank reads it once and closes
/// it, so the processes it starts inherit neither (see `handoff`).
pub const ENV_SECRET_FD: &str = "SYMMEM_UNIX_SECRET_FD";
/// Environment variable holding the timeout in milliseconds (optional).
pub const ENV_TIMEOUT_MS: &str = "SYMMEM_TIMEOUT_MS";

/// One process-rank's end of a UNIX-socket group.
///
/// # Examples
/// A rank started by [`spawn`] joins its group:
/// ```no_run
/// use symmem::backend::cpu::Cpu;
/// use symmem::bootstrap::unix::UnixBootstrap;
/// use symmem::{Config, World};
///
/// let world = World::new(Box::new(UnixBootstrap::from_env()?), Cpu::new(), &Config::default())?;
/// # let _ = world;
/// # Ok::<(), symmem::Error>(())
/// ```
/// The launcher and the ranks as one program: [`crate::guides::processes`].
pub struct UnixBootstrap {
    rank: usize,
    world: usize,
    timeout: Duration,
    max_frame: usize,
    /// On the hub: a stream per rank (`None` for itself). Elsewhere: the hub's stream.
    peers: Vec<Option<UnixStream>>,
    /// The process id of each rank as the kernel gave it for its connection (on the hub,
    /// every spoke's; on a spoke, the hub's), this process's own for this rank.
    pids: Vec<Option<u32>>,
    /// What ended the group, once something has: every later call fails with it.
    ended: Option<Verdict>,
}

/// Why a group ended, as the hub tells every rank (the payload of an `Abort` frame:
/// little-endian `u64` words, a tag and then the fields).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// The rank left, crashed, was killed, or did not answer in time.
    Lost(usize),
    /// These ranks never joined.
    NeverJoined(Vec<usize>),
    /// The rank sent a frame longer than the limit.
    TooLarge {
        rank: usize,
        bytes: u64,
        limit: usize,
    },
}

impl Verdict {
    fn encode(&self) -> Vec<u8> {
        let words: Vec<u64> = match self {
            Self::Lost(rank) => vec![0, *rank as u64],
            Self::NeverJoined(ranks) => std::iter::once(1)
                .chain(ranks.iter().map(|&r| r as u64))
                .collect(),
            Self::TooLarge { rank, bytes, limit } => vec![2, *rank as u64, *bytes, *limit as u64],
        };
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// The verdict in `bytes`, if they hold one about ranks of a `world`-rank group.
    fn decode(bytes: &[u8], world: usize) -> Option<Self> {
        let (words, rest) = bytes.as_chunks::<8>();
        if !rest.is_empty() {
            return None;
        }
        let rank = |w: &[u8; 8]| {
            usize::try_from(u64::from_le_bytes(*w))
                .ok()
                .filter(|&r| r < world)
        };
        match words {
            [[0, 0, 0, 0, 0, 0, 0, 0], r] => Some(Self::Lost(rank(r)?)),
            [[1, 0, 0, 0, 0, 0, 0, 0], ranks @ ..] => Some(Self::NeverJoined(
                ranks.iter().map(rank).collect::<Option<_>>()?,
            )),
            [[2, 0, 0, 0, 0, 0, 0, 0], r, bytes, limit] => Some(Self::TooLarge {
                rank: rank(r)?,
                bytes: u64::from_le_bytes(*bytes),
                limit: usize::try_from(u64::from_le_bytes(*limit)).ok()?,
            }),
            _ => None,
        }
    }

    fn error(&self, waited: Duration) -> Error {
        match self {
            Self::Lost(rank) => Error::PeerLost {
                rank: Some(*rank),
                waited,
            },
            Self::NeverJoined(ranks) => Error::NeverJoined {
                ranks: ranks.clone(),
                waited,
            },
            Self::TooLarge { rank, bytes, limit } => Error::FrameTooLarge {
                rank: Some(*rank),
                bytes: *bytes,
                limit: *limit,
            },
        }
    }
}

/// The abstract socket name group `group`'s hub listens on (rank 0 binds it; the other
/// ranks connect to it): what a program that listens on a group's socket itself
/// ([`auth::admit`]) binds.
///
/// # Errors
/// Where `symmem-<group>` is too long for a socket address.
pub fn hub_address(group: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("symmem-{group}"))
}

fn os(what: &'static str) -> impl Fn(io::Error) -> Error {
    move |source| Error::Os { what, source }
}

impl UnixBootstrap {
    /// Joins group `group` as `rank` of `world`, waiting at most `timeout` for the others;
    /// every rank passes the same `secret` (make one with [`Secret::random`] and hand it to
    /// the ranks you start, and to nobody else). The name is no secret: any process on the
    /// machine can list it (`ss -xl`), and knowing it admits no one; choose one nobody can
    /// predict, or a process that binds it first keeps the group from forming. Only
    /// processes of this user that hold `secret` join (see the module documentation).
    /// Contributions longer than [`DEFAULT_MAX_FRAME_BYTES`] are refused (see
    /// [`UnixBootstrap::set_max_frame_bytes`]).
    ///
    /// # Errors
    /// On the hub, [`Error::NeverJoined`] naming every rank that did not connect
    /// and prove itself within `timeout` (the ranks that did get the same error from their
    /// first collective), [`Error::Os`] if the name is taken; on a spoke, `PeerLost`
    /// naming rank 0 if no hub listens within `timeout`, [`Error::StrangerRefused`] if the
    /// process that listens is no member.
    pub fn connect(
        rank: usize,
        world: usize,
        group: &str,
        secret: &Secret,
        timeout: Duration,
    ) -> Result<Self> {
        if rank >= world {
            return Err(Error::RankOutOfRange { rank, world });
        }
        let start = Instant::now();
        let addr = hub_address(group).map_err(os("socket name"))?;
        let mut pids = vec![None; world];
        pids[rank] = Some(std::process::id());
        let mut this = Self {
            rank,
            world,
            timeout,
            max_frame: DEFAULT_MAX_FRAME_BYTES,
            peers: (0..world).map(|_| None).collect(),
            pids,
            ended: None,
        };
        let context = Context {
            group: group.as_bytes(),
            world,
        };
        if rank == 0 {
            this.accept_spokes(&addr, start, secret, context)?;
        } else {
            this.join_hub(&addr, start, secret, context)?;
        }
        Ok(this)
    }

    /// The hub's side of `connect`: admits every other rank (each through the handshake,
    /// all at once) and refuses everything else.
    fn accept_spokes(
        &mut self,
        addr: &SocketAddr,
        start: Instant,
        secret: &Secret,
        context: Context<'_>,
    ) -> Result<()> {
        let listener = UnixListener::bind_addr(addr).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                os(
                    "bind of the hub socket: another process holds the group's name (`ss -xlp` \
                    names it); give every group a name nobody can predict",
                )(e)
            } else {
                os("bind of the hub socket")(e)
            }
        })?;
        listener.set_nonblocking(true).map_err(os("hub socket"))?;
        let deadline = start + self.timeout;
        let mut doorman = Doorman::new(secret, context, self.timeout);
        let mut joined = 1;
        while joined < self.world {
            if Instant::now() >= deadline {
                let missing = (1..self.world)
                    .filter(|&p| self.peers[p].is_none())
                    .collect();
                return Err(self.abort(Verdict::NeverJoined(missing), start));
            }
            for member in doorman.members_at(&listener, deadline)? {
                let rank = member.rank;
                if rank == 0 || rank >= self.world || self.peers[rank].is_some() {
                    doorman.refuse_member(&member, "a rank the hub does not wait for");
                    continue;
                }
                self.bound(&member.stream).map_err(os("hub socket"))?;
                tracing::debug!(rank, pid = member.peer.pid, "a rank joined the group");
                // Pid 0: a process in a PID namespace this one cannot see, unverifiable.
                self.pids[rank] = Some(member.peer.pid).filter(|&pid| pid != 0);
                self.peers[rank] = Some(member.stream);
                joined += 1;
            }
        }
        Ok(())
    }

    /// A spoke's side of `connect`: connects to the hub and proves which rank it is, once
    /// the hub has proved itself a member.
    fn join_hub(
        &mut self,
        addr: &SocketAddr,
        start: Instant,
        secret: &Secret,
        context: Context<'_>,
    ) -> Result<()> {
        let deadline = start + self.timeout;
        // Bounded even where the hub's backlog is full (a stranger's doing).
        let mut stream = dial::connect_by(addr, deadline).map_err(|error| {
            tracing::debug!(%error, "no hub reached within the timeout");
            Verdict::Lost(0).error(start.elapsed())
        })?;
        let hub = auth::connect_as(&mut stream, secret, &context, self.rank, deadline).map_err(
            |refusal| {
                let (why, peer) = refusal;
                tracing::warn!(
                    pid = peer.map(|p| p.pid),
                    uid = peer.map(|p| p.uid),
                    why = why.why(),
                    "the process at the hub's socket is no member: nothing sent to it"
                );
                auth::stranger_error(HUB_SOCKET, refusal)
            },
        )?;
        self.bound(&stream).map_err(os("rank socket"))?;
        self.pids[0] = Some(hub.pid).filter(|&pid| pid != 0);
        self.peers[0] = Some(stream);
        Ok(())
    }

    /// Bounds every read and write on `stream` by the timeout.
    fn bound(&self, stream: &UnixStream) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))
    }

    /// Joins the group described by the environment that [`spawn`] sets; the limit on
    /// contributions comes from [`ENV_MAX_FRAME_BYTES`](super::ENV_MAX_FRAME_BYTES) when
    /// it is set.
    pub fn from_env() -> Result<Self> {
        // Set by `spawn` for the ranks it starts: a rank started by hand lacks them.
        let bad = |name, value| Error::BadEnv {
            name,
            value,
            expected: "set by bootstrap::unix::spawn for the ranks it starts: start ranks \
                       with spawn, not by hand",
        };
        let var = |name: &'static str| std::env::var(name).map_err(|_| bad(name, None));
        let number = |name: &'static str| -> Result<usize> {
            let value = var(name)?;
            value.parse().map_err(|_| bad(name, Some(value)))
        };
        let timeout = match std::env::var(ENV_TIMEOUT_MS) {
            Ok(ms) => Duration::from_millis(
                ms.parse()
                    .map_err(|_| bad(ENV_TIMEOUT_MS, Some(ms.clone())))?,
            ),
            Err(_) => DEFAULT_TIMEOUT,
        };
        let max_frame = max_frame_from_env()?;
        let named = var(ENV_SECRET_FD)?;
        let secret = handoff::take(&named).ok_or(Error::BadEnv {
            name: ENV_SECRET_FD,
            value: Some(named),
            expected: "the pipe holding the group's secret that bootstrap::unix::spawn gives \
                       each rank it starts, read once: call UnixBootstrap::from_env once per \
                       rank process, started by spawn",
        })?;
        let mut this = Self::connect(
            number(ENV_RANK)?,
            number(ENV_WORLD)?,
            &var(ENV_GROUP)?,
            &secret,
            timeout,
        )?;
        this.set_max_frame_bytes(max_frame);
        Ok(this)
    }

    /// True when this process was started by [`spawn`].
    pub fn in_env() -> bool {
        std::env::var_os(ENV_GROUP).is_some()
    }

    /// Sets the longest contribution this rank accepts from a peer in one collective
    /// (the hub checks every spoke's; a spoke, every one the hub relays). A longer one
    /// ends the group with [`Error::FrameTooLarge`] on every rank. All ranks of a group
    /// should set the same limit.
    pub fn set_max_frame_bytes(&mut self, bytes: usize) {
        self.max_frame = bytes;
    }

    /// The longest contribution this rank accepts from a peer.
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame
    }

    /// The timeout this rank waits for peers.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn hub_gather(&mut self, mine: Shareable) -> Result<Vec<Shareable>> {
        let start = Instant::now();
        let mut got: Vec<Option<Shareable>> = (0..self.world).map(|_| None).collect();
        let own_fd = match &mine.fd {
            Some(fd) => Some(fd.try_clone().map_err(os("dup of own fd"))?),
            None => None,
        };
        let own_bytes = mine.bytes.clone();
        got[0] = Some(mine);
        while let Some(first) = got.iter().position(Option::is_none) {
            let Some(left) = self.timeout.checked_sub(start.elapsed()) else {
                return Err(self.abort(Verdict::Lost(first), start));
            };
            let waiting: Vec<usize> = (first..self.world).filter(|&r| got[r].is_none()).collect();
            for rank in self.readable(&waiting, left)? {
                let Some(stream) = self.peers[rank].as_mut() else {
                    return Err(self.abort(Verdict::Lost(rank), start));
                };
                // One deadline for the whole frame: a member that trickles it is lost.
                match scm::recv(stream, self.max_frame, start + self.timeout) {
                    Ok((Kind::Data, item)) => got[rank] = Some(item),
                    Ok((Kind::Abort, notice)) => {
                        // The spoke gives up because of the loss it names; one that
                        // names the hub (it stopped waiting for it) is the one lost here.
                        let verdict = Verdict::decode(&notice.bytes, self.world)
                            .filter(|v| *v != Verdict::Lost(0))
                            .unwrap_or(Verdict::Lost(rank));
                        return Err(self.abort(verdict, start));
                    }
                    Err(RecvError::TooLarge { bytes, limit }) => {
                        let verdict = Verdict::TooLarge { rank, bytes, limit };
                        return Err(self.abort(verdict, start));
                    }
                    Err(RecvError::Io(error)) => {
                        tracing::debug!(rank, %error, "a rank's stream to the hub ended");
                        return Err(self.abort(Verdict::Lost(rank), start));
                    }
                }
            }
        }
        let mut all: Vec<Shareable> = got.into_iter().flatten().collect();
        for rank in 1..self.world {
            let sent = match self.peers[rank].as_mut() {
                Some(stream) => all
                    .iter()
                    .try_for_each(|item| scm::send(stream, Kind::Data, item)),
                None => Err(io::ErrorKind::NotConnected.into()),
            };
            if sent.is_err() {
                return Err(self.abort(Verdict::Lost(rank), start));
            }
        }
        all[0] = Shareable {
            bytes: own_bytes,
            fd: own_fd,
        };
        Ok(all)
    }

    /// Waits at most `left` until some of `ranks`' streams can be read (a frame, or
    /// their end); returns those ranks (none when the wait ran out).
    fn readable(&self, ranks: &[usize], left: Duration) -> Result<Vec<usize>> {
        // A rank without a stream is left out: it never wakes the wait.
        let (polled, mut fds): (Vec<usize>, Vec<PollFd<'_>>) = ranks
            .iter()
            .filter_map(|&r| Some((r, PollFd::new(self.peers[r].as_ref()?, PollFlags::IN))))
            .unzip();
        auth::poll(&mut fds, left).map_err(os("poll of the hub's streams"))?;
        Ok(polled
            .into_iter()
            .zip(&fds)
            .filter(|(_, p)| !p.revents().is_empty())
            .map(|(r, _)| r)
            .collect())
    }

    /// Ends the group with `verdict`: tells every other rank (over the hub's streams, or
    /// to the hub from a spoke), closes them, and returns the error. A rank that is gone
    /// too sees end of stream instead.
    fn abort(&mut self, verdict: Verdict, start: Instant) -> Error {
        let notice = Shareable {
            bytes: verdict.encode(),
            fd: None,
        };
        for stream in self.peers.iter_mut().flatten() {
            // Writes are bounded by the timeout; a peer that is gone fails at once.
            let _ = scm::send(stream, Kind::Abort, &notice);
        }
        self.peers.iter_mut().for_each(|s| *s = None);
        let error = verdict.error(start.elapsed());
        self.ended = Some(verdict);
        error
    }

    fn spoke_gather(&mut self, mine: Shareable) -> Result<Vec<Shareable>> {
        let start = Instant::now();
        let deadline = start + 2 * self.timeout;
        let Some(stream) = self.peers[0].as_mut() else {
            return Err(self.abort(Verdict::Lost(0), start));
        };
        if scm::send(stream, Kind::Data, &mine).is_err() {
            // The hub closes its end only after telling this rank why: read that first.
            let verdict = pending_verdict(stream, self.world).unwrap_or(Verdict::Lost(0));
            return Err(self.abort(verdict, start));
        }
        let mut all = Vec::with_capacity(self.world);
        while all.len() < self.world {
            let verdict = match scm::recv(stream, self.max_frame, deadline) {
                Ok((Kind::Data, item)) => {
                    all.push(item);
                    continue;
                }
                Ok((Kind::Abort, notice)) => {
                    Verdict::decode(&notice.bytes, self.world).unwrap_or(Verdict::Lost(0))
                }
                Err(RecvError::TooLarge { bytes, limit }) => Verdict::TooLarge {
                    rank: all.len(),
                    bytes,
                    limit,
                },
                Err(RecvError::Io(_)) => Verdict::Lost(0),
            };
            return Err(self.abort(verdict, start));
        }
        Ok(all)
    }
}

/// The hub's verdict waiting unread on `stream`, if there is one (it is sent before the
/// hub closes, so it is there whenever the hub closed its end).
fn pending_verdict(stream: &mut UnixStream, world: usize) -> Option<Verdict> {
    stream.set_nonblocking(true).ok()?;
    loop {
        // A verdict is at most a tag and one word per rank, or four words.
        // Non-blocking: what is there already, or nothing.
        match scm::recv(
            stream,
            8 * (world + 4),
            Instant::now() + Duration::from_secs(1),
        ) {
            Ok((Kind::Abort, notice)) => return Verdict::decode(&notice.bytes, world),
            Ok((Kind::Data, _)) => continue,
            Err(_) => return None,
        }
    }
}

impl Bootstrap for UnixBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn all_gather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let all = self.all_gather_shareable(Shareable {
            bytes: mine.to_vec(),
            fd: None,
        })?;
        Ok(all.into_iter().map(|s| s.bytes).collect())
    }
    fn all_gather_shareable(&mut self, mine: Shareable) -> Result<Vec<Shareable>> {
        if let Some(verdict) = &self.ended {
            return Err(verdict.error(Duration::ZERO));
        }
        if self.rank == 0 {
            self.hub_gather(mine)
        } else {
            self.spoke_gather(mine)
        }
    }
    /// Ends the group with `lost` as its verdict, which every other rank then names (a
    /// spoke tells the hub, which passes it on; the hub tells every spoke), this rank
    /// included: a hub whose thread panicked would otherwise go on serving the group from
    /// its world's `leave`, and take a spoke that stopped because of it for a lost one.
    fn note_lost(&mut self, lost: usize) {
        if self.ended.is_none() && lost < self.world {
            let _ = self.abort(Verdict::Lost(lost), Instant::now());
        }
    }
    /// The hub's record: every spoke's process id as the kernel gave it for the spoke's
    /// connection. A spoke checks the hub's own entry against its connection too.
    fn verified_pids(&mut self) -> Result<Vec<Option<u32>>> {
        let mine = if self.rank == 0 {
            encode_pids(&self.pids)
        } else {
            Vec::new()
        };
        let all = self.all_gather(&mine)?;
        let pids = decode_pids(&all[0], self.world)
            .filter(|pids| self.rank == 0 || pids[0] == self.pids[0])
            .ok_or(Error::BadMessage {
                from: Some(0),
                what: "roster of the ranks' process ids",
            })?;
        Ok(pids)
    }
}

/// A roster of process ids, by rank (0: unknown), as little-endian `u32`s.
fn encode_pids(pids: &[Option<u32>]) -> Vec<u8> {
    pids.iter()
        .flat_map(|p| p.unwrap_or(0).to_le_bytes())
        .collect()
}

/// The roster in `bytes`, if it names `world` ranks.
fn decode_pids(bytes: &[u8], world: usize) -> Option<Vec<Option<u32>>> {
    let (words, rest) = bytes.as_chunks::<4>();
    (rest.is_empty() && words.len() == world).then(|| {
        words
            .iter()
            .map(|w| Some(u32::from_le_bytes(*w)).filter(|&p| p != 0))
            .collect()
    })
}

/// The rank processes [`spawn`] started, indexed by rank. It owns them, so that none is
/// left behind as a zombie: [`Ranks::wait`] reaps every one, and dropping a `Ranks`
/// kills the ranks still running and reaps them all.
pub struct Ranks {
    children: Vec<Child>,
    group: String,
}

impl Ranks {
    /// The group's socket name (in the abstract namespace, as `symmem-<group>`). It is no
    /// secret: any process on the machine can list it, and knowing it admits no one.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The processes, by rank: to take their pipes, poll one (`try_wait`) or kill one. A
    /// child reaped through here is not waited for again.
    pub fn children_mut(&mut self) -> &mut [Child] {
        &mut self.children
    }

    /// Number of rank processes.
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// Waits for every rank to exit and returns how each ended, by rank. Every rank is
    /// waited for, also when waiting for one fails (then the first failure is returned).
    pub fn wait(mut self) -> Result<Vec<ExitStatus>> {
        let waited: Vec<io::Result<ExitStatus>> =
            self.children.iter_mut().map(Child::wait).collect();
        waited
            .into_iter()
            .map(|w| w.map_err(os("waiting for a rank process")))
            .collect()
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        for child in &mut self.children {
            // Neither fails for a child of ours that has exited or been reaped already.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `world` processes of `command`, each with the environment
/// [`UnixBootstrap::from_env`] reads: a new group with a random name, and a new random
/// [`Secret`] handed to these children only, each through a pipe it alone inherits and
/// reads once (not in the environment: the processes a rank starts get nothing of it).
/// `command` keeps the non-secret variables and an inert `pre_exec` hook. `timeout`
/// bounds every wait of the children. If a rank cannot be started, the ranks started
/// before it are killed and reaped, and the error names the failure. The children's
/// `NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME` is `lo` unless this process or `command` sets it.
///
/// # Errors
/// [`Error::Os`] if the random source or a child's start fails.
pub fn spawn(command: &mut Command, world: usize, timeout: Duration) -> Result<Ranks> {
    // 128 random bits: a name nobody can bind before the hub does.
    let group = Secret::random()?.to_hex()[..32].to_owned();
    let secret = Secret::random()?;
    let mut ranks = Ranks {
        children: Vec::with_capacity(world),
        group,
    };
    // NVSHMEM's unique-id socket, should the ranks start NVSHMEM, on loopback: the ranks
    // share this machine, and NVSHMEM's default interface may be reachable from others.
    use crate::transport::nvshmem::ENV_UID_IFNAME;
    if std::env::var_os(ENV_UID_IFNAME).is_none()
        && !command.get_envs().any(|(k, _)| k == ENV_UID_IFNAME)
    {
        command.env(ENV_UID_IFNAME, "lo");
    }
    let handoff = handoff::Handoff::install(command);
    for rank in 0..world {
        // Open until the child has started (it inherits it then), closed here after.
        let (_pipe, named) = handoff.arm(&secret)?;
        let child = command
            .env(ENV_RANK, rank.to_string())
            .env(ENV_WORLD, world.to_string())
            .env(ENV_GROUP, &ranks.group)
            .env(ENV_SECRET_FD, named)
            .env(ENV_TIMEOUT_MS, timeout.as_millis().to_string())
            .spawn()
            .map_err(os("starting a rank process"))?;
        ranks.children.push(child);
    }
    handoff.disarm();
    tracing::debug!(group = %ranks.group, world, "started the group's rank processes");
    Ok(ranks)
}

/// Decodes `bytes` from the hub or a spoke as a verdict about a group of `world` ranks,
/// checking that one that decodes names only ranks of the group and re-encodes to the
/// very bytes it came from (anything else is no verdict: the receiver blames the sender).
/// The oracle of the property tests below and of the `bootstrap` fuzz target.
///
/// # Panics
/// Where the decode breaks that.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_verdict(bytes: &[u8], world: usize) {
    let Some(verdict) = Verdict::decode(bytes, world) else {
        return;
    };
    assert_eq!(verdict.encode(), bytes);
    match verdict.error(Duration::ZERO) {
        Error::PeerLost { rank: Some(r), .. } | Error::FrameTooLarge { rank: Some(r), .. } => {
            assert!(r < world);
        }
        Error::NeverJoined { ranks, .. } => assert!(ranks.iter().all(|&r| r < world)),
        other => panic!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bad_bytes::bytes_near;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn verdict() -> impl Strategy<Value = Verdict> {
        prop_oneof![
            (0usize..8).prop_map(Verdict::Lost),
            vec(0usize..8, 0..8).prop_map(Verdict::NeverJoined),
            (0usize..8, any::<u64>(), any::<usize>())
                .prop_map(|(rank, bytes, limit)| Verdict::TooLarge { rank, bytes, limit }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_bytes_are_a_verdict_about_the_group_or_none(
            bytes in bytes_near(verdict().prop_map(|v| v.encode())),
            world in 0usize..10,
        ) {
            check_verdict(&bytes, world);
        }

        #[test]
        fn verdicts_round_trip(v in verdict()) {
            prop_assert_eq!(Verdict::decode(&v.encode(), 8), Some(v));
        }
    }
}
