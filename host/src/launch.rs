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
//! typed buffer or view of the same `T`, a `View<T>`/`ViewMut<T>` too (with its
//! length), a `SymView<T>`/`SymViewMut<T>` a symmetric buffer or view (with its length
//! and table), a `PeerTable` a [`PeerBases`] handle, a number the number itself.
//! symmem's own kernels go the same way ([`World::kernels`]).
//!
//! # Safe and unsafe kernels
//!
//! A kernel written as a safe `fn` takes parameters that keep it safe (views that carry
//! their length, checked peer access): [`Module::launch`] launches it from safe code. A
//! kernel written as an `unsafe fn` has a `# Safety` section its parameters' types do not
//! keep (a raw pointer's length, a rank it indexes a table with): only the `unsafe`
//! [`Module::launch_unchecked`] takes it, and its caller states that the arguments meet
//! that section. The same setup with the right arguments compiles (the control for the
//! failures below):
//!
//! ```no_run
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<u8, Cpu>) -> symmem::Result<()> {
//! // symmem_copy(dst: ViewMut<u8>, src: View<u8>): a safe kernel, from safe code.
//! world.kernels().launch(symmem_kernels::symmem_copy, Grid::new(1, 1), (buffer, buffer))
//! # }
//! ```
//!
//! ```compile_fail,E0308
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<u8, Cpu>) -> symmem::Result<()> {
//! // symmem_lamport_reset is an `unsafe fn` kernel (it writes `bytes` bytes it cannot
//! // check): a safe launch does not compile.
//! world.kernels().launch(symmem_kernels::symmem_lamport_reset, Grid::new(1, 1), (buffer, 4u64))
//! # }
//! ```
//!
//! ```no_run
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<u8, Cpu>) -> symmem::Result<()> {
//! // SAFETY: `buffer` holds the 4 bytes the kernel writes.
//! unsafe {
//!     world.kernels().launch_unchecked(
//!         symmem_kernels::symmem_lamport_reset,
//!         Grid::new(1, 1),
//!         (buffer, 4u64),
//!     )
//! }
//! # }
//! ```
//!
//! ```compile_fail,E0277
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<u8, Cpu>) -> symmem::Result<()> {
//! // symmem_put takes (dst: SymViewMut<u8>, src: View<u8>, to: u32): a u64 rank does not compile.
//! world.kernels().launch(symmem_kernels::symmem_put, Grid::new(1, 1), (buffer, buffer, 1u64))
//! # }
//! ```
//!
//! ```compile_fail,E0277
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<u8, Cpu>) -> symmem::Result<()> {
//! // One argument missing does not compile.
//! world.kernels().launch(symmem_kernels::symmem_copy, Grid::new(1, 1), (buffer,))
//! # }
//! ```
//!
//! ```compile_fail,E0277
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<f32, Cpu>) -> symmem::Result<()> {
//! // A buffer of f32 for a `ViewMut<u8>` parameter does not compile.
//! world.kernels().launch(symmem_kernels::symmem_copy, Grid::new(1, 1), (buffer, buffer))
//! # }
//! ```
//!
//! ```compile_fail,E0277
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, buffer: &symmem::SymmetricBuffer<u8, Cpu>) -> symmem::Result<()> {
//! // A raw address is no buffer.
//! world.kernels().launch(symmem_kernels::symmem_copy, Grid::new(1, 1), (buffer, 0x1000u64))
//! # }
//! ```
//!
//! ```compile_fail,E0277
//! # use symmem::{World, Grid, backend::cpu::Cpu};
//! # fn f(world: &World<Cpu>, plain: &symmem::DeviceBuffer<u8, Cpu>) -> symmem::Result<()> {
//! // A plain buffer has no peer table: it is no `SymViewMut`.
//! world.kernels().launch(symmem_kernels::symmem_put, Grid::new(1, 1), (plain, plain, 1u32))
//! # }
//! ```

use crate::backend::code_objects::{CodeObjects, Loaded};
use crate::backend::{Backend, Grid, launch_lowered};
use crate::error::{Error, Result};
use crate::table::PeerBases;
use crate::world::World;
use std::sync::Arc;
use symmem_device::{Cmp, Kernel, Param, Params, PeerTable, UnsafeKernel};

/// A kernel crate's code objects loaded on one rank's device. Its kernels are launched
/// with [`Module::launch`]; it lives as long as the world.
///
/// ```
/// use symmem::{Config, Grid, backend::cpu::Cpu};
/// symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |world| {
///     // symmem's own kernels; a crate of yours: `world.load(&MY_KERNELS)?`.
///     let module = world.kernels();
///     let (src, dst) = (world.from_slice(&[7u8; 16])?, world.zeros::<u8>(16)?);
///     module.launch(symmem_kernels::symmem_copy, Grid::new(1, 16), (&dst, &src))?;
///     assert_eq!(world.read(&dst)?, [7; 16]);
///     Ok(())
/// })
/// .unwrap();
/// ```
pub struct Module<B: Backend> {
    world: World<B>,
    loaded: Arc<Loaded<B>>,
}

impl<B: Backend> Module<B> {
    pub(crate) fn new(world: World<B>, loaded: Arc<Loaded<B>>) -> Self {
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
    /// # Errors
    /// The world's failed device wait ([`World::check_waits`]: it is poisoned),
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
        self.checked_launch(kernel, grid, args)
    }

    /// Enqueues `kernel`, a kernel declared as an `unsafe fn`, as [`Module::launch`]
    /// does: the same checks of every handle, and the kernel's own contract left to the
    /// caller.
    ///
    /// # Safety
    /// `args` meet `kernel`'s `# Safety` section (what its parameters' types do not
    /// guarantee: the counts its pointers hold, the ranks it indexes a table with, what
    /// its peers' kernels do meanwhile).
    ///
    /// # Errors
    /// As [`Module::launch`].
    pub unsafe fn launch_unchecked<P: Params, A: KernelArgs<B, P>>(
        &self,
        kernel: UnsafeKernel<P>,
        grid: Grid,
        args: A,
    ) -> Result<()> {
        // SAFETY: the caller states that `args` meet the kernel's contract.
        self.checked_launch(unsafe { kernel.assume_checked() }, grid, args)
    }

    /// [`Module::launch`]'s checks and launch, for a kernel whose contract its arguments'
    /// types keep (a safe kernel, or an unsafe one the caller vouched for).
    fn checked_launch<P: Params, A: KernelArgs<B, P>>(
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
            return Err(Error::EmptyGrid {
                blocks: grid.blocks,
                threads: grid.threads,
            });
        }
        self.world.check_waits()?;
        let mut lowering = Lowering {
            world: &self.world,
            tables: Vec::new(),
        };
        let abi = args.lower(&mut lowering)?;
        if !lowering.tables.is_empty() {
            self.world.check_one_sided(&lowering.tables)?;
        }
        // SAFETY: every pointer argument came from a typed handle of this world
        // (`KernelArg`'s contract), checked above.
        unsafe { launch_lowered(self.world.backend(), &self.loaded.module, kernel, grid, abi) }
    }
}

impl<B: Backend> World<B> {
    /// Loads the code objects of a kernel crate (made with [`crate::include_kernels!`])
    /// for this rank's device, once per world: the object built for its architecture.
    /// Every kernel is loaded now, so no launch waits for a load.
    ///
    /// # Errors
    /// The world's failed device wait ([`World::check_waits`]),
    /// [`Error::NoCodeObject`] naming the crate and the device's architecture when none
    /// of the objects runs here; the backend's load errors.
    pub fn load(&self, objects: &'static CodeObjects) -> Result<Module<B>> {
        self.ready_for("a load")?;
        if std::ptr::eq(objects, self.own_kernels().objects) {
            return Ok(self.kernels());
        }
        let mut modules = self
            .loaded_modules()
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let loaded = match modules.iter().find(|m| std::ptr::eq(m.objects, objects)) {
            Some(loaded) => Arc::clone(loaded),
            None => {
                let loaded = Loaded::new(
                    self.backend(),
                    objects,
                    self.control(),
                    self.module_transport(),
                )?;
                modules.push(Arc::clone(&loaded));
                loaded
            }
        };
        Ok(Module::new(self.clone(), loaded))
    }

    /// symmem's own kernels (`symmem-kernels`), launched through the same checked path
    /// as a user's.
    pub fn kernels(&self) -> Module<B> {
        Module::new(self.clone(), Arc::clone(self.own_kernels()))
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
    /// Checks that a handle of world `owner` may be passed to this launch.
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] if it belongs to another world.
    pub fn check_owner(&self, owner: &World<B>) -> Result<()> {
        self.world.check_own(owner)
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
            fn lower(&self, _: &mut Lowering<'_, B>) -> Result<($t,)> {
                Ok((*self,))
            }
        }
    )*};
}

numbers!(u32, i32, u64, i64, f32, f64);

// SAFETY: a comparison carries no promise.
unsafe impl<B: Backend> KernelArg<B, Cmp> for Cmp {
    #[inline]
    fn lower(&self, _: &mut Lowering<'_, B>) -> Result<(u32,)> {
        Ok((symmem_device::cmp_to_abi(*self),))
    }
}

// SAFETY: a `PeerBases` handle names a device-resident table of `world_size` entries
// with its header in front (`symmem_device::TABLE_HEADER_WORDS`: every table symmem
// uploads has it), kept while its owner lives (and, once the owner is dropped, until a
// barrier at which every rank has dropped it, which waits for this launch first).
unsafe impl<B: Backend> KernelArg<B, PeerTable> for &PeerBases {
    #[inline]
    fn lower(&self, lowering: &mut Lowering<'_, B>) -> Result<(*const u64,)> {
        if self.world_serial() != lowering.world.serial() {
            return Err(Error::ForeignHandle);
        }
        if let Some(object) = self.object()? {
            lowering.tables.push(object);
        }
        Ok((std::ptr::without_provenance(self.device_ptr() as usize),))
    }
}
