//! Code objects: what a kernel crate's build produced, embedded in the program, and
//! what a backend made of them once loaded.
//!
//! A kernel crate declares kernels with `#[kernel]` (`symmem-device`); the application's
//! `build.rs` builds it with `symmem-build`, and [`include_kernels!`](crate::include_kernels)
//! embeds the code objects as a [`CodeObjects`]. symmem's own kernels (`symmem-kernels`)
//! are built and embedded the same way, by `host/build.rs`: [`KERNELS`] and
//! [`KERNELS_ON_NODE`].

use super::Backend;
use super::ModuleTransport;
use crate::error::Result;
use std::sync::Arc;

/// The code objects of one kernel crate, one per GPU target, embedded in the binary by
/// [`include_kernels!`](crate::include_kernels).
#[derive(Debug)]
pub struct CodeObjects {
    crate_name: &'static str,
    objects: &'static [(&'static str, &'static [u8])],
}

impl CodeObjects {
    /// The code objects `objects` (`(processor, bytes)`: `.hsaco` ELF for `gfx*`, PTX
    /// text for `sm_*`) of kernel crate `crate_name` (its name with `_` for `-`).
    pub const fn new(
        crate_name: &'static str,
        objects: &'static [(&'static str, &'static [u8])],
    ) -> Self {
        Self {
            crate_name,
            objects,
        }
    }

    /// The kernel crate they were built from.
    pub const fn crate_name(&self) -> &'static str {
        self.crate_name
    }

    /// Every `(processor, bytes)` pair, in build order.
    pub fn objects(&self) -> &'static [(&'static str, &'static [u8])] {
        self.objects
    }

    /// The object built for `processor` (`gfx942`, `sm_90`), if there is one.
    pub fn find(&self, processor: &str) -> Option<&'static [u8]> {
        self.objects
            .iter()
            .find(|(p, _)| *p == processor)
            .map(|(_, bytes)| *bytes)
    }
}

/// Embeds the code objects that `symmem_build::KernelCrate` built for kernel crate
/// `$name` (its crate name, `_` for `-`) in this crate's `build.rs`, as a
/// [`CodeObjects`]: `static KERNELS: symmem::CodeObjects = symmem::include_kernels!("my_kernels");`
/// With a second name, the objects of the variant built under that name
/// (`KernelCrate::variant`), still the kernels of crate `$name`.
#[macro_export]
macro_rules! include_kernels {
    ($name:literal) => {
        $crate::include_kernels!($name, $name)
    };
    ($name:literal, $variant:literal) => {
        $crate::backend::CodeObjects::new(
            $name,
            include!(concat!(
                env!("OUT_DIR"),
                "/symmem-kernels/",
                $variant,
                ".rs"
            )),
        )
    };
}

/// `symmem-kernels` for every GPU target (symmem-build's defaults: `gfx90a`, `gfx942`,
/// `gfx950`, `sm_80`): what a world
/// that spans nodes loads for its own operations (`World::kernels`), and the
/// off-node engine's target side for its atomics on a GPU heap. It leaves out the bodies of
/// the one-node collectives, which a world across nodes never launches
/// (`symmem_rma::ONE_NODE_KERNELS`, `symmem_kernels::one_node_only`).
pub static KERNELS: CodeObjects = crate::include_kernels!("symmem_kernels");

/// The same kernels built without the off-node engine (feature `on-node`): what a
/// world on one node loads. No RMA path there calls into the engine, so each kernel's
/// registers are its own on-node code's.
pub static KERNELS_ON_NODE: CodeObjects =
    crate::include_kernels!("symmem_kernels", "symmem_kernels_on_node");

/// The same kernels built with NVSHMEM's device library (symmem's feature `nvshmem`):
/// what a world whose off-node transport is NVSHMEM loads. Their off-node requests call
/// NVSHMEM; everything else is [`KERNELS`]'.
#[cfg(feature = "nvshmem")]
pub static KERNELS_NVSHMEM: CodeObjects =
    crate::include_kernels!("symmem_kernels", "symmem_kernels_nvshmem");

/// A kernel crate's code objects loaded on one rank's device, with its bounded waits
/// pointed at the rank's control block. A world keeps it until it goes, as a loaded
/// module's kernels may still run.
pub(crate) struct Loaded<B: Backend> {
    pub(crate) objects: &'static CodeObjects,
    pub(crate) module: B::Module,
}

impl<B: Backend> Loaded<B> {
    /// Loads `objects` and points its kernels' bounded waits at `control`, the world's
    /// control block, and their off-node requests at `transport`, the world's (which
    /// the world keeps alive as long as the module, and stops before unloading it).
    pub(crate) fn new(
        backend: &B,
        objects: &'static CodeObjects,
        control: &B::Shared,
        transport: Option<&dyn ModuleTransport>,
    ) -> Result<Arc<Self>> {
        let mut module = backend.load_module(objects)?;
        // SAFETY: `control` is the world's control block, initialised by it, and
        // `transport` its transport; both are freed only after the world's last
        // synchronisation, after every launch of the module, and the transport stops
        // before the world's modules are unloaded.
        unsafe { backend.watch(&mut module, control, transport)? };
        Ok(Arc::new(Self { objects, module }))
    }
}
