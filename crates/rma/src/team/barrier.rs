//! [`Team::barrier_block`]: the cross-rank barrier over an array of arrival counts, and
//! the poison a rank that gave up leaves in them.

use super::Team;
use crate::atomic::{AtomicInt, AtomicOp};
use crate::signal::SignalOp;
use crate::{Order, Scope};
use symmem_arch::Arch;

impl Team<'_> {
    /// A barrier across every rank of the team, run by one block per rank.
    ///
    /// On return, everything any thread of the participating blocks did before the
    /// barrier (puts included) is complete and visible to every thread of them.
    /// `sig` is a symmetric array of [`crate::signal::barrier_words`]`(world)` `u64`s,
    /// zero before the first barrier and used only by barriers of this one block on
    /// every rank; word `r` counts rank `r`'s arrivals. Thread `t` signals and waits
    /// for the ranks `r ≡ t (mod block_dim)`.
    ///
    /// Returns true, on every thread of the block, when every rank arrived; false when
    /// the barrier gave up (a wait ended on a lost peer, the abort word or the deadline,
    /// here or at an earlier barrier on `sig`). After false, peers may not be in the
    /// same call at all: a kernel must not write into them (a collective whose entry
    /// barrier gave up and still wrote changed the buffer of a rank that never entered
    /// it, with no error on that rank).
    ///
    /// # Safety
    /// Every thread of the block calls it; exactly one block on every rank uses `sig`,
    /// and all of them call the same sequence of barriers on it.
    #[inline(always)]
    #[must_use = "false means peers may not be in this call: write nothing into them"]
    pub unsafe fn barrier_block<A: Arch>(&self, arch: &A, sig: *mut u64) -> bool {
        let world = self.world();
        let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
        // Only this rank ever updates its own arrival count, and only after the
        // barrier below, so every thread reads the same count here.
        // SAFETY: `sig` has `world` words; `rank < world`.
        let own = unsafe { u64::load(sig.add(self.rank), Order::Relaxed, Scope::Block) };
        if own & crate::watch::POISON != 0 {
            // This rank gave up at an earlier barrier on `sig` (its status says so): it
            // arrives no more, so its count on every peer stays at the last arrival it made
            // before it gave up, which peers may trust; waits for later ones see the poison.
            arch.sync_block();
            return false;
        }
        let arrival = own + 1;
        // Every thread's earlier work completes at system scope before any arrival.
        arch.sync_block_release(Scope::System);
        let mut r = tid;
        while r < world {
            // SAFETY: r < world; the word is symmetric. Release orders the block's
            // earlier work (through the releasing barrier above) before the arrival.
            unsafe { self.signal(sig.add(self.rank), SignalOp::Add, 1, r) };
            r += threads;
        }
        let mut r = tid;
        let mut gave_up = false;
        while r < world {
            // SAFETY: r < world.
            gave_up |= !unsafe { self.wait_arrival(sig.add(r), arrival, r) };
            r += threads;
        }
        if gave_up {
            // What this rank does after a wait that gave up is not to be trusted: its
            // arrival word on every peer says so, and their waits for a later arrival give
            // up too (this one, made before the wait, stands). On its own copy it stops
            // this rank's later barriers on `sig` from arriving (above).
            let mut p = 0;
            while p < world {
                // SAFETY: p < world; the word is symmetric. Relaxed: it orders nothing (no
                // arrival follows it).
                unsafe {
                    self.atomic(
                        AtomicOp::Or,
                        sig.add(self.rank),
                        crate::watch::POISON,
                        p,
                        Order::Relaxed,
                        Scope::System,
                    )
                };
                p += 1;
            }
        }
        arch.sync_block();
        // Whether any thread of the block gave up: each that did poisoned this rank's own
        // word too (above), before the block's barrier, so every thread reads the same.
        // SAFETY: `sig` has `world` words; `rank < world`.
        let own = unsafe { u64::load(sig.add(self.rank), Order::Relaxed, Scope::Block) };
        own & crate::watch::POISON == 0
    }

    /// A barrier's wait for rank `peer`'s arrival count at `sig` to reach `arrival`: true
    /// when it did, false when the wait gave up (see [`crate::watch`]) or the count, short
    /// of it, carries [`crate::watch::POISON`] (recorded as
    /// [`crate::watch::REASON_PEER_GAVE_UP`]).
    ///
    /// # Safety
    /// `sig` valid, 8-aligned, accessed only atomically.
    #[inline(always)]
    unsafe fn wait_arrival(&self, sig: *const u64, arrival: u64, peer: usize) -> bool {
        let mut watch = crate::watch::Watch::new();
        let mut spins = 0;
        loop {
            // SAFETY: forwarded from the caller.
            let v = unsafe { u64::load(sig, Order::Acquire, Scope::System) };
            // A peer that gave up arrives no more after it poisons its word: a count that
            // reached `arrival` was made before it gave up (the soak found lagging ranks
            // failing a barrier every peer had passed, on the poison alone).
            if v & !crate::watch::POISON >= arrival {
                return true;
            }
            if v & crate::watch::POISON != 0 {
                crate::watch::record(
                    crate::watch::REASON_PEER_GAVE_UP,
                    peer as u64,
                    sig.addr() as u64,
                    arrival,
                    v,
                );
                return false;
            }
            crate::spin(&mut spins);
            if watch.give_up(spins, sig, arrival, v, peer as u64) {
                return false;
            }
        }
    }
}
