//! The off-node engine under `mpirun`, with one machine split into emulated nodes
//! (`SYMMEM_RANKS_PER_NODE`): every rank of `engine-ranks` (built with `--features
//! mpi`; see its documentation for what it checks against host references) must print
//! its `ok` line and exit 0.
//!
//! * `-np 4` with 2 ranks per node (puts and gets through the MPI window, on-node peers
//!   through shared memory), and with 1 rank per node and the data staged through the
//!   ring as on a GPU heap (`SYMMEM_ENGINE_STAGING=1`: every request and its data as MPI
//!   messages). The other splits (every peer remote through the window, 8 ranks as 2
//!   nodes of 4) run the same checks over the local transport in `off_node_local.rs`,
//!   where only the wire differs: under `mpirun` on 2 cores they took 3 s and 13 s;
//! * on the CUDA backend (`engine-ranks --cuda`, the staging path of an MPI that is not
//!   CUDA-aware), `-np 2` and `-np 4` with 1 rank per node and `-np 4` with 2: these
//!   print `skipped: <reason>` and pass where no CUDA device answers (recorded runs on
//!   the H200: `BENCHMARKS.md`);
//! * the `fused-allreduce-rmsnorm` example as its own program (`--features mpi`, `--mpi`),
//!   its kernel unchanged, against its host reference: `-np 2` with every peer on another
//!   node, at 8 rows. Each element a peer's kernel reads off-node is one request, so four
//!   ranks take minutes under `mpirun` on 2 cores (3.8-4.7 min at 64 rows with every peer
//!   remote, 2-5 min as 2 nodes of 2); they run over the local transport instead, both
//!   ways (the example's `tests/emulated_nodes.rs`). The engine itself runs as 2 nodes of
//!   2 under `mpirun` above;
//! * the kill test: `engine-kill` at `-np 4` with 2 ranks per node (`mpirun` with
//!   recovery enabled, so that a dead rank does not take the job down): the last rank
//!   kills itself while the others wait for it on the device, and every survivor, on its
//!   node and on the other one, reports a typed error within its wait deadline.
//!
//! Without `mpirun` on PATH these tests fail, unless `SYMMEM_SKIP_MPI=1`.

use std::time::Duration;
use symmem_tests::mpi::{self, mpirun_available};

fn run(np: usize, per_node: usize, staged: bool) {
    run_on(np, per_node, staged, &[]);
}

fn run_cuda(np: usize, per_node: usize) {
    if let Some(why) = symmem_tests::processes::cuda_missing() {
        println!("skipped: no CUDA device ({why})");
        return;
    }
    run_on(np, per_node, false, &["--cuda"]);
}

fn run_on(np: usize, per_node: usize, staged: bool, args: &[&str]) {
    if !mpirun_available() {
        return;
    }
    let exe = mpi::build("symmem-tests", "mpi", "engine-ranks");
    let split = format!("SYMMEM_RANKS_PER_NODE={per_node}");
    let staging = format!("SYMMEM_ENGINE_STAGING={}", u8::from(staged));
    let run = mpi::mpirun(
        np,
        &["-x", &split, "-x", &staging],
        &exe,
        args,
        Duration::from_secs(300),
    );
    let all = run.all();
    assert!(
        run.status.success(),
        "mpirun -np {np} ({split}, {staging}): {}:\n{all}",
        run.status
    );
    let nodes = np / per_node;
    for rank in 0..np {
        let line = format!(
            "off-node checks: rank {rank} of {np} on node {} of {nodes}: ok",
            rank / per_node
        );
        assert!(run.stdout.contains(&line), "no `{line}`:\n{all}");
    }
}

#[test]
fn np4_two_nodes_of_two() {
    run(4, 2, false);
}

#[test]
fn np4_every_peer_on_another_node_staged() {
    run(4, 1, true);
}

#[test]
fn cuda_np2_every_peer_on_another_node() {
    run_cuda(2, 1);
}

#[test]
fn cuda_np4_every_peer_on_another_node() {
    run_cuda(4, 1);
}

#[test]
fn cuda_np4_two_nodes_of_two() {
    run_cuda(4, 2);
}

/// `engine-kill`'s wait deadline (its argument), and what a survivor may take beyond it.
const KILL_DEADLINE_S: f64 = 5.0;
const KILL_SLACK_S: f64 = 5.0;

#[test]
fn a_killed_rank_gives_every_other_node_a_typed_error() {
    if !mpirun_available() {
        return;
    }
    let exe = mpi::build("symmem-tests", "mpi", "engine-kill");
    let (np, per_node) = (4, 2);
    let split = format!("SYMMEM_RANKS_PER_NODE={per_node}");
    let run = mpi::mpirun(
        np,
        &["--mca", "orte_enable_recovery", "1", "-x", &split],
        &exe,
        &[&KILL_DEADLINE_S.to_string()],
        Duration::from_secs(60),
    );
    let all = run.all();
    for rank in 0..np - 1 {
        let prefix = format!("engine-kill: rank {rank}: typed error after ");
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("survivor {rank} reported no typed error:\n{all}"));
        let seconds: f64 = line[prefix.len()..]
            .split(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no time in `{line}`"));
        assert!(
            seconds <= KILL_DEADLINE_S + KILL_SLACK_S,
            "survivor {rank} waited {seconds} s (deadline {KILL_DEADLINE_S} s): {line}"
        );
        println!("{line}");
    }
}

/// The fused example under `mpirun`: every rank must print its line (its elements match
/// the example's host reference).
fn fused_example(np: usize, per_node: usize) {
    if !mpirun_available() {
        return;
    }
    let exe = mpi::build("fused-allreduce-rmsnorm", "mpi", "fused-allreduce-rmsnorm");
    let split = format!("SYMMEM_RANKS_PER_NODE={per_node}");
    let run = mpi::mpirun(
        np,
        &["-x", &split],
        &exe,
        &["--mpi", "--backend", "cpu", "--rows", "8"],
        Duration::from_secs(600),
    );
    let all = run.all();
    assert!(
        run.status.success(),
        "mpirun -np {np} ({split}): {}:\n{all}",
        run.status
    );
    let nodes = np / per_node;
    for rank in 0..np {
        let line = format!(
            "fused-allreduce-rmsnorm: rank {rank} of {np} on node {} of {nodes} on cpu: ",
            rank / per_node
        );
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with(&line) && l.ends_with("match the host reference")),
            "no `{line}...`:\n{all}"
        );
    }
}

#[test]
fn fused_example_np2_every_peer_on_another_node() {
    fused_example(2, 1);
}
