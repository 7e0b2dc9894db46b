//! Topology (issue 19, first part): one machine split into emulated nodes
//! (`Config::ranks_per_node`). Peers on this rank's node are mapped; a peer on another
//! node has entry 0 in every peer table (the heap's, a symmetric buffer's, a
//! rendezvous's), and every host call that would reach it with loads and stores is a
//! typed error (`Error::OffNode`), as are collectives until the engine exists. The
//! allocator-agnostic example kernel checks the entry and leaves an off-node peer alone.
//! CPU backend, ranks as threads.

use symmem::backend::Grid;
use symmem::backend::cpu::Cpu;
use symmem::bootstrap::Bootstrap;
use symmem::bootstrap::local::LocalBootstrap;
use symmem::collectives::Collectives;
use symmem::{Config, Error, PeerBaseProvider, Rendezvous, World};

fn config(split: Option<usize>) -> Config {
    Config {
        heap_bytes: 8 << 20,
        ranks_per_node: split,
        ..Config::default()
    }
}

#[test]
fn split_nodes_have_zero_entries_for_off_node_peers_and_typed_errors() {
    let n = 4;
    let results = symmem::launch(
        n,
        &config(Some(2)),
        |_| Ok(Cpu::new()),
        |w: World<Cpu>| {
            let me = w.rank();
            let same: Vec<usize> = if me < 2 { vec![0, 1] } else { vec![2, 3] };
            let buddy = me ^ 1;
            let far = (me + 2) % n;
            assert_eq!(w.topology().nodes(), 2);
            assert_eq!(w.topology().node_ranks(), same);
            for (r, &e) in w.heap_bases().entries().iter().enumerate() {
                assert_eq!(
                    e == 0,
                    !same.contains(&r),
                    "heap entry {r} on rank {me}: {e:#x}"
                );
            }
            let (buf, table) = w.allocate_symmetric::<u32>(64)?;
            for (r, &e) in table.entries().iter().enumerate() {
                assert_eq!(e == 0, !same.contains(&r), "buffer entry {r} on rank {me}");
            }
            let shared = Rendezvous::new(w.device_zeros::<u32>(64)?)?;
            for (r, &e) in shared.table().entries().iter().enumerate() {
                assert_eq!(
                    e == 0,
                    !same.contains(&r),
                    "rendezvous entry {r} on rank {me}"
                );
            }
            w.write(&buf, 0, &[me as u32 + 1; 64])?;
            w.barrier()?;
            // Off-node: typed errors, no address.
            assert!(
                matches!(buf.as_slice().peer_ptr(far), Err(Error::OffNode { rank }) if rank == far)
            );
            assert!(matches!(w.read_peer(&buf, far), Err(Error::OffNode { rank }) if rank == far));
            let src = w.device_from_slice(&[7u32; 64])?;
            assert!(matches!(w.put(&buf, &src, far), Err(Error::OffNode { rank }) if rank == far));
            // On the node: loads and stores as before.
            assert_eq!(w.read_peer(&buf, buddy)?, vec![buddy as u32 + 1; 64]);
            // The example's kernel checks the entry: an off-node target is left alone.
            let module = w.load(symmem_tests::objects::of("peer_put_kernels"))?;
            // An allocation away from the heap's start: off-node entries stay 0, not the offset.
            let data = w.zeros::<u32>(4 * n)?;
            for (r, &e) in data.peer_bases().entries().iter().enumerate() {
                assert_eq!(
                    e == 0,
                    !same.contains(&r),
                    "data entry {r} on rank {me}: {e:#x}"
                );
            }
            let mine = w.device_from_slice(&[me as u32 + 100; 4])?;
            w.barrier()?;
            for to in [buddy, far] {
                module.launch(
                    peer_put_kernels::ring_put,
                    Grid::new(1, 1),
                    (&data, &mine, data.peer_bases(), me as u32, to as u32, 4u32),
                )?;
            }
            w.barrier()?;
            let got = w.read(&data)?;
            for r in 0..n {
                let want = if r == buddy { r as u32 + 100 } else { 0 };
                assert_eq!(got[4 * r..4 * r + 4], [want; 4], "slot {r} on rank {me}");
            }
            // Collectives reach every peer: across nodes they are refused on every rank.
            let coll = Collectives::new(&w);
            assert!(matches!(coll, Err(Error::OffNode { .. })), "{coll:?}");
            drop((buf, table, shared));
            w.barrier()
        },
    )
    .expect("launch");
    for (rank, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

#[test]
fn one_node_per_rank_and_one_node_in_all() {
    for (split, nodes) in [(Some(1), 3), (Some(3), 1), (None, 1)] {
        let results = symmem::launch(
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
    let results = symmem::launch(
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
