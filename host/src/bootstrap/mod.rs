//! How ranks find each other and exchange handles.
//!
//! A [`Bootstrap`] is one rank's end of a group: it knows its rank and the world size,
//! and can all-gather bytes and [`Shareable`] handles (file descriptors included). Every
//! wait is bounded: a peer that exits, crashes or is killed turns into
//! [`Error::PeerLost`](crate::Error::PeerLost) within the group's timeout, never a hang.
//!
//! * [`local`]: ranks as threads of one process (`launch`).
//! * [`unix`]: ranks as processes on one machine over a UNIX socket (`spawn`).
//! * `mpi` (cargo feature `mpi`): ranks started by `mpirun`, over `MPI_COMM_WORLD`.

pub mod local;
#[cfg(feature = "mpi")]
pub mod mpi;
mod scm;
pub mod unix;

use crate::backend::Shareable;
use crate::error::Result;
use std::time::Duration;

/// How long a rank waits for its peers before it reports them lost, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One rank's end of a bootstrap group.
pub trait Bootstrap: Send {
    /// This rank, `0..world_size()`.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn world_size(&self) -> usize;
    /// Every rank contributes `mine`; returns all contributions indexed by rank.
    fn all_gather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Every rank contributes one handle; returns everyone's, indexed by rank, with file
    /// descriptors valid in this process (this rank's own entry is `mine`).
    fn all_gather_shareable(&mut self, mine: Shareable) -> Result<Vec<Shareable>>;
    /// Returns once every rank has called `barrier`.
    fn barrier(&mut self) -> Result<()> {
        self.all_gather(&[]).map(drop)
    }
}
