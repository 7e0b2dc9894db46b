//! The LLVM IR library linked into every AMD code object.
//!
//! Inline `asm!` is unsupported on amdgcn and Rust has no spelling for LLVM's
//! `syncscope` or for the dispatch packet (a pointer in address space 4), so those few
//! operations are `alwaysinline` IR functions, generated here from tables, assembled
//! with llvm-as and linked under `-Clinker-plugin-lto`. They are declared in
//! `symmem-arch`'s `amdgpu` module as `extern "C"` functions of the same names.

use std::fmt::Write;

/// `(name, LLVM syncscope)` of every scoped fence: `symmem_amdgpu_fence_<name>`.
pub const FENCE_SCOPES: [(&str, &str); 3] = [
    ("workgroup", "syncscope(\"workgroup\") "),
    ("agent", "syncscope(\"agent\") "),
    ("system", ""),
];

/// The library's LLVM IR text for a target with data layout `data_layout`.
pub fn library(data_layout: &str) -> String {
    let mut ir = String::new();
    let w = &mut ir;
    wl(w, format_args!("target datalayout = \"{data_layout}\""));
    wl(w, format_args!("target triple = \"amdgcn-amd-amdhsa\""));
    wl(
        w,
        format_args!("declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()"),
    );
    // hsa_kernel_dispatch_packet_t: workgroup_size_x is a u16 at byte 4, grid_size_x (in
    // work-items) a u32 at byte 12. Both are invariant for the whole dispatch.
    wl(
        w,
        format_args!(
            "define linkonce_odr hidden i32 @symmem_amdgpu_block_dim_x() #0 {{\n\
         \x20 %p = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()\n\
         \x20 %q = getelementptr inbounds i8, ptr addrspace(4) %p, i64 4\n\
         \x20 %v = load i16, ptr addrspace(4) %q, align 4, !invariant.load !0\n\
         \x20 %r = zext i16 %v to i32\n\
         \x20 ret i32 %r\n}}"
        ),
    );
    wl(
        w,
        format_args!(
            "define linkonce_odr hidden i32 @symmem_amdgpu_grid_dim_x() #0 {{\n\
         \x20 %p = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()\n\
         \x20 %q = getelementptr inbounds i8, ptr addrspace(4) %p, i64 12\n\
         \x20 %g = load i32, ptr addrspace(4) %q, align 4, !invariant.load !0\n\
         \x20 %b = call i32 @symmem_amdgpu_block_dim_x()\n\
         \x20 %r = udiv i32 %g, %b\n\
         \x20 ret i32 %r\n}}"
        ),
    );
    for (name, scope) in FENCE_SCOPES {
        wl(
            w,
            format_args!(
                "define linkonce_odr hidden void @symmem_amdgpu_fence_{name}() #0 {{\n\
             \x20 fence {scope}seq_cst\n\
             \x20 ret void\n}}"
            ),
        );
    }
    wl(
        w,
        format_args!("attributes #0 = {{ alwaysinline nounwind }}"),
    );
    wl(w, format_args!("!0 = !{{}}"));
    ir
}

fn wl(w: &mut String, args: std::fmt::Arguments<'_>) {
    // Writing to a String cannot fail.
    let _ = w.write_fmt(args);
    w.push('\n');
}
