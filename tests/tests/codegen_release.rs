//! Release sequences in the AMD code objects (issue 18, item 1; issue 29 for gfx90a).
//!
//! A release at agent or system scope on gfx942/gfx950, and at system scope on gfx90a
//! (whose L2 serves the whole agent, so an agent-scope release there writes nothing
//! back), writes the L2 back (`buffer_wbl2`; `sc1`/`sc0 sc1` on gfx94x, no bits on
//! gfx90a) and must then wait for that write-back, which the vector-memory counter
//! counts, before the releasing store or atomic: `s_waitcnt vmcnt(0)`. Without the wait
//! a peer can see the flag before the data it releases. The sequences per processor are
//! `codegen_rma.rs`'s (`symmem_tests::objects::AmdCaches`); these tests walk every
//! write-back of every function, whatever the processor. LLVM 22's waitcnt pass
//! deleted that wait (llvm/llvm-project#178316, fixed in LLVM 23), so these tests read
//! what the toolchain actually emitted. Measured 2026-12-04: on nightly-2026-09-15 (LLVM
//! 23.1.1) all 135 write-backs of each object are waited for; on nightly-2026-05-20 (LLVM
//! 22.1.4) 130 of 254 are not (every one that releases a signal or a barrier arrival).
//!
//! gfx90a, measured 2026-12-04 on nightly-2026-09-15: all 304 write-backs of the one-node
//! object and all 354 of the full one are waited for (gfx942: 307 and 357).
//!
//! The code objects are every AMD one of every embedded kernel crate (symmem's own and
//! every example's, `symmem_tests::objects::all`, so a user's kernels built the same way
//! are walked too), for every AMD target of the build (`symmem_tests::objects::amd_targets`),
//! disassembled with llvm-tools' `llvm-objdump`; every function (every `<name>:` symbol)
//! is walked. A missing tool or object is a failure.

use std::sync::OnceLock;
use symmem_tests::llvm;

/// One disassembled function: its symbol and its instructions, comments cut.
struct Function {
    name: String,
    body: Vec<String>,
}

/// An embedded AMD code object, disassembled.
struct Object {
    crate_name: &'static str,
    /// symmem's build for worlds across nodes, which leaves the one-node collectives out
    /// (`symmem_kernels::one_node_only`).
    across_nodes: bool,
    cpu: &'static str,
    functions: Vec<Function>,
}

/// Every function of an AMD code object, in address order.
fn disassemble(cpu: &str, bytes: &[u8]) -> Vec<Function> {
    let mcpu = format!("--mcpu={cpu}");
    let text = llvm::run_on("llvm-objdump", &["-d", &mcpu], bytes);
    let mut functions: Vec<Function> = Vec::new();
    for line in text.lines() {
        // `0000000000034000 <symmem_barrier_all>:` opens a function.
        if let Some(name) = line
            .strip_suffix(">:")
            .and_then(|l| l.split_once(" <"))
            .map(|(_, name)| name)
        {
            functions.push(Function {
                name: name.to_owned(),
                body: Vec::new(),
            });
            continue;
        }
        let insn = line.split("//").next().unwrap_or("").trim();
        // Padding after the last instruction prints as `...`.
        if insn.is_empty() || insn == "..." || insn.starts_with("Disassembly of") {
            continue;
        }
        if let Some(f) = functions.last_mut() {
            f.body.push(insn.to_owned());
        }
    }
    functions
}

/// Every AMD code object the `symmem` crate embeds (ELF images; PTX is text),
/// disassembled once for all tests.
fn amd_objects() -> &'static [Object] {
    static OBJECTS: OnceLock<Vec<Object>> = OnceLock::new();
    OBJECTS.get_or_init(|| {
        let objects: Vec<Object> = symmem_tests::objects::all()
            .flat_map(|o| {
                let across_nodes = std::ptr::eq(o, &symmem::backend::code_objects::KERNELS);
                o.objects()
                    .iter()
                    .map(move |&(cpu, bytes)| (o.crate_name(), across_nodes, cpu, bytes))
            })
            .filter(|(_, _, _, bytes)| bytes.starts_with(b"\x7fELF"))
            .map(|(crate_name, across_nodes, cpu, bytes)| Object {
                crate_name,
                across_nodes,
                cpu,
                functions: disassemble(cpu, bytes),
            })
            .collect();
        // The project's own objects for every AMD target must be among them, or the test
        // proves nothing for that target.
        for cpu in symmem_tests::objects::amd_targets() {
            assert!(
                objects
                    .iter()
                    .any(|o| o.crate_name == "symmem_kernels" && o.cpu == cpu),
                "no embedded symmem_kernels object for {cpu}"
            );
        }
        objects
    })
}

fn mnemonic(insn: &str) -> &str {
    insn.split_whitespace().next().unwrap_or("")
}

fn words(insn: &str) -> Vec<&str> {
    insn.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .collect()
}

/// A wait that covers an outstanding write-back: the vector-memory counter at zero.
/// On gfx9 that is `s_waitcnt` with a `vmcnt(0)` field (alone or with `expcnt`/
/// `lgkmcnt`). `s_waitcnt_vscnt` (gfx10+) counts stores only and does not count: the
/// targets that have `buffer_wbl2` (gfx90a, gfx942, gfx950) count it with `vmcnt`.
fn waits_for_write_back(insn: &str) -> bool {
    mnemonic(insn) == "s_waitcnt" && words(insn).contains(&"vmcnt(0)")
}

/// An instruction that touches memory (vector, scalar or LDS), including the cache
/// write-backs and invalidates themselves.
fn is_memory(insn: &str) -> bool {
    let m = mnemonic(insn);
    [
        "global_",
        "flat_",
        "buffer_",
        "tbuffer_",
        "scratch_",
        "ds_",
        "image_",
        "s_load",
        "s_store",
        "s_buffer_",
        "s_atomic",
        "s_scratch_",
        "s_dcache_",
        "s_memtime",
        "s_memrealtime",
    ]
    .iter()
    .any(|p| m.starts_with(p))
}

/// A cache write-back or invalidate: part of a fence or of an atomic's ordering, not an
/// access of its own (`buffer_invl2` is gfx90a's L2 invalidate, `buffer_inv` gfx94x's).
fn is_cache_maintenance(insn: &str) -> bool {
    matches!(
        mnemonic(insn),
        "buffer_wbl2"
            | "buffer_inv"
            | "buffer_invl2"
            | "buffer_wbinvl1"
            | "buffer_wbinvl1_vol"
            | "buffer_gl0_inv"
            | "buffer_gl1_inv"
    )
}

/// An instruction that leaves straight-line code or ends the wave.
fn is_control(insn: &str) -> bool {
    let m = mnemonic(insn);
    m == "s_branch"
        || m.starts_with("s_cbranch")
        || m.starts_with("s_setpc")
        || m.starts_with("s_swappc")
        || m.starts_with("s_call")
        || m == "s_endpgm"
        || m == "s_trap"
        || m == "s_rfe_b64"
}

/// Where the write-back at `at` stands: `Ok(index of its wait)`, or `Err(index of the
/// instruction that came first, or body.len() at the end of the function)`.
///
/// Conservative about control flow: a branch, `s_endpgm` or the end of the function
/// before the wait is a failure (a wait on the branch target is not looked for; the
/// memory legalizer puts the wait right after the write-back, so there is no reason for
/// one to be elsewhere). An `s_barrier` before the wait is a failure too: other waves
/// may act on what they think is released.
fn wait_after(body: &[String], at: usize) -> Result<usize, usize> {
    for (j, insn) in body.iter().enumerate().skip(at + 1) {
        if waits_for_write_back(insn) {
            return Ok(j);
        }
        if is_memory(insn) || is_control(insn) || mnemonic(insn) == "s_barrier" {
            return Err(j);
        }
    }
    Err(body.len())
}

/// The lines `from..=to` (clamped), for failure messages.
fn excerpt(body: &[String], from: usize, to: usize) -> String {
    body[from..=to.min(body.len() - 1)].join("\n    ")
}

/// Every `buffer_wbl2` in every function of every embedded AMD code object is waited for
/// (`s_waitcnt vmcnt(0)`) before the next memory instruction, barrier or branch.
#[test]
fn amd_every_write_back_is_waited_for() {
    let mut failures = Vec::new();
    let mut total = 0;
    for object in amd_objects() {
        let mut checked = 0;
        let mut unwaited = 0;
        for f in &object.functions {
            for (at, insn) in f.body.iter().enumerate() {
                if mnemonic(insn) != "buffer_wbl2" {
                    continue;
                }
                checked += 1;
                if let Err(j) = wait_after(&f.body, at) {
                    unwaited += 1;
                    let next = f.body.get(j).map_or("the end of the function", |s| s);
                    failures.push(format!(
                        "{} {} {}: `{insn}` reaches `{next}` before any s_waitcnt vmcnt(0):\n    {}",
                        object.cpu,
                        object.crate_name,
                        f.name,
                        excerpt(&f.body, at, j)
                    ));
                }
            }
        }
        println!(
            "{} {}: {checked} write-backs in {} functions, {} waited for",
            object.cpu,
            object.crate_name,
            object.functions.len(),
            checked - unwaited
        );
        if object.crate_name == "symmem_kernels" {
            assert!(checked > 0, "{}: no release write-back found", object.cpu);
        }
        total += checked;
    }
    assert!(
        failures.is_empty(),
        "{} of {total} write-backs are not waited for; the first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(4)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The cache-policy bits of a `buffer_wbl2` (`sc1` agent, `sc0 sc1` system).
fn scope_bits(insn: &str) -> Vec<&str> {
    words(insn)
        .into_iter()
        .filter(|w| w.starts_with("sc") || *w == "nt")
        .collect()
}

/// Kernels in which one thread releases for its block after a block barrier (signals,
/// cross-rank barrier arrivals), each of which must show the per-wave release.
const BLOCK_RELEASERS: [&str; 9] = [
    "symmem_barrier_all",
    "symmem_rma_put_signal_add",
    "symmem_all_gather",
    "symmem_all_to_all",
    "symmem_broadcast",
    "symmem_all_reduce_one_shot_sum_f32",
    "symmem_all_reduce_two_shot_sum_bf16",
    "symmem_reduce_scatter_max_i32",
    "symmem_all_reduce_one_shot_min_i32",
];

/// A team's release covers every wave: wherever a write-back that releases an atomic
/// (a signal, a barrier arrival) follows an `s_barrier` in the same function, every wave
/// ran a write-back at least as wide, waited for it (`s_waitcnt vmcnt(0)`) and only then
/// reached that `s_barrier`, with no branch on the way (so no wave skips it). A release
/// by one wave after the barrier waits only for that wave's own stores.
#[test]
fn amd_block_release_waits_in_every_wave_before_the_barrier() {
    let mut failures = Vec::new();
    for object in amd_objects() {
        let mut shown = false;
        let mut checked = 0;
        for f in &object.functions {
            let mut in_function = 0;
            for (at, insn) in f.body.iter().enumerate() {
                if mnemonic(insn) != "buffer_wbl2" {
                    continue;
                }
                // Only write-backs that release an atomic or store (not a barrier); whether
                // they are waited for is amd_every_write_back_is_waited_for's business.
                // The fence's own cache maintenance (the invalidate of a seq_cst fence)
                // is not an access it releases.
                let Some(released) = f.body[at + 1..]
                    .iter()
                    .position(|l| {
                        (is_memory(l) && !is_cache_maintenance(l))
                            || is_control(l)
                            || mnemonic(l) == "s_barrier"
                    })
                    .map(|k| at + 1 + k)
                else {
                    continue;
                };
                if !is_memory(&f.body[released]) {
                    continue;
                }
                let Some(barrier) = f.body[..at]
                    .iter()
                    .rposition(|l| mnemonic(l) == "s_barrier")
                else {
                    continue; // A single thread's release; no block to cover.
                };
                checked += 1;
                in_function += 1;
                // Walk back from the barrier: the wait, then the write-back, with no
                // memory instruction between the wait and the barrier and no branch
                // anywhere between the write-back and the barrier.
                let mut wait_at = None;
                let mut ok = false;
                for k in (0..barrier).rev() {
                    let l = &f.body[k];
                    if is_control(l) || mnemonic(l) == "s_barrier" {
                        break;
                    }
                    if wait_at.is_none() {
                        if waits_for_write_back(l) {
                            wait_at = Some(k);
                        } else if is_memory(l) {
                            break;
                        }
                        continue;
                    }
                    if mnemonic(l) == "buffer_wbl2" {
                        let need = scope_bits(insn);
                        let have = scope_bits(l);
                        ok = need.iter().all(|b| have.contains(b));
                        break;
                    }
                }
                if !ok {
                    failures.push(format!(
                        "{} {} {}: `{insn}` releases after the s_barrier at line {barrier} without \
                         a per-wave write-back and wait before it:\n    {}",
                        object.cpu,
                        object.crate_name,
                        f.name,
                        excerpt(&f.body, barrier.saturating_sub(6), at + 2)
                    ));
                } else if !shown && f.name == "symmem_barrier_all" {
                    shown = true;
                    println!(
                        "{} {}:\n    {}\n    ...\n    {}",
                        object.cpu,
                        f.name,
                        excerpt(&f.body, barrier.saturating_sub(3), barrier + 1),
                        excerpt(&f.body, at, released)
                    );
                }
            }
            // The build across nodes leaves the one-node collectives' bodies out.
            if object.crate_name == "symmem_kernels"
                && BLOCK_RELEASERS.contains(&f.name.as_str())
                && !(object.across_nodes && symmem_kernels::one_node_only(&f.name))
            {
                assert!(
                    in_function > 0,
                    "{} {}: no release after a block barrier found:\n    {}",
                    object.cpu,
                    f.name,
                    f.body.join("\n    ")
                );
            }
        }
        println!(
            "{} {}: {checked} releases after a block barrier checked",
            object.cpu, object.crate_name
        );
    }
    assert!(
        failures.is_empty(),
        "{} releases after a block barrier do not cover every wave; the first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
