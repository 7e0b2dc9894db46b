//! Ranks as threads of one process.
//!
//! All ranks share one rendezvous table guarded by a mutex. A collective is a numbered
//! round: each rank deposits its contribution in its slot and waits for the others.
//! A rank that leaves ([`Bootstrap::leave`]) or whose [`LocalBootstrap`] is dropped (it
//! returned, or panicked) is marked gone, so its peers stop waiting for it at once with
//! `PeerLost`. A rank that goes because it lost a peer leaves that peer's name behind, and
//! its peers name that rank instead of it: every rank names the first rank lost, not a
//! survivor that left after it. Once a rank has lost a peer, every later collective on its
//! end returns the same error at once.

use super::{Bootstrap, DEFAULT_TIMEOUT};
use crate::backend::Shareable;
use crate::error::{Error, Result};
use crate::transport::Transport;
use crate::transport::local::{Fabric, LocalTransport};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Round {
    slots: Vec<Option<Shareable>>,
    taken: usize,
}

struct State {
    rounds: HashMap<u64, Round>,
    /// Ranks that have left or whose end was dropped: they contribute to no more rounds.
    departed: Vec<bool>,
    /// For a rank that went because it had lost a peer: that peer.
    cause: Vec<Option<usize>>,
}

struct Group {
    /// What the ranks' off-node transports share, when their world spans emulated nodes.
    fabric: Arc<Fabric>,
    world: usize,
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

impl Group {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A rank that panicked while holding the lock left consistent state behind: every
        // update below is a single insertion or flag.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One thread-rank's end of an in-process group.
pub struct LocalBootstrap {
    rank: usize,
    round: u64,
    group: Arc<Group>,
    /// The first peer this rank found lost.
    lost: Option<usize>,
}

impl LocalBootstrap {
    /// Creates a group of `world` ranks; element `r` of the result is rank `r`'s end.
    /// Waits give up after `timeout` with `PeerLost`.
    pub fn group(world: usize, timeout: Duration) -> Vec<LocalBootstrap> {
        let group = Arc::new(Group {
            fabric: Fabric::new(world),
            world,
            timeout,
            state: Mutex::new(State {
                rounds: HashMap::new(),
                departed: vec![false; world],
                cause: vec![None; world],
            }),
            changed: Condvar::new(),
        });
        (0..world)
            .map(|rank| LocalBootstrap {
                rank,
                round: 0,
                group: group.clone(),
                lost: None,
            })
            .collect()
    }

    /// A group with the default timeout.
    pub fn default_group(world: usize) -> Vec<LocalBootstrap> {
        Self::group(world, DEFAULT_TIMEOUT)
    }

    /// Records `rank` as the peer this rank lost (the first one stays), and returns the
    /// error that names it.
    fn lose(&mut self, rank: usize, start: Instant) -> Error {
        let rank = *self.lost.get_or_insert(rank);
        Error::PeerLost {
            rank: Some(rank),
            waited: start.elapsed(),
        }
    }

    fn exchange(&mut self, mine: Shareable) -> Result<Vec<Shareable>> {
        self.exchange_within(mine, self.group.timeout)
    }

    /// [`LocalBootstrap::exchange`], waiting up to `timeout` for a rank that is merely
    /// slow (a departed one ends the wait at once, as always).
    fn exchange_within(&mut self, mine: Shareable, timeout: Duration) -> Result<Vec<Shareable>> {
        if let Some(rank) = self.lost {
            return Err(Error::PeerLost {
                rank: Some(rank),
                waited: Duration::ZERO,
            });
        }
        let start = Instant::now();
        let group = self.group.clone();
        let (world, round) = (group.world, self.round);
        self.round += 1;
        let mut state = group.lock();
        let entry = state.rounds.entry(round).or_insert_with(|| Round {
            slots: (0..world).map(|_| None).collect(),
            taken: 0,
        });
        entry.slots[self.rank] = Some(mine);
        group.changed.notify_all();
        loop {
            let round_state = &state.rounds[&round];
            let missing = round_state.slots.iter().position(Option::is_none);
            let Some(missing) = missing else { break };
            // Any rank that has left and not contributed ends the wait now, whoever else
            // is merely slow.
            let departed = round_state
                .slots
                .iter()
                .zip(&state.departed)
                .position(|(slot, &gone)| slot.is_none() && gone);
            if let Some(gone) = departed {
                // A rank that went because it lost a peer names that peer.
                let first = state.cause[gone].unwrap_or(gone);
                return Err(self.lose(first, start));
            }
            let Some(left) = timeout.checked_sub(start.elapsed()) else {
                return Err(self.lose(missing, start));
            };
            state = group
                .changed
                .wait_timeout(state, left)
                .map_or_else(|p| p.into_inner().0, |r| r.0);
        }
        let round_state = state
            .rounds
            .get_mut(&round)
            .expect("present until the last taker");
        let mut out = Vec::with_capacity(world);
        for (rank, slot) in round_state.slots.iter().enumerate() {
            let slot = slot.as_ref().expect("all slots filled");
            let fd = match &slot.fd {
                Some(fd) => Some(fd.try_clone().map_err(|source| Error::Os {
                    what: "dup of a peer's fd",
                    source,
                })?),
                None => None,
            };
            debug_assert!(rank < world);
            out.push(Shareable {
                bytes: slot.bytes.clone(),
                fd,
            });
        }
        round_state.taken += 1;
        if round_state.taken == world {
            state.rounds.remove(&round);
        }
        Ok(out)
    }
}

impl Drop for LocalBootstrap {
    fn drop(&mut self) {
        let group = self.group.clone();
        let mut state = group.lock();
        state.cause[self.rank] = self.lost;
        state.departed[self.rank] = true;
        drop(state);
        group.changed.notify_all();
    }
}

impl Bootstrap for LocalBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }
    fn transport(&self) -> Result<Box<dyn Transport>> {
        Ok(Box::new(LocalTransport::new(
            self.group.fabric.clone(),
            self.rank,
        )))
    }
    fn world_size(&self) -> usize {
        self.group.world
    }
    fn all_gather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let all = self.exchange(Shareable {
            bytes: mine.to_vec(),
            fd: None,
        })?;
        Ok(all.into_iter().map(|s| s.bytes).collect())
    }
    fn all_gather_shareable(&mut self, mine: Shareable) -> Result<Vec<Shareable>> {
        self.exchange(mine)
    }
    fn barrier_within(&mut self, patience: Duration) -> Result<()> {
        let none = Shareable {
            bytes: Vec::new(),
            fd: None,
        };
        self.exchange_within(none, patience.max(self.group.timeout))
            .map(drop)
    }
    /// Every rank is a thread of this process: its pid, by construction (no message).
    fn verified_pids(&mut self) -> Result<Vec<Option<u32>>> {
        Ok(vec![Some(std::process::id()); self.group.world])
    }
    fn note_lost(&mut self, lost: usize) {
        // This rank itself (its thread panicked) needs no record: a rank that leaves with
        // no cause is the one its peers name.
        if lost < self.group.world && lost != self.rank {
            self.lost.get_or_insert(lost);
        }
    }
    fn leave(&mut self) -> Result<()> {
        let group = self.group.clone();
        let start = Instant::now();
        let mut state = group.lock();
        state.cause[self.rank] = self.lost;
        state.departed[self.rank] = true;
        group.changed.notify_all();
        loop {
            let Some(missing) = state.departed.iter().position(|gone| !gone) else {
                return Ok(());
            };
            let Some(left) = group.timeout.checked_sub(start.elapsed()) else {
                return Err(Error::PeerLost {
                    rank: Some(missing),
                    waited: start.elapsed(),
                });
            };
            state = group
                .changed
                .wait_timeout(state, left)
                .map_or_else(|p| p.into_inner().0, |r| r.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank slower than the group's timeout is lost to a barrier, and waited for by a
    /// barrier with the patience for it (a first compile of kernels).
    #[test]
    fn a_barrier_with_patience_waits_for_a_slow_rank() {
        let slow = Duration::from_millis(300);
        for patient in [false, true] {
            let ranks: Vec<_> = LocalBootstrap::group(2, Duration::from_millis(50))
                .into_iter()
                .map(|mut b| {
                    std::thread::spawn(move || {
                        if b.rank() == 1 {
                            std::thread::sleep(slow);
                        }
                        let r = if patient {
                            b.barrier_within(Duration::from_secs(10))
                        } else {
                            b.barrier()
                        };
                        (b.rank(), r)
                    })
                })
                .collect();
            for rank in ranks {
                let (rank, r) = rank.join().expect("rank");
                match (patient, rank, r) {
                    (true, _, Ok(())) | (false, 1, Ok(()) | Err(_)) => {}
                    (false, 0, Err(Error::PeerLost { rank: Some(1), .. })) => {}
                    other => panic!("patient {patient}: {other:?}"),
                }
            }
        }
    }
}
