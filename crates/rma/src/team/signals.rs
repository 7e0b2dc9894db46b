//! [`Team`]'s signals: a release update of a peer's signal word, put with signal, and the
//! bounded waits on a local signal word.

use super::Team;
use crate::atomic::{AtomicInt, AtomicOp};
use crate::signal::{Cmp, SignalOp};
use crate::{Order, Scope};
use symmem_arch::Arch;

impl Team<'_> {
    /// Updates the signal word at symmetric `sig` on rank `to` with release semantics
    /// at system scope: everything this thread did before is visible to a rank that
    /// observes the new value with an acquire wait, and so is everything the block did
    /// before an [`Arch::sync_block_release`] at [`Scope::System`] that this thread
    /// passed (a plain [`Arch::sync_block`] is not enough on AMD GPUs: the release
    /// would wait only for this thread's wave).
    ///
    /// # Safety
    /// `to < world`; `sig` symmetric, 8-aligned, accessed only atomically.
    #[inline(always)]
    pub unsafe fn signal(&self, sig: *mut u64, op: SignalOp, value: u64, to: usize) {
        // SAFETY: forwarded from the caller.
        unsafe {
            match op {
                SignalOp::Set => self.atomic_store(sig, value, to, Order::Release, Scope::System),
                SignalOp::Add => {
                    self.atomic(AtomicOp::Add, sig, value, to, Order::Release, Scope::System)
                }
            }
        }
    }

    /// Put with signal: the block puts `n` bytes from local `src` to symmetric `dst` on
    /// rank `to`, then (after [`Arch::sync_block_release`] at system scope, so every
    /// thread's stores are complete) thread 0 updates the signal at symmetric
    /// `sig` on rank `to` with release semantics. A rank that sees the update with
    /// [`Team::signal_wait_until`] sees all `n` bytes. On return `src` may be reused.
    ///
    /// # Safety
    /// As [`Team::put_nbi_block`] and [`Team::signal`]; every thread of the block calls
    /// it with the same arguments.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn put_with_signal_block<A: Arch>(
        &self,
        arch: &A,
        dst: *mut u8,
        src: *const u8,
        n: usize,
        sig: *mut u64,
        op: SignalOp,
        value: u64,
        to: usize,
    ) {
        // Blocking towards `src` (it may be reused on return): an off-node put through the
        // engine's window is complete before the signal is posted. The soak found a
        // source freed by its caller while the proxy still read it (emulated nodes).
        // SAFETY: forwarded from the caller.
        unsafe { self.put_done_block(arch, dst, src, n, to) };
        arch.sync_block_release(Scope::System);
        if arch.thread_id() == 0 {
            // SAFETY: forwarded; the releasing barrier above completed every thread's
            // stores at system scope before this release.
            unsafe { self.signal(sig, op, value, to) };
        }
    }

    /// Waits until the local signal word at `sig` satisfies `cmp` against `value`,
    /// reading it with acquire semantics at system scope; returns the value seen. What
    /// the signalling rank did before its release update is visible afterwards.
    ///
    /// The wait is bounded (see [`crate::watch`]): if the host aborts or the deadline
    /// passes (a peer's departure does not end it: it names no peer; see
    /// [`Team::signal_wait_until_from`]), it records why in the rank's control block and returns the last value it
    /// saw, which then does not satisfy the condition; every later wait of the rank
    /// returns at once.
    ///
    /// # Safety
    /// `sig` valid, 8-aligned, accessed only atomically.
    #[inline(always)]
    pub unsafe fn signal_wait_until(&self, sig: *const u64, cmp: Cmp, value: u64) -> u64 {
        // SAFETY: forwarded from the caller.
        unsafe { self.wait_from(sig, cmp, value, crate::watch::NO_PEER) }
    }

    /// [`Team::signal_wait_until`] for a word that rank `peer` updates: the wait also
    /// gives up, promptly, once `peer` has left the world without satisfying it (see
    /// [`crate::watch`]), and a wait that gives up records `peer`.
    ///
    /// # Safety
    /// As [`Team::signal_wait_until`].
    #[inline(always)]
    pub unsafe fn signal_wait_until_from(
        &self,
        sig: *const u64,
        cmp: Cmp,
        value: u64,
        peer: usize,
    ) -> u64 {
        // SAFETY: forwarded from the caller.
        unsafe { self.wait_from(sig, cmp, value, peer as u64) }
    }

    /// [`Team::signal_wait_until`] for a word that rank `peer` updates ([`crate::watch::NO_PEER`]
    /// for none).
    ///
    /// # Safety
    /// As [`Team::signal_wait_until`].
    #[inline(always)]
    unsafe fn wait_from(&self, sig: *const u64, cmp: Cmp, value: u64, peer: u64) -> u64 {
        let mut watch = crate::watch::Watch::new();
        let mut spins = 0;
        loop {
            // SAFETY: forwarded from the caller.
            let v = unsafe { u64::load(sig, Order::Acquire, Scope::System) };
            if cmp.holds(v, value) {
                return v;
            }
            crate::spin(&mut spins);
            if watch.give_up(spins, sig, value, v, peer) {
                return v;
            }
        }
    }
}
