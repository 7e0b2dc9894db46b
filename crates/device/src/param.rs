//! Kernel parameters: the types a `#[kernel]` function may take, the one primitive each
//! crosses the kernel ABI as, and [`Kernel`], the host's typed handle on a kernel.

use core::fmt;
use symmem_arch::host::HostThread;
use symmem_rma::{Cmp, Team};
use symmem_translate::PeerBases;

/// What kind of value a kernel parameter is in the code object's ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbiKind {
    /// A device address (`*mut T`, `*const T`, a peer table).
    Pointer,
    /// An integer.
    Int,
    /// A floating-point number.
    Float,
}

/// One kernel parameter as the ABI lays it out: its size and alignment in bytes, and
/// its kind. A launch packs its arguments by these; the HIP backend's tests compare them
/// with the code object's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    /// Bytes.
    pub size: usize,
    /// Alignment in bytes.
    pub align: usize,
    /// Pointer, integer or float.
    pub kind: AbiKind,
}

mod sealed {
    pub trait Sealed {}
}

/// A primitive that crosses the kernel ABI as itself: `u32`, `i32`, `u64`, `i64`, `f32`,
/// `f64`, `*mut T`, `*const T`. Sealed: rustc's `gpu-kernel` ABI is reliable for these
/// only.
pub trait Abi: Copy + 'static + sealed::Sealed {
    /// Its slot in a kernel's parameter list.
    const SLOT: Slot;
}

macro_rules! abi_primitives {
    ($($t:ty => $kind:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Abi for $t {
            const SLOT: Slot = Slot {
                size: size_of::<$t>(),
                align: align_of::<$t>(),
                kind: AbiKind::$kind,
            };
        }
        impl Param for $t {
            type Abi = $t;
            #[inline(always)]
            fn from_abi(abi: $t) -> $t {
                abi
            }
        }
    )*};
}

abi_primitives!(u32 => Int, i32 => Int, u64 => Int, i64 => Int, f32 => Float, f64 => Float);

impl<T: 'static> sealed::Sealed for *mut T {}
impl<T: 'static> Abi for *mut T {
    const SLOT: Slot = Slot {
        size: 8,
        align: 8,
        kind: AbiKind::Pointer,
    };
}
impl<T: 'static> sealed::Sealed for *const T {}
impl<T: 'static> Abi for *const T {
    const SLOT: Slot = Slot {
        size: 8,
        align: 8,
        kind: AbiKind::Pointer,
    };
}

/// A type a `#[kernel]` parameter may have: it travels as one [`Abi`] primitive.
///
/// On the host, `symmem` accepts an argument for a parameter only where it implements
/// `symmem::KernelArg` for that parameter type: a typed buffer or view for `*mut T` and
/// `*const T` (same `T`), a peer table handle for [`PeerTable`], the number itself for
/// integers and floats.
pub trait Param: Sized + 'static {
    /// The primitive it crosses the ABI as.
    type Abi: Abi;
    /// Rebuilds the parameter inside the kernel.
    fn from_abi(abi: Self::Abi) -> Self;
}

impl<T: 'static> Param for *mut T {
    type Abi = *mut T;
    #[inline(always)]
    fn from_abi(abi: *mut T) -> *mut T {
        abi
    }
}

impl<T: 'static> Param for *const T {
    type Abi = *const T;
    #[inline(always)]
    fn from_abi(abi: *const T) -> *const T {
        abi
    }
}

/// A comparison travels as a number: [`cmp_to_abi`] on the host, this in the kernel.
impl Param for Cmp {
    type Abi = u32;
    #[inline(always)]
    fn from_abi(code: u32) -> Self {
        match code {
            0 => Cmp::Eq,
            1 => Cmp::Ne,
            2 => Cmp::Gt,
            4 => Cmp::Lt,
            5 => Cmp::Le,
            _ => Cmp::Ge,
        }
    }
}

/// The number a [`Cmp`] parameter travels as (the inverse of its `Param::from_abi`).
pub const fn cmp_to_abi(cmp: Cmp) -> u32 {
    match cmp {
        Cmp::Eq => 0,
        Cmp::Ne => 1,
        Cmp::Gt => 2,
        Cmp::Ge => 3,
        Cmp::Lt => 4,
        Cmp::Le => 5,
    }
}

/// A device-resident peer-base table, as a kernel parameter: entry `r` is the address,
/// in this rank's address space, of the buffer it belongs to on rank `r`
/// (`base(my_rank)` is the local pointer). Any provider's table (the symmetric heap, a
/// rendezvous, NVSHMEM, torch) has this shape; translation is
/// `p - base(cur) + base(to)`.
///
/// The host passes a table handle for it, never a plain buffer: its length is the world
/// size, which the kernel takes as another parameter.
#[derive(Clone, Copy, Debug)]
pub struct PeerTable {
    bases: *const u64,
}

impl Param for PeerTable {
    type Abi = *const u64;
    #[inline(always)]
    fn from_abi(bases: *const u64) -> Self {
        Self { bases }
    }
}

impl PeerTable {
    /// The table's device address.
    #[inline(always)]
    pub const fn as_ptr(self) -> *const u64 {
        self.bases
    }

    /// Entry `rank`: the buffer's address on rank `rank`, as mapped here.
    ///
    /// # Safety
    /// `rank` is less than the table's length (the world size).
    #[inline(always)]
    pub unsafe fn base(self, rank: usize) -> u64 {
        // SAFETY: the caller keeps `rank` inside the table.
        unsafe { self.bases.add(rank).read() }
    }

    /// The table as [`PeerBases`] of `world` entries (translation by pointer offset).
    ///
    /// # Safety
    /// `world` is the table's length, and the table is not written while `'a` lasts.
    #[inline(always)]
    pub unsafe fn bases<'a>(self, world: usize) -> PeerBases<'a> {
        // SAFETY: forwarded from the caller.
        unsafe { PeerBases::from_raw_parts(self.bases, world) }
    }

    /// The team of `world` ranks this table describes, seen from `rank` (what device RMA,
    /// atomics, signals and collectives take).
    ///
    /// # Safety
    /// As [`PeerTable::bases`], and `rank < world`.
    #[inline(always)]
    pub unsafe fn team<'a>(self, world: u32, rank: u32) -> Team<'a> {
        // SAFETY: forwarded from the caller.
        unsafe { Team::from_raw_parts(self.bases, world, rank) }
    }
}

/// A kernel's parameter list, as a tuple of [`Param`] types: what its arguments must
/// match, and how they are laid out.
pub trait Params: Sized + 'static {
    /// The tuple of the parameters' [`Abi`] primitives.
    type Abi: Copy;
    /// Each parameter's slot, in order.
    const SLOTS: &'static [Slot];
    /// Calls `f` with the address of each primitive of `abi`, in order (what
    /// `cuLaunchKernel`'s `kernelParams` holds).
    fn visit(abi: &Self::Abi, f: &mut dyn FnMut(*const ()));
}

macro_rules! params {
    ($($p:ident $i:tt),*) => {
        impl<$($p: Param),*> Params for ($($p,)*) {
            type Abi = ($($p::Abi,)*);
            const SLOTS: &'static [Slot] = &[$(<$p::Abi as Abi>::SLOT),*];
            #[allow(unused_variables)]
            fn visit(abi: &Self::Abi, f: &mut dyn FnMut(*const ())) {
                $(f(core::ptr::from_ref(&abi.$i).cast());)*
            }
        }
    };
}

params!();
params!(P0 0);
params!(P0 0, P1 1);
params!(P0 0, P1 1, P2 2);
params!(P0 0, P1 1, P2 2, P3 3);
params!(P0 0, P1 1, P2 2, P3 3, P4 4);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5, P6 6);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5, P6 6, P7 7);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5, P6 6, P7 7, P8 8);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5, P6 6, P7 7, P8 8, P9 9);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5, P6 6, P7 7, P8 8, P9 9, P10 10);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5, P6 6, P7 7, P8 8, P9 9, P10 10, P11 11);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5, P6 6, P7 7, P8 8, P9 9, P10 10, P11 11, P12 12);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5, P6 6, P7 7, P8 8, P9 9, P10 10, P11 11, P12 12, P13 13);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5, P6 6, P7 7, P8 8, P9 9, P10 10, P11 11, P12 12, P13 13, P14 14);
params!(P0 0, P1 1, P2 2, P3 3, P4 4, P5 5, P6 6, P7 7, P8 8, P9 9, P10 10, P11 11, P12 12, P13 13, P14 14, P15 15);

/// A kernel declared with `#[kernel]`, as the host sees it: the crate whose code objects
/// export it, its name there, its parameter list `P`, and its body for CPU threads.
pub struct Kernel<P: Params> {
    crate_name: &'static str,
    name: &'static str,
    host: fn(&HostThread<'_>, P::Abi),
}

impl<P: Params> Kernel<P> {
    /// What `#[kernel]` expands to on the host.
    ///
    /// # Safety
    /// The code objects of crate `crate_name` export a kernel `name` whose parameters
    /// are `P` and whose body is the one `host` runs.
    #[doc(hidden)]
    pub const unsafe fn new(
        crate_name: &'static str,
        name: &'static str,
        host: fn(&HostThread<'_>, P::Abi),
    ) -> Self {
        Self {
            crate_name,
            name,
            host,
        }
    }

    /// The exported symbol.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The crate that declares it (`CARGO_CRATE_NAME`, `-` as `_`): the code objects
    /// built from that crate hold it.
    pub const fn crate_name(&self) -> &'static str {
        self.crate_name
    }

    /// Runs the body as one thread of a launch on the host.
    ///
    /// # Safety
    /// `abi` holds what the kernel's contract asks of its arguments (live pointers of the
    /// right types and lengths), and `arch` is one thread of a launch whose other
    /// threads run the body with the same `abi`.
    pub unsafe fn run_on_host(&self, arch: &HostThread<'_>, abi: P::Abi) {
        (self.host)(arch, abi)
    }
}

impl<P: Params> Clone for Kernel<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: Params> Copy for Kernel<P> {}

impl<P: Params> fmt::Debug for Kernel<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kernel({}::{})", self.crate_name, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_comparison_survives_the_abi() {
        for cmp in [Cmp::Eq, Cmp::Ne, Cmp::Gt, Cmp::Ge, Cmp::Lt, Cmp::Le] {
            assert_eq!(Cmp::from_abi(cmp_to_abi(cmp)), cmp);
        }
    }

    #[test]
    fn slots_follow_the_parameter_types() {
        type P = (*mut f32, PeerTable, u32, f64, *const u8, i64);
        let kinds: [AbiKind; 6] = core::array::from_fn(|i| P::SLOTS[i].kind);
        assert_eq!(
            kinds,
            [
                AbiKind::Pointer,
                AbiKind::Pointer,
                AbiKind::Int,
                AbiKind::Float,
                AbiKind::Pointer,
                AbiKind::Int
            ]
        );
        let sizes: [usize; 6] = core::array::from_fn(|i| P::SLOTS[i].size);
        assert_eq!(sizes, [8, 8, 4, 8, 8, 8]);
        let abi: <P as Params>::Abi = (
            core::ptr::null_mut(),
            core::ptr::null(),
            7,
            2.5,
            core::ptr::null(),
            -3,
        );
        let mut seen = [core::ptr::null::<()>(); 6];
        let mut n = 0;
        P::visit(&abi, &mut |p| {
            seen[n] = p;
            n += 1;
        });
        assert_eq!(n, 6);
        // SAFETY: the third and fourth addresses are of the u32 and f64 of `abi`.
        unsafe {
            assert_eq!(seen[2].cast::<u32>().read(), 7);
            assert_eq!(seen[3].cast::<f64>().read(), 2.5);
        }
    }
}
