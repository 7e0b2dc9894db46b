//! Ranks started by `mpirun`, over `MPI_COMM_WORLD` (cargo feature `mpi`, OpenMPI).
//!
//! Bytes travel through MPI all-gathers. File descriptors cannot travel through MPI, so
//! each rank also listens on an abstract-namespace UNIX socket named after the job and
//! its rank, and hands its descriptor to every peer over it (SCM_RIGHTS): ranks of one
//! world must therefore share a machine, as ranks sharing GPU memory do. A rank that
//! dies makes `mpirun` end the job; socket waits are bounded by the timeout.

use super::scm::{self, Kind};
use super::{Bootstrap, DEFAULT_TIMEOUT};
use crate::backend::Shareable;
use crate::error::{Error, Result};
use mpi::datatype::PartitionMut;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// One MPI rank's end of the world.
pub struct MpiBootstrap {
    _universe: mpi::environment::Universe,
    world: SimpleCommunicator,
    job: String,
    listener: UnixListener,
    timeout: Duration,
}

// SAFETY: MPI is initialised with `Threading::Serialized`, so its handles may be used
// from any thread as long as calls never overlap; a World serialises every bootstrap call
// behind its mutex, and the bootstrap is only moved, never shared.
unsafe impl Send for MpiBootstrap {}

fn os(what: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |source| Error::Os { what, source }
}

fn socket_name(job: &str, rank: usize) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("symmem-mpi-{job}-{rank}"))
}

impl MpiBootstrap {
    /// True when this process was started by an MPI launcher (OpenMPI or PMI).
    pub fn in_env() -> bool {
        ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
            .iter()
            .any(|v| std::env::var_os(v).is_some())
    }

    /// Initialises MPI and joins `MPI_COMM_WORLD`. Errors if MPI was initialised already.
    pub fn new() -> Result<Self> {
        let universe = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .map(|(universe, _)| universe)
            .ok_or(Error::Bootstrap("MPI is already initialised".into()))?;
        let world = universe.world();
        let mut stamp = [0u64; 2];
        if world.rank() == 0 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            stamp = [u64::from(std::process::id()), nanos];
        }
        world.process_at_rank(0).broadcast_into(&mut stamp[..]);
        let job = format!("{:x}-{:x}", stamp[0], stamp[1]);
        let addr = socket_name(&job, world.rank() as usize).map_err(os("socket name"))?;
        let listener = UnixListener::bind_addr(&addr).map_err(os("bind of the rank socket"))?;
        listener.set_nonblocking(true).map_err(os("rank socket"))?;
        world.barrier();
        Ok(Self {
            _universe: universe,
            world,
            job,
            listener,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    fn exchange_fds(
        &mut self,
        fd: Option<std::os::fd::OwnedFd>,
    ) -> Result<Vec<Option<std::os::fd::OwnedFd>>> {
        let (me, n) = (self.rank(), self.world_size());
        let start = Instant::now();
        let lost = |rank| Error::PeerLost {
            rank: Some(rank),
            waited: start.elapsed(),
        };
        let mut out: Vec<Option<std::os::fd::OwnedFd>> = (0..n).map(|_| None).collect();
        if let Some(fd) = &fd {
            for peer in (0..n).filter(|&p| p != me) {
                let addr = socket_name(&self.job, peer).map_err(os("socket name"))?;
                let mut stream = UnixStream::connect_addr(&addr).map_err(|_| lost(peer))?;
                let dup = fd.try_clone().map_err(os("dup of own fd"))?;
                let item = Shareable {
                    bytes: (me as u64).to_le_bytes().to_vec(),
                    fd: Some(dup),
                };
                scm::send(&mut stream, Kind::Data, &item).map_err(|_| lost(peer))?;
            }
            let mut received = 0;
            while received + 1 < n {
                match self.listener.accept() {
                    Ok((mut stream, _)) => {
                        stream.set_nonblocking(false).map_err(os("rank socket"))?;
                        stream
                            .set_read_timeout(Some(self.timeout))
                            .map_err(os("rank socket"))?;
                        let (_, item) = scm::recv(&mut stream).map_err(os("fd from a peer"))?;
                        let from = item
                            .bytes
                            .get(..8)
                            .and_then(|b| b.try_into().ok())
                            .map(u64::from_le_bytes);
                        match from.map(|f| f as usize) {
                            Some(f) if f < n && f != me && out[f].is_none() => out[f] = item.fd,
                            other => {
                                return Err(Error::Bootstrap(format!(
                                    "fd from unknown rank {other:?}"
                                )));
                            }
                        }
                        received += 1;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if start.elapsed() > self.timeout {
                            let missing =
                                (0..n).find(|&p| p != me && out[p].is_none()).unwrap_or(0);
                            return Err(lost(missing));
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => return Err(os("accept on the rank socket")(e)),
                }
            }
            out[me] = Some(fd.try_clone().map_err(os("dup of own fd"))?);
        }
        self.world.barrier();
        Ok(out)
    }
}

impl Bootstrap for MpiBootstrap {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }
    fn world_size(&self) -> usize {
        self.world.size() as usize
    }
    fn all_gather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.world_size();
        let mut lens = vec![0i32; n];
        let my_len =
            i32::try_from(mine.len()).map_err(|_| Error::Bootstrap("message over 2 GiB".into()))?;
        self.world.all_gather_into(&my_len, &mut lens[..]);
        let displs: Vec<i32> = lens
            .iter()
            .scan(0, |acc, &l| {
                let d = *acc;
                *acc += l;
                Some(d)
            })
            .collect();
        let total: i32 = lens.iter().sum();
        let mut buf = vec![0u8; total as usize];
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
        self.world.barrier();
        Ok(())
    }
}
