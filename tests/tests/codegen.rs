//! Reads the embedded code objects (symmem's own and every example's,
//! `symmem_tests::objects::all`) for every GPU target of the build
//! (`symmem_tests::objects::targets`: `SYMMEM_GPU_TARGETS`, else symmem-build's
//! defaults) and checks what the design depends on: every kernel a crate declares with
//! `#[kernel]` is exported on every target, each PTX object declares its processor and
//! the PTX ISA version chosen for it and uses no instruction newer than its processor,
//! and translated stores stay 16-byte vector stores in the global address space
//! (`global_store_dwordx4`, never `flat_store`, on AMD; `st.global.v4` in PTX) — in
//! symmem's put, get and copy, and in the examples' own translation
//! (`peer_put_kernels::ring_put`, which computes `p - bases[cur] + bases[to]` itself). A
//! missing object, tool or kernel fails.

use symmem_tests::{llvm, objects};

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
    let targets = objects::targets();
    assert!(
        !targets.is_empty(),
        "this build has no GPU code object to check: build the tests with \
         SYMMEM_GPU_TARGETS=default (as CI does)"
    );
    let mut crates = 0;
    for objects in objects::all() {
        crates += 1;
        let built: Vec<&str> = objects.objects().iter().map(|&(cpu, _)| cpu).collect();
        assert_eq!(
            built,
            targets,
            "{}: the objects are not the build's targets",
            objects.crate_name()
        );
        let kernels = declared(objects.crate_name());
        for &cpu in &targets {
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
                let (target, version) = (
                    format!("\n.target {cpu}\n"),
                    format!("\n.version {}\n", objects::ptx_isa(cpu)),
                );
                assert!(text.contains(&target), "{cpu}: not {cpu} PTX");
                assert!(text.contains(&version), "{cpu}: not {version:?}");
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
            "{}: {} kernels on {targets:?}",
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
    for cpu in objects::amd_targets() {
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
    for cpu in objects::ptx_targets() {
        for (krate, kernel) in VECTOR_KERNELS {
            let body = llvm::ptx_entry(objects::object(krate, cpu), kernel);
            let stores: Vec<&String> = body.iter().filter(|l| l.starts_with("st.")).collect();
            println!("{cpu} {krate}::{kernel}: {}", join(&stores));
            assert!(
                body.iter().any(|l| l.starts_with("st.global.v4.b32")),
                "{cpu} {kernel}: {stores:?}"
            );
            assert!(
                body.iter().any(|l| l.starts_with("ld.global.v4.b32")),
                "{cpu} {kernel}"
            );
            assert!(
                !body
                    .iter()
                    .any(|l| l.starts_with("st.b") || l.starts_with("st.v")),
                "{cpu} {kernel}: generic store"
            );
        }
    }
}

/// PTX instructions (and special registers) that need a processor newer than sm_80, by
/// the prefix they start with and the oldest processor that has them (PTX ISA
/// reference, "Target ISA notes"). llc checks what it emits itself against the target;
/// inline PTX (`asm!`) it passes through unchecked, so this is where an instruction
/// that would fail the driver's JIT on an older GPU is caught.
const NEWER_THAN_SM80: [(&str, u32); 15] = [
    ("multimem.", 90),
    ("fence.proxy", 90),
    ("fence.mbarrier_init", 90),
    ("mbarrier.try_wait", 90),
    ("mbarrier.expect_tx", 90),
    ("cp.async.bulk", 90),
    ("cp.reduce.async.bulk", 90),
    ("st.async", 90),
    ("red.async", 90),
    ("barrier.cluster", 90),
    ("elect.sync", 90),
    ("setmaxnreg", 90),
    ("griddepcontrol", 90),
    ("wgmma.", 90),
    ("tcgen05.", 100),
];

/// Every PTX object uses only instructions its processor has: none of
/// [`NEWER_THAN_SM80`] that needs a newer one, no cluster special register before
/// sm_90, no `.cluster` scope before sm_90.
#[test]
fn ptx_uses_no_instruction_newer_than_its_target() {
    for cpu in objects::ptx_targets() {
        let sm: u32 = cpu
            .trim_start_matches("sm_")
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .parse()
            .unwrap_or_else(|e| panic!("{cpu}: {e}"));
        for objects in objects::all() {
            let bytes = objects
                .find(cpu)
                .unwrap_or_else(|| panic!("{}: no {cpu} object", objects.crate_name()));
            let text = std::str::from_utf8(bytes).expect("PTX is text");
            let mut seen = 0;
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or("");
                // One line may hold several instructions (inline PTX in braces).
                for insn in code.split([';', '{', '}']).map(str::trim) {
                    seen += usize::from(!insn.is_empty());
                    for (prefix, needs) in NEWER_THAN_SM80 {
                        assert!(
                            sm >= needs || !insn.starts_with(prefix),
                            "{cpu} {}: `{insn}` needs sm_{needs}",
                            objects.crate_name()
                        );
                    }
                    if sm < 90 {
                        assert!(
                            !insn.contains("%cluster") && !insn.contains(".cluster."),
                            "{cpu} {}: `{insn}` needs sm_90 (clusters)",
                            objects.crate_name()
                        );
                    }
                }
            }
            println!("{cpu} {}: {seen} statements", objects.crate_name());
        }
    }
}

fn join(lines: &[&String]) -> String {
    lines
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" | ")
}
