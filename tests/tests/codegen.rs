//! Reads the built code objects and checks the instructions the design depends on:
//! translated stores stay 16-byte vector stores in the global address space
//! (`global_store_dwordx4`, never `flat_store`, on gfx942/gfx950; `st.global.v4` on
//! sm_90), and every kernel is exported. A missing code object fails the test.

use std::path::PathBuf;
use std::process::Command;
use symmem::code_objects;
use symmem_device_build::{DEVICE_MODULE, Family, TARGETS};

const KERNELS: [&str; 3] = ["symmem_put", "symmem_get", "symmem_copy"];

fn llvm_bin() -> PathBuf {
    symmem_device_build::llvm_tools_bin(std::path::Path::new(env!("CARGO"))).expect("llvm-tools")
}

/// The code object's file in `target/code-objects`, where the build leaves it.
fn object_path(cpu: &str, ext: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    target
        .join("code-objects")
        .join(format!("{DEVICE_MODULE}-{cpu}.{ext}"))
}

/// llvm-objdump's disassembly of one kernel: the lines from its label to the next label.
fn amd_function(cpu: &str, kernel: &str) -> Vec<String> {
    let path = object_path(cpu, "hsaco");
    assert!(path.exists(), "missing code object {}", path.display());
    let out = Command::new(llvm_bin().join("llvm-objdump"))
        .args(["-d", &format!("--mcpu={cpu}")])
        .arg(&path)
        .output()
        .expect("llvm-objdump runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let label = format!("<{kernel}>:");
    let body: Vec<String> = text
        .lines()
        .skip_while(|l| !l.ends_with(&label))
        .skip(1)
        .take_while(|l| !l.ends_with(">:"))
        .map(|l| l.split("//").next().unwrap_or(l).trim().to_owned())
        .collect();
    assert!(!body.is_empty(), "{kernel} not found in {}", path.display());
    body
}

/// The PTX of one `.entry`, up to the next entry.
fn ptx_entry(cpu: &str, kernel: &str) -> Vec<String> {
    let path = object_path(cpu, "ptx");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let head = format!(".visible .entry {kernel}(");
    let body: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with(&head))
        .take_while(|l| l.starts_with(&head) || !l.starts_with(".visible .entry"))
        .map(|l| l.trim().to_owned())
        .collect();
    assert!(
        !body.is_empty(),
        "{kernel} is not a visible entry of {}",
        path.display()
    );
    body
}

#[test]
fn every_target_has_a_code_object_on_disk_and_embedded() {
    for target in TARGETS {
        let path = object_path(target.cpu, target.extension());
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let embedded = code_objects::find(DEVICE_MODULE, target.cpu).expect("embedded");
        assert_eq!(
            embedded.bytes,
            &on_disk[..],
            "{} differs from the embedded copy",
            target.cpu
        );
        match target.family {
            Family::Amdgpu => assert_eq!(&on_disk[..4], b"\x7fELF", "{} is not ELF", target.cpu),
            Family::Nvptx => assert!(String::from_utf8_lossy(&on_disk).contains(".target sm_90")),
        }
    }
}

#[test]
fn amd_translated_put_uses_global_dwordx4_stores() {
    for cpu in ["gfx942", "gfx950"] {
        for kernel in ["symmem_put", "symmem_get", "symmem_copy"] {
            let body = amd_function(cpu, kernel);
            let stores: Vec<&String> = body.iter().filter(|l| l.contains("_store_")).collect();
            println!(
                "{cpu} {kernel}: {}",
                stores
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
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
fn amd_kernels_are_exported_with_descriptors() {
    for cpu in ["gfx942", "gfx950"] {
        let out = Command::new(llvm_bin().join("llvm-nm"))
            .arg(object_path(cpu, "hsaco"))
            .output()
            .expect("llvm-nm runs");
        let symbols = String::from_utf8_lossy(&out.stdout);
        for kernel in KERNELS {
            assert!(
                symbols
                    .lines()
                    .any(|l| l.ends_with(&format!(" T {kernel}"))),
                "{cpu}: {kernel}"
            );
            assert!(
                symbols
                    .lines()
                    .any(|l| l.ends_with(&format!(" R {kernel}.kd"))),
                "{cpu}: {kernel}.kd"
            );
        }
        // The IR library's helpers are inlined and gone: only kernels are global code.
        assert!(
            !symbols.contains("symmem_amdgpu_"),
            "{cpu}: IR helpers left behind:\n{symbols}"
        );
    }
}

#[test]
fn ptx_translated_put_uses_global_v4_stores() {
    for kernel in KERNELS {
        let body = ptx_entry("sm_90", kernel);
        let stores: Vec<&String> = body.iter().filter(|l| l.starts_with("st.")).collect();
        println!(
            "sm_90 {kernel}: {}",
            stores
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        );
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
    let text = std::fs::read_to_string(object_path("sm_90", "ptx")).expect("ptx");
    assert!(!text.contains(".extern"), "unresolved external in the PTX");
}
