//! Ranks as processes on one machine, over UNIX stream sockets.
//!
//! Rank 0 is the hub: it listens on an abstract-namespace socket (no file is created)
//! and every other rank connects to it. A collective sends each contribution to the hub,
//! which answers every rank with all of them, file descriptors attached. When the hub
//! sees a rank vanish (end of stream, or no answer within the timeout) it tells the
//! others which rank was lost, so every survivor returns `PeerLost` promptly.
//!
//! [`spawn`] starts the ranks as child processes of a command; each child joins with
//! [`UnixBootstrap::from_env`].

use super::scm::{self, Kind};
use super::{Bootstrap, DEFAULT_TIMEOUT};
use crate::backend::Shareable;
use crate::error::{Error, Result};
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Environment variable naming this process's rank.
pub const ENV_RANK: &str = "SYMMEM_RANK";
/// Environment variable naming the world size.
pub const ENV_WORLD: &str = "SYMMEM_WORLD_SIZE";
/// Environment variable naming the group's socket.
pub const ENV_GROUP: &str = "SYMMEM_UNIX_GROUP";
/// Environment variable holding the timeout in milliseconds (optional).
pub const ENV_TIMEOUT_MS: &str = "SYMMEM_TIMEOUT_MS";

/// One process-rank's end of a UNIX-socket group.
pub struct UnixBootstrap {
    rank: usize,
    world: usize,
    timeout: Duration,
    /// On the hub: a stream per rank (`None` for itself). Elsewhere: the hub's stream.
    peers: Vec<Option<UnixStream>>,
}

fn address(group: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("symmem-{group}"))
}

fn lost(rank: usize, start: Instant) -> Error {
    Error::PeerLost {
        rank: Some(rank),
        waited: start.elapsed(),
    }
}

impl UnixBootstrap {
    /// Joins group `group` as `rank` of `world`, waiting at most `timeout` for the others.
    pub fn connect(rank: usize, world: usize, group: &str, timeout: Duration) -> Result<Self> {
        if rank >= world {
            return Err(Error::RankOutOfRange { rank, world });
        }
        let start = Instant::now();
        let addr = address(group).map_err(|source| Error::Os {
            what: "socket name",
            source,
        })?;
        let os = |what| move |source| Error::Os { what, source };
        let mut peers: Vec<Option<UnixStream>> = (0..world).map(|_| None).collect();
        if rank == 0 {
            let listener = UnixListener::bind_addr(&addr).map_err(os("bind of the hub socket"))?;
            listener.set_nonblocking(true).map_err(os("hub socket"))?;
            let mut joined = 1;
            while joined < world {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        stream.set_nonblocking(false).map_err(os("hub socket"))?;
                        stream
                            .set_read_timeout(Some(timeout))
                            .map_err(os("hub socket"))?;
                        let (_, hello) = scm::recv(&mut stream).map_err(os("hello from a rank"))?;
                        let peer = hello.bytes.get(..8).and_then(|b| b.try_into().ok());
                        let peer = peer.map(u64::from_le_bytes).map(|p| p as usize);
                        match peer {
                            Some(p) if p > 0 && p < world && peers[p].is_none() => {
                                peers[p] = Some(stream);
                                joined += 1;
                            }
                            _ => return Err(Error::Bootstrap(format!("bad hello {peer:?}"))),
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if start.elapsed() > timeout {
                            let missing = peers.iter().skip(1).position(Option::is_none);
                            return Err(lost(missing.map_or(0, |m| m + 1), start));
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => return Err(os("accept on the hub socket")(e)),
                }
            }
        } else {
            let mut stream = loop {
                match UnixStream::connect_addr(&addr) {
                    Ok(stream) => break stream,
                    Err(_) if start.elapsed() < timeout => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(_) => return Err(lost(0, start)),
                }
            };
            stream
                .set_read_timeout(Some(timeout))
                .map_err(os("rank socket"))?;
            let hello = Shareable {
                bytes: (rank as u64).to_le_bytes().to_vec(),
                fd: None,
            };
            scm::send(&mut stream, Kind::Data, &hello).map_err(|_| lost(0, start))?;
            peers[0] = Some(stream);
        }
        Ok(Self {
            rank,
            world,
            timeout,
            peers,
        })
    }

    /// Joins the group described by the environment that [`spawn`] sets.
    pub fn from_env() -> Result<Self> {
        let var = |name: &'static str| {
            std::env::var(name).map_err(|_| Error::Bootstrap(format!("{name} is not set")))
        };
        let number = |name: &'static str| -> Result<usize> {
            var(name)?
                .parse()
                .map_err(|_| Error::Bootstrap(format!("{name} is not a number")))
        };
        let timeout = match std::env::var(ENV_TIMEOUT_MS) {
            Ok(ms) => Duration::from_millis(
                ms.parse()
                    .map_err(|_| Error::Bootstrap(format!("{ENV_TIMEOUT_MS}={ms}")))?,
            ),
            Err(_) => DEFAULT_TIMEOUT,
        };
        Self::connect(
            number(ENV_RANK)?,
            number(ENV_WORLD)?,
            &var(ENV_GROUP)?,
            timeout,
        )
    }

    /// True when this process was started by [`spawn`].
    pub fn in_env() -> bool {
        std::env::var_os(ENV_GROUP).is_some()
    }

    fn hub_gather(&mut self, mine: Shareable) -> Result<Vec<Shareable>> {
        let start = Instant::now();
        let mut all = Vec::with_capacity(self.world);
        all.push(mine);
        for rank in 1..self.world {
            let stream = self.peers[rank].as_mut().ok_or_else(|| lost(rank, start))?;
            match scm::recv(stream) {
                Ok((Kind::Data, item)) => all.push(item),
                _ => return Err(self.abort(rank, start)),
            }
        }
        for rank in 1..self.world {
            let stream = self.peers[rank].as_mut().ok_or_else(|| lost(rank, start))?;
            for item in &all {
                if scm::send(stream, Kind::Data, item).is_err() {
                    return Err(self.abort(rank, start));
                }
            }
        }
        let own = all.remove(0);
        let mut own_dup = Shareable {
            bytes: own.bytes.clone(),
            fd: None,
        };
        if let Some(fd) = &own.fd {
            own_dup.fd = Some(fd.try_clone().map_err(|source| Error::Os {
                what: "dup of own fd",
                source,
            })?);
        }
        all.insert(0, own_dup);
        Ok(all)
    }

    /// Tells every surviving rank that `rank` was lost, and returns that error.
    fn abort(&mut self, rank: usize, start: Instant) -> Error {
        let notice = Shareable {
            bytes: (rank as u64).to_le_bytes().to_vec(),
            fd: None,
        };
        for (peer, stream) in self.peers.iter_mut().enumerate() {
            if let (Some(stream), true) = (stream.as_mut(), peer != rank) {
                // A peer that is gone too will see end of stream instead.
                let _ = scm::send(stream, Kind::Abort, &notice);
            }
        }
        self.peers.iter_mut().for_each(|s| *s = None);
        lost(rank, start)
    }

    fn spoke_gather(&mut self, mine: Shareable) -> Result<Vec<Shareable>> {
        let start = Instant::now();
        let stream = self.peers[0].as_mut().ok_or_else(|| lost(0, start))?;
        scm::send(stream, Kind::Data, &mine).map_err(|_| lost(0, start))?;
        let mut all = Vec::with_capacity(self.world);
        for _ in 0..self.world {
            match scm::recv(stream) {
                Ok((Kind::Data, item)) => all.push(item),
                Ok((Kind::Abort, notice)) => {
                    let rank = notice.bytes.get(..8).and_then(|b| b.try_into().ok());
                    let rank = rank.map_or(0, |b| u64::from_le_bytes(b) as usize);
                    return Err(lost(rank, start));
                }
                Err(_) => return Err(lost(0, start)),
            }
        }
        Ok(all)
    }

    /// The timeout this rank waits for peers.
    pub fn timeout(&self) -> Duration {
        self.timeout
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
        if self.rank == 0 {
            self.hub_gather(mine)
        } else {
            self.spoke_gather(mine)
        }
    }
}

/// Starts `world` processes of `command`, each with the environment
/// [`UnixBootstrap::from_env`] reads, in a group named after this process and a counter.
/// `timeout` bounds every wait of the children.
pub fn spawn(command: &mut Command, world: usize, timeout: Duration) -> io::Result<Vec<Child>> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static GROUPS: AtomicU64 = AtomicU64::new(0);
    let group = format!(
        "{}-{}",
        std::process::id(),
        GROUPS.fetch_add(1, Ordering::Relaxed)
    );
    (0..world)
        .map(|rank| {
            command
                .env(ENV_RANK, rank.to_string())
                .env(ENV_WORLD, world.to_string())
                .env(ENV_GROUP, &group)
                .env(ENV_TIMEOUT_MS, timeout.as_millis().to_string())
                .spawn()
        })
        .collect()
}
