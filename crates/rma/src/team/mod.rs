//! [`Team`]: a peer-base table plus the calling rank, and every operation on it.
//!
//! This module holds the type; its methods are in modules of their own: construction
//! and the translation of symmetric pointers ([`translate`]), point loads and stores
//! ([`point`]), block ranges with fence and quiet ([`ranges`]), atomics ([`atomics`]),
//! signals and their waits ([`signals`]), and the cross-rank barrier ([`barrier`]).

// Declared in this order (the comments keep rustfmt from sorting them) so that the
// documentation lists `Team`'s methods as they were written: construction and
// translation first, then each kind of operation in turn.

// Construction, accessors, and the translation of a symmetric pointer to a peer.
mod translate;
// Point loads and stores of one element (or a batch).
mod point;
// Block-cooperative put, get and copy; fence and quiet.
mod ranges;
// Atomics on a peer's element.
mod atomics;
// Signals and the waits on them.
mod signals;
// The cross-rank barrier.
mod barrier;

pub(crate) use point::write_each;

use symmem_translate::PeerBases;

/// The ranks a kernel can reach: a [`PeerBases`] table (entry `r` is the symmetric
/// heap's address on rank `r`, mapped here) and this rank's index in it.
///
/// Every pointer argument named "symmetric" must lie in this rank's copy of the
/// allocation the table describes; the operation reaches the same offset on the peer
/// by translation. Pointers named "local" are used as they are. Ranks (`to`, `from`)
/// must be `< self.world()`: that is every unsafe method's first precondition.
///
/// **Peers on other nodes.** A peer whose table entry is 0 is not mapped here: every
/// operation below (point operations, ranges, atomics, signals, the barrier, quiet)
/// reaches it through the rank's off-node engine instead ([`crate::engine`]), with the
/// same ordering guarantees, as long as the symmetric pointers lie in the world's
/// symmetric heap (the memory peers expose). One branch on the entry picks the path.
#[derive(Clone, Copy, Debug)]
pub struct Team<'a> {
    bases: PeerBases<'a>,
    rank: usize,
}
