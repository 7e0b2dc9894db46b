//! Builds `kernels/` into GPU code objects, embedded by `src/main.rs`.

fn main() {
    symmem_build::KernelCrate::new("kernels")
        .build()
        .expect("building the GPU kernels");
}
