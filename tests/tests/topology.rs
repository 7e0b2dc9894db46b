//! Topology with ranks as threads: one node in all forms a world; a split into several
//! nodes needs the off-node engine (MPI), so it is a typed error here; ranks that
//! disagree on the split are named. The off-node entries and the engine itself are
//! tested under `mpirun` (`engine_mpi.rs`).

use symmem::backend::cpu::Cpu;
use symmem::bootstrap::Bootstrap;
use symmem::bootstrap::local::LocalBootstrap;
use symmem::{Config, Error, World};

fn config(split: Option<usize>) -> Config {
    Config {
        heap_bytes: 8 << 20,
        ranks_per_node: split,
        ..Config::default()
    }
}

#[test]
fn threads_split_into_nodes_need_the_engine() {
    // Ranks as threads have no MPI, so no engine: forming a world of several nodes is a
    // typed error on every rank (the entries and the engine are tested under mpirun, in
    // `engine_mpi.rs`).
    let results = symmem::spawn_ranks(
        4,
        &config(Some(2)),
        |_| Ok(Cpu::new()),
        |w: World<Cpu>| Ok(w.topology().nodes()),
    )
    .expect("launch");
    assert!(
        results.iter().all(|r| matches!(r, Err(Error::NoEngine(_)))),
        "{results:?}"
    );
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
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(Error::Unsupported(_)))),
        "{results:?}"
    );
}
