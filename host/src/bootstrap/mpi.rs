//! Ranks started by `mpirun`, over `MPI_COMM_WORLD` (cargo feature `mpi`, OpenMPI), or
//! over a communicator an application that initialised MPI itself already has
//! ([`MpiBootstrap::from_communicator`]: the world, or a split of it).
//!
//! Bytes travel through MPI all-gathers. File descriptors cannot travel through MPI, so
//! each rank also listens on an abstract-namespace UNIX socket of a random name of its own
//! (chosen and bound before it is published over MPI, so no process can predict and take
//! it first), and hands its descriptor to every peer **on its machine** over it
//! (SCM_RIGHTS): ranks on other machines are reached through the off-node transport
//! instead. A rank that dies makes `mpirun` end the job; socket waits are bounded by the
//! timeout.
//!
//! symmem asks for `MPI_THREAD_MULTIPLE` and needs `MPI_THREAD_SERIALIZED`: a
//! [`World`](crate::World) may be created, used and dropped on any thread (it is `Send`
//! and `Sync`, and every bootstrap call goes through its mutex, so calls never overlap),
//! while `MPI_THREAD_FUNNELED` would allow MPI calls from the thread that initialised MPI
//! only. An MPI library that provides less makes [`MpiBootstrap::new`] fail with
//! [`Error::MpiThreadLevel`], naming both levels. A world that spans several nodes also
//! runs the off-node engine's proxy thread, which calls MPI concurrently: it needs
//! `MPI_THREAD_MULTIPLE`, and forming such a world fails the same way without it.
//!
//! Descriptors are handed only to peers on the same machine (by host name): a peer on
//! another machine cannot map this one's memory anyway, and reaches it through the
//! engine.
//!
//! **Only the communicator's ranks connect.** Rank 0 makes the job's name (128 random
//! bits, which every handshake is bound to) and a [`Secret`], and broadcasts both over MPI, whose launcher admits only
//! its job's processes; the ranks' process ids travel over MPI too. Every connection to a
//! rank's socket passes [`auth`]'s handshake (same user, proof of the secret,
//! in both directions) and must come from the process id MPI gave for the rank it proves;
//! anything else is dropped and logged, and the rank keeps accepting. A rank sends its
//! descriptor only to a listener that proved itself and is the process MPI named.
//!
//! Every rank learns every contribution's length before any is sent, so a length over
//! the limit ([`ENV_MAX_FRAME_BYTES`](super::ENV_MAX_FRAME_BYTES)) is
//! [`Error::FrameTooLarge`] on every rank alike, before anything is allocated for it.

use super::auth::{self, Context, Doorman, Secret};
use super::dial;
use super::scm::{self, Kind, RecvError};
use super::{Bootstrap, DEFAULT_TIMEOUT, max_frame_from_env};
use crate::backend::Shareable;
use crate::error::{Error, Result};
use mpi::datatype::PartitionMut;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::mem::ManuallyDrop;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::time::{Duration, Instant};

/// The `mpi` crate (rsmpi) this bootstrap is built on: an application that initialises
/// MPI itself uses this one, so that its communicators are the type
/// [`MpiBootstrap::from_communicator`] takes.
pub use ::mpi as rsmpi;

/// One MPI rank's end of the world.
///
/// # Examples
/// Under `mpirun`, each rank on the GPU of its place on its machine:
/// ```no_run
/// use symmem::backend::cuda::Cuda;
/// use symmem::bootstrap::mpi::MpiBootstrap;
/// use symmem::{Config, World};
///
/// let mut bootstrap = MpiBootstrap::new()?;
/// let local = symmem::topology::local_rank(&mut bootstrap)?;
/// let backend = Cuda::new(local.rank % Cuda::device_count()?)?;
/// let world = World::new(Box::new(bootstrap), backend, &Config::default())?;
/// # let _ = world;
/// # Ok::<(), symmem::Error>(())
/// ```
/// More: [`crate::guides::mpirun`].
pub struct MpiBootstrap {
    /// `MPI_COMM_WORLD`, or symmem's own duplicate of the application's communicator.
    /// Declared before `_universe`, so it is freed before this bootstrap's own MPI, if
    /// any, is finalised.
    world: OwnedCommunicator,
    /// MPI itself, when this bootstrap initialised it ([`new`](Self::new)): finalised
    /// when the bootstrap goes. `None` when the application owns MPI.
    _universe: Option<mpi::environment::Universe>,
    provided: mpi::Threading,
    /// Whether each rank runs on this machine (descriptors go to those only).
    same_machine: Vec<bool>,
    /// Every rank's process id, as MPI carried it.
    pids: Vec<u32>,
    /// The job's random name (what the handshakes are about) and secret, from rank 0
    /// over MPI.
    job: String,
    secret: Secret,
    /// Every rank's socket address: a random name each rank chose and bound itself
    /// before any was published (over MPI), so none can be predicted and squatted.
    names: Vec<SocketAddr>,
    listener: UnixListener,
    timeout: Duration,
    max_frame: usize,
}

/// The thread level symmem needs (see the module documentation).
const REQUIRED: mpi::Threading = mpi::Threading::Serialized;
/// The thread level symmem asks for: what the off-node engine needs.
const WANTED: mpi::Threading = mpi::Threading::Multiple;

/// The MPI name of a thread level.
fn level_name(level: mpi::Threading) -> &'static str {
    match level {
        mpi::Threading::Single => "MPI_THREAD_SINGLE",
        mpi::Threading::Funneled => "MPI_THREAD_FUNNELED",
        mpi::Threading::Serialized => "MPI_THREAD_SERIALIZED",
        mpi::Threading::Multiple => "MPI_THREAD_MULTIPLE",
    }
}

/// The longest message of the descriptor exchange (a rank number).
const FD_FRAME_BYTES: usize = 8;

// SAFETY: MPI is initialised with at least `Threading::Serialized`, so its handles may be used
// from any thread as long as calls never overlap; a World serialises every bootstrap call
// behind its mutex, and the bootstrap is only moved, never shared.
unsafe impl Send for MpiBootstrap {}

/// Waits for `request`, leaving the core to the rank's other threads: yielding, and
/// after a millisecond sleeping between tests. An MPI wait spins without yielding, and
/// under `mpirun`'s default binding (one core per rank from 2 ranks down) the off-node
/// engine's proxy shares that core: it would get it back only at the scheduler's next
/// tick, and every request a peer's kernel sent this rank would wait that long
/// (measured: 4 ms per staged request on 2 cores).
fn wait_yielding<'a, D: ?Sized, S: mpi::request::Scope<'a>>(
    mut request: mpi::request::Request<'a, D, S>,
) {
    let start = Instant::now();
    loop {
        match request.test() {
            Ok(_) => return,
            Err(pending) => request = pending,
        }
        if start.elapsed() < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// [`Error::MpiThreadLevel`] unless `provided` is at least what symmem needs.
fn check_level(provided: mpi::Threading) -> Result<()> {
    if provided < REQUIRED {
        return Err(Error::MpiThreadLevel {
            required: level_name(REQUIRED),
            provided: level_name(provided),
        });
    }
    Ok(())
}

/// A communicator freed when dropped (nothing for `MPI_COMM_WORLD`) while MPI is
/// initialised; after `MPI_Finalize` freeing it would be an MPI error that aborts the
/// process, so then the handle is left as it is.
struct OwnedCommunicator(ManuallyDrop<SimpleCommunicator>);

impl std::ops::Deref for OwnedCommunicator {
    type Target = SimpleCommunicator;

    fn deref(&self) -> &SimpleCommunicator {
        &self.0
    }
}

impl Drop for OwnedCommunicator {
    fn drop(&mut self) {
        if !mpi::environment::is_finalized() {
            // SAFETY: dropped once, here; the handle is not used again.
            unsafe { ManuallyDrop::drop(&mut self.0) };
        }
    }
}

fn os(what: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |source| Error::Os { what, source }
}

/// Bytes of randomness in a rank's socket name.
const NAME_BYTES: usize = 16;

/// The socket address of the random name `bytes`.
fn socket_name(bytes: &[u8]) -> std::io::Result<SocketAddr> {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    SocketAddr::from_abstract_name(format!("symmem-mpi-{hex}"))
}

/// A listener on a new random name of this rank's own: chosen and bound before anyone
/// can see it, so no other process can take it first (a name derived from the job's, or
/// from the rank, could be squatted once the first rank's showed in `/proc/net/unix`).
/// Returns the name's bytes and the listener.
fn bind_random_name() -> Result<([u8; NAME_BYTES], UnixListener)> {
    let mut attempts = 0;
    loop {
        let name: [u8; NAME_BYTES] = auth::random_bytes()?;
        let addr = socket_name(&name).map_err(os("socket name"))?;
        match UnixListener::bind_addr(&addr) {
            Ok(listener) => return Ok((name, listener)),
            // 128 random bits taken: only by chance, so a few tries settle it.
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempts < 4 => {
                attempts += 1;
            }
            Err(e) => return Err(os("bind of the rank socket")(e)),
        }
    }
}

impl MpiBootstrap {
    /// True when this process was started by an MPI launcher (OpenMPI or PMI).
    pub fn in_env() -> bool {
        ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
            .iter()
            .any(|v| std::env::var_os(v).is_some())
    }

    /// Initialises MPI and joins `MPI_COMM_WORLD`; contributions longer than
    /// [`ENV_MAX_FRAME_BYTES`](super::ENV_MAX_FRAME_BYTES) are refused. MPI is finalised
    /// when the bootstrap (the world made from it) goes.
    ///
    /// # Errors
    /// [`Error::MpiAlreadyInitialised`] if the application initialised MPI
    /// (then use [`from_communicator`](Self::from_communicator));
    /// [`Error::MpiThreadLevel`] if the MPI library provides a lower thread level than
    /// `MPI_THREAD_SERIALIZED` (MPI is finalised again on every rank alike).
    pub fn new() -> Result<Self> {
        let max_frame = max_frame_from_env()?;
        let (universe, provided) =
            mpi::initialize_with_threading(WANTED).ok_or(Error::MpiAlreadyInitialised)?;
        check_level(provided)?;
        let world = universe.world();
        Self::over(Some(universe), provided, world, max_frame)
    }

    /// Joins a world over `communicator`, which the application owns, in an application
    /// that initialised MPI itself (an rsmpi [`Universe`](mpi::environment::Universe)):
    /// its world, or a split of it; every rank of `communicator` calls this
    /// (collective). The ranks of the symmem world are the ranks in `communicator`.
    ///
    /// symmem talks over its own duplicate of the communicator (`MPI_Comm_dup`), so its
    /// messages never match the application's, and neither initialises nor finalises
    /// MPI. Drop the world before the application's `Universe` finalises MPI; a world
    /// that outlives MPI leaks its duplicate rather than free it after `MPI_Finalize`.
    ///
    /// # Errors
    /// [`Error::MpiNotInitialised`] if MPI is not initialised (or already
    /// finalised); [`Error::MpiThreadLevel`] if the application initialised MPI with a
    /// lower thread level than `MPI_THREAD_SERIALIZED` (`MPI_THREAD_MULTIPLE` for a
    /// world across nodes): initialise it with
    /// `rsmpi::initialize_with_threading(rsmpi::Threading::Multiple)`.
    pub fn from_communicator(communicator: &impl Communicator) -> Result<Self> {
        if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
            return Err(Error::MpiNotInitialised);
        }
        let max_frame = max_frame_from_env()?;
        let provided = mpi::environment::threading_support();
        check_level(provided)?;
        Self::over(None, provided, communicator.duplicate(), max_frame)
    }

    /// The bootstrap over `world`, whose every rank calls this (collective).
    fn over(
        universe: Option<mpi::environment::Universe>,
        provided: mpi::Threading,
        world: SimpleCommunicator,
        max_frame: usize,
    ) -> Result<Self> {
        // Freed (while MPI lives) when dropped, also when this fails.
        let world = OwnedCommunicator(ManuallyDrop::new(world));
        // The job's name (16 bytes) and secret (32), rank 0's, from the OS's random source.
        // A rank 0 whose source fails sends zeros, and every rank fails alike below.
        let mut keys = [0u8; 16 + auth::SECRET_BYTES];
        if world.rank() == 0 {
            keys = auth::random_bytes().unwrap_or(keys);
        }
        world.process_at_rank(0).broadcast_into(&mut keys[..]);
        if keys == [0; 16 + auth::SECRET_BYTES] {
            return Err(Error::Os {
                what: "getrandom on rank 0 (the job's socket names and secret)",
                source: std::io::ErrorKind::Unsupported.into(),
            });
        }
        let job: String = keys[..16].iter().map(|b| format!("{b:02x}")).collect();
        let secret = Secret::from_bytes(keys[16..].try_into().expect("32 bytes"));
        let mut pids = vec![0u32; world.size() as usize];
        world.all_gather_into(&std::process::id(), &mut pids[..]);
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim().as_bytes();
        let mut this = [0u8; 64];
        this[..host.len().min(64)].copy_from_slice(&host[..host.len().min(64)]);
        let mut hosts = vec![0u8; 64 * world.size() as usize];
        world.all_gather_into(&this[..], &mut hosts[..]);
        let same_machine = hosts.chunks(64).map(|h| h == this).collect();
        let (name, listener) = bind_random_name()?;
        listener.set_nonblocking(true).map_err(os("rank socket"))?;
        let mut all_names = vec![0u8; NAME_BYTES * world.size() as usize];
        world.all_gather_into(&name[..], &mut all_names[..]);
        let names = all_names
            .chunks(NAME_BYTES)
            .map(socket_name)
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(os("socket name"))?;
        Ok(Self {
            world,
            _universe: universe,
            provided,
            same_machine,
            pids,
            job,
            secret,
            names,
            listener,
            timeout: DEFAULT_TIMEOUT,
            max_frame,
        })
    }

    /// Sets the longest contribution this rank accepts from a peer in one collective;
    /// all ranks should set the same limit.
    pub fn set_max_frame_bytes(&mut self, bytes: usize) {
        self.max_frame = bytes;
    }

    fn exchange_fds(
        &mut self,
        fd: Option<std::os::fd::OwnedFd>,
    ) -> Result<Vec<Option<std::os::fd::OwnedFd>>> {
        let (me, n) = (self.rank(), self.world_size());
        let start = Instant::now();
        let deadline = start + self.timeout;
        let lost = |rank| Error::PeerLost {
            rank: Some(rank),
            waited: start.elapsed(),
        };
        let context = Context {
            group: self.job.as_bytes(),
            world: n,
        };
        let mut out: Vec<Option<std::os::fd::OwnedFd>> = (0..n).map(|_| None).collect();
        if let Some(fd) = &fd {
            // Every rank sends and receives at once: a rank's handshake with a peer's
            // socket needs that peer to serve its own socket meanwhile.
            let sender = FdSender {
                me,
                names: &self.names,
                secret: &self.secret,
                pids: &self.pids,
                same_machine: &self.same_machine,
                context,
                deadline,
            };
            let (sent, received) = std::thread::scope(|scope| {
                let sending = scope.spawn(|| sender.send(fd));
                let received = self.receive_fds(&mut out, context, deadline, &lost);
                (sending.join(), received)
            });
            received?;
            sent.map_err(|_| Error::LockPoisoned {
                what: "the descriptor exchange (its sending thread panicked)",
            })?
            .map_err(|peer| match peer {
                Ok(peer) => lost(peer),
                Err(e) => e,
            })?;
            out[me] = Some(fd.try_clone().map_err(os("dup of own fd"))?);
        }
        self.world.barrier();
        Ok(out)
    }

    /// Receives a descriptor from every other rank on this machine into `out`, through
    /// this rank's socket: only from the process MPI named for the rank each proves.
    fn receive_fds(
        &self,
        out: &mut [Option<std::os::fd::OwnedFd>],
        context: Context<'_>,
        deadline: Instant,
        lost: &dyn Fn(usize) -> Error,
    ) -> Result<()> {
        let (me, n) = (self.rank(), self.world_size());
        {
            let expected = self.same_machine.iter().filter(|&&s| s).count() - 1;
            let mut doorman = Doorman::new(&self.secret, context, self.timeout);
            let mut received = 0;
            while received < expected {
                if Instant::now() >= deadline {
                    let missing = (0..n)
                        .find(|&p| p != me && self.same_machine[p] && out[p].is_none())
                        .unwrap_or(0);
                    return Err(lost(missing));
                }
                for member in doorman.members_at(&self.listener, deadline)? {
                    let f = member.rank;
                    if f >= n || f == me || !self.same_machine[f] || out[f].is_some() {
                        doorman.refuse_member(&member, "a rank this one does not wait for");
                        continue;
                    }
                    if member.peer.pid != self.pids[f] {
                        doorman.refuse_member(&member, "not the process MPI named for its rank");
                        continue;
                    }
                    let mut stream = member.stream;
                    let (_, item) = match scm::recv(&mut stream, FD_FRAME_BYTES, deadline) {
                        Ok(frame) => frame,
                        Err(RecvError::Io(_)) => return Err(lost(f)),
                        Err(RecvError::TooLarge { bytes, limit }) => {
                            return Err(Error::FrameTooLarge {
                                rank: Some(f),
                                bytes,
                                limit,
                            });
                        }
                    };
                    let from = item
                        .bytes
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map(u64::from_le_bytes);
                    if from != Some(f as u64) || item.fd.is_none() {
                        return Err(Error::BadMessage {
                            from: Some(f),
                            what: "file-descriptor message (not the rank it proved, or no descriptor)",
                        });
                    }
                    out[f] = item.fd;
                    received += 1;
                }
            }
        }
        Ok(())
    }
}

/// The sending half of the descriptor exchange: what it needs of the bootstrap, so that it
/// runs on a thread of its own beside the receiving half.
struct FdSender<'a> {
    me: usize,
    names: &'a [SocketAddr],
    secret: &'a Secret,
    pids: &'a [u32],
    same_machine: &'a [bool],
    context: Context<'a>,
    deadline: Instant,
}

impl FdSender<'_> {
    /// Sends `fd` to every other rank on this machine, each once its socket has proved
    /// that it holds the job's secret and is the process MPI named for it.
    ///
    /// # Errors
    /// The
    /// rank that could not be reached (`Ok(rank)`: it is lost), or the error.
    fn send(
        &self,
        fd: &std::os::fd::OwnedFd,
    ) -> std::result::Result<(), std::result::Result<usize, Error>> {
        let n = self.pids.len();
        for peer in (0..n).filter(|&p| p != self.me && self.same_machine[p]) {
            let addr = &self.names[peer];
            // Bounded even where the peer's backlog is full (a stranger's doing).
            let mut stream = dial::connect_by(addr, self.deadline).map_err(|_| Ok(peer))?;
            // The descriptor goes to the process MPI named for `peer`, once it has proved
            // that it holds the job's secret; nothing goes to anyone else.
            let listener = auth::connect_as(
                &mut stream,
                self.secret,
                &self.context,
                self.me,
                self.deadline,
            )
            .map_err(|refusal| Err(auth::stranger_error(RANK_SOCKET, refusal)))?;
            if listener.pid != self.pids[peer] {
                return Err(Err(auth::stranger_error(
                    RANK_SOCKET,
                    (auth::Refusal::NotTheRank, Some(listener)),
                )));
            }
            let dup = fd.try_clone().map_err(|e| Err(os("dup of own fd")(e)))?;
            let item = Shareable {
                bytes: (self.me as u64).to_le_bytes().to_vec(),
                fd: Some(dup),
            };
            scm::send(&mut stream, Kind::Data, &item).map_err(|_| Ok(peer))?;
        }
        Ok(())
    }
}

/// Who [`Error::StrangerRefused`] names when a rank's socket fails the handshake.
const RANK_SOCKET: &str = "the process at a peer rank's socket";

impl Bootstrap for MpiBootstrap {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }
    fn world_size(&self) -> usize {
        self.world.size() as usize
    }
    fn all_gather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.world_size();
        let mut announced = vec![0u64; n];
        // Ranks arrive at different times: the early ones wait here, yielding.
        let len = mine.len() as u64;
        mpi::request::scope(|scope| {
            wait_yielding(
                self.world
                    .immediate_all_gather_into(scope, &len, &mut announced[..]),
            )
        });
        // Every rank sees the same lengths, so every rank refuses the same one, before
        // anything is allocated and before any rank sends its bytes.
        let (lens, displs, total) = super::gather_layout(&announced, self.max_frame)?;
        let mut buf = vec![0u8; total];
        {
            let mut partition = PartitionMut::new(&mut buf[..], &lens[..], &displs[..]);
            self.world.all_gather_varcount_into(mine, &mut partition);
        }
        Ok(displs
            .iter()
            .zip(&lens)
            .map(|(&d, &l)| buf[d as usize..(d + l) as usize].to_vec())
            .collect())
    }
    fn all_gather_shareable(&mut self, mine: Shareable) -> Result<Vec<Shareable>> {
        let bytes = self.all_gather(&mine.bytes)?;
        let fds = self.exchange_fds(mine.fd)?;
        Ok(bytes
            .into_iter()
            .zip(fds)
            .map(|(bytes, fd)| Shareable { bytes, fd })
            .collect())
    }
    fn barrier(&mut self) -> Result<()> {
        wait_yielding(self.world.immediate_barrier());
        Ok(())
    }
    /// The pids MPI carried (its launcher admits only the job's processes), for the ranks
    /// on this machine; `None` for the others, whose pids mean nothing here.
    fn verified_pids(&mut self) -> Result<Vec<Option<u32>>> {
        Ok(self
            .pids
            .iter()
            .zip(&self.same_machine)
            .map(|(&pid, &here)| here.then_some(pid))
            .collect())
    }
    fn mpi_communicator(&self) -> Option<crate::transport::RawMpiComm> {
        Some(crate::transport::RawMpiComm::of(self.world.as_raw()))
    }

    fn transport(&self) -> Result<Box<dyn crate::transport::Transport>> {
        Ok(Box::new(crate::transport::mpi::MpiTransport::new(
            self.world.as_raw(),
            self.provided >= mpi::Threading::Multiple,
            level_name(self.provided),
        )?))
    }
}
