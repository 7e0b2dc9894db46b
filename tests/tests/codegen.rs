//! Reads the embedded code objects (symmem's own and every example's,
//! `symmem_tests::objects::all`) and checks what the design depends on: every kernel a
//! crate declares with `#[kernel]` is exported on every target, and translated stores
//! stay 16-byte vector stores in the global address space (`global_store_dwordx4`, never
//! `flat_store`, on gfx942/gfx950; `st.global.v4` on sm_90) — in symmem's put, get and
//! copy, and in the examples' own translation (`peer_put_kernels::ring_put`, which
//! computes `p - bases[cur] + bases[to]` itself). A missing object, tool or kernel fails.

use symmem_tests::{llvm, objects};

const GPU_TARGETS: [&str; 3] = ["gfx942", "gfx950", "sm_90"];

/// The kernels crate `crate_name` declares (what `#[kernel]` recorded in this program).
fn declared(crate_name: &str) -> Vec<&'static str> {
    let names: Vec<_> = symmem_device::declarations()
        .filter(|d| d.crate_name == crate_name)
        .map(|d| d.name)
        .collect();
    assert!(!names.is_empty(), "{crate_name} declares no kernel");
    names
}

#[test]
fn every_crate_has_an_object_per_target_exporting_every_declared_kernel() {
    let mut crates = 0;
    for objects in objects::all() {
        crates += 1;
        let kernels = declared(objects.crate_name());
        for cpu in GPU_TARGETS {
            let bytes = objects
                .find(cpu)
                .unwrap_or_else(|| panic!("{}: no {cpu} object", objects.crate_name()));
            if cpu.starts_with("gfx") {
                assert_eq!(&bytes[..4], b"\x7fELF", "{cpu} is not ELF");
                let symbols = llvm::run_on("llvm-nm", &[], bytes);
                for kernel in &kernels {
                    for (symbol, kind) in [(kernel.to_string(), "T"), (format!("{kernel}.kd"), "R")]
                    {
                        assert!(
                            symbols
                                .lines()
                                .any(|l| l.ends_with(&format!(" {kind} {symbol}"))),
                            "{} {cpu}: {symbol} is not exported",
                            objects.crate_name()
                        );
                    }
                }
                // The IR library's helpers are inlined and gone: only kernels are global code.
                assert!(
                    !symbols.contains("symmem_amdgpu_"),
                    "{cpu}: IR helpers left behind"
                );
            } else {
                let text = String::from_utf8_lossy(bytes);
                assert!(text.contains(".target sm_90"), "not sm_90 PTX");
                assert!(!text.contains(".extern"), "unresolved external in the PTX");
                for kernel in &kernels {
                    assert!(
                        text.contains(&format!(".visible .entry {kernel}(")),
                        "{}: {kernel} is not a PTX entry",
                        objects.crate_name()
                    );
                }
            }
        }
        println!(
            "{}: {} kernels on {GPU_TARGETS:?}",
            objects.crate_name(),
            kernels.len()
        );
    }
    assert!(
        crates >= 3,
        "symmem's kernels and both examples' must be embedded"
    );
}

/// The kernels whose translated (or direct) copies must be 16-byte global stores:
/// `(crate, kernel)`.
const VECTOR_KERNELS: [(&str, &str); 4] = [
    ("symmem_kernels", "symmem_put"),
    ("symmem_kernels", "symmem_get"),
    ("symmem_kernels", "symmem_copy"),
    ("peer_put_kernels", "ring_put"),
];

#[test]
fn amd_translated_stores_are_global_dwordx4() {
    for cpu in ["gfx942", "gfx950"] {
        for (krate, kernel) in VECTOR_KERNELS {
            let body = llvm::amd_function(objects::object(krate, cpu), cpu, kernel);
            let stores: Vec<&String> = body.iter().filter(|l| l.contains("_store_")).collect();
            println!("{cpu} {krate}::{kernel}: {}", join(&stores));
            assert!(
                body.iter().any(|l| l.starts_with("global_store_dwordx4")),
                "{cpu} {kernel}: {stores:?}"
            );
            assert!(
                body.iter().any(|l| l.starts_with("global_load_dwordx4")),
                "{cpu} {kernel}"
            );
            assert!(
                !body.iter().any(|l| l.starts_with("flat_")),
                "{cpu} {kernel} uses flat accesses"
            );
        }
    }
}

#[test]
fn ptx_translated_stores_are_global_v4() {
    for (krate, kernel) in VECTOR_KERNELS {
        let body = llvm::ptx_entry(objects::object(krate, "sm_90"), kernel);
        let stores: Vec<&String> = body.iter().filter(|l| l.starts_with("st.")).collect();
        println!("sm_90 {krate}::{kernel}: {}", join(&stores));
        assert!(
            body.iter().any(|l| l.starts_with("st.global.v4.b32")),
            "{kernel}: {stores:?}"
        );
        assert!(
            body.iter().any(|l| l.starts_with("ld.global.v4.b32")),
            "{kernel}"
        );
        assert!(
            !body
                .iter()
                .any(|l| l.starts_with("st.b") || l.starts_with("st.v")),
            "{kernel}: generic store"
        );
    }
}

fn join(lines: &[&String]) -> String {
    lines
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" | ")
}
