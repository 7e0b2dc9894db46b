//! Agreements: ranks compare their ledgers (see [`crate::ledger`]) at barriers and
//! collectives, name the ranks that differ, and release what every rank let go of.

use super::World;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::ledger::{self, Proposal};
use crate::table::DeviceTable;
use std::time::Duration;

/// An agreement that waited longer than this for the other ranks is reported
/// (`tracing` warning): a rank that arrives late at every barrier is a bug or a hot spot.
const SLOW_AGREEMENT: Duration = Duration::from_secs(1);

/// The kind of call an agreement is part of, its first call word: ranks at different
/// calls (one at a barrier, another at a collective's first use of new buffers, as after
/// a skipped call) disagree, instead of passing each other.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Call {
    /// [`World::barrier`].
    Barrier = 1,
    /// A collective call's first use of objects created since the last agreement.
    Collective = 2,
    /// A [`crate::Rendezvous`]'s creation.
    Rendezvous = 3,
    /// An [`crate::ExternalTable`]'s creation.
    ExternalTable = 4,
    /// A [`crate::Rendezvous`]' mapping of every peer's memory, after its creation.
    RendezvousMapped = 5,
}

impl<B: Backend> World<B> {
    /// An agreement (see [`crate::ledger`]): every rank calls it at the same point of its
    /// program, the same `kind` of call with the same `call` words. `failed` says this
    /// rank's part of the call failed. With `release`, objects every rank has let go of
    /// are released.
    ///
    /// A world poisoned by a failed device wait ([`World::check_waits`]) still takes
    /// part, as failed, so its peers are not left waiting for it, and returns that error.
    ///
    /// # Errors
    /// The failed wait's, the poisoning [`Error::CollectiveMismatch`] (at once,
    /// without an exchange, when an earlier agreement failed: every rank knows that), a
    /// call-parameter `CollectiveMismatch`, [`Error::PeerFailed`], and the bootstrap's.
    pub(crate) fn agree(
        &self,
        kind: Call,
        call: &[u64],
        failed: bool,
        release: bool,
    ) -> Result<()> {
        let waits = self.check_waits();
        // A live graph may replay launches on dropped objects: keep them all.
        let release = release && waits.is_ok() && self.lock_pins().graphs == 0;
        let call: Vec<u64> = std::iter::once(kind as u64)
            .chain(call.iter().copied())
            .collect();
        let agreed = self.exchange_agreement(&call, failed || waits.is_err(), release);
        waits.and(agreed)
    }

    /// [`World::agree`]'s exchange.
    fn exchange_agreement(&self, call: &[u64], failed: bool, release: bool) -> Result<()> {
        let proposal = {
            let state = self.lock_state();
            state.ledger.check()?;
            let dropped: Vec<u64> = if release {
                state.retired.iter().map(|r| r.id).collect()
            } else {
                Vec::new()
            };
            state.ledger.propose(call, failed, &dropped)
        };
        let mut bootstrap = self
            .shared
            .bootstrap
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let started = std::time::Instant::now();
        let all = self.noting_loss(bootstrap.all_gather(&proposal.encode()))?;
        let waited = started.elapsed();
        if waited > SLOW_AGREEMENT {
            tracing::warn!(
                rank = self.shared.rank,
                waited_ms = waited.as_millis() as u64,
                "slow agreement: this rank waited for the others (a rank reached the barrier or \
                 collective late, or is busy elsewhere)"
            );
        }
        let proposals = all
            .iter()
            .enumerate()
            .map(|(rank, bytes)| Proposal::decode(rank, bytes))
            .collect::<Result<Vec<_>>>()?;
        let verdict = ledger::decide(&proposals);
        let mut state = self.lock_state();
        let outcome = state.ledger.apply(&verdict, self.shared.rank);
        tracing::debug!(
            rank = self.shared.rank,
            call = ?call,
            failed,
            released = verdict.released.len(),
            waited_us = waited.as_micros() as u64,
            ok = outcome.is_ok(),
            "agreement"
        );
        if verdict.released.is_empty() {
            return outcome;
        }
        let (released, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut state.retired)
            .into_iter()
            .partition(|r| verdict.released.binary_search(&r.id).is_ok());
        state.retired = kept;
        let mut exported = Vec::new();
        let mut handed_over = Vec::new();
        let mut unshared = Vec::new();
        for mut r in released {
            if let Some((offset, _, table)) = r.allocation {
                // Allocated since its creation and released once: cannot fail.
                let _ = state.allocator.free(offset);
                state.tables.free.push(DeviceTable::memory_of(table));
            }
            r.mappings.clear();
            if r.exported {
                exported.append(&mut r.memories);
            } else {
                unshared.append(&mut r.memories);
            }
            handed_over.append(&mut r.kept);
        }
        drop(state);
        tracing::debug!(
            rank = self.shared.rank,
            objects = verdict.released.len(),
            exported = exported.len(),
            "released retired memory every rank let go of"
        );
        if !exported.is_empty() {
            // Every rank released the same objects, so every rank takes this barrier:
            // after it, no peer maps this rank's exported memory any more.
            self.noting_loss(bootstrap.barrier())?;
        }
        drop(bootstrap);
        // Past the exchange, a peer may already have launched a kernel that waits for
        // this rank, and where frees wait for the device (ranks of this process sharing
        // it) a free here would wait for that kernel, which waits for this rank: found
        // on the H200 (a registration released at a barrier, a collective at once after
        // it). Those frees go to the next point where no peer waits for this rank.
        let mut pins = self.lock_pins();
        if pins.defer_frees {
            pins.deferred.append(&mut exported);
            pins.deferred.append(&mut unshared);
            pins.deferred_kept.append(&mut handed_over);
        }
        drop(pins);
        drop((exported, unshared, handed_over));
        outcome
    }

    /// Checks that every allocation in `ids` (id, heap offset) is agreed before a
    /// one-sided operation uses it.
    ///
    /// # Errors
    /// The poisoning `CollectiveMismatch`, or
    /// [`Error::NotAgreed`] naming the first allocation no agreement has confirmed.
    pub(crate) fn check_one_sided(&self, ids: &[(u64, usize)]) -> Result<()> {
        let state = self.lock_state();
        state.ledger.check()?;
        match ids.iter().find(|(id, _)| !state.ledger.is_agreed(*id)) {
            Some(&(_, offset)) => Err(Error::NotAgreed {
                rank: self.shared.rank,
                offset,
            }),
            None => Ok(()),
        }
    }

    /// The agreement of a collective call on parameters `call`, given this rank's own
    /// check of its part, `checked`: a rank whose check failed still takes part (the
    /// others get [`Error::PeerFailed`]) and returns its own error.
    pub(crate) fn agree_on<R>(&self, kind: Call, call: &[u64], checked: Result<R>) -> Result<R> {
        let agreed = self.agree(kind, call, checked.is_err(), false);
        let value = checked?;
        agreed.map(|()| value)
    }

    /// Records in the ledger a device collective call this rank makes (see
    /// [`crate::ledger::Ledger::note_call`]).
    pub(crate) fn note_collective_call(&self, call: &[u64], ids: &[u64]) {
        self.lock_state().ledger.note_call(call, ids);
    }

    /// Before a collective call that uses the objects `ids`, with this rank's own check
    /// of its arguments, `checked`: agrees as [`World::agree_on`] (every rank reaches
    /// this with the same objects, so every rank does) if any was created since the last
    /// agreement; otherwise only checks that the world is not poisoned.
    pub(crate) fn check_collective<R>(&self, ids: &[u64], checked: Result<R>) -> Result<R> {
        // A failed wait came first, if there is one: the world reports its first fault.
        self.check_waits()?;
        let fresh = {
            let state = self.lock_state();
            state.ledger.check()?;
            ids.iter().any(|&id| !state.ledger.is_agreed(id))
        };
        if fresh {
            self.agree_on(Call::Collective, &[], checked)
        } else {
            checked
        }
    }
}
