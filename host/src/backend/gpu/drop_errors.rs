//! The failures of calls made while dropping a backend's objects, kept by the backend.

use crate::error::Result;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The failures of runtime calls made while dropping one GPU backend's objects (the
/// backend itself and every handle it made). `Drop` must not panic, so a failed release
/// is recorded here instead; [`Cuda::drop_errors`](crate::backend::cuda::Cuda::drop_errors)
/// hands out the record, which outlives the backend for as long as it is held.
#[derive(Debug, Default)]
pub struct DropErrors {
    count: AtomicU64,
    last: Mutex<Option<String>>,
}

impl DropErrors {
    /// How many calls made while dropping failed.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The last such failure, as text.
    pub fn last(&self) -> Option<String> {
        self.last.lock().ok().and_then(|last| last.clone())
    }

    /// Records `result` if it is a failure (a call made in `Drop`, which must not panic).
    pub fn record(&self, result: Result<()>) {
        if let Err(e) = result {
            self.count.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut last) = self.last.lock() {
                *last = Some(e.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn drop_errors_count_failures_and_keep_the_last() {
        let errors = DropErrors::default();
        errors.record(Ok(()));
        assert_eq!((errors.count(), errors.last()), (0, None));
        errors.record(Err(Error::ZeroSize));
        errors.record(Err(Error::TableDropped));
        assert_eq!(errors.count(), 2);
        assert_eq!(errors.last(), Some(Error::TableDropped.to_string()));
    }
}
