//! The example across emulated nodes without MPI: its ranks are threads, split one per
//! node (`SYMMEM_RANKS_PER_NODE=1`), so every peer's data its kernel reads travels
//! through the local off-node transport (`symmem::transport::local`); its kernel is
//! unchanged. It must say that its elements match its host reference.

#[test]
fn every_peer_on_another_node_matches_the_host_reference() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_fused-allreduce-rmsnorm"))
        .args(["--ranks", "4", "--backend", "cpu"])
        .env("SYMMEM_RANKS_PER_NODE", "1")
        .output()
        .expect("running the example");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success()
            && stdout.contains("fused-allreduce-rmsnorm: 4 ranks on cpu: ")
            && stdout.contains("match the host reference"),
        "{}:\n{stdout}\n{stderr}",
        output.status
    );
}
