//! What a world that spans nodes must do, checked against host references on every rank:
//! everything a kernel does to peers on its node and on other nodes (through the off-node
//! transport). `engine-ranks` runs it under `mpirun` over the MPI transport
//! (`engine_mpi.rs`), `off_node_local.rs` with ranks as threads over the local one.
//!
//! * the peer tables: an off-node peer's entry is 0 in the heap's, a symmetric buffer's,
//!   a rendezvous's and an external table's (which refuses an address for such a peer),
//!   and host calls that need a mapping are `OffNode`;
//! * the host's translated put and get (`symmem_put`, `symmem_get`) to and from every
//!   peer, and a kernel's copy between two peers (`symmem_rma_copy`), the copier on a
//!   third node where each rank has its own;
//! * the suite's RMA bodies (`rma_ranks`): repeated device barriers and ordering puts,
//!   put-with-signal to every peer with a device-side wait, atomics under contention on
//!   every peer's counter;
//! * every collective: all-gather, all-to-all, broadcast from every root, all-reduce
//!   (one-shot, two-shot, auto) and reduce-scatter of i32 and f32, byte for byte or bit
//!   for bit against the host's fold in rank order;
//! * the `peer-put` example's kernel, which translates by hand and so leaves an off-node
//!   peer alone (the fused example, which reads peers through the RMA layer, runs as its
//!   own program).
#![allow(clippy::needless_range_loop)] // rank-indexed loops read best in tests

#[path = "../tests/suite/rma_ranks.rs"]
#[allow(dead_code)]
mod rma_ranks;

use rma_ranks::{FILL, assert_bytes, filled, handles, local, patterned};
use symmem::backend::{Backend, Grid};
use symmem::collectives::{Algorithm, ReduceOp};
use symmem::{Error, ExternalTable, LamportRefusal, PeerBaseProvider, Rendezvous, World};

const SIZES: [usize; 5] = [0, 1, 17, 4095, 70_000];

fn tables<B: Backend>(w: &World<B>) -> symmem::Result<()> {
    let me = w.rank();
    let t = w.topology();
    let check = |what: &str, entries: &[u64]| {
        for (r, &e) in entries.iter().enumerate() {
            assert_eq!(
                e == 0,
                !t.reaches(r),
                "{what} entry {r} on rank {me}: {e:#x}"
            );
        }
    };
    check("heap", w.heap_bases().entries());
    let (buf, table) = w.allocate_symmetric::<u32>(64)?;
    check("buffer", table.entries());
    let shared = Rendezvous::new(w.device_zeros::<u32>(64)?)?;
    check("rendezvous", shared.table().entries());
    // Another library's table of the same allocation, null for off-node peers as
    // `nvshmem_ptr` gives it: accepted. An address for an off-node peer: refused.
    let entries = table.entries().to_vec();
    // SAFETY: the buffer's own table: each entry its address on that rank, as mapped here.
    let external = unsafe { ExternalTable::<u32, B>::new(w, buf.ptr(), 64, &entries)? };
    check("external", external.peer_bases().entries());
    if let Some(far) = (0..w.world_size()).find(|&r| !t.reaches(r)) {
        let mut wrong = entries.clone();
        wrong[far] = entries[me];
        // SAFETY: refused before anything is uploaded (checked below).
        let refused = unsafe { ExternalTable::<u32, B>::new(w, buf.ptr(), 64, &wrong) };
        assert!(
            matches!(
                refused,
                Err(Error::BadPeerTable { rank, .. }) if rank == far
            ) || matches!(refused, Err(Error::PeerFailed { .. })),
            "an address for off-node rank {far}: {:?}",
            refused.map(drop)
        );
    }
    w.barrier()?;
    if let Some(far) = (0..w.world_size()).find(|&r| !t.reaches(r)) {
        let off = |r: symmem::Result<()>| matches!(r, Err(Error::OffNode { rank }) if rank == far);
        assert!(
            off(buf.as_slice().peer_ptr(far).map(drop)),
            "peer_ptr({far})"
        );
        assert!(off(w.read_peer(&buf, far).map(drop)), "read_peer({far})");
        assert!(
            off(w.translate(buf.ptr(), far).map(drop)),
            "translate({far})"
        );
    }
    drop((buf, table, shared, external));
    w.barrier()
}

/// Every rank puts its stamp into its slot of every peer's buffer, then gets every
/// peer's own slot back.
fn host_put_get<B: Backend>(w: &World<B>) -> symmem::Result<()> {
    let (me, n) = (w.rank(), w.world_size());
    let len = 3000;
    let buf = w.zeros::<u32>(n * len)?;
    let mine: Vec<u32> = (0..len).map(|i| (me * 1_000_000 + i) as u32).collect();
    let src = w.device_from_slice(&mine)?;
    w.barrier()?;
    for k in 0..n {
        let to = (me + k) % n;
        w.put(&buf.slice(me * len..(me + 1) * len)?, &src, to)?;
    }
    w.barrier()?;
    let got = w.read(&buf)?;
    for r in 0..n {
        let want: Vec<u32> = (0..len).map(|i| (r * 1_000_000 + i) as u32).collect();
        assert_eq!(
            got[r * len..(r + 1) * len],
            want[..],
            "slot {r} on rank {me}"
        );
    }
    let back = w.device_zeros::<u32>(len)?;
    for from in 0..n {
        w.get(&back, &buf.slice(from * len..(from + 1) * len)?, from)?;
        w.backend().synchronize()?;
        let want: Vec<u32> = (0..len).map(|i| (from * 1_000_000 + i) as u32).collect();
        assert_eq!(
            w.read(&back)?,
            want,
            "get of rank {from}'s slot on rank {me}"
        );
    }
    w.barrier()
}

/// A kernel's copy between two peers (`symmem_rma_copy`): rank `me` copies rank
/// `me + 1`'s bytes into slot `me` of rank `me + 2`'s buffer (mod the world). With a node
/// per rank the source, the destination and the copier are on three nodes (the engine
/// relays through the copier); with 2 per node one end is on the copier's node.
fn copies<B: Backend>(w: &World<B>) -> symmem::Result<()> {
    let (me, n) = (w.rank(), w.world_size());
    let len = 4099;
    let src = w.zeros::<u8>(len)?;
    w.write(&src, 0, &rma_ranks::patterned(me, len))?;
    let out = w.full::<u8>(n * len, FILL)?;
    w.barrier()?;
    let (from, to) = ((me + 1) % n, (me + 2) % n);
    let slot = out.slice(me * len..(me + 1) * len)?;
    // SAFETY: `slot` and `src` are views of agreed symmetric buffers of `len` bytes on
    // every rank, `from` and `to` ranks of the world.
    unsafe {
        w.kernels().launch_unchecked(
            symmem_kernels::symmem_rma_copy,
            w.backend().grid_for_bytes(len),
            (
                &slot,
                &src,
                src.peer_bases(),
                n as u32,
                me as u32,
                len as u64,
                from as u32,
                to as u32,
            ),
        )
    }?;
    w.barrier()?;
    let got = w.read(&out)?;
    for r in 0..n {
        let want = if (r + 2) % n == me {
            rma_ranks::patterned((r + 1) % n, len)
        } else {
            vec![FILL; len]
        };
        assert_bytes(
            &got[r * len..(r + 1) * len],
            &want,
            &format!("slot {r} (copied by rank {r}) on rank {me}"),
        );
    }
    w.barrier()
}

fn byte_collectives<B: Backend>(w: &World<B>) -> symmem::Result<()> {
    let cs = handles(w)?;
    let (me, n) = (w.rank(), w.world_size());
    let mut keep = Vec::new();
    for (k, &size) in SIZES.iter().enumerate() {
        let c = &cs[k % 2];
        let dst = filled(w, n * size)?;
        let src = local(w, &patterned(me, size), 3)?;
        w.barrier()?;
        c.all_gather(&dst, &src.view(), size)?;
        let got = w.read(&dst)?;
        for r in 0..n {
            let what = format!("all_gather size {size} rank {me} chunk {r}");
            assert_bytes(&got[r * size..(r + 1) * size], &patterned(r, size), &what);
        }
        keep.push(src);
        let data: Vec<u8> = (0..n).flat_map(|j| patterned(me * n + j, size)).collect();
        let src = local(w, &data, 1)?;
        let dst = filled(w, n * size)?;
        w.barrier()?;
        c.all_to_all(&dst, &src.view(), size)?;
        let got = w.read(&dst)?;
        for i in 0..n {
            let what = format!("all_to_all size {size} rank {me} from {i}");
            assert_bytes(
                &got[i * size..(i + 1) * size],
                &patterned(i * n + me, size),
                &what,
            );
        }
        keep.push(src);
        for root in 0..n {
            let mut data = patterned(me + 10 * root, size);
            data.resize(size + 16, FILL);
            let src = w.from_slice(&data)?;
            let dst = local(w, &vec![FILL; size], 5)?;
            w.barrier()?;
            c.broadcast(&dst.view(), &src, size, root)?;
            let what = format!("broadcast size {size} root {root} rank {me}");
            assert_bytes(&w.read(&dst.view())?, &patterned(11 * root, size), &what);
            keep.push(dst);
        }
    }
    Ok(())
}

fn fold_i32(op: ReduceOp, xs: impl Iterator<Item = i32>) -> i32 {
    xs.reduce(|a, x| match op {
        ReduceOp::Sum => a.wrapping_add(x),
        ReduceOp::Min => a.min(x),
        ReduceOp::Max => a.max(x),
    })
    .expect("one rank at least")
}

fn value(r: usize, i: usize) -> i32 {
    ((i as i32).wrapping_mul(0x3b9a_ca07) ^ (r as i32 * 977)).wrapping_add(i as i32 >> 3)
}

fn reductions<B: Backend>(w: &World<B>) -> symmem::Result<()> {
    let cs = handles(w)?;
    let (me, n) = (w.rank(), w.world_size());
    for (k, &count) in [1usize, 17, 1000].iter().enumerate() {
        let c = &cs[k % 2];
        let src = w.from_slice(&(0..n * count).map(|i| value(me, i)).collect::<Vec<_>>())?;
        for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
            for algorithm in [Algorithm::OneShot, Algorithm::TwoShot, Algorithm::Auto] {
                let dst = w.full(count, i32::MIN)?;
                w.barrier()?;
                c.all_reduce(&dst, &src, count, op, algorithm)?;
                let want: Vec<i32> = (0..count)
                    .map(|i| fold_i32(op, (0..n).map(|r| value(r, i))))
                    .collect();
                assert_eq!(
                    w.read(&dst)?,
                    want,
                    "all_reduce {op:?} {algorithm:?} {count} rank {me}"
                );
            }
            let out = w.device_zeros::<i32>(count)?;
            w.barrier()?;
            c.reduce_scatter(&out, &src, count, op)?;
            let want: Vec<i32> = (0..count)
                .map(|i| fold_i32(op, (0..n).map(|r| value(r, me * count + i))))
                .collect();
            assert_eq!(
                w.read(&out)?,
                want,
                "reduce_scatter {op:?} {count} rank {me}"
            );
        }
        // Floats: small integers, so every order of summation gives the same bits.
        let xs: Vec<f32> = (0..count)
            .map(|i| ((i * 7 + me * 3) % 1000) as f32)
            .collect();
        let fsrc = w.from_slice(&xs)?;
        let fdst = w.zeros::<f32>(count)?;
        w.barrier()?;
        c.all_reduce(&fdst, &fsrc, count, ReduceOp::Sum, Algorithm::Auto)?;
        let want: Vec<f32> = (0..count)
            .map(|i| (0..n).map(|r| ((i * 7 + r * 3) % 1000) as f32).sum())
            .collect();
        assert_eq!(w.read(&fdst)?, want, "f32 all_reduce {count} rank {me}");
        if w.topology().nodes() > 1 {
            let refused = c.all_reduce(&fdst, &fsrc, count, ReduceOp::Sum, Algorithm::Lamport);
            match refused {
                Err(
                    e @ Error::LamportUnavailable {
                        why: LamportRefusal::SeveralNodes { .. },
                        ..
                    },
                ) => assert!(e.to_string().contains("use Algorithm::Auto"), "{e}"),
                other => panic!("{other:?}"),
            }
        }
    }
    w.barrier()
}

fn examples<B: Backend>(w: &World<B>) -> symmem::Result<()> {
    let (me, n) = (w.rank(), w.world_size());
    let module = w.load(crate::objects::of("peer_put_kernels"))?;
    let data = w.zeros::<u32>(4 * n)?;
    let mine = w.device_from_slice(&[me as u32 + 100; 4])?;
    w.barrier()?;
    for to in 0..n {
        module.launch(
            peer_put_kernels::ring_put,
            Grid::new(1, 1),
            (&data, &mine, to as u32),
        )?;
    }
    w.barrier()?;
    let got = w.read(&data)?;
    for r in 0..n {
        // The example writes only where it can store: a peer on this node.
        let want = if w.topology().reaches(r) {
            r as u32 + 100
        } else {
            0
        };
        assert_eq!(
            got[4 * r..4 * r + 4],
            [want; 4],
            "ring_put slot {r} on rank {me}"
        );
    }
    w.barrier()
}

/// Every check, in order, on world `w` (every rank calls it): each phase's end goes to
/// stderr with its time, so a run that stops says where.
pub fn checks<B: Backend>(w: &World<B>) -> symmem::Result<()> {
    let start = std::time::Instant::now();
    let phase = |name: &str, result: symmem::Result<()>| {
        eprintln!(
            "off-node checks: rank {}: {name} {} at {:.2?}",
            w.rank(),
            if result.is_ok() { "done" } else { "failed" },
            start.elapsed()
        );
        result
    };
    phase("tables", tables(w))?;
    phase("host put/get", host_put_get(w))?;
    phase("copies between peers", copies(w))?;
    phase("barriers", rma_ranks::barrier_rounds(w, 10))?;
    phase(
        "put with signal",
        rma_ranks::put_with_signal_rounds(w, &SIZES),
    )?;
    // Every thread's add to an off-node counter is one proxied request: small grids.
    let grids = [Grid::new(2, 8), Grid::new(3, 2)];
    phase("atomics", rma_ranks::atomic_rounds_on(w, grids, 16))?;
    phase("byte collectives", byte_collectives(w))?;
    phase("reductions", reductions(w))?;
    phase("examples", examples(w))
}

/// The line a rank that passed [`checks`] prints: `off-node checks: rank R of N on node
/// K of M: ok`.
pub fn ok_line<B: Backend>(w: &World<B>) -> String {
    let t = w.topology();
    format!(
        "off-node checks: rank {} of {} on node {} of {}: ok",
        w.rank(),
        w.world_size(),
        t.node_of(w.rank()).unwrap_or(0),
        t.nodes()
    )
}
