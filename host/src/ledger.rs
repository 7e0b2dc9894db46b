//! The ledger of a world's collective objects, and how ranks agree on it.
//!
//! Every object that all ranks create together (a symmetric allocation, a rendezvous, an
//! external table) is recorded here in creation order: its parameters and, for an
//! allocation, the heap offset it got. The record's position is the object's **id**,
//! which is the same on every rank whose ledgers agree. Ranks never exchange messages
//! when they create objects (allocation stays free of communication); they compare
//! ledgers at an **agreement**: every [`World::barrier`](crate::World::barrier), every
//! collective that is the first use of an object created since the last agreement, and
//! every provider's creation. An agreement all-gathers each rank's [`Proposal`] and
//! [`decide`]s: either every rank's ledger is the same (and the objects every rank has
//! let go of may be released, in id order, so the heap allocator stays identical on
//! every rank whatever order each rank dropped them in), or the ranks that differ from
//! the majority are named and the world is poisoned.

use crate::error::{Error, Result};

/// A running FNV-1a hash of 64-bit words.
fn fnv(hash: u64, words: &[u64]) -> u64 {
    words
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .fold(hash, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// A word naming `name` (its bytes hashed): the same in every process.
pub(crate) fn name_word(name: &str) -> u64 {
    name.bytes().fold(FNV_OFFSET, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The first word a device collective call is recorded with (object records use
/// [`Record`]'s small numbers).
const CALL: u64 = 0x100;

/// What kind of collective object a ledger record describes (the record's first word).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Record {
    /// A heap allocation: bytes, alignment, offset.
    Allocation = 1,
    /// Objects released at an agreement: their ids.
    Release = 2,
    /// A rendezvous of user allocations.
    Rendezvous = 3,
    /// An external peer-base table.
    ExternalTable = 4,
}

/// Ranks whose ledgers differ from the majority's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mismatch {
    ranks: Vec<usize>,
}

/// One rank's ledger.
#[derive(Debug)]
pub(crate) struct Ledger {
    hash: u64,
    /// Objects created so far; the last one's id.
    created: u64,
    /// Every object with an id up to this one is confirmed on every rank.
    agreed: u64,
    /// Set by a failed agreement; every later symmetric operation fails with it.
    poisoned: Option<Mismatch>,
}

impl Ledger {
    /// An empty ledger.
    pub(crate) fn new() -> Self {
        Self {
            hash: FNV_OFFSET,
            created: 0,
            agreed: 0,
            poisoned: None,
        }
    }

    /// Records a new collective object; returns its id (1, 2, ...).
    pub(crate) fn create(&mut self, record: Record, words: &[u64]) -> u64 {
        self.created += 1;
        self.hash = fnv(self.hash, &[record as u64, self.created]);
        self.hash = fnv(self.hash, words);
        self.created
    }

    /// Records a device collective call this rank made: its kind and parameters (`call`)
    /// and the objects it used (`ids`). Calls exchange no host messages, so ranks whose
    /// kernels paired with different calls (one skipped a call, or made another, or with
    /// another count) would otherwise go on unaware; their ledgers now differ, and the
    /// next agreement names them.
    pub(crate) fn note_call(&mut self, call: &[u64], ids: &[u64]) {
        self.hash = fnv(self.hash, &[CALL, call.len() as u64]);
        self.hash = fnv(self.hash, call);
        self.hash = fnv(self.hash, ids);
    }

    /// Marks every object created so far as agreed (a world of one rank, where no
    /// exchange is needed).
    pub(crate) fn agree_alone(&mut self) {
        self.agreed = self.created;
    }

    /// True if object `id` has been confirmed on every rank.
    pub(crate) fn is_agreed(&self, id: u64) -> bool {
        id <= self.agreed
    }

    /// The error of a failed agreement, if there was one: [`Error::CollectiveMismatch`].
    pub(crate) fn check(&self) -> Result<()> {
        match &self.poisoned {
            None => Ok(()),
            Some(m) => Err(self.mismatch_error(m)),
        }
    }

    fn mismatch_error(&self, m: &Mismatch) -> Error {
        Error::CollectiveMismatch {
            ranks: m.ranks.clone(),
            ops: self.created,
        }
    }

    /// This rank's proposal: its ledger, the parameters of the call that agrees (`call`,
    /// words that must be the same on every rank, such as a provider's length), whether
    /// its part of the call failed, and the ids of the objects it has let go of
    /// (`dropped`, in any order).
    pub(crate) fn propose(&self, call: &[u64], failed: bool, dropped: &[u64]) -> Proposal {
        let mut dropped = dropped.to_vec();
        dropped.sort_unstable();
        Proposal {
            hash: self.hash,
            created: self.created,
            call: fnv(FNV_OFFSET, call),
            failed,
            dropped,
        }
    }

    /// Applies a verdict: on agreement every object so far is agreed and `released` is
    /// folded into the ledger; on a ledger mismatch the ledger is poisoned. Returns the
    /// error every rank gets: [`Error::CollectiveMismatch`] for differing ledgers or call
    /// parameters, [`Error::PeerFailed`] when other ranks failed their part (a rank
    /// whose own part failed reports its own error instead).
    pub(crate) fn apply(&mut self, verdict: &Verdict, rank: usize) -> Result<()> {
        if let Some(m) = &verdict.ledger_mismatch {
            self.poisoned = Some(m.clone());
            return Err(self.mismatch_error(m));
        }
        self.agreed = self.created;
        if !verdict.released.is_empty() {
            self.hash = fnv(self.hash, &[Record::Release as u64]);
            self.hash = fnv(self.hash, &verdict.released);
        }
        if let Some(m) = &verdict.call_mismatch {
            return Err(self.mismatch_error(m));
        }
        let others: Vec<usize> = verdict
            .failed
            .iter()
            .copied()
            .filter(|&r| r != rank)
            .collect();
        if others.is_empty() {
            Ok(())
        } else {
            Err(Error::PeerFailed {
                rank,
                ranks: others,
            })
        }
    }
}

/// What one rank brings to an agreement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Proposal {
    hash: u64,
    created: u64,
    call: u64,
    failed: bool,
    /// Ids this rank has let go of, ascending.
    dropped: Vec<u64>,
}

impl Proposal {
    /// The bytes sent to the other ranks (never empty: an empty contribution is a rank
    /// leaving the world).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let words = [
            self.hash,
            self.created,
            self.call,
            u64::from(self.failed),
            self.dropped.len() as u64,
        ];
        words
            .iter()
            .chain(&self.dropped)
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    /// Reads rank `rank`'s contribution. An empty one means that rank is leaving the
    /// world ([`Error::PeerLost`]); a malformed one is [`Error::BadMessage`].
    pub(crate) fn decode(rank: usize, bytes: &[u8]) -> Result<Self> {
        if bytes.is_empty() {
            return Err(Error::PeerLost {
                rank: Some(rank),
                waited: std::time::Duration::ZERO,
            });
        }
        let (words, rest) = bytes.as_chunks::<8>();
        let words: Vec<u64> = words.iter().map(|w| u64::from_le_bytes(*w)).collect();
        let malformed = || Error::BadMessage {
            from: Some(rank),
            what: "agreement",
        };
        let [hash, created, call, failed, n, dropped @ ..] = words.as_slice() else {
            return Err(malformed());
        };
        // `decide` looks ids up by binary search: they must be ascending.
        if !rest.is_empty() || *failed > 1 || dropped.len() as u64 != *n || !dropped.is_sorted() {
            return Err(malformed());
        }
        Ok(Self {
            hash: *hash,
            created: *created,
            call: *call,
            failed: *failed == 1,
            dropped: dropped.to_vec(),
        })
    }
}

/// Decodes every rank's contribution in `all` (bytes from peers) and, if all are
/// proposals, decides on them, checking that a proposal is [`Error::BadMessage`] or
/// [`Error::PeerLost`] naming its rank, or re-encodes to the very bytes it came from, and
/// that the verdict names only ranks of the group and releases only ids every rank
/// dropped. The oracle of the property tests below and of the `agreement` fuzz target.
///
/// # Panics
/// Where a decode or the decision breaks that.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_agreement(all: &[Vec<u8>]) {
    let mut proposals = Vec::new();
    for (rank, bytes) in all.iter().enumerate() {
        match Proposal::decode(rank, bytes) {
            Ok(p) => {
                assert_eq!(
                    &p.encode(),
                    bytes,
                    "rank {rank}: a proposal has one encoding"
                );
                proposals.push(p);
            }
            Err(Error::BadMessage { from, .. }) => assert_eq!(from, Some(rank)),
            Err(Error::PeerLost { rank: from, .. }) => {
                assert!(bytes.is_empty() && from == Some(rank));
            }
            Err(other) => panic!("rank {rank}: {other:?}"),
        }
    }
    if proposals.len() < all.len() {
        return;
    }
    let verdict = decide(&proposals);
    let n = proposals.len();
    for m in [&verdict.ledger_mismatch, &verdict.call_mismatch]
        .into_iter()
        .flatten()
    {
        assert!(!m.ranks.is_empty() && m.ranks.len() < n && m.ranks.iter().all(|&r| r < n));
    }
    assert!(verdict.failed.iter().all(|&r| r < n && proposals[r].failed));
    assert!(verdict.released.is_sorted());
    for id in &verdict.released {
        assert!(proposals.iter().all(|p| p.dropped.contains(id)));
    }
    for rank in 0..n {
        let _ = Ledger::new().apply(&verdict, rank);
    }
}

/// The outcome of an agreement, the same on every rank (it is computed from the same
/// gathered proposals).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Ranks whose ledgers differ from the majority's, if any.
    ledger_mismatch: Option<Mismatch>,
    /// Ranks whose call parameters differ from the majority's, if any.
    call_mismatch: Option<Mismatch>,
    /// Ranks whose part of the call failed.
    failed: Vec<usize>,
    /// Ids every rank has let go of, ascending; empty unless every ledger and call agree
    /// and no rank failed.
    pub(crate) released: Vec<u64>,
}

/// The ranks whose `key` differs from the largest group's; on a tie, the group with the
/// lowest rank is the majority (groups are met in rank order, and only a strictly larger
/// one replaces it). `None` if every rank has the same key.
fn minority<K: PartialEq>(
    proposals: &[Proposal],
    key: impl Fn(&Proposal) -> K,
) -> Option<Mismatch> {
    let mut best: Option<(K, usize)> = None;
    for p in proposals {
        let size = proposals.iter().filter(|q| key(q) == key(p)).count();
        if best.as_ref().is_none_or(|(_, s)| size > *s) {
            best = Some((key(p), size));
        }
    }
    let (majority, _) = best?;
    let ranks: Vec<usize> = (0..proposals.len())
        .filter(|&r| key(&proposals[r]) != majority)
        .collect();
    (!ranks.is_empty()).then_some(Mismatch { ranks })
}

/// Decides an agreement from every rank's proposal, indexed by rank.
pub(crate) fn decide(proposals: &[Proposal]) -> Verdict {
    let ledger_mismatch = minority(proposals, |p| (p.hash, p.created));
    let call_mismatch = minority(proposals, |p| p.call);
    let failed: Vec<usize> = (0..proposals.len())
        .filter(|&r| proposals[r].failed)
        .collect();
    let released = match proposals.split_first() {
        Some((first, rest))
            if ledger_mismatch.is_none() && call_mismatch.is_none() && failed.is_empty() =>
        {
            first
                .dropped
                .iter()
                .copied()
                .filter(|id| rest.iter().all(|p| p.dropped.binary_search(id).is_ok()))
                .collect()
        }
        _ => Vec::new(),
    };
    Verdict {
        ledger_mismatch,
        call_mismatch,
        failed,
        released,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bad_bytes::bytes_near;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Proposals as ranks send them.
    fn proposal() -> impl Strategy<Value = Proposal> {
        (
            vec(0u64..4, 0..4),
            vec(0u64..3, 0..2),
            any::<bool>(),
            vec(0u64..8, 0..6),
        )
            .prop_map(|(sizes, call, failed, dropped)| {
                ledger(&sizes).propose(&call, failed, &dropped)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_bytes_decode_to_a_proposal_that_round_trips_or_a_typed_error(
            all in vec(bytes_near(proposal().prop_map(|p| p.encode())), 1..4),
        ) {
            check_agreement(&all);
        }

        #[test]
        fn valid_proposals_round_trip_and_agree_soundly(all in vec(proposal(), 1..5)) {
            let bytes: Vec<Vec<u8>> = all.iter().map(Proposal::encode).collect();
            for (rank, b) in bytes.iter().enumerate() {
                prop_assert_eq!(&Proposal::decode(rank, b).unwrap(), &all[rank]);
            }
            check_agreement(&bytes);
        }
    }

    #[test]
    fn agreement_dropped_ids_out_of_order_are_a_bad_message() {
        // Found by review: `decide` binary-searches every rank's dropped ids, so a
        // proposal whose ids are not ascending must not decode.
        let mut words = [1u64, 2, 3, 0, 2, 9, 3];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert!(matches!(
            Proposal::decode(2, &bytes),
            Err(Error::BadMessage { from: Some(2), .. })
        ));
        words.swap(5, 6);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(Proposal::decode(2, &bytes).unwrap().dropped, [3, 9]);
    }

    fn ledger(sizes: &[u64]) -> Ledger {
        let mut l = Ledger::new();
        for &s in sizes {
            l.create(Record::Allocation, &[s, 256, 0]);
        }
        l
    }

    #[test]
    fn proposals_round_trip_and_empty_is_leaving() {
        let p = ledger(&[1, 2]).propose(&[7], true, &[9, 3, 5]);
        assert_eq!(Proposal::decode(0, &p.encode()).unwrap(), p);
        assert!(matches!(
            Proposal::decode(3, &[]),
            Err(Error::PeerLost { rank: Some(3), .. })
        ));
        let mut bad = p.encode();
        bad.pop();
        assert!(matches!(
            Proposal::decode(1, &bad),
            Err(Error::BadMessage { from: Some(1), .. })
        ));
        let mut short = p.encode();
        short.truncate(short.len() - 8);
        assert!(matches!(
            Proposal::decode(1, &short),
            Err(Error::BadMessage { from: Some(1), .. })
        ));
    }

    #[test]
    fn the_odd_rank_out_is_named_even_when_it_is_rank_0() {
        for world in [2, 3, 4, 8] {
            for odd in 0..world {
                let proposals: Vec<_> = (0..world)
                    .map(|r| {
                        let sizes: &[u64] = if r == odd { &[1, 3] } else { &[1, 2] };
                        ledger(sizes).propose(&[], false, &[])
                    })
                    .collect();
                let mut l = ledger(&[1, 2]);
                let e = l.apply(&decide(&proposals), 0).unwrap_err();
                // At world 2 neither history has a majority: rank 0's group wins the tie.
                let expected = if world == 2 { 1 } else { odd };
                assert!(
                    matches!(&e, Error::CollectiveMismatch { ranks, ops: 2 } if ranks == &[expected]),
                    "world {world}, odd rank {odd}: {e:?}"
                );
                assert!(l.check().is_err(), "a ledger mismatch poisons");
            }
        }
    }

    #[test]
    fn released_is_what_every_rank_dropped_whatever_the_order() {
        let l = ledger(&[1, 2, 3, 4]);
        let proposals = [
            l.propose(&[], false, &[4, 1, 3]),
            l.propose(&[], false, &[3, 4]),
            l.propose(&[], false, &[1, 4, 3, 2]),
        ];
        assert_eq!(decide(&proposals).released, vec![3, 4]);
    }

    #[test]
    fn a_call_mismatch_or_a_failure_releases_nothing_and_does_not_poison() {
        let mut l = ledger(&[1]);
        assert!(!l.is_agreed(1));
        let calls = [
            l.propose(&[64], false, &[1]),
            l.propose(&[64], false, &[1]),
            l.propose(&[32], false, &[1]),
        ];
        let verdict = decide(&calls);
        assert!(verdict.released.is_empty());
        let e = l.apply(&verdict, 0).unwrap_err();
        assert!(matches!(&e, Error::CollectiveMismatch { ranks, .. } if ranks == &[2]));
        assert!(l.check().is_ok() && l.is_agreed(1));
        let failed = [l.propose(&[], false, &[1]), l.propose(&[], true, &[1])];
        let verdict = decide(&failed);
        assert!(verdict.released.is_empty());
        let e = l.apply(&verdict, 0).unwrap_err();
        assert!(matches!(&e, Error::PeerFailed { rank: 0, ranks } if ranks == &[1]));
        assert!(
            l.apply(&verdict, 1).is_ok(),
            "the failed rank reports its own error"
        );
    }
}
