//! Loading a kernel crate's code objects and launching its kernels with checked
//! arguments.
//!
//! A kernel crate declares kernels with `#[kernel]` (`symmem-device`); the application's
//! `build.rs` builds it with `symmem-build`, and [`include_kernels!`] embeds the code
//! objects. [`World::load`] picks the object for the rank's device, and
//! [`Module::launch`] enqueues a kernel on the rank's stream (the CPU backend runs the
//! same body on host threads):
//!
//! ```text
//! static KERNELS: symmem::CodeObjects = symmem::include_kernels!("my_kernels");
//! let module = world.load(&KERNELS)?;
//! module.launch(my_kernels::ring_step, Grid::new(4, 256), (&buffer, buffer.peer_bases(), n))?;
//! ```
//!
//! The arguments are a tuple checked against the kernel's parameter list at compile
//! time: each argument implements [`KernelArg`] for its parameter's type, so a wrong
//! type or a wrong count does not compile. A `*mut T` or `*const T` parameter takes a
//! typed buffer or view of the same `T`, a `PeerTable` a [`PeerBases`] handle, a number
//! the number itself. symmem's own kernels go the same way ([`World::kernels`]).
//!
//! The same setup with the right arguments compiles (the control for the failures below):
//!
//! ```no_run
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<'_, u8, Cpu>) -> symmem::Result<()> {
//! world.kernels().launch(symmem_kernels::symmem_copy, Grid::new(1, 1), (buffer, buffer, 4u64))
//! # }
//! ```
//!
//! ```compile_fail,E0277
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<'_, u8, Cpu>) -> symmem::Result<()> {
//! // symmem_copy takes (dst: *mut u8, src: *const u8, n: u64): a u32 for `n` does not compile.
//! world.kernels().launch(symmem_kernels::symmem_copy, Grid::new(1, 1), (buffer, buffer, 4u32))
//! # }
//! ```
//!
//! ```compile_fail,E0277
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<'_, u8, Cpu>) -> symmem::Result<()> {
//! // One argument missing does not compile.
//! world.kernels().launch(symmem_kernels::symmem_copy, Grid::new(1, 1), (buffer, buffer))
//! # }
//! ```
//!
//! ```compile_fail,E0277
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<'_, f32, Cpu>) -> symmem::Result<()> {
//! // A buffer of f32 for a `*mut u8` parameter does not compile.
//! world.kernels().launch(symmem_kernels::symmem_copy, Grid::new(1, 1), (buffer, buffer, 4u64))
//! # }
//! ```
//!
//! ```compile_fail,E0277
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<'_, u8, Cpu>) -> symmem::Result<()> {
//! // A raw address is no buffer.
//! world.kernels().launch(symmem_kernels::symmem_copy, Grid::new(1, 1), (buffer, 0x1000u64, 4u64))
//! # }
//! ```

use crate::backend::{Backend, Grid, KernelLaunch};
use crate::error::{Error, Result};
use crate::world::{PeerBases, World};
use std::sync::Arc;
use symmem_device::{Cmp, Kernel, Param, Params, PeerTable};

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
        $crate::CodeObjects::new(
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

/// A kernel crate's code objects loaded on one rank's device. Its kernels are launched
/// with [`Module::launch`]; it lives as long as the world.
pub struct Module<'w, B: Backend> {
    world: &'w World<B>,
    loaded: Arc<Loaded<B>>,
}

/// A loaded module, owned by its world (kept until the world goes, as a loaded module's
/// kernels may still run).
pub(crate) struct Loaded<B: Backend> {
    pub(crate) objects: &'static CodeObjects,
    pub(crate) module: B::Module,
}

impl<B: Backend> Loaded<B> {
    /// Loads `objects` and points its kernels' bounded waits at `control`, the world's
    /// control block (which the world keeps alive as long as the module).
    pub(crate) fn new(
        backend: &B,
        objects: &'static CodeObjects,
        control: &B::Shared,
    ) -> Result<Arc<Self>> {
        let mut module = backend.load_module(objects)?;
        // SAFETY: `control` is the world's control block, initialised by it and freed
        // only after the world's last synchronisation, after every launch of the module.
        unsafe { backend.watch(&mut module, control)? };
        Ok(Arc::new(Self { objects, module }))
    }
}

impl<'w, B: Backend> Module<'w, B> {
    pub(crate) fn new(world: &'w World<B>, loaded: Arc<Loaded<B>>) -> Self {
        Self { world, loaded }
    }

    /// The kernel crate it was loaded from.
    pub fn crate_name(&self) -> &'static str {
        self.loaded.objects.crate_name()
    }

    /// Enqueues `kernel` over `grid` with `args` on this rank's stream (the CPU backend
    /// runs it on host threads and returns when it is done).
    ///
    /// `args` is a tuple with one argument per kernel parameter, each checked against its
    /// parameter's type at compile time (see the module documentation); at run time every
    /// buffer and table must belong to this module's world, and a peer table must belong
    /// to an object every rank has agreed on (a [`World::barrier`] after allocating).
    ///
    /// Errors: the world's failed device wait ([`World::check_waits`]: it is poisoned),
    /// [`Error::WrongModule`] for a kernel of another crate,
    /// [`Error::KernelNotFound`] if the code object lacks it, [`Error::ForeignHandle`],
    /// [`Error::NotAgreed`], the poisoning [`Error::CollectiveMismatch`], an empty
    /// `grid`, and the backend's launch errors.
    pub fn launch<P: Params, A: KernelArgs<B, P>>(
        &self,
        kernel: Kernel<P>,
        grid: Grid,
        args: A,
    ) -> Result<()> {
        if kernel.crate_name() != self.crate_name() {
            return Err(Error::WrongModule {
                kernel: kernel.name(),
                kernel_crate: kernel.crate_name(),
                module: self.crate_name(),
            });
        }
        if grid.blocks == 0 || grid.threads == 0 {
            return Err(Error::Unsupported("an empty launch shape"));
        }
        self.world.check_waits()?;
        let mut lowering = Lowering {
            world: self.world,
            tables: Vec::new(),
        };
        let abi = args.lower(&mut lowering)?;
        if !lowering.tables.is_empty() {
            self.world.check_one_sided(&lowering.tables)?;
        }
        let mut pointers = [std::ptr::null::<()>(); MAX_PARAMS];
        let mut count = 0;
        P::visit(&abi, &mut |p| {
            pointers[count] = p;
            count += 1;
        });
        let host = HostBody { kernel, abi };
        let launch = KernelLaunch {
            name: kernel.name(),
            args: &pointers[..count],
            slots: P::SLOTS,
            host: &host,
        };
        // SAFETY: `args` holds one pointer per parameter to a value of its ABI type, in
        // order (`Params::visit`), alive until `launch` returns; every pointer argument
        // came from a typed handle of this world (`KernelArg`'s contract), and `host`
        // runs the same body with the same values.
        unsafe {
            self.world
                .backend()
                .launch(&self.loaded.module, &launch, grid)
        }
    }
}

/// The most parameters a kernel has (the tuples `Params` is implemented for).
const MAX_PARAMS: usize = 16;

/// Enqueues `kernel` of `module` over `grid` on `backend` with arguments already lowered
/// to the kernel's ABI (`abi`): [`Module::launch`] without the handle checks, for
/// launches below the world (the engine's proxy applying a peer's atomic, and backend
/// tests whose heaps and tables are made by hand).
///
/// # Safety
/// Every address in `abi` satisfies `kernel`'s contract: memory `backend`'s kernels
/// reach, of the lengths the other arguments give, alive until the launch completes.
#[cfg(any(test, feature = "mpi"))]
pub(crate) unsafe fn launch_lowered<B: Backend, P: Params>(
    backend: &B,
    module: &B::Module,
    kernel: Kernel<P>,
    grid: Grid,
    abi: P::Abi,
) -> Result<()> {
    let host = HostBody { kernel, abi };
    let mut pointers = [std::ptr::null::<()>(); MAX_PARAMS];
    let mut count = 0;
    P::visit(&host.abi, &mut |p| {
        pointers[count] = p;
        count += 1;
    });
    let launch = KernelLaunch {
        name: kernel.name(),
        args: &pointers[..count],
        slots: P::SLOTS,
        host: &host,
    };
    // SAFETY: one pointer per parameter into `host.abi`, which outlives the call; the
    // addresses in it are the caller's contract.
    unsafe { backend.launch(module, &launch, grid) }
}

/// A kernel's body with its lowered arguments, run by the CPU backend on each thread.
struct HostBody<P: Params> {
    kernel: Kernel<P>,
    abi: P::Abi,
}

// SAFETY: the raw pointers in `abi` address memory that every thread of the launch may
// use as the kernel's contract allows (as on a GPU, where all threads share them).
unsafe impl<P: Params> Sync for HostBody<P> {}
// SAFETY: as above: the addresses mean the same on any thread of the process.
unsafe impl<P: Params> Send for HostBody<P> {}

impl<P: Params> crate::backend::HostKernel for HostBody<P> {
    fn run(&self, arch: &symmem_arch::host::HostThread<'_>) {
        // SAFETY: `abi` was lowered from checked handles (see `Module::launch`), and the
        // CPU backend runs every thread of the launch with the same `abi`.
        unsafe { self.kernel.run_on_host(arch, self.abi) }
    }
    fn to_owned(&self) -> std::sync::Arc<dyn crate::backend::HostKernel> {
        std::sync::Arc::new(Self {
            kernel: self.kernel,
            abi: self.abi,
        })
    }
}

/// Where arguments are lowered: the launching world, and the objects whose peer tables
/// the launch passes (which must be agreed before any kernel reaches a peer through
/// them).
pub struct Lowering<'a, B: Backend> {
    world: &'a World<B>,
    tables: Vec<(u64, usize)>,
}

impl<B: Backend> Lowering<'_, B> {
    /// The launching world's serial number.
    pub(crate) fn world_serial(&self) -> u64 {
        self.world.serial()
    }

    /// Checks that a handle of world `owner` may be passed to this launch.
    ///
    /// Errors: [`Error::ForeignHandle`] if it belongs to another world.
    pub fn check_owner(&self, owner: &World<B>) -> Result<()> {
        self.world.check_own(owner)
    }

    /// Notes that the launch reaches peers through the table of collective object `id`
    /// (created at heap offset `offset`, for error messages).
    pub(crate) fn through_table(&mut self, id: u64, offset: usize) {
        self.tables.push((id, offset));
    }
}

/// A host value that a kernel parameter of type `P` accepts.
///
/// # Safety
/// [`KernelArg::lower`] returns a value that keeps the promise of `P`'s type: for
/// `*mut T` / `*const T`, the address of live device memory of this rank holding
/// elements of `T` (writable for `*mut`), which stays allocated while kernels enqueued
/// before the next synchronisation can run; for a `PeerTable`, a device-resident table of
/// `world_size` entries that stays alive as long.
pub unsafe trait KernelArg<B: Backend, P: Param> {
    /// The parameter's ABI value, after checking that the handle may be used here.
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<P::Abi>;
}

/// A tuple of arguments for a kernel with parameter list `P`: implemented for every
/// tuple whose elements are [`KernelArg`]s of the corresponding parameters.
pub trait KernelArgs<B: Backend, P: Params> {
    /// Lowers every argument in order.
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<P::Abi>;
}

macro_rules! kernel_args {
    ($($a:ident $p:ident $i:tt),*) => {
        impl<B: Backend, $($p: Param, $a: KernelArg<B, $p>),*> KernelArgs<B, ($($p,)*)> for ($($a,)*) {
            #[allow(unused_variables)]
            fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<<($($p,)*) as Params>::Abi> {
                Ok(($(self.$i.lower(lowering)?,)*))
            }
        }
    };
}

kernel_args!();
kernel_args!(A0 P0 0);
kernel_args!(A0 P0 0, A1 P1 1);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8, A9 P9 9);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8, A9 P9 9, A10 P10 10);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8, A9 P9 9, A10 P10 10, A11 P11 11);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8, A9 P9 9, A10 P10 10, A11 P11 11, A12 P12 12);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8, A9 P9 9, A10 P10 10, A11 P11 11, A12 P12 12, A13 P13 13);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8, A9 P9 9, A10 P10 10, A11 P11 11, A12 P12 12, A13 P13 13, A14 P14 14);
kernel_args!(A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8, A9 P9 9, A10 P10 10, A11 P11 11, A12 P12 12, A13 P13 13, A14 P14 14, A15 P15 15);

macro_rules! numbers {
    ($($t:ty),*) => {$(
        // SAFETY: a number carries no promise.
        unsafe impl<B: Backend> KernelArg<B, $t> for $t {
            #[inline]
            fn lower(&self, _: &mut Lowering<'_, B>) -> Result<$t> {
                Ok(*self)
            }
        }
    )*};
}

numbers!(u32, i32, u64, i64, f32, f64);

// SAFETY: a comparison carries no promise.
unsafe impl<B: Backend> KernelArg<B, Cmp> for Cmp {
    #[inline]
    fn lower(&self, _: &mut Lowering<'_, B>) -> Result<u32> {
        Ok(symmem_device::cmp_to_abi(*self))
    }
}

// SAFETY: a `PeerBases` handle names a device-resident table of `world_size` entries,
// kept while its owner lives (and, once the owner is dropped, until a barrier at which
// every rank has dropped it, which waits for this launch first).
unsafe impl<B: Backend> KernelArg<B, PeerTable> for &PeerBases {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<*const u64> {
        self.check_usable(lowering)?;
        Ok(std::ptr::without_provenance(self.device_ptr() as usize))
    }
}
