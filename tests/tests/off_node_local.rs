//! The off-node path without MPI: ranks as threads of this test, split into emulated
//! nodes (`Config::ranks_per_node`), reach peers on other nodes through the local
//! transport (`symmem::transport::local`: the proxy and its ring, over the ranks' shared
//! memory). Every check `engine-ranks` runs under `mpirun` (`symmem_tests::off_node`)
//! runs here in plain `cargo test`:
//!
//! * 4 ranks as 2 nodes of 2, as 4 nodes of 1 (every peer remote), and 8 ranks as 2
//!   nodes of 4, on the CPU backend (puts and gets one-sided into the peer's heap);
//! * on CUDA, where a device answers, the local transport refuses thread-ranks split into
//!   nodes with `Error::NoEngine` (see `cuda_is_refused`; under `mpirun`, a process per
//!   rank, the checks pass on the H200); `skipped: <reason>` where none answers;
//! * the fused example runs the same way in its own test
//!   (`examples/fused-allreduce-rmsnorm/tests/emulated_nodes.rs`).
//!
//! `off_node_local_staged.rs` runs the CPU checks with the data staged as on a GPU.

use std::time::Duration;
use symmem::backend::Backend;
use symmem::backend::cpu::Cpu;
use symmem::backend::cuda::Cuda;
use symmem::{Config, Error, Result, World};
use symmem_tests::off_node;

fn config(per_node: usize) -> Config {
    Config {
        heap_bytes: 64 << 20,
        // A device wait that cannot finish ends the run with its error, not a hang.
        wait_deadline: Duration::from_secs(20),
        ranks_per_node: Some(per_node),
        ..Config::default()
    }
}

/// Runs every off-node check on `n` ranks of `per_node` per node; every rank must pass.
fn run<B: Backend>(n: usize, per_node: usize, make: impl Fn(usize) -> Result<B> + Sync) {
    let results = symmem::spawn_ranks(n, &config(per_node), make, |w: World<B>| {
        off_node::checks(&w)?;
        let line = off_node::ok_line(&w);
        w.finalize()?;
        Ok(line)
    })
    .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        let line = result.unwrap_or_else(|e| panic!("rank {rank}: {e} ({e:?})"));
        let want = format!(
            "off-node checks: rank {rank} of {n} on node {} of {}: ok",
            rank / per_node,
            n / per_node
        );
        assert_eq!(line, want);
    }
}

fn run_cpu(n: usize, per_node: usize) {
    run(n, per_node, |_| Ok(Cpu::new()));
}

/// On CUDA the local transport refuses thread-ranks split into nodes with a typed error:
/// on the H200 (2026-12-04) they stalled, every rank and every rank's proxy sharing one
/// CUDA context, a rank's `cuMemFree` holding the driver's lock that its proxy's
/// `cuLaunchKernel` waited for while a peer's kernel waited for that proxy, until the
/// wait deadline (host stacks: `BENCHMARKS.md`, issue 28). Prints `skipped: <reason>` where
/// no CUDA device answers.
fn cuda_is_refused(n: usize, per_node: usize) {
    if let Some(why) = symmem_tests::processes::cuda_missing() {
        println!("skipped: no CUDA device ({why})");
        return;
    }
    let results = symmem::spawn_ranks(n, &config(per_node), |_| Cuda::new(0), |_w| Ok(()))
        .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        assert!(
            matches!(result, Err(Error::NoEngine(_))),
            "rank {rank}: {result:?}"
        );
    }
}

#[test]
fn cpu_four_ranks_as_two_nodes_of_two() {
    run_cpu(4, 2);
}

#[test]
fn cpu_four_ranks_every_peer_on_another_node() {
    run_cpu(4, 1);
}

#[test]
fn cpu_eight_ranks_as_two_nodes_of_four() {
    run_cpu(8, 4);
}

#[test]
fn cuda_two_ranks_every_peer_on_another_node_is_refused() {
    cuda_is_refused(2, 1);
}

#[test]
fn cuda_four_ranks_as_two_nodes_of_two_is_refused() {
    cuda_is_refused(4, 2);
}

/// Across nodes, an all-reduce uploads its table of copies on every call, which a graph
/// cannot record: a capture of one is refused naming the reduction (not an allocation or
/// a write the user did not make), and the world works after it. Found by the fault
/// soak's graphs on emulated nodes.
#[test]
fn a_reduction_across_nodes_refuses_a_capture() {
    use symmem::collectives::{Algorithm, Collectives, ReduceOp};
    let results = symmem::spawn_ranks(
        4,
        &config(2),
        |_| Ok(Cpu::new()),
        |w: World<Cpu>| {
            let c = Collectives::new(&w)?;
            let src = w.from_slice(&[w.rank() as i32 + 1; 16])?;
            let dst = w.zeros::<i32>(16)?;
            w.barrier()?;
            let refused = w
                .capture(|| c.all_reduce(&dst, &src, 16, ReduceOp::Sum, Algorithm::Auto))
                .map(|_| ());
            c.all_reduce(&dst, &src, 16, ReduceOp::Sum, Algorithm::Auto)?;
            let sum = w.read(&dst)?;
            drop((c, src, dst));
            w.finalize()?;
            Ok((refused, sum))
        },
    )
    .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        let (refused, sum) = result.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert!(
            matches!(
                refused,
                Err(Error::Capturing {
                    call: "an all-reduce or reduce-scatter across nodes"
                })
            ),
            "rank {rank}: {refused:?}"
        );
        assert_eq!(sum, vec![1 + 2 + 3 + 4; 16], "rank {rank}");
    }
}

/// A put with signal to a rank on another node may free its source when the call returns
/// (its doc's promise): the engine's proxy must have read it by then. The fault soak found
/// a proxy reading a source its caller had freed (SIGSEGV), with the put part posted
/// without waiting; 1 MiB sources are their own mappings, unmapped when dropped.
#[test]
fn a_put_with_signal_across_nodes_may_free_its_source_on_return() {
    use symmem::collectives::{Cmp, Collectives};
    const N: usize = 1 << 18;
    let results = symmem::spawn_ranks(
        2,
        &config(1),
        |_| Ok(Cpu::new()),
        |w: World<Cpu>| {
            let c = Collectives::new(&w)?;
            let dst = w.zeros::<u32>(N)?;
            let sig = w.zeros::<u64>(1)?;
            w.barrier()?;
            let (me, to) = (w.rank(), 1 - w.rank());
            for round in 1..=8u32 {
                let src = w.device_from_slice(&vec![round * 10 + me as u32; N])?;
                c.put_with_signal(&dst, 0, &src, &sig, 0, 1, to)?;
                drop(src);
                c.signal_wait_until_from(&sig, 0, to, Cmp::Ge, u64::from(round))?;
                let got = w.read(&dst)?;
                if got.iter().any(|&v| v != round * 10 + to as u32) {
                    return Ok(Some(round));
                }
                w.barrier()?;
            }
            drop((c, dst, sig));
            w.finalize()?;
            Ok(None)
        },
    )
    .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        let wrong = result.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(wrong, None, "rank {rank}: wrong data in that round");
    }
}
