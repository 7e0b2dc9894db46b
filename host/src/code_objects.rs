//! The GPU code objects built by `host/build.rs` and embedded in this crate, found by
//! module name and target processor.

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/code_objects.rs"));
}

/// An embedded code object: `.hsaco` ELF bytes for AMD processors, PTX text for NVIDIA.
#[derive(Clone, Copy, Debug)]
pub struct CodeObject {
    /// The kernel module it was built from (`symmem_device`).
    pub module: &'static str,
    /// The processor it runs on (`gfx942`, `gfx950`, `sm_90`).
    pub target: &'static str,
    /// Its bytes.
    pub bytes: &'static [u8],
}

/// Every embedded code object.
pub fn all() -> impl Iterator<Item = CodeObject> {
    embedded::CODE_OBJECTS
        .iter()
        .map(|&(module, target, bytes)| CodeObject {
            module,
            target,
            bytes,
        })
}

/// The code object of `module` built for processor `target`, if one is embedded.
pub fn find(module: &str, target: &str) -> Option<CodeObject> {
    all().find(|o| o.module == module && o.target == target)
}
