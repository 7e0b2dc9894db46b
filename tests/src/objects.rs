//! Every kernel crate's embedded code objects the codegen tests read: symmem's own, both
//! builds (`symmem::backend::code_objects::KERNELS_ON_NODE`, what worlds on one node run, and
//! `KERNELS`, with the off-node engine), and every example's (built by `tests/build.rs`,
//! as the examples' build scripts build them). A new example is found on disk.

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
