//! Codegen checks for `symmem-rma`: the scope of an atomic reaches the instruction, and
//! a translated put stays a 16-byte global vector store, on every GPU target of the
//! build (`symmem_tests::objects::targets`; each AMD one by its memory model,
//! `symmem_tests::objects::AmdCaches`).
//!
//! Reads the code objects of `symmem-kernels` embedded in the `symmem` crate (built by `host/build.rs`, so
//! they exist whenever this test compiles) and disassembles the AMD ones with
//! llvm-tools' `llvm-objdump`. A missing object, tool or function is a failure.

use symmem_tests::llvm;
use symmem_tests::objects::{AmdCaches, amd_targets, ptx_targets};

fn object(cpu: &str) -> &'static [u8] {
    symmem_tests::objects::object("symmem_kernels", cpu)
}

/// The instructions of function `name` in symmem's AMD code object for `cpu`.
fn amd_function(cpu: &str, name: &str) -> Vec<String> {
    llvm::amd_function(object(cpu), cpu, name)
}

/// The body of PTX entry `name` in symmem's code object for `cpu`.
fn ptx_entry(cpu: &str, name: &str) -> Vec<String> {
    llvm::ptx_entry(object(cpu), name)
}

/// Asserts that lines matching each pattern appear in this order; returns them.
fn in_order<'a>(
    lines: &'a [String],
    patterns: &[&dyn Fn(&str) -> bool],
    what: &str,
) -> Vec<&'a str> {
    let mut at = 0;
    let mut found = Vec::new();
    for (k, pattern) in patterns.iter().enumerate() {
        let i = lines[at..]
            .iter()
            .position(|l| pattern(l))
            .unwrap_or_else(|| {
                panic!(
                    "{what}: pattern {k} not found after line {at} in:\n{}",
                    lines.join("\n")
                )
            });
        found.push(lines[at + i].as_str());
        at += i + 1;
    }
    found
}

fn words(l: &str) -> Vec<&str> {
    l.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .collect()
}

fn has_bits(l: &str, bits: &[&str]) -> bool {
    let w = words(l);
    bits.iter().all(|b| w.contains(b))
}

fn check_amd_scopes(cpu: &str) {
    let probe = |scope: &str| amd_function(cpu, &format!("symmem_probe_atomic_add_u32_{scope}"));
    let is = |l: &str, m: &str| l.split_whitespace().next() == Some(m);

    let device = probe("device");
    let found = match AmdCaches::of(cpu) {
        AmdCaches::Gfx94x => in_order(
            &device,
            &[
                &|l| is(l, "buffer_wbl2") && has_bits(l, &["sc1"]) && !has_bits(l, &["sc0"]),
                &|l| is(l, "global_atomic_add") && !has_bits(l, &["sc1"]),
                &|l| is(l, "buffer_inv") && has_bits(l, &["sc1"]) && !has_bits(l, &["sc0"]),
            ],
            &format!("{cpu} device-scope acq_rel add"),
        ),
        // The agent's L2 is coherent for the agent: the release writes nothing back
        // (it waits for earlier accesses, of which the probe has none), the acquire
        // invalidates the L1 only.
        AmdCaches::Gfx90a => {
            assert!(
                !device
                    .iter()
                    .any(|l| is(l, "buffer_wbl2") || is(l, "buffer_invl2")),
                "{cpu} device-scope add must not write back or invalidate the L2:\n{}",
                device.join("\n")
            );
            in_order(
                &device,
                &[
                    &|l| is(l, "global_atomic_add"),
                    &|l| is(l, "s_waitcnt") && has_bits(l, &["vmcnt(0)"]),
                    &|l| is(l, "buffer_wbinvl1_vol"),
                ],
                &format!("{cpu} device-scope acq_rel add"),
            )
        }
    };
    println!("{cpu} device: {}", found.join(" | "));

    // The shorthand (`Team::atomic_fetch_add`) is system scope: a peer may be another GPU.
    for scope in ["system", "default"] {
        let body = probe(scope);
        let found = match AmdCaches::of(cpu) {
            AmdCaches::Gfx94x => in_order(
                &body,
                &[
                    &|l| is(l, "buffer_wbl2") && has_bits(l, &["sc0", "sc1"]),
                    &|l| is(l, "global_atomic_add") && has_bits(l, &["sc0", "sc1"]),
                    &|l| is(l, "buffer_inv") && has_bits(l, &["sc0", "sc1"]),
                ],
                &format!("{cpu} {scope}-scope acq_rel add"),
            ),
            // The whole L2 written back and waited for, the atomic, then the L2's
            // lines of other agents' memory and the L1 invalidated.
            AmdCaches::Gfx90a => in_order(
                &body,
                &[
                    &|l| is(l, "buffer_wbl2"),
                    &|l| is(l, "s_waitcnt") && has_bits(l, &["vmcnt(0)"]),
                    &|l| is(l, "global_atomic_add"),
                    &|l| is(l, "s_waitcnt") && has_bits(l, &["vmcnt(0)"]),
                    &|l| is(l, "buffer_invl2"),
                    &|l| is(l, "buffer_wbinvl1_vol"),
                ],
                &format!("{cpu} {scope}-scope acq_rel add"),
            ),
        };
        println!("{cpu} {scope}: {}", found.join(" | "));
    }

    let block = probe("block");
    let found = in_order(
        &block,
        &[&|l| is(l, "global_atomic_add") && !has_bits(l, &["sc1"])],
        &format!("{cpu} block-scope acq_rel add"),
    );
    assert!(
        !block.iter().any(|l| l.starts_with("buffer_")),
        "{cpu} block-scope add must be the bare atomic:\n{}",
        block.join("\n")
    );
    println!("{cpu} block: {}", found.join(" | "));
}

#[test]
fn amd_atomic_scope_reaches_the_instruction() {
    for cpu in amd_targets() {
        check_amd_scopes(cpu);
    }
}

#[test]
fn ptx_atomic_scope_reaches_the_instruction() {
    let scopes = [
        ("block", "cta"),
        ("device", "gpu"),
        ("system", "sys"),
        ("default", "sys"),
    ];
    for cpu in ptx_targets() {
        for (scope, ptx) in scopes {
            let body = ptx_entry(cpu, &format!("symmem_probe_atomic_add_u32_{scope}"));
            let want = format!("atom.acq_rel.{ptx}.global.add.u32");
            let line = body
                .iter()
                .find(|l| l.contains(&want))
                .unwrap_or_else(|| panic!("{cpu}: no `{want}` in:\n{}", body.join("\n")));
            assert!(
                !body.iter().any(|l| l.contains("fence.")),
                "{cpu}: acq_rel {scope} add needs no separate fence"
            );
            println!("{cpu} {scope}: {line}");
        }
    }
}

fn check_amd_put(cpu: &str) {
    for kernel in ["symmem_rma_put", "symmem_all_gather", "symmem_all_to_all"] {
        let body = amd_function(cpu, kernel);
        let store = body
            .iter()
            .find(|l| l.starts_with("global_store_dwordx4 "))
            .unwrap_or_else(|| {
                panic!(
                    "{cpu} {kernel}: no global_store_dwordx4 in:\n{}",
                    body.join("\n")
                )
            });
        // The only flat accesses left are the bounded waits' 8-byte words of the control
        // block (reached through a pointer global, whose address space is unknown); a
        // translated data store that fell back to flat would be 16 bytes or a byte.
        let flat: Vec<&String> = body.iter().filter(|l| l.starts_with("flat_")).collect();
        assert!(
            flat.iter().all(|l| l.contains("_dwordx2 ")),
            "{cpu} {kernel}: a translated access fell back to flat addressing: {flat:?}"
        );
        println!("{cpu} {kernel}: {store}");
    }
}

#[test]
fn amd_translated_put_is_a_global_vector_store() {
    for cpu in amd_targets() {
        check_amd_put(cpu);
    }
}

#[test]
fn ptx_translated_put_is_a_global_vector_store() {
    for cpu in ptx_targets() {
        for kernel in ["symmem_rma_put", "symmem_all_gather", "symmem_all_to_all"] {
            let body = ptx_entry(cpu, kernel);
            let store = body
                .iter()
                .find(|l| l.starts_with("st.global.v4."))
                .unwrap_or_else(|| {
                    panic!("{cpu} {kernel}: no st.global.v4 in:\n{}", body.join("\n"))
                });
            assert!(
                body.iter().any(|l| l.starts_with("ld.global.v4.")),
                "{cpu} {kernel}: the source side is not a 16-byte vector load"
            );
            println!("{cpu} {kernel}: {store}");
        }
    }
}

/// The longest run of `is_load` lines before the first `is_store` after it.
fn loads_before_store(
    body: &[String],
    is_load: &dyn Fn(&str) -> bool,
    is_store: &dyn Fn(&str) -> bool,
) -> usize {
    let mut best = 0;
    let mut run = 0;
    for l in body {
        if is_load(l) {
            run += 1;
        } else if is_store(l) {
            best = best.max(run);
            run = 0;
        }
    }
    best
}

/// A grid whose lanes each move several vectors keeps four 16-byte loads in flight
/// before their stores (the copy engine's unrolled loop), held in registers, not spilled.
#[test]
fn copy_loop_keeps_four_vector_loads_in_flight() {
    for kernel in ["symmem_rma_put", "symmem_all_gather", "symmem_all_to_all"] {
        for cpu in ptx_targets() {
            let body = ptx_entry(cpu, kernel);
            let n = loads_before_store(&body, &|l| l.starts_with("ld.global.v4."), &|l| {
                l.starts_with("st.global.v4.")
            });
            assert!(n >= 4, "{cpu} {kernel}: {n} vector loads before a store");
            assert!(
                !body.iter().any(|l| l.contains(".local")),
                "{cpu} {kernel}: local memory (a spill) in:\n{}",
                body.join("\n")
            );
        }
        for cpu in amd_targets() {
            let body = amd_function(cpu, kernel);
            let n = loads_before_store(&body, &|l| l.starts_with("global_load_dwordx4 "), &|l| {
                l.starts_with("global_store_dwordx4 ")
            });
            assert!(n >= 4, "{cpu} {kernel}: {n} vector loads before a store");
            assert!(
                !body
                    .iter()
                    .any(|l| l.starts_with("scratch_") || l.starts_with("buffer_store")),
                "{cpu} {kernel}: scratch (a spill) in:\n{}",
                body.join("\n")
            );
        }
    }
}

/// Every reduction kernel reads its peers 16 bytes at a time (the vector path) and keeps
/// its accumulators in registers: no local memory or scratch.
#[test]
fn reductions_read_16_byte_vectors_without_spills() {
    for shape in [
        "all_reduce_one_shot",
        "all_reduce_two_shot",
        "all_reduce_tables",
        "all_reduce_staged",
        "reduce_scatter",
    ] {
        for op in ["sum", "min", "max"] {
            for ty in ["f32", "bf16", "i32"] {
                let kernel = format!("symmem_{shape}_{op}_{ty}");
                for cpu in ptx_targets() {
                    let body = ptx_entry(cpu, &kernel);
                    assert!(
                        body.iter().any(|l| l.starts_with("ld.global.v4.")),
                        "{cpu} {kernel}: no 16-byte load"
                    );
                    assert!(
                        !body.iter().any(|l| l.contains(".local")),
                        "{cpu} {kernel}: local memory in:\n{}",
                        body.join("\n")
                    );
                }
                for cpu in amd_targets() {
                    let body = amd_function(cpu, &kernel);
                    assert!(
                        body.iter().any(|l| l.starts_with("global_load_dwordx4 ")),
                        "{cpu} {kernel}: no 16-byte load"
                    );
                    assert!(
                        !body.iter().any(|l| l.starts_with("scratch_")),
                        "{cpu} {kernel}: scratch in:\n{}",
                        body.join("\n")
                    );
                }
            }
        }
    }
}

/// Bounded waits (`symmem_rma::watch`) read the device clocks the design names and find
/// the control block through the module global the host sets: `%globaltimer` and a
/// visible `SYMMEM_CONTROL` in the PTX, `s_memrealtime` and an exported `SYMMEM_CONTROL`
/// in each AMD object.
#[test]
fn bounded_waits_read_the_device_clock_and_the_control_global() {
    for cpu in ptx_targets() {
        let ptx = std::str::from_utf8(object(cpu)).expect("PTX is text");
        assert!(
            ptx.contains("%globaltimer"),
            "{cpu}: no globaltimer read in the PTX"
        );
        assert!(
            ptx.contains(".visible .global .align 8 .b8 SYMMEM_CONTROL[8];"),
            "{cpu}: SYMMEM_CONTROL is not a visible global of the PTX"
        );
    }
    for cpu in amd_targets() {
        let text = llvm::run_on(
            "llvm-objdump",
            &["-d", &format!("--mcpu={cpu}")],
            object(cpu),
        );
        let reads = text
            .lines()
            .filter(|l| l.trim_start().starts_with("s_memrealtime"))
            .count();
        assert!(reads > 0, "{cpu}: no s_memrealtime");
        let symbols = llvm::run_on("llvm-nm", &["-D"], object(cpu));
        assert!(
            symbols.lines().any(|l| l.ends_with(" SYMMEM_CONTROL")),
            "{cpu}: SYMMEM_CONTROL is not exported"
        );
        println!("{cpu}: {reads} s_memrealtime reads");
    }
}

/// symmem's object for `cpu` with the off-node engine (`KERNELS`: worlds across nodes).
fn engine_object(cpu: &str) -> &'static [u8] {
    symmem::backend::code_objects::KERNELS
        .find(cpu)
        .unwrap_or_else(|| panic!("no {cpu} code object of symmem's engine build"))
}

/// Off-node requests read their ring's words from the module's copy, which the host sets
/// when it loads the module (`symmem_rma::engine::SYMMEM_ENGINE`, one `Ring` in device
/// memory), not from the ring in host memory through the control block: a visible global
/// of `Ring`'s size in the PTX that the ticket counter's address is loaded from, and an
/// exported symbol of that size in each AMD object.
#[test]
fn engine_requests_read_the_ring_from_a_module_global() {
    let bytes = size_of::<symmem_rma::engine::Ring>();
    let tickets = std::mem::offset_of!(symmem_rma::engine::Ring, tickets);
    for cpu in ptx_targets() {
        let ptx = std::str::from_utf8(engine_object(cpu)).expect("PTX is text");
        assert!(
            ptx.contains(&format!(
                ".visible .global .align 8 .b8 SYMMEM_ENGINE[{bytes}];"
            )),
            "{cpu}: SYMMEM_ENGINE is not a visible global of {bytes} bytes in the PTX"
        );
        let loads = ptx
            .lines()
            .filter(|l| {
                l.trim_start().starts_with("ld.global.b64")
                    && l.contains(&format!("[SYMMEM_ENGINE+{tickets}]"))
            })
            .count();
        assert!(
            loads > 0,
            "{cpu}: no load of the ticket counter's address from SYMMEM_ENGINE"
        );
        println!("{cpu}: {loads} loads of the ring's tickets word from SYMMEM_ENGINE");
    }
    for cpu in amd_targets() {
        let symbols = llvm::run_on("llvm-nm", &["-D", "-S"], engine_object(cpu));
        let size = symbols
            .lines()
            .find(|l| l.ends_with(" SYMMEM_ENGINE"))
            .and_then(|l| l.split_whitespace().nth(1))
            .map(|s| usize::from_str_radix(s, 16).expect("a hexadecimal size"));
        assert_eq!(
            size,
            Some(bytes),
            "{cpu}: SYMMEM_ENGINE's exported size:\n{symbols}"
        );
    }
}

/// The one symbol of AMD code object `bytes` whose (mangled) name contains `fragment`.
fn amd_symbol(bytes: &[u8], fragment: &str) -> String {
    let symbols = llvm::run_on("llvm-nm", &[], bytes);
    let mut named = symbols
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| s.contains(fragment));
    let symbol = named
        .next()
        .unwrap_or_else(|| panic!("no symbol like {fragment} in:\n{symbols}"));
    assert!(named.next().is_none(), "several symbols like {fragment}");
    symbol.to_owned()
}

/// A warp's staged put (`symmem_rma::engine::post_by`): the first lane takes the ticket,
/// the warp learns it from that lane, every lane releases its share of the staged bytes at
/// system scope before the warp's barrier, and only then does the first lane publish the
/// request with its release store of the slot's turn. In PTX: the ticket's `atom.add`,
/// two `shfl.sync.idx`, `fence.acq_rel.sys`, `bar.warp.sync`, then `st.release.sys`. On
/// AMD: the ticket's atomic add, `v_readfirstlane` of it, then a release fence at system
/// scope by the wave (a cache write-back and a wait for every lane's stores) before the
/// first lane's own release fence and store.
#[test]
fn a_warps_staged_put_releases_every_lane_before_the_first_publishes() {
    let name = "put_through_ring";
    for cpu in ptx_targets() {
        let body = llvm::ptx_function(engine_object(cpu), name);
        let found = in_order(
            &body,
            &[
                &|l| l.contains("atom.relaxed.gpu.global.add.u64"),
                &|l| l.starts_with("shfl.sync.idx.b32"),
                &|l| l.starts_with("shfl.sync.idx.b32"),
                &|l| l == "fence.acq_rel.sys;",
                &|l| l.starts_with("bar.warp.sync"),
                &|l| l.contains("st.release.sys.global.b64"),
            ],
            &format!("{cpu} {name}"),
        );
        println!("{cpu}: {found:?}");
    }
    for cpu in amd_targets() {
        let symbol = amd_symbol(engine_object(cpu), name);
        let body = llvm::amd_function(engine_object(cpu), cpu, &symbol);
        let found = in_order(
            &body,
            &[
                &|l| l.contains("atomic_add_x2"),
                &|l| l.starts_with("v_readfirstlane_b32"),
                &|l| l.starts_with("buffer_wbl2"),
                &|l| l.starts_with("s_waitcnt vmcnt(0)"),
                &|l| l.starts_with("buffer_wbl2"),
                &|l| l.starts_with("s_waitcnt vmcnt(0)"),
                &|l| l.contains("store_dwordx2"),
            ],
            &format!("{cpu} {name}"),
        );
        println!("{cpu}: {found:?}");
    }
}

/// The barrier-free all-reduce (`symmem_rma::lamport`) publishes its data and polls for
/// it in 16 bytes at system scope, without going through the flat address space: in PTX
/// one volatile (relaxed, system) 16-byte global store per peer and 16-byte volatile
/// global loads; on AMD 8-byte global stores and loads, no flat 16-byte access and no
/// scratch. On gfx942/gfx950 they carry `sc0 sc1` (a plain store could wait in the
/// writer's L2, and a volatile access stays flat: LLVM's address space inference skips
/// it). On gfx90a no instruction bit has a system scope: the loads carry `glc` (they miss
/// the L1, so a poll sees a new value), and the stores are plain, which reach a peer
/// because the heap is fine-grained memory (another GPU's pages uncached, the local ones
/// probed): LLVM's own sequence for a relaxed system-scope store and load there.
#[test]
fn lamport_publishes_and_polls_at_system_scope_in_global_memory() {
    for ty in ["f32", "bf16"] {
        let kernel = format!("symmem_all_reduce_lamport_sum_{ty}");
        for cpu in ptx_targets() {
            let body = ptx_entry(cpu, &kernel);
            for (what, prefix) in [
                ("publish", "st.volatile.global.v4."),
                ("poll", "ld.volatile.global.v"),
                ("tail publish", "st.relaxed.sys.global.b32"),
            ] {
                assert!(
                    body.iter().any(|l| l.contains(prefix)),
                    "{cpu} {kernel}: no {what} ({prefix}) in:\n{}",
                    body.join("\n")
                );
            }
        }
        for cpu in amd_targets() {
            let body = amd_function(cpu, &kernel);
            let (store_bits, load_bits): (&[&str], &[&str]) = match AmdCaches::of(cpu) {
                AmdCaches::Gfx94x => (&["sc0", "sc1"], &["sc0", "sc1"]),
                AmdCaches::Gfx90a => (&[], &["glc"]),
            };
            let count = |op: &str, bits: &[&str]| {
                body.iter()
                    .filter(|l| l.starts_with(op) && has_bits(l, bits))
                    .count()
            };
            assert!(
                count("global_store_dwordx2 ", store_bits) >= 2
                    && count("global_load_dwordx2 ", load_bits) >= 2,
                "{cpu} {kernel}: no 8-byte system-scope global publish ({store_bits:?}) and \
                 poll ({load_bits:?}) in:\n{}",
                body.join("\n")
            );
            assert!(
                !body.iter().any(|l| l.starts_with("flat_load_dwordx4")
                    || l.starts_with("flat_store_dwordx4")
                    || l.starts_with("scratch_")),
                "{cpu} {kernel}: a flat 16-byte access or scratch in:\n{}",
                body.join("\n")
            );
        }
    }
}

/// The build for worlds across nodes (`KERNELS`) leaves out the one-node collectives'
/// bodies and nothing else (`symmem_rma::ONE_NODE_KERNELS`): in every PTX object, each
/// declared kernel of symmem's calls the recorder of a one-node launch exactly where
/// `symmem_kernels::one_node_only` names it, and keeps no block barrier there, while the
/// one-node build's same entry does its work (a barrier, and no such call). On AMD, one
/// kernel of each one-node family: no `s_barrier` in the build across nodes, one in the
/// one-node build.
#[test]
fn the_build_across_nodes_leaves_out_exactly_the_one_node_collectives() {
    let names: Vec<&str> = symmem_device::declarations()
        .filter(|d| d.crate_name == "symmem_kernels")
        .map(|d| d.name)
        .collect();
    let one_node = names
        .iter()
        .filter(|n| symmem_kernels::one_node_only(n))
        .count();
    assert!(one_node >= 75, "only {one_node} one-node kernels declared");
    let across = &symmem::backend::code_objects::KERNELS;
    let records = |body: &[String]| {
        body.iter()
            .any(|l| l.starts_with("call") && l.contains("one_node_kernel_launched"))
    };
    let barrier = |body: &[String]| body.iter().any(|l| l.starts_with("bar.sync"));
    for cpu in ptx_targets() {
        let (general, on_node) = (across.find(cpu).expect("an object"), object(cpu));
        for name in &names {
            let body = llvm::ptx_entry(general, name);
            if symmem_kernels::one_node_only(name) {
                assert!(
                    records(&body) && !barrier(&body),
                    "{cpu} {name}: not left out of the build across nodes:\n{}",
                    body.join("\n")
                );
                let kept = llvm::ptx_entry(on_node, name);
                assert!(
                    barrier(&kept) && !records(&kept),
                    "{cpu} {name}: the one-node build lacks its body:\n{}",
                    kept.join("\n")
                );
            } else {
                assert!(
                    !records(&body),
                    "{cpu} {name}: left out of the build across nodes"
                );
            }
        }
    }
    for cpu in amd_targets() {
        let general = across.find(cpu).expect("an object");
        for name in [
            "symmem_all_reduce_one_shot_sum_f32",
            "symmem_all_reduce_two_shot_max_bf16",
            "symmem_reduce_scatter_min_i32",
            "symmem_all_reduce_tables_sum_f64",
            "symmem_all_reduce_staged_sum_f16",
            "symmem_all_reduce_lamport_sum_f32",
        ] {
            assert!(symmem_kernels::one_node_only(name), "{name}");
            let barrier = |body: &[String]| body.iter().any(|l| l.starts_with("s_barrier"));
            assert!(
                !barrier(&llvm::amd_function(general, cpu, name)),
                "{cpu} {name}: kept"
            );
            assert!(
                barrier(&amd_function(cpu, name)),
                "{cpu} {name}: one-node build lacks it"
            );
        }
    }
}
