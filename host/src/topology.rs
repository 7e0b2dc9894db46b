//! Which peers a rank reaches with loads and stores: the ranks on its node.
//!
//! A world learns its topology when it forms: every rank contributes its machine's host
//! name and its node split ([`Config::ranks_per_node`](crate::Config::ranks_per_node), or
//! the environment variable [`ENV_RANKS_PER_NODE`]). Ranks on one machine form one node,
//! unless a split cuts that machine's ranks, in rank order, into nodes of that many
//! ranks: one machine then emulates several nodes, as a test of the off-node paths.
//!
//! Peers on the rank's node are mapped and reached with loads and stores. A peer on
//! another node is not mapped, and its entry in every peer table this world builds (the
//! heap's, every symmetric buffer's, every [`Rendezvous`](crate::Rendezvous)'s) is 0, as
//! NCCL's `ncclGetPeerPointer` and `nvshmem_ptr` give NULL for a peer they cannot map. A
//! kernel that translates by hand checks the entry before using it.

use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};

/// Environment variable that splits every machine's ranks into emulated nodes of this
/// many ranks (see the module documentation), when [`crate::Config::ranks_per_node`] is
/// `None`.
pub const ENV_RANKS_PER_NODE: &str = "SYMMEM_RANKS_PER_NODE";

/// The node of every rank of a world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    rank: usize,
    /// Node index of every rank, numbered in order of each node's first rank.
    node: Vec<usize>,
}

impl Topology {
    /// Collective: every rank of `bootstrap` calls it with its split (`None`: the
    /// environment's [`ENV_RANKS_PER_NODE`], else one node per machine).
    ///
    /// # Errors
    /// [`Error::BadConfig`] for a split of 0, [`Error::BadEnv`] for an
    /// environment value that is not a number of ranks (or is 0),
    /// [`Error::NodeSplitMismatch`] naming the first rank whose split differs from rank
    /// 0's, and the bootstrap's.
    pub(crate) fn exchange(bootstrap: &mut dyn Bootstrap, split: Option<usize>) -> Result<Self> {
        let split = match split {
            Some(0) => {
                return Err(Error::BadConfig {
                    field: "ranks_per_node",
                    why: "Some(0) is a node of zero ranks: use Some(n) with n >= 1, or None \
                          for one node per machine",
                });
            }
            Some(s) => Some(s),
            None => match std::env::var(ENV_RANKS_PER_NODE) {
                Ok(v) => match v.parse() {
                    Ok(n @ 1..) => Some(n),
                    _ => {
                        return Err(Error::BadEnv {
                            name: ENV_RANKS_PER_NODE,
                            value: Some(v),
                            expected: "a number of ranks per node, at least 1 (unset it for \
                                       one node per machine; Config::ranks_per_node overrides \
                                       it)",
                        });
                    }
                },
                Err(_) => None,
            },
        };
        let host = host_name();
        let mine = [
            &split.map_or(0, |s| s as u64).to_le_bytes()[..],
            host.as_bytes(),
        ]
        .concat();
        let all = bootstrap.all_gather(&mine)?;
        let decode = |bytes: &[u8]| -> (Option<usize>, Vec<u8>) {
            let (s, host) = bytes.split_at(8.min(bytes.len()));
            let s = s.try_into().map(u64::from_le_bytes).unwrap_or(0) as usize;
            ((s > 0).then_some(s), host.to_vec())
        };
        let ranks: Vec<_> = all.iter().map(|b| decode(b)).collect();
        if let Some(rank) = ranks.iter().position(|(s, _)| *s != ranks[0].0) {
            return Err(Error::NodeSplitMismatch {
                rank,
                expected: ranks[0].0,
                found: ranks[rank].0,
            });
        }
        Ok(Self::from_hosts(
            bootstrap.rank(),
            &ranks.into_iter().map(|(_, h)| h).collect::<Vec<_>>(),
            split,
        ))
    }

    /// The topology of ranks on machines `hosts` (one name per rank), each machine's
    /// ranks cut into nodes of `split` ranks when given.
    fn from_hosts(rank: usize, hosts: &[Vec<u8>], split: Option<usize>) -> Self {
        let mut keys: Vec<(&[u8], usize)> = Vec::new();
        let mut seen_on_host = std::collections::HashMap::<&[u8], usize>::new();
        let node = hosts
            .iter()
            .map(|h| {
                let index = seen_on_host.entry(h).or_insert(0);
                let key = (h.as_slice(), split.map_or(0, |s| *index / s));
                *index += 1;
                match keys.iter().position(|k| *k == key) {
                    Some(n) => n,
                    None => {
                        keys.push(key);
                        keys.len() - 1
                    }
                }
            })
            .collect();
        Self { rank, node }
    }

    /// The node of `rank`, if it is a rank of the world.
    pub fn node_of(&self, rank: usize) -> Option<usize> {
        self.node.get(rank).copied()
    }

    /// How many nodes the world spans.
    pub fn nodes(&self) -> usize {
        self.node.iter().max().map_or(0, |n| n + 1)
    }

    /// Whether this rank reaches `peer` with loads and stores (it is on this rank's
    /// node; this rank itself included).
    pub fn reaches(&self, peer: usize) -> bool {
        self.node.get(peer) == self.node.get(self.rank)
    }

    /// The ranks on this rank's node, in order.
    pub fn node_ranks(&self) -> Vec<usize> {
        (0..self.node.len()).filter(|&r| self.reaches(r)).collect()
    }
}

/// A rank's place among the ranks of its machine: what chooses its GPU when a launcher
/// (`mpirun`, [`crate::bootstrap::unix::spawn`]) starts one process per rank on several
/// machines, where the world rank counts across machines and would pick a GPU that is
/// another rank's, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalRank {
    /// This rank's index among its machine's ranks, in world-rank order (0 for the
    /// machine's lowest world rank).
    pub rank: usize,
    /// How many ranks of the world run on this machine.
    pub ranks: usize,
}

/// This rank's [`LocalRank`], learnt from every rank's machine (its kernel host name).
/// Collective: every rank of `bootstrap` calls it, before [`crate::World::new`], to pick
/// its device:
///
/// ```no_run
/// # #[cfg(feature = "mpi")]
/// # fn main() -> symmem::Result<()> {
/// use symmem::backend::cuda::Cuda;
/// use symmem::bootstrap::mpi::MpiBootstrap;
/// use symmem::{Config, World};
///
/// let mut bootstrap = MpiBootstrap::new()?;
/// let local = symmem::topology::local_rank(&mut bootstrap)?;
/// let backend = Cuda::new(local.rank % Cuda::device_count()?)?;
/// let world = World::new(Box::new(bootstrap), backend, &Config::default())?;
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "mpi"))]
/// # fn main() {}
/// ```
///
/// (An emulated node split, [`ENV_RANKS_PER_NODE`], does not change it: GPUs belong to
/// machines.)
///
/// # Errors
/// The bootstrap's ([`Error::PeerLost`] where a rank does not take part in time).
pub fn local_rank(bootstrap: &mut dyn Bootstrap) -> Result<LocalRank> {
    let hosts = bootstrap.all_gather(host_name().as_bytes())?;
    Ok(local_of(bootstrap.rank(), &hosts))
}

/// `rank`'s [`LocalRank`] among ranks on machines `hosts` (one name per rank).
fn local_of(rank: usize, hosts: &[Vec<u8>]) -> LocalRank {
    let mine = &hosts[rank];
    LocalRank {
        rank: hosts[..rank].iter().filter(|h| *h == mine).count(),
        ranks: hosts.iter().filter(|h| *h == mine).count(),
    }
}

/// This machine's host name (the kernel's; empty if it cannot be read).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(names: &[&str]) -> Vec<Vec<u8>> {
        names.iter().map(|n| n.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_local_rank_counts_the_ranks_of_its_machine_only() {
        // Two machines, their ranks interleaved as `mpirun --map-by node` places them.
        let h = hosts(&["a", "b", "a", "b", "a"]);
        let got: Vec<_> = (0..5).map(|r| local_of(r, &h)).collect();
        let want =
            [(0, 3), (0, 2), (1, 3), (1, 2), (2, 3)].map(|(rank, ranks)| LocalRank { rank, ranks });
        assert_eq!(got, want);
    }

    #[test]
    fn machines_are_nodes_and_a_split_cuts_each_machine_in_rank_order() {
        let t = Topology::from_hosts(1, &hosts(&["a", "a", "b", "b"]), None);
        assert_eq!(t.node, [0, 0, 1, 1]);
        assert_eq!((t.node_of(2), t.node_of(4)), (Some(1), None));
        assert_eq!(t.nodes(), 2);
        assert_eq!(t.node_ranks(), [0, 1]);
        assert!(t.reaches(0) && t.reaches(1) && !t.reaches(2));
        let t = Topology::from_hosts(3, &hosts(&["a"; 8]), Some(2));
        assert_eq!(t.node, [0, 0, 1, 1, 2, 2, 3, 3]);
        assert_eq!(t.node_ranks(), [2, 3]);
        let t = Topology::from_hosts(0, &hosts(&["a", "b", "a", "b"]), Some(1));
        assert_eq!(t.node, [0, 1, 2, 3]);
        assert_eq!(t.node_ranks(), [0]);
        let t = Topology::from_hosts(0, &hosts(&["a", "b", "a", "b", "a"]), Some(2));
        assert_eq!(t.node, [0, 1, 0, 1, 2]);
    }
}
