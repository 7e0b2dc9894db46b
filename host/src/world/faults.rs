//! Faults: a device wait that gave up, an abort after a peer was lost, a failed
//! transport. The first one seen poisons the world, and every later call reports it.

use super::{Shared, World};
use crate::backend::{Backend, SharedRegion};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use symmem_rma::watch::Control;

impl<B: Backend> World<B> {
    /// Checks this rank's device waits: a wait that gave up (its deadline passed, the
    /// host aborted, or the peer it waited on had left) poisons the world, and so does a peer process found lost (a
    /// watchdog thread polls a pidfd of every peer process on this machine); this and
    /// every later call get the error (launches, barriers, allocations, reads and writes
    /// check it first; a read checks again after it has waited for the device). Reads
    /// host memory only: no device synchronisation.
    ///
    /// # Errors
    /// [`Error::WaitTimedOut`], [`Error::PeerLost`] (an abort: a peer lost; or a
    /// wait on a peer that had left).
    pub fn check_waits(&self) -> Result<()> {
        self.shared.check_waits()
    }

    /// Waits until the off-node transport has completed every request this rank's
    /// kernels posted (the device is idle): nothing without a transport.
    pub(super) fn quiet_transport(&self) -> Result<()> {
        self.shared.quiet_transport()
    }
}

impl<B: Backend> Shared<B> {
    /// [`World::check_waits`].
    pub(crate) fn check_waits(&self) -> Result<()> {
        let control = self.control.host_ptr().cast::<Control>();
        // SAFETY: the live control block; words are read atomically (the device writes
        // each with one system-scope store).
        let read = |p: *mut u64| unsafe { AtomicU64::from_ptr(p) }.load(Ordering::Acquire);
        // SAFETY: a field address of the live block.
        let status = read(unsafe { &raw mut (*control).status });
        let lost = self.abort.read();
        // Neither word ever goes back to 0: while both are 0 no wait has failed and no
        // peer is lost, and every launch pays two loads, no lock.
        if status == 0 && lost.is_none() {
            return Ok(());
        }
        if let Some(e) = self.transport.as_ref().and_then(|t| t.failure()) {
            // A transport that failed on a peer after another rank was lost or had left
            // failed because of that rank, which is the error (the soak found window puts
            // to survivors that had already left after it: `Engine` named the survivor).
            // The first abort wins, so one naming another rank than the transport's came
            // first; a healthy departure sets none.
            let Error::Engine { peer, .. } = &e else {
                return Err(e);
            };
            let cause = match lost {
                Some(Some(r)) if *peer != Some(r) => Some(r),
                _ => self
                    .departures
                    .healthy
                    .first()
                    .filter(|&d| *peer != Some(d)),
            };
            return Err(match cause {
                Some(rank) => Error::PeerLost {
                    rank: Some(rank),
                    waited: Duration::ZERO,
                },
                None => e,
            });
        }
        let mut fault = self.fault.lock().unwrap_or_else(|p| p.into_inner());
        let first = fault.is_none();
        // The first record seen stays the world's error, even if a later wait of the
        // same kernel overwrote the block.
        let fault = *fault.get_or_insert_with(|| {
            // SAFETY: as above.
            let (signal, value, seen) = unsafe {
                (
                    read(&raw mut (*control).signal),
                    read(&raw mut (*control).value),
                    read(&raw mut (*control).seen),
                )
            };
            let peer = symmem_rma::watch::status::peer(status).map(|p| p as usize);
            Fault {
                status,
                lost,
                departed: self.departures.healthy.first(),
                peer_left_healthy: peer.is_some_and(|p| self.departures.healthy.is_set(p)),
                peer_cause: peer.and_then(|p| self.departures.causes.get(p)),
                signal,
                value,
                seen,
            }
        });
        let error = fault.error(self.rank);
        if first {
            tracing::error!(rank = self.rank, %error, "a device wait gave up: the world is poisoned");
            // The kernel whose wait gave up may have left a request in the ring, naming a
            // buffer its caller is now free to drop: the transport must not touch it.
            if let Some(transport) = &self.transport {
                transport.disown();
            }
        }
        Err(error)
    }

    /// Waits until the off-node transport has completed every request this rank's
    /// kernels posted (the device is idle): nothing without a transport.
    pub(crate) fn quiet_transport(&self) -> Result<()> {
        if let Some(transport) = &self.transport {
            // SAFETY: the live control block's deadline word, written once at creation.
            let deadline = unsafe { (*self.control.host_ptr().cast::<Control>()).deadline_ns };
            let deadline = match deadline {
                0 => Duration::MAX,
                ns => Duration::from_nanos(ns),
            };
            return transport.quiet(deadline);
        }
        Ok(())
    }
}

/// A device wait that gave up, as its control block recorded it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fault {
    status: u64,
    /// The abort, if any, and the rank it names.
    lost: Option<Option<usize>>,
    /// The first rank that had left the world healthy, if any.
    departed: Option<usize>,
    /// The peer the wait named had left the world healthy.
    peer_left_healthy: bool,
    /// The rank the peer the wait named had found lost or gone, where that failed it
    /// before it left.
    peer_cause: Option<usize>,
    signal: u64,
    value: u64,
    seen: u64,
}

impl Fault {
    /// The error of rank `rank`'s fault: the root cause where it is known (a lost or
    /// departed rank), else what the wait saw.
    fn error(self, rank: usize) -> Error {
        use symmem_rma::watch::{
            REASON_ABORT, REASON_ONE_NODE_KERNEL, REASON_PEER_GAVE_UP, REASON_UNREACHABLE, status,
        };
        let peer = status::peer(self.status).map(|p| p as usize);
        let waited = Duration::from_nanos(status::waited_ns(self.status));
        let reason = status::reason(self.status);
        if reason == REASON_ONE_NODE_KERNEL {
            Error::OneNodeKernel { rank }
        } else if reason == REASON_UNREACHABLE {
            Error::Unreachable {
                rank,
                peer,
                address: self.signal,
            }
        } else if let Some(lost) = self.lost {
            // The abort names the rank that was lost; the wait that saw it may have waited
            // for another (or no wait was running).
            Error::PeerLost { rank: lost, waited }
        } else if reason == REASON_ABORT {
            // No abort was set: the wait gave up because the peer it waited on had left.
            // A peer that left after its own failure failed because of the rank it named
            // (the processes soak found a survivor naming a rank that had stopped because
            // of a killed one, whose notice came before the kill's) or, while another rank
            // had left in good order, because of that rank (the soak found the failed peer
            // named instead): that is the cause.
            let rank = match (self.peer_cause, self.departed) {
                (Some(cause), _) => Some(cause),
                (None, Some(departed)) if !self.peer_left_healthy => Some(departed),
                _ => peer,
            };
            Error::PeerLost { rank, waited }
        } else if reason == REASON_PEER_GAVE_UP
            && let Some(departed) = self.departed
        {
            // A peer gave up, and a rank had left in good order: that is why (the peer
            // names it too).
            Error::PeerLost {
                rank: Some(departed),
                waited,
            }
        } else if reason == REASON_PEER_GAVE_UP {
            // The peer's own error (its wait timed out, or it saw another peer give up)
            // says why; this rank stopped rather than go on with what it sent after.
            Error::PeerFailed {
                rank,
                ranks: peer.into_iter().collect(),
            }
        } else {
            Error::WaitTimedOut {
                peer,
                waited,
                signal: self.signal,
                value: self.value,
                seen: self.seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symmem_rma::watch::{REASON_ABORT, status};

    /// A wait of rank 2 that gave up because peer `peer` had left (no abort set).
    fn gave_up_on(peer: u64) -> Fault {
        Fault {
            status: status::pack(REASON_ABORT, peer, 1000),
            lost: None,
            departed: None,
            peer_left_healthy: false,
            peer_cause: None,
            signal: 0,
            value: 0,
            seen: 0,
        }
    }

    fn named(e: Error) -> Option<usize> {
        match e {
            Error::PeerLost { rank, .. } => rank,
            other => panic!("not PeerLost: {other:?}"),
        }
    }

    #[test]
    fn a_wait_on_a_departed_peer_names_the_cause_it_left_with() {
        // The peer left: it is the one named.
        assert_eq!(named(gave_up_on(0).error(2)), Some(0));
        // The peer left after its own failure, naming rank 3 (killed, say) as the cause:
        // rank 3 is named, whether or not another rank had left healthy.
        let failed = Fault {
            peer_cause: Some(3),
            ..gave_up_on(0)
        };
        assert_eq!(named(failed.error(2)), Some(3));
        let also_departed = Fault {
            departed: Some(1),
            ..failed
        };
        assert_eq!(named(also_departed.error(2)), Some(3));
        // No cause named, another rank left healthy: that rank.
        let departed = Fault {
            departed: Some(1),
            ..gave_up_on(0)
        };
        assert_eq!(named(departed.error(2)), Some(1));
        // An abort names its rank above all.
        let aborted = Fault {
            lost: Some(Some(4)),
            ..failed
        };
        assert_eq!(named(aborted.error(2)), Some(4));
    }
}
