//! Signals: `u64` words in the symmetric heap that one rank updates with release
//! semantics and another waits on with acquire semantics.
//!
//! Signal updates and waits are at [`Scope::System`](crate::Scope::System): the peers
//! are other devices (or the host), which device scope does not reach. See
//! [`crate::Team::signal`], [`crate::Team::put_with_signal_block`],
//! [`crate::Team::signal_wait_until`] and [`crate::Team::barrier_block`].

/// How a signal word is updated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignalOp {
    /// Store the value (a release store).
    Set,
    /// Add the value, wrapping (a release read-modify-write, no result returned).
    Add,
}

/// The condition a wait holds out for, comparing the signal word with a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    /// `signal == value`.
    Eq,
    /// `signal != value`.
    Ne,
    /// `signal > value`.
    Gt,
    /// `signal >= value`.
    Ge,
    /// `signal < value`.
    Lt,
    /// `signal <= value`.
    Le,
}

impl Cmp {
    /// Whether `signal` satisfies the condition against `value`.
    #[inline(always)]
    pub const fn holds(self, signal: u64, value: u64) -> bool {
        match self {
            Cmp::Eq => signal == value,
            Cmp::Ne => signal != value,
            Cmp::Gt => signal > value,
            Cmp::Ge => signal >= value,
            Cmp::Lt => signal < value,
            Cmp::Le => signal <= value,
        }
    }
}

/// Signal words one [`crate::Team::barrier_block`] needs: one per rank.
pub const fn barrier_words(world: usize) -> usize {
    world
}
