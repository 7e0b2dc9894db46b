//! Topology with ranks as threads: one node in all forms a world; a split into several
//! nodes forms one whose off-node peers are reached through the local transport (a
//! bootstrap with no transport is a typed error); ranks that disagree on the split are
//! named. The off-node entries and the engine itself are tested over the local transport
//! (`off_node_local.rs`) and under `mpirun` (`engine_mpi.rs`).

use symmem::backend::Shareable;
use symmem::backend::cpu::Cpu;
use symmem::bootstrap::Bootstrap;
use symmem::bootstrap::local::LocalBootstrap;
use symmem::transport::{EnginePath, OffNode};
use symmem::{Config, Error, World};

fn config(split: Option<usize>) -> Config {
    Config {
        heap_bytes: 8 << 20,
        ranks_per_node: split,
        ..Config::default()
    }
}

#[test]
fn threads_split_into_nodes_reach_each_other_through_the_local_transport() {
    // Ranks as threads carry off-node requests over the local transport (its checks:
    // `off_node_local.rs`): the world forms, with 0 for the other node's entries.
    let results = symmem::spawn_ranks(
        4,
        &config(Some(2)),
        |_| Ok(Cpu::new()),
        |w: World<Cpu>| {
            let far = w.heap_bases().entries().iter().filter(|&&e| e == 0).count();
            Ok((w.topology().nodes(), w.engine_path(), far))
        },
    )
    .expect("launch");
    for r in results {
        assert_eq!(
            r.expect("a world of two nodes"),
            (2, Some(EnginePath::Window), 2)
        );
    }
}

/// A thread-rank's bootstrap that offers no off-node transport (as ranks as processes
/// have none).
struct NoTransport(LocalBootstrap);

impl Bootstrap for NoTransport {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn world_size(&self) -> usize {
        self.0.world_size()
    }
    fn all_gather(&mut self, mine: &[u8]) -> symmem::Result<Vec<Vec<u8>>> {
        self.0.all_gather(mine)
    }
    fn all_gather_shareable(&mut self, mine: Shareable) -> symmem::Result<Vec<Shareable>> {
        self.0.all_gather_shareable(mine)
    }
}

#[test]
fn several_nodes_without_a_transport_are_a_typed_error() {
    let threads: Vec<_> = LocalBootstrap::default_group(4)
        .into_iter()
        .map(|b| {
            std::thread::spawn(move || {
                World::new(Box::new(NoTransport(b)), Cpu::new(), &config(Some(2))).map(drop)
            })
        })
        .collect();
    for t in threads {
        let result = t.join().expect("rank");
        assert!(matches!(result, Err(Error::NoEngine(_))), "{result:?}");
    }
}

#[test]
fn one_node_in_all() {
    for (split, nodes) in [(Some(3), 1), (None, 1)] {
        let results = symmem::spawn_ranks(
            3,
            &config(split),
            |_| Ok(Cpu::new()),
            |w: World<Cpu>| {
                assert_eq!(w.topology().nodes(), nodes, "split {split:?}");
                let mapped = w.heap_bases().entries().iter().filter(|&&e| e != 0).count();
                assert_eq!(mapped, 3 / nodes, "split {split:?}");
                Ok(())
            },
        )
        .expect("launch");
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }
}

#[test]
fn ranks_that_disagree_on_the_split_are_named() {
    let threads: Vec<_> = LocalBootstrap::default_group(3)
        .into_iter()
        .map(|b| {
            std::thread::spawn(move || {
                let split = if b.rank() == 2 { Some(1) } else { Some(3) };
                World::new(Box::new(b), Cpu::new(), &config(split)).map(drop)
            })
        })
        .collect();
    for t in threads {
        match t.join().expect("rank") {
            Err(Error::NodeSplitMismatch {
                rank: 2,
                expected: Some(3),
                found: Some(1),
            }) => {}
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_split_of_zero_is_refused() {
    let results = symmem::spawn_ranks(
        2,
        &config(Some(0)),
        |_| Ok(Cpu::new()),
        |_w: World<Cpu>| Ok(()),
    )
    .expect("launch");
    for r in &results {
        match r {
            Err(
                e @ Error::BadConfig {
                    field: "ranks_per_node",
                    ..
                },
            ) => assert!(e.to_string().contains("Config::ranks_per_node"), "{e}"),
            other => panic!("{other:?}"),
        }
    }
}

/// Ranks across nodes that choose different off-node transports all fail, naming the first
/// rank whose choice differs from rank 0's (no rank starts a transport its peers do not).
#[test]
fn ranks_that_disagree_on_the_transport_are_named() {
    let threads: Vec<_> = LocalBootstrap::default_group(3)
        .into_iter()
        .map(|b| {
            std::thread::spawn(move || {
                let off_node = Some(if b.rank() == 2 {
                    OffNode::Nvshmem
                } else {
                    OffNode::Bootstrap
                });
                let config = Config {
                    off_node,
                    ..config(Some(1))
                };
                World::new(Box::new(b), Cpu::new(), &config).map(drop)
            })
        })
        .collect();
    for t in threads {
        match t.join().expect("rank") {
            Err(
                e @ Error::OffNodeMismatch {
                    rank: 2,
                    expected: "bootstrap",
                    found: "nvshmem",
                },
            ) => assert!(e.to_string().contains("SYMMEM_OFF_NODE"), "{e}"),
            other => panic!("{other:?}"),
        }
    }
}

/// NVSHMEM asked for where it cannot serve: a typed refusal on every rank, never a world
/// whose off-node peers no kernel reaches. Without symmem's `nvshmem` feature (CI) the
/// kernels cannot call it; with it, the CPU backend has no CUDA heap to register.
#[test]
fn nvshmem_where_it_cannot_serve_is_refused() {
    let config = Config {
        off_node: Some(OffNode::Nvshmem),
        ..config(Some(1))
    };
    let results = symmem::spawn_ranks(2, &config, |_| Ok(Cpu::new()), |_w: World<Cpu>| Ok(()))
        .expect("launch");
    for r in &results {
        match r {
            Err(e @ Error::NoEngine(why)) => {
                assert!(
                    why.contains("`nvshmem` feature")
                        || why.contains("CUDA heaps only")
                        || why.contains("one PE per process"),
                    "{e}"
                )
            }
            Err(Error::NvshmemUnavailable { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn ranks_of_one_machine_are_numbered_on_it_before_the_world_forms() {
    // Ranks as threads share the machine: local rank = world rank, all of them on it
    // (across machines, the unit test of `topology` counts each machine's own).
    let ranks: Vec<_> = LocalBootstrap::default_group(3)
        .into_iter()
        .map(|mut b| std::thread::spawn(move || symmem::topology::local_rank(&mut b)))
        .collect();
    for (rank, handle) in ranks.into_iter().enumerate() {
        let local = handle.join().expect("rank thread").expect("local_rank");
        assert_eq!((local.rank, local.ranks), (rank, 3));
    }
}
