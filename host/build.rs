//! Builds symmem's own kernel crate (`crates/kernels`) into code objects with
//! `symmem-build`, as any application's `build.rs` does; `code_objects.rs` embeds them.

fn main() {
    symmem_build::KernelCrate::new("../crates/kernels")
        .build()
        .expect("building symmem's GPU kernels");
}
