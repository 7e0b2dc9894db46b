//! The example across emulated nodes without MPI: its ranks are threads, split into nodes
//! by `SYMMEM_RANKS_PER_NODE`, so the peers' data its kernel reads on other nodes travels
//! through the local off-node transport (`symmem::transport::local`); its kernel is
//! unchanged. It must say that its elements match its host reference. (Under `mpirun`,
//! `symmem-tests`' `engine_mpi` runs it at `-np 2`, every peer remote.)

/// Runs the example at `ranks` ranks, `per_node` to a node, on the CPU backend, with 8
/// rows: each element a kernel reads on another node is one request through the engine,
/// and the default 64 rows took 22-27 s a run on 2 cores.
fn matches_the_host_reference(ranks: usize, per_node: usize) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_fused-allreduce-rmsnorm"))
        .args([
            "--ranks",
            &ranks.to_string(),
            "--backend",
            "cpu",
            "--rows",
            "8",
        ])
        .env("SYMMEM_RANKS_PER_NODE", per_node.to_string())
        .output()
        .expect("running the example");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success()
            && stdout.contains(&format!("fused-allreduce-rmsnorm: {ranks} ranks on cpu: "))
            && stdout.contains("match the host reference"),
        "{}:\n{stdout}\n{stderr}",
        output.status
    );
}

#[test]
fn every_peer_on_another_node_matches_the_host_reference() {
    matches_the_host_reference(4, 1);
}

#[test]
fn two_nodes_of_two_match_the_host_reference() {
    matches_the_host_reference(4, 2);
}
