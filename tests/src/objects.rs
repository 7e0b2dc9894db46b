//! Every kernel crate's embedded code objects the codegen tests read: symmem's own, both
//! builds (`symmem::backend::code_objects::KERNELS_ON_NODE`, what worlds on one node run, and
//! `KERNELS`, with the off-node engine), and every example's (built by `tests/build.rs`,
//! as the examples' build scripts build them). A new example is found on disk.
//!
//! The targets the tests walk are the ones this build was asked for ([`targets`]):
//! `SYMMEM_GPU_TARGETS` as it was when the tests were compiled (`default`: symmem-build's
//! `DEFAULT_TARGETS`, as CI sets it), else the build machine's GPUs' (symmem-build's
//! `detected_targets`). Every crate must have an object for each of them
//! ([`object`] panics otherwise), so a default target that fails to build, or one the
//! checks have no expectations for ([`AmdCaches::of`], [`ptx_isa`]), fails the tests.

use symmem::CodeObjects;

// `extern crate` of every example's kernel crate: links their declarations.
include!(concat!(env!("OUT_DIR"), "/example_crates.rs"));

static EXAMPLES: &[&CodeObjects] = include!(concat!(env!("OUT_DIR"), "/examples.rs"));

/// symmem's own code objects (the one-node build first), then every example's.
pub fn all() -> impl Iterator<Item = &'static CodeObjects> {
    [
        &symmem::backend::code_objects::KERNELS_ON_NODE,
        &symmem::backend::code_objects::KERNELS,
    ]
    .into_iter()
    .chain(EXAMPLES.iter().copied())
}

/// The code objects of kernel crate `crate_name` (for symmem's own, the one-node build:
/// what worlds on one node run). Panics if none is embedded.
pub fn of(crate_name: &str) -> &'static CodeObjects {
    all()
        .find(|o| o.crate_name() == crate_name)
        .unwrap_or_else(|| panic!("no code objects of {crate_name} are embedded"))
}

/// The object of `crate_name` for `cpu`. Panics if there is none.
pub fn object(crate_name: &str, cpu: &str) -> &'static [u8] {
    of(crate_name)
        .find(cpu)
        .unwrap_or_else(|| panic!("no {cpu} code object of {crate_name}"))
}

/// The GPU targets every kernel crate of this build was built for, in order, without
/// repeats: `SYMMEM_GPU_TARGETS` when it was set as this crate was compiled (the build
/// scripts saw the same value; `default` is [`symmem_build::DEFAULT_TARGETS`]), else the
/// build machine's GPUs' ([`symmem_build::detected_targets`], which the build scripts
/// ran on this machine too).
pub fn targets() -> Vec<&'static str> {
    let names: Vec<&'static str> = match option_env!("SYMMEM_GPU_TARGETS") {
        Some(list) if list.trim() == symmem_build::ALL_DEFAULTS => {
            symmem_build::DEFAULT_TARGETS.to_vec()
        }
        Some(list) => list.split(',').map(str::trim).collect(),
        None => symmem_build::detected_targets()
            .into_iter()
            .map(|t| &*Box::leak(t.into_boxed_str()))
            .collect(),
    };
    let mut targets: Vec<&'static str> = Vec::new();
    for name in names {
        if !name.is_empty() && !targets.contains(&name) {
            targets.push(name);
        }
    }
    targets
}

/// The AMD targets of [`targets`] (`gfx…`).
///
/// # Panics
/// Where there is none: a check over them would pass having checked nothing.
pub fn amd_targets() -> Vec<&'static str> {
    of_kind("gfx", "AMD")
}

/// The NVIDIA targets of [`targets`] (`sm_…`).
///
/// # Panics
/// Where there is none, as [`amd_targets`].
pub fn ptx_targets() -> Vec<&'static str> {
    of_kind("sm_", "NVIDIA")
}

/// The targets of [`targets`] whose names start with `prefix`; panics, naming `vendor`
/// and how to build them, where there is none.
fn of_kind(prefix: &str, vendor: &str) -> Vec<&'static str> {
    let all = targets();
    let some: Vec<&'static str> = all
        .iter()
        .copied()
        .filter(|t| t.starts_with(prefix))
        .collect();
    assert!(
        !some.is_empty(),
        "this build has no {vendor} code object to check (its targets: {all:?}): build the \
         tests with SYMMEM_GPU_TARGETS=default (as CI does) to check every default target"
    );
    some
}

/// How an AMD processor keeps memory coherent beyond its own L2, which decides the
/// instructions LLVM emits for a scoped atomic or fence (LLVM's AMDGPUUsage, "Memory
/// Model GFX90A" and "Memory Model GFX942"), and so what the codegen checks expect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmdCaches {
    /// gfx90a (MI200): the L2 is coherent for the whole agent; coherence with other
    /// agents comes from the pages (fine-grained memory: local pages written through
    /// and probed, remote ones uncached) and from `buffer_wbl2`/`buffer_invl2` for the
    /// rest, and instructions carry no scope bits. A system-scope release is
    /// `buffer_wbl2` (no bits) then `s_waitcnt vmcnt(0)`; a system-scope acquire
    /// `buffer_invl2; buffer_wbinvl1_vol`; an agent-scope one `buffer_wbinvl1_vol` alone;
    /// an agent-scope release only waits for earlier accesses. Atomics that return a
    /// value and scoped loads carry `glc` (miss the L1).
    Gfx90a,
    /// gfx942, gfx950 (MI300, MI350): scope is in the instructions' `sc0`/`sc1` bits.
    /// An agent-scope release is `buffer_wbl2 sc1`, a system-scope one `buffer_wbl2 sc0
    /// sc1`, each then `s_waitcnt vmcnt(0)`; acquires are `buffer_inv` with the same
    /// bits; system-scope accesses carry `sc0 sc1`.
    Gfx94x,
}

impl AmdCaches {
    /// The model of processor `cpu`. Panics for a processor the codegen checks have no
    /// expectations for: a target is added to the defaults only once they do.
    pub fn of(cpu: &str) -> Self {
        match cpu {
            "gfx90a" => Self::Gfx90a,
            "gfx942" | "gfx950" => Self::Gfx94x,
            _ => panic!(
                "the codegen checks have no expectations for {cpu}'s memory model: add them \
                 (symmem_tests::objects::AmdCaches) before building for it"
            ),
        }
    }
}

/// The PTX ISA version (`.version`) the object for NVIDIA target `cpu` must declare:
/// the oldest LLVM accepts for the processor, never below 7.0 (rustc's floor for
/// nvptx64, above the 6.0 the inline PTX needs). Panics for a processor the checks have
/// no expectation for.
pub fn ptx_isa(cpu: &str) -> &'static str {
    match cpu {
        "sm_70" | "sm_72" | "sm_75" | "sm_80" => "7.0",
        "sm_86" => "7.1",
        "sm_87" => "7.4",
        "sm_89" | "sm_90" => "7.8",
        "sm_90a" => "8.0",
        "sm_100" | "sm_100a" | "sm_101" => "8.6",
        "sm_120" => "8.7",
        _ => panic!(
            "the codegen checks have no PTX ISA version for {cpu}: add it \
             (symmem_tests::objects::ptx_isa) before building for it"
        ),
    }
}
