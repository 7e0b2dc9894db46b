//! Builds the fused-allreduce-rmsnorm example's kernels into GPU code objects, embedded
//! by `src/main.rs` (the same kernel crate, built for this binary).

fn main() {
    symmem_build::KernelCrate::new("../fused-allreduce-rmsnorm/kernels")
        .build()
        .expect("building the GPU kernels");
}
