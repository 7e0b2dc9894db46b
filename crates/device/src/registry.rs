//! Every `#[kernel]` linked into a program, as declared: what tests compare code objects
//! with (the HIP kernel-argument layout in the code-object metadata, the exported names).
//!
//! `#[kernel]` places one [`Declaration`] per kernel in the ELF section
//! `symmem_kernels` of host builds on Linux; the linker gathers them and names the
//! section's bounds `__start_symmem_kernels` / `__stop_symmem_kernels`. Nothing is kept
//! by hand.

use crate::Slot;

/// One kernel as its `#[kernel]` declaration describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declaration {
    /// The crate that declares it (`CARGO_CRATE_NAME`).
    pub crate_name: &'static str,
    /// The exported name.
    pub name: &'static str,
    /// Each parameter's slots, in order (one for most, more for a view:
    /// [`crate::AbiTuple`]).
    pub slots: &'static [&'static [Slot]],
}

/// Keeps the section in every program that links this crate, even one that declares no
/// kernel (the linker names section bounds only for a section that exists).
#[used]
#[unsafe(link_section = "symmem_kernels")]
static PLACEHOLDER: Declaration = Declaration {
    crate_name: "",
    name: "",
    slots: &[],
};

/// Every kernel declared with `#[kernel]` in the crates linked into this program.
pub fn declarations() -> impl Iterator<Item = &'static Declaration> {
    unsafe extern "Rust" {
        #[link_name = "__start_symmem_kernels"]
        static START: Declaration;
        #[link_name = "__stop_symmem_kernels"]
        static STOP: Declaration;
    }
    // SAFETY: the linker places every `Declaration` of the section back to back (each is
    // a static of the same type, size and alignment) between the two bounds.
    let all = unsafe {
        let start = &raw const START;
        let stop = &raw const STOP;
        let count = (stop.addr() - start.addr()) / size_of::<Declaration>();
        core::slice::from_raw_parts(start, count)
    };
    core::hint::black_box(&PLACEHOLDER);
    all.iter().filter(|d| !d.name.is_empty())
}
