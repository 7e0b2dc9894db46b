//! The fused kernel's code objects, for this example's binary and for other programs that
//! launch it (the `tp-mlp` example fuses its block's all-reduce with it): built once, by
//! this package's build script.

/// The kernels of `fused_allreduce_rmsnorm_kernels`, one code object per GPU target built.
pub static KERNELS: symmem::CodeObjects =
    symmem::include_kernels!("fused_allreduce_rmsnorm_kernels");

pub use fused_allreduce_rmsnorm_kernels as kernels;
