//! How ranks find each other and exchange handles.
//!
//! A [`Bootstrap`] is one rank's end of a group: it knows its rank and the world size,
//! and can all-gather bytes and [`Shareable`] handles (file descriptors included). Every
//! wait is bounded: a peer that exits, crashes or is killed turns into
//! [`Error::PeerLost`](crate::Error::PeerLost) within the group's timeout (twice it for a
//! UNIX-socket spoke, which waits for the hub's verdict), never a hang. Every survivor
//! names the first rank lost, not a rank that left because of it, and a local or
//! UNIX-socket group that has failed fails every later call at once. A peer's message
//! longer than the limit ([`ENV_MAX_FRAME_BYTES`]) is
//! [`Error::FrameTooLarge`](crate::Error::FrameTooLarge) before anything is allocated
//! for it.
//!
//! Only members join: a group that listens on a socket admits only processes of this
//! user that hold the group's secret ([`auth`]); a stranger gets nothing and does not stop
//! the members from forming the group.
//!
//! * [`local`]: ranks as threads of one process ([`crate::spawn_ranks`]).
//! * [`unix`]: ranks as processes on one machine over a UNIX socket (`spawn`).
//! * `mpi` (cargo feature `mpi`): ranks started by `mpirun`, over `MPI_COMM_WORLD`.

pub mod auth;
mod credentials;
mod dial;
mod handoff;
pub mod local;
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub mod mpi;
mod scm;
pub mod unix;

// The `fuzzing` module's door to the frames' checks.
#[cfg(fuzzing)]
pub(crate) use scm::check_stream;

use crate::backend::Shareable;
use crate::error::Result;
use crate::transport::Transport;
use std::time::Duration;

/// How long a rank waits for its peers before it reports them lost, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest contribution a rank accepts from a peer in one collective, by default:
/// far above what symmem itself sends (tens of bytes per collective), so only a user's
/// [`World::all_gather_bytes`](crate::World::all_gather_bytes) of more than this needs a
/// higher limit.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 64 << 20;

/// Environment variable that sets the longest contribution a rank accepts from a peer
/// (bytes; [`DEFAULT_MAX_FRAME_BYTES`] when unset). A longer one is
/// [`Error::FrameTooLarge`](crate::Error::FrameTooLarge), refused before anything is
/// allocated for it, so a corrupt or hostile length cannot exhaust memory. The
/// UNIX-socket and MPI bootstraps read it when they are created; ranks of one group should
/// agree on it (children of [`unix::spawn`] inherit it).
pub const ENV_MAX_FRAME_BYTES: &str = "SYMMEM_MAX_FRAME_BYTES";

/// The limit [`ENV_MAX_FRAME_BYTES`] sets, or the default.
fn max_frame_from_env() -> Result<usize> {
    match std::env::var(ENV_MAX_FRAME_BYTES) {
        Ok(v) => v.parse().map_err(|_| crate::error::Error::BadEnv {
            name: ENV_MAX_FRAME_BYTES,
            value: Some(v),
            expected: "a number of bytes, the same on every rank (unset: \
                       bootstrap::DEFAULT_MAX_FRAME_BYTES, 64 MiB)",
        }),
        Err(_) => Ok(DEFAULT_MAX_FRAME_BYTES),
    }
}

/// Where every rank's contribution lies in one buffer of them all, from the lengths the
/// ranks announced (`announced`, by rank; from peers): MPI counts and displacements, and
/// the total.
///
/// # Errors
/// [`Error::FrameTooLarge`](crate::Error::FrameTooLarge) naming the
/// first rank whose length is over `limit` or an MPI count (`i32`), or naming no rank when
/// the contributions together overflow an MPI count.
#[cfg(any(feature = "mpi", test, fuzzing))]
pub(crate) fn gather_layout(
    announced: &[u64],
    limit: usize,
) -> Result<(Vec<i32>, Vec<i32>, usize)> {
    use crate::error::Error;
    let count = i32::MAX as usize;
    let limit = limit.min(count);
    let mut lens = Vec::with_capacity(announced.len());
    let mut displs = Vec::with_capacity(announced.len());
    let mut total: usize = 0;
    for (rank, &bytes) in announced.iter().enumerate() {
        let len = usize::try_from(bytes).ok().filter(|&len| len <= limit);
        let len = len.ok_or(Error::FrameTooLarge {
            rank: Some(rank),
            bytes,
            limit,
        })?;
        // Both at most `i32::MAX`: the sum cannot overflow.
        let end = Some(total + len).filter(|&end| end <= count);
        let end = end.ok_or(Error::FrameTooLarge {
            rank: None,
            bytes: (total + len) as u64,
            limit: count,
        })?;
        lens.push(len as i32);
        displs.push(total as i32);
        total = end;
    }
    Ok((lens, displs, total))
}

/// Lays out `announced` (lengths from peers) as [`gather_layout`] does and checks the
/// layout: contiguous, in rank order, every length as announced, or the documented
/// refusal of the first length that does not fit. The oracle of the property tests
/// below and of the `bootstrap` fuzz target.
///
/// # Panics
/// Where `gather_layout` breaks that.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_gather_layout(announced: &[u64], limit: usize) {
    let count = i32::MAX as u64;
    let fits = |b: u64| b <= (limit as u64).min(count);
    // The first rank refused, by a model in u128 (no overflow to guard against).
    let mut sum: u128 = 0;
    let mut refused = None;
    for (rank, &b) in announced.iter().enumerate() {
        sum += u128::from(b);
        if !fits(b) {
            refused = Some(Some(rank));
            break;
        }
        if sum > u128::from(count) {
            refused = Some(None);
            break;
        }
    }
    match (gather_layout(announced, limit), refused) {
        (Ok((lens, displs, total)), None) => {
            assert_eq!(total as u128, sum);
            let mut at = 0i64;
            for (rank, (&len, &displ)) in lens.iter().zip(&displs).enumerate() {
                assert_eq!((len as u64, displ as i64), (announced[rank], at));
                at += i64::from(len);
            }
            assert_eq!(lens.len(), announced.len());
        }
        (Err(crate::error::Error::FrameTooLarge { rank, .. }), Some(first)) => {
            assert_eq!(rank, first);
        }
        (got, expected) => panic!("{got:?}, expected a refusal of {expected:?}"),
    }
}

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
    /// [`Bootstrap::barrier`], waiting up to `patience` (where that is longer than the
    /// group's timeout) for a rank that is slow but not gone: after a step whose length
    /// differs by much more than the timeout across ranks, such as the driver's first
    /// compile of a code object, which ranks of one process on one GPU wait for in
    /// turn. A rank that is gone still ends the wait at once where the group can tell.
    /// The default is [`Bootstrap::barrier`] (groups whose ranks are processes compile
    /// side by side).
    fn barrier_within(&mut self, patience: Duration) -> Result<()> {
        let _ = patience;
        self.barrier()
    }
    /// Leaves the group (the last call on it): tells every rank that this one is leaving,
    /// so a peer that waits for it in a collective gets `PeerLost` naming it at once,
    /// then waits (bounded by the timeout) until every rank has left or is lost. On
    /// return, every other rank has called `leave` or is gone.
    ///
    /// The default is a barrier, for groups whose transport tells peers of a departure
    /// by itself.
    fn leave(&mut self) -> Result<()> {
        self.barrier()
    }
    /// Records that this rank stops because it learned, outside the bootstrap (a device
    /// wait, its world's watchdog), that rank `lost` was lost or left, or because it is
    /// lost itself (`lost` is this rank: its thread panicked): the ranks that later find
    /// this one gone name `lost`, the cause, rather than a survivor. The first cause
    /// stays. The default does nothing (a group that cannot pass it on).
    fn note_lost(&mut self, lost: usize) {
        let _ = lost;
    }
    /// Every rank's process id as this group verified it, by rank (collective: every rank
    /// calls it at the same point): the kernel's credentials of the rank's connection, or
    /// the launcher's own record; `None` where the group cannot say (a rank on another
    /// machine). The liveness watchdog watches a peer's process, and believes its departure
    /// notices, only where the pid the peer gives matches this. The default says nothing.
    fn verified_pids(&mut self) -> Result<Vec<Option<u32>>> {
        Ok(vec![None; self.world_size()])
    }
    /// The off-node transport this group's ranks reach each other with when their world
    /// spans several nodes ([`crate::transport`]): the local wire for thread-ranks, MPI
    /// for ranks `mpirun` started.
    ///
    /// # Errors
    /// [`Error::NoEngine`](crate::Error::NoEngine) where the group has none (the
    /// default); the transport's own (an MPI below `MPI_THREAD_MULTIPLE`).
    fn transport(&self) -> Result<Box<dyn Transport>> {
        Err(crate::error::Error::NoEngine(
            "its bootstrap has no off-node transport: start the ranks as threads \
             (`spawn_ranks`) or with `mpirun` (cargo feature `mpi`)",
        ))
    }
    /// The group's MPI communicator, where the group runs over MPI (`None`, the default,
    /// elsewhere): a library that starts collectively over it (NVSHMEM's MPI bootstrap)
    /// then needs no channel of its own.
    fn mpi_communicator(&self) -> Option<crate::transport::RawMpiComm> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bad_bytes::huge_u64;
    use crate::error::Error;
    use proptest::collection::vec;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_announced_lengths_are_laid_out_or_refused_by_rank(
            announced in vec(prop_oneof![0u64..4096, huge_u64(), Just(i32::MAX as u64)], 0..6),
            limit in prop_oneof![Just(DEFAULT_MAX_FRAME_BYTES), Just(usize::MAX), 0usize..8192],
        ) {
            check_gather_layout(&announced, limit);
        }
    }

    #[test]
    fn lengths_that_together_overflow_an_mpi_count_are_refused_naming_no_rank() {
        let half = i32::MAX as u64 / 2 + 1;
        let refused = gather_layout(&[half, half], usize::MAX);
        assert!(matches!(
            refused,
            Err(Error::FrameTooLarge { rank: None, .. })
        ));
        check_gather_layout(&[half, half, 1], usize::MAX);
    }
}
