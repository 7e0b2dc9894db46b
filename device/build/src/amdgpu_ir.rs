//! The LLVM IR library linked into every AMD code object.
//!
//! Inline `asm!` is unsupported on amdgcn and Rust has no spelling for LLVM's
//! `syncscope` or for the dispatch packet (a pointer in address space 4), so those few
//! operations are `alwaysinline` IR functions, generated here from tables, assembled
//! with llvm-as and linked under `-Clinker-plugin-lto`. They are declared in
//! `symmem-arch`'s `amdgpu` module as `extern "C"` functions of the same names.

use std::fmt::Write;

/// `(name, LLVM syncscope)` of every scope: fences `symmem_amdgpu_fence_<name>`
/// (seq_cst) and `symmem_amdgpu_fence_release_<name>`, and the atomics' scope suffix.
pub const FENCE_SCOPES: [(&str, &str); 3] = [
    ("workgroup", "syncscope(\"workgroup\") "),
    ("agent", "syncscope(\"agent\") "),
    ("system", ""),
];

/// `(name, LLVM type, signed, alignment)` of every atomic element type.
pub const ATOMIC_TYPES: [(&str, &str, bool, u32); 4] = [
    ("u32", "i32", false, 4),
    ("i32", "i32", true, 4),
    ("u64", "i64", false, 8),
    ("i64", "i64", true, 8),
];

/// `(name, atomicrmw op for unsigned types, for signed types)` of every one-operand
/// read-modify-write.
pub const RMW_OPS: [(&str, &str, &str); 8] = [
    ("add", "add", "add"),
    ("sub", "sub", "sub"),
    ("xchg", "xchg", "xchg"),
    ("and", "and", "and"),
    ("or", "or", "or"),
    ("xor", "xor", "xor"),
    ("min", "umin", "min"),
    ("max", "umax", "max"),
];

/// `(name, read-modify-write ordering, cmpxchg failure ordering, load ordering, store
/// ordering)`: each symmem order as LLVM spells it for each kind of operation (a load
/// keeps the acquire half, a store the release half, a failed cmpxchg is a load).
pub const ATOMIC_ORDERS: [(&str, &str, &str, &str, &str); 5] = [
    (
        "relaxed",
        "monotonic",
        "monotonic",
        "monotonic",
        "monotonic",
    ),
    ("acquire", "acquire", "acquire", "acquire", "monotonic"),
    ("release", "release", "monotonic", "monotonic", "release"),
    ("acq_rel", "acq_rel", "acquire", "acquire", "release"),
    ("seq_cst", "seq_cst", "seq_cst", "seq_cst", "seq_cst"),
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
    // The constant-rate real-time counter (`s_memrealtime`, 100 MHz on gfx9), for the
    // deadlines of device waits. Volatile: each call reads it anew.
    wl(w, format_args!("declare i64 @llvm.amdgcn.s.memrealtime()"));
    wl(
        w,
        format_args!(
            "define linkonce_odr hidden i64 @symmem_amdgpu_realtime() #0 {{\n\
         \x20 %t = call i64 @llvm.amdgcn.s.memrealtime()\n\
         \x20 ret i64 %t\n}}"
        ),
    );
    // A call that is never inlined: rustc drops `#[inline(never)]` on amdgcn, but the
    // inliner honours `noinline` on a call site, and this one stays on the call when the
    // helper itself is inlined and `%f` becomes a known function.
    wl(
        w,
        format_args!(
            "define linkonce_odr hidden i64 @symmem_amdgpu_call_outlined(ptr %f, i64 %a, i64 %b, i64 %c, i64 %d, i64 %e, i64 %g) #0 {{\n\
         \x20 %r = call i64 %f(i64 %a, i64 %b, i64 %c, i64 %d, i64 %e, i64 %g) #1\n\
         \x20 ret i64 %r\n}}"
        ),
    );
    // `symmem_amdgpu_fence_<scope>` is seq_cst; `symmem_amdgpu_fence_release_<scope>`
    // only the release half (the write-back and the wait, no invalidate).
    for (name, scope) in FENCE_SCOPES {
        for (kind, order) in [("", "seq_cst"), ("release_", "release")] {
            wl(
                w,
                format_args!(
                    "define linkonce_odr hidden void @symmem_amdgpu_fence_{kind}{name}() #0 {{\n\
                 \x20 fence {scope}{order}\n\
                 \x20 ret void\n}}"
                ),
            );
        }
    }
    atomics(w);
    wl(
        w,
        format_args!("attributes #0 = {{ alwaysinline nounwind }}"),
    );
    wl(w, format_args!("attributes #1 = {{ noinline }}"));
    wl(w, format_args!("!0 = !{{}}"));
    ir
}

/// Every (type, op, order, scope) atomic function.
fn atomics(w: &mut String) {
    for (ty, llty, signed, align) in ATOMIC_TYPES {
        for (order, rmw, fail, load, store) in ATOMIC_ORDERS {
            for (scope, sync) in FENCE_SCOPES {
                let suffix = format!("{ty}_{order}_{scope}");
                for (op, unsigned_op, signed_op) in RMW_OPS {
                    let llop = if signed { signed_op } else { unsigned_op };
                    wl(
                        w,
                        format_args!(
                            "define linkonce_odr hidden {llty} @symmem_amdgpu_atomic_{op}_{suffix}(ptr %p, {llty} %v) #0 {{\n\
                         \x20 %r = atomicrmw {llop} ptr %p, {llty} %v {sync}{rmw}, align {align}\n\
                         \x20 ret {llty} %r\n}}"
                        ),
                    );
                }
                wl(
                    w,
                    format_args!(
                        "define linkonce_odr hidden {llty} @symmem_amdgpu_atomic_cas_{suffix}(ptr %p, {llty} %c, {llty} %n) #0 {{\n\
                     \x20 %x = cmpxchg ptr %p, {llty} %c, {llty} %n {sync}{rmw} {fail}, align {align}\n\
                     \x20 %r = extractvalue {{ {llty}, i1 }} %x, 0\n\
                     \x20 ret {llty} %r\n}}"
                    ),
                );
                wl(
                    w,
                    format_args!(
                        "define linkonce_odr hidden {llty} @symmem_amdgpu_atomic_load_{suffix}(ptr %p) #0 {{\n\
                     \x20 %r = load atomic {llty}, ptr %p {sync}{load}, align {align}\n\
                     \x20 ret {llty} %r\n}}"
                    ),
                );
                wl(
                    w,
                    format_args!(
                        "define linkonce_odr hidden void @symmem_amdgpu_atomic_store_{suffix}(ptr %p, {llty} %v) #0 {{\n\
                     \x20 store atomic {llty} %v, ptr %p {sync}{store}, align {align}\n\
                     \x20 ret void\n}}"
                    ),
                );
            }
        }
    }
}

fn wl(w: &mut String, args: std::fmt::Arguments<'_>) {
    // Writing to a String cannot fail.
    let _ = w.write_fmt(args);
    w.push('\n');
}
