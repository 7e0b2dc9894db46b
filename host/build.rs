//! Builds symmem's own kernel crate (`crates/kernels`) into code objects with
//! `symmem-build`, as any application's `build.rs` does, twice (with the off-node engine,
//! and without it for worlds on one node); `code_objects.rs` embeds both.

fn main() {
    symmem_build::KernelCrate::new("../crates/kernels")
        .build()
        .expect("building symmem's GPU kernels");
    // The same kernels without the off-node engine's code, for worlds on one node: their
    // RMA paths hold no call into the engine, whose registers would otherwise count
    // against every kernel's occupancy (`symmem_on_node` in `symmem-rma`).
    symmem_build::KernelCrate::new("../crates/kernels")
        .variant("symmem_kernels_on_node", "symmem_on_node")
        .build()
        .expect("building symmem's GPU kernels for one node");
}
