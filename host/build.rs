//! Builds symmem's own kernel crate (`symmem-kernels`) into code objects with
//! `symmem-build`, as any application's `build.rs` does, twice (with the off-node engine,
//! and without it for worlds on one node), and a third time with NVSHMEM's device library
//! under feature `nvshmem`; `code_objects.rs` embeds them.

fn main() {
    // Where cargo put symmem-kernels' sources (this workspace, or the registry's cache):
    // its build script says so through its `links` key.
    let kernels = std::env::var("DEP_SYMMEM_KERNELS_SOURCE")
        .expect("symmem-kernels' build script sets DEP_SYMMEM_KERNELS_SOURCE");
    symmem_build::KernelCrate::new(&kernels)
        .build()
        .expect("building symmem's GPU kernels");
    // The same kernels without the off-node engine's code, for worlds on one node: their
    // RMA paths hold no call into the engine, whose registers would otherwise count
    // against every kernel's occupancy (feature `on-node` of `symmem-rma`).
    symmem_build::KernelCrate::new(&kernels)
        .variant("symmem_kernels_on_node", "on-node")
        .build()
        .expect("building symmem's GPU kernels for one node");
    // With symmem's feature `nvshmem`: the same kernels whose off-node path calls NVSHMEM's
    // device library, linked in (the install `SYMMEM_NVSHMEM_HOME` or `NVSHMEM_HOME` names),
    // for worlds whose transport is NVSHMEM (`transport::nvshmem`).
    if std::env::var_os("CARGO_FEATURE_NVSHMEM").is_some() {
        symmem_build::KernelCrate::new(&kernels)
            .variant("symmem_kernels_nvshmem", "nvshmem")
            .nvshmem()
            .build()
            .expect("building symmem's GPU kernels with NVSHMEM");
    }
}
