//! The host's side of a rank's control block of bounded device waits
//! (`symmem_rma::watch::Control`): the abort word that ends every wait of the rank's
//! kernels. The watchdog, the bootstrap's loss reports, and the off-node transports
//! write it; the world reads it.

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
