//! Reductions are the host's fold in rank order, bit for bit, on the backend under test
//! (issue 54; `symmem_tests::determinism`): every type, algorithm and count, two grids,
//! in place and out of place, on one node. (Emulated nodes and the fused kernel's batch
//! invariance: `tests/determinism.rs`, on the CPU.)

use super::TestBackend;
use symmem::backend::Backend;
use symmem::collectives::Collectives;
use symmem::{Config, Grid, World};
use symmem_tests::determinism::{assert_order_shows, check_all};

fn sums(n: usize) {
    let _one = super::app_memory::exclusive();
    let config = Config {
        heap_bytes: 32 << 20,
        ..Config::default()
    };
    let results = symmem::spawn_ranks(n, &config, super::make_backend, |w: World<TestBackend>| {
        // The backend's grid, and one of a block more (two threads a block, at least).
        let grid = w.backend().collective_grid();
        let grids = [
            Collectives::new(&w)?,
            Collectives::with_grid(&w, Grid::new(grid.blocks + 1, grid.threads.max(2)))?,
        ];
        check_all(&w, &grids)
    })
    .expect("spawning the ranks");
    for (rank, result) in results.into_iter().enumerate() {
        let shows = result.unwrap_or_else(|e| panic!("world {n}, rank {rank}: {e}"));
        assert_order_shows(n, shows);
    }
}

per_world! {
    sums;
}
