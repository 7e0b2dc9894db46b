//! The local transport's staging path on the CPU backend: with `SYMMEM_ENGINE_STAGING=1`
//! put and get data is staged through the ring and applied by the target's proxy, as on
//! a GPU heap, and every off-node check (`symmem_tests::off_node`) must still pass with
//! every peer on another node. One test in this binary, so the variable is set before
//! any thread reads the environment.

use std::time::Duration;
use symmem::backend::cpu::Cpu;
use symmem::transport::{ENV_ENGINE_STAGING, EnginePath};
use symmem::{Config, World};
use symmem_tests::off_node;

#[test]
fn cpu_four_ranks_every_peer_on_another_node_staged() {
    // SAFETY: the only test of this binary sets it before it starts any thread.
    unsafe { std::env::set_var(ENV_ENGINE_STAGING, "1") };
    let config = Config {
        heap_bytes: 64 << 20,
        wait_deadline: Duration::from_secs(20),
        ranks_per_node: Some(1),
        ..Config::default()
    };
    let results = symmem::spawn_ranks(
        4,
        &config,
        |_| Ok(Cpu::new()),
        |w: World<Cpu>| {
            assert_eq!(w.engine_path(), Some(EnginePath::Staged));
            off_node::checks(&w)?;
            w.finalize()
        },
    )
    .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        result.unwrap_or_else(|e| panic!("rank {rank}: {e} ({e:?})"));
    }
}
