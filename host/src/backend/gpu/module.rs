//! A kernel crate's code object loaded on one device, every kernel found by name.

use super::{LoadedModule, Runtime};
use crate::backend::CodeObjects;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::fmt;

/// A kernel crate's code object loaded on one device, every kernel found by name.
pub struct Module<R: Runtime> {
    // Field order is drop order: the handles, then the module.
    functions: HashMap<String, R::Function>,
    target: &'static str,
    crate_name: &'static str,
    loaded: LoadedModule<R>,
}

impl<R: Runtime> Module<R> {
    /// `loaded`, the object built for `target` of `objects`, with its kernels `functions`.
    pub(in crate::backend) fn new(
        objects: &'static CodeObjects,
        target: &'static str,
        loaded: LoadedModule<R>,
        functions: HashMap<String, R::Function>,
    ) -> Self {
        Self {
            functions,
            target,
            crate_name: objects.crate_name(),
            loaded,
        }
    }

    /// The processor of the code object that was loaded (`sm_90`, possibly older than
    /// the device; `gfx942`).
    pub fn target(&self) -> &'static str {
        self.target
    }

    /// The kernel crate it was built from.
    pub fn crate_name(&self) -> &'static str {
        self.crate_name
    }

    /// How many kernels the code object holds (each with its function handle).
    pub fn kernel_count(&self) -> usize {
        self.functions.len()
    }

    /// The loaded code object.
    pub(in crate::backend) fn handle(&self) -> R::Module {
        self.loaded.module
    }

    /// Kernel `name`, or [`Error::KernelNotFound`].
    pub(in crate::backend) fn function(&self, name: &'static str) -> Result<R::Function> {
        self.functions
            .get(name)
            .copied()
            .ok_or(Error::KernelNotFound {
                module: self.crate_name,
                kernel: name,
            })
    }
}

impl<R: Runtime> fmt::Debug for Module<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("runtime", &R::NAME)
            .field("crate", &self.crate_name)
            .field("target", &self.target)
            .field("kernels", &self.functions.len())
            .finish()
    }
}
