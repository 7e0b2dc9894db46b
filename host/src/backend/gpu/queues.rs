//! Hardware queues of a GPU that several ranks of one process share.
//!
//! Ranks as threads on one GPU share its context, and the runtime maps their streams onto
//! a fixed number of hardware queues (CUDA: `CUDA_DEVICE_MAX_CONNECTIONS`, 8 by default;
//! HIP: `GPU_MAX_HW_QUEUES`, 4 by default). Two ranks' streams on one queue run their
//! kernels one after the other; a collective kernel waits on the device for its peers, so
//! a rank whose kernel is queued behind a waiting peer's never starts, and both wait until
//! the deadline (measured on an H200: 8 thread-ranks with the default 8 connections
//! deadlocked in a broadcast; with 32 the same programs pass).
//!
//! So symmem sets the variable, when the user has not, before its first runtime call
//! ([`configure`]; not where the runtime says it must stay unset: CUDA under MPS); and every backend holds a [`QueueSlot`] of its device, which is
//! refused with [`Error::HardwareQueues`] naming the variable when this process's ranks
//! on the device would outnumber the queues its context has (a context some other
//! library made before symmem set the variable has the runtime's default).

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// A runtime's hardware-queue setting.
#[derive(Debug)]
pub(in crate::backend) struct QueueSetting {
    /// The environment variable the runtime reads when it makes a context.
    pub variable: &'static str,
    /// What symmem sets it to when it is unset.
    pub ours: usize,
    /// The runtime's own default, where the variable is unset.
    pub default: usize,
    /// Whether symmem set it (filled in by [`configure`]).
    pub set_by_us: OnceLock<bool>,
    /// Why symmem must leave the variable unset in this process, if it must.
    pub leave_unset: fn() -> Option<&'static str>,
}

/// Sets `setting.variable` to `setting.ours` unless the user set it; once per process,
/// and before the runtime's first call (every backend constructor calls it first).
pub(in crate::backend) fn configure(setting: &QueueSetting) {
    setting.set_by_us.get_or_init(|| {
        if std::env::var_os(setting.variable).is_some() {
            return false;
        }
        if let Some(why) = (setting.leave_unset)() {
            tracing::debug!(
                variable = setting.variable,
                why,
                "leaving the GPU's hardware queues as they are"
            );
            return false;
        }
        tracing::debug!(
            variable = setting.variable,
            value = setting.ours,
            "setting the GPU's hardware queues for ranks that share it"
        );
        // SAFETY: `set_var` races with a concurrent `getenv` in another thread. This runs
        // once, before symmem's first runtime call, and every symmem thread that could
        // read the environment meanwhile waits on this `OnceLock`. A process that reads
        // the environment from other threads at this moment should set the variable
        // itself before it starts them; then this never writes.
        unsafe { std::env::set_var(setting.variable, setting.ours.to_string()) };
        true
    });
}

/// The hardware queues of a context: what the variable said when it was made, or the
/// runtime's default for a context made before symmem set the variable.
fn queues(setting: &QueueSetting, context_made_before_us: bool) -> usize {
    if context_made_before_us && *setting.set_by_us.get().unwrap_or(&false) {
        return setting.default;
    }
    std::env::var(setting.variable)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(setting.default)
}

/// Live slots per (variable, device ordinal) in this process.
static LIVE: Mutex<Option<HashMap<(&'static str, usize), usize>>> = Mutex::new(None);

/// One rank's stream on a device's hardware queues; dropping it gives the queue back.
#[derive(Debug)]
pub(in crate::backend) struct QueueSlot {
    key: (&'static str, usize),
}

impl QueueSlot {
    /// Claims a queue of device `ordinal` for one more rank of this process.
    /// `context_made_before_us`: the device's context existed before any live rank of
    /// symmem's used it (another library made it, perhaps before the variable was set).
    ///
    /// # Errors
    /// [`Error::HardwareQueues`] when this process's ranks on the device would
    /// then outnumber its queues.
    pub(in crate::backend) fn take(
        setting: &QueueSetting,
        ordinal: usize,
        context_made_before_us: impl FnOnce() -> Result<bool>,
    ) -> Result<Self> {
        let key = (setting.variable, ordinal);
        let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        let live = live.get_or_insert_with(HashMap::new);
        let count = live.get(&key).copied().unwrap_or(0);
        // Only the first rank on the device can find a context nobody in symmem made.
        let before = count == 0 && context_made_before_us()?;
        let queues = queues(setting, before);
        if count + 1 > queues {
            return Err(Error::HardwareQueues {
                device: ordinal,
                ranks: count + 1,
                queues,
                variable: setting.variable,
            });
        }
        *live.entry(key).or_insert(0) += 1;
        Ok(Self { key })
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = live.as_mut().and_then(|l| l.get_mut(&self.key)) {
            *count = count.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A setting of its own per test (the environment variable is the key).
    fn setting(variable: &'static str, set_by_us: bool) -> QueueSetting {
        let setting = QueueSetting {
            variable,
            ours: 3,
            default: 2,
            set_by_us: OnceLock::new(),
            leave_unset: || None,
        };
        setting.set_by_us.set(set_by_us).expect("fresh");
        setting
    }

    #[test]
    fn ranks_beyond_the_queues_are_refused_naming_the_variable() {
        let s = setting("QUEUES_TEST_A", false);
        // Unset and not set by us: the runtime's default, 2 queues.
        let first = QueueSlot::take(&s, 0, || Ok(false)).expect("first");
        let _second = QueueSlot::take(&s, 0, || unreachable!()).expect("second");
        let third = QueueSlot::take(&s, 0, || unreachable!()).expect_err("third");
        assert!(matches!(
            third,
            Error::HardwareQueues {
                device: 0,
                ranks: 3,
                queues: 2,
                variable: "QUEUES_TEST_A"
            }
        ));
        assert!(third.to_string().contains("QUEUES_TEST_A"));
        // Another device counts apart; a slot given back frees a queue.
        let _other = QueueSlot::take(&s, 1, || Ok(false)).expect("device 1");
        drop(first);
        QueueSlot::take(&s, 0, || unreachable!()).expect("after a rank left");
    }

    #[test]
    fn a_context_made_before_symmem_set_the_variable_has_the_default() {
        let s = setting("QUEUES_TEST_B", true);
        assert_eq!(queues(&s, true), 2);
        let s = setting("QUEUES_TEST_C", false);
        assert_eq!(queues(&s, true), 2);
    }
}
