//! The host's side of a rank's control block of bounded device waits
//! (`symmem_rma::watch::Control`): the abort word that ends every wait of the rank's
//! kernels, and the departed-peer bitmask that ends the waits on a peer that has left.
//! The watchdog, the bootstrap's loss reports, and the off-node transports write them;
//! the world reads them.

use std::sync::atomic::{AtomicU64, Ordering};

/// The abort word of a rank's control block.
///
/// Only the watchdog thread and the world that owns the block write it, with single
/// atomic stores; the block outlives the watchdog (the world stops the watchdog before
/// it frees the block).
#[derive(Clone, Copy)]
pub struct AbortWord(*mut u64);

// SAFETY: it is only accessed with atomic operations, and the world keeps the block alive
// for as long as any copy is used (see the type's documentation).
unsafe impl Send for AbortWord {}
// SAFETY: as for `Send`: every access through `&self` is atomic.
unsafe impl Sync for AbortWord {}

impl AbortWord {
    /// The abort word at `word`.
    ///
    /// # Safety
    /// `word` is an 8-aligned `u64` that stays valid while the result (or a copy) is
    /// used, and that is written only atomically.
    pub(crate) unsafe fn new(word: *mut u64) -> Self {
        Self(word)
    }

    fn atomic(&self) -> &AtomicU64 {
        // SAFETY: valid, aligned and atomically accessed (`new`'s contract).
        unsafe { AtomicU64::from_ptr(self.0) }
    }

    /// Makes every wait of the rank give up: `lost` is the rank that ended, when known.
    /// The first abort stays (a later one does not overwrite the rank it names).
    pub fn abort(self, lost: Option<usize>) {
        let value = lost.map_or(u64::MAX, |r| r as u64 + 1);
        let _ = self
            .atomic()
            .compare_exchange(0, value, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Whether an abort was set, and the rank it names.
    pub fn read(self) -> Option<Option<usize>> {
        match self.atomic().load(Ordering::Acquire) {
            0 => None,
            u64::MAX => Some(None),
            r => Some(Some((r - 1) as usize)),
        }
    }
}

/// The departed-peer bitmask of a rank's control block
/// (`symmem_rma::watch::Control::departed`): bit `r` set once rank `r` has left the world.
///
/// Only the world's watchdog thread sets bits (a peer's departure notice), with atomic
/// operations on the host; kernels only read them. The bitmask lives in the control
/// block's region, which outlives the watchdog (as for [`AbortWord`]).
#[derive(Clone, Copy)]
pub struct DepartedMask {
    words: *mut u64,
    ranks: usize,
}

// SAFETY: only accessed with atomic operations, while the world keeps the region alive
// (see the type's documentation).
unsafe impl Send for DepartedMask {}
// SAFETY: as for `Send`: every access through `&self` is atomic.
unsafe impl Sync for DepartedMask {}

impl DepartedMask {
    /// The bitmask of `ranks` bits at `words`.
    ///
    /// # Safety
    /// `words` is 8-aligned, holds `ranks.div_ceil(64)` `u64`s that stay valid while the
    /// result (or a copy) is used, and is accessed only atomically.
    pub(crate) unsafe fn new(words: *mut u64, ranks: usize) -> Self {
        Self { words, ranks }
    }

    /// How many bytes a bitmask of `ranks` bits takes.
    pub(crate) const fn bytes(ranks: usize) -> usize {
        ranks.div_ceil(64) * 8
    }

    fn word(&self, rank: usize) -> Option<&AtomicU64> {
        (rank < self.ranks).then(|| {
            // SAFETY: word `rank / 64` of the live bitmask (`new`'s contract), accessed
            // atomically.
            unsafe { AtomicU64::from_ptr(self.words.add(rank / 64)) }
        })
    }

    /// Marks `rank` as departed (a rank outside the world is ignored). The release
    /// orders it after whatever told this thread of the departure.
    pub fn set(self, rank: usize) {
        if let Some(word) = self.word(rank) {
            word.fetch_or(1 << (rank % 64), Ordering::Release);
        }
    }

    /// The lowest rank that has departed, if any.
    pub fn first(self) -> Option<usize> {
        (0..self.ranks.div_ceil(64)).find_map(|w| {
            // SAFETY: word `w` of the live bitmask, accessed atomically.
            let bits = unsafe { AtomicU64::from_ptr(self.words.add(w)) }.load(Ordering::Acquire);
            (bits != 0).then(|| w * 64 + bits.trailing_zeros() as usize)
        })
    }

    /// Whether `rank` has departed.
    pub fn is_set(self, rank: usize) -> bool {
        self.word(rank)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (rank % 64)) != 0)
    }
}

/// The ranks that peers which left after their own failure named as its cause, by peer
/// (host only; one word per rank, the cause plus one, 0 for none). Written by the
/// world's watchdog thread, read by the world, with atomic operations; it lives in the
/// control block's region, which outlives the watchdog (as for [`AbortWord`]).
#[derive(Clone, Copy)]
pub struct Causes {
    words: *mut u64,
    ranks: usize,
}

// SAFETY: only accessed with atomic operations, while the world keeps the region alive.
unsafe impl Send for Causes {}
// SAFETY: as for `Send`: every access through `&self` is atomic.
unsafe impl Sync for Causes {}

impl Causes {
    /// The table of `ranks` words at `words`.
    ///
    /// # Safety
    /// `words` is 8-aligned, holds `ranks` zeroed `u64`s that stay valid while the result
    /// (or a copy) is used, and is accessed only atomically.
    pub(crate) unsafe fn new(words: *mut u64, ranks: usize) -> Self {
        Self { words, ranks }
    }

    /// How many bytes a table of `ranks` ranks takes.
    pub(crate) const fn bytes(ranks: usize) -> usize {
        ranks * 8
    }

    fn word(&self, rank: usize) -> Option<&AtomicU64> {
        // SAFETY: word `rank` of the live table (`new`'s contract), accessed atomically.
        (rank < self.ranks).then(|| unsafe { AtomicU64::from_ptr(self.words.add(rank)) })
    }

    /// Records that `rank` left naming `cause` (ranks outside the world are ignored). The
    /// release orders it before the departure bit set after it.
    pub fn set(self, rank: usize, cause: usize) {
        if let Some(word) = self.word(rank)
            && cause < self.ranks
        {
            word.store(cause as u64 + 1, Ordering::Release);
        }
    }

    /// The cause `rank` named when it left, if it left after a failure and named one.
    pub fn get(self, rank: usize) -> Option<usize> {
        match self.word(rank)?.load(Ordering::Acquire) {
            0 => None,
            c => Some((c - 1) as usize),
        }
    }
}

/// What this rank knows of its peers' departures: `all` (the device's bitmask, every
/// departure, so waits on the rank end), `healthy` (host only: the ranks that left with
/// their world in good order, so a departure can be named as the cause of a failure; a
/// rank that left after its own wait failed is not a cause) and `causes` (host only: what
/// a rank that left after its own failure named as the cause).
#[derive(Clone, Copy)]
pub struct Departures {
    /// Every departed rank (the control block's `departed` bitmask).
    pub all: DepartedMask,
    /// The ranks that left healthy.
    pub healthy: DepartedMask,
    /// The causes named by the ranks that left failed.
    pub causes: Causes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn departed_bits_are_per_rank_and_ignore_ranks_outside_the_world() {
        let mut words = [0u64; 2];
        // SAFETY: two local words, used atomically until the end of the test.
        let mask = unsafe { DepartedMask::new(words.as_mut_ptr(), 70) };
        mask.set(69);
        mask.set(3);
        mask.set(70);
        mask.set(1000);
        assert!(mask.is_set(69) && mask.is_set(3));
        assert!(!mask.is_set(4) && !mask.is_set(70));
        assert_eq!(words, [1 << 3, 1 << 5]);
        assert_eq!(mask.first(), Some(3));
        assert_eq!(DepartedMask::bytes(70), 16);
        assert_eq!(DepartedMask::bytes(64), 8);
    }
}
