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
            type Abi = ($t,);
            #[inline(always)]
            unsafe fn from_abi((abi,): ($t,)) -> $t {
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

/// The primitives one kernel parameter crosses the ABI as, in order: a tuple of one, two
/// or three [`Abi`] values (most parameters are one; a view is its address and length; a
/// symmetric view also its peer table).
pub trait AbiTuple: Copy + 'static {
    /// Each primitive's slot, in order.
    const SLOTS: &'static [Slot];
    /// Calls `f` with the address of each primitive, in order.
    fn visit(&self, f: &mut dyn FnMut(*const ()));
}

/// Primitive number `I` of an [`AbiTuple`]: how `#[kernel]` names each parameter of the
/// exported entry point.
pub trait AbiPart<const I: usize> {
    /// Its type.
    type Part: Abi;
}

macro_rules! abi_tuples {
    ($(($($t:ident $i:tt),+))*) => {$(
        impl<$($t: Abi),+> AbiTuple for ($($t,)+) {
            const SLOTS: &'static [Slot] = &[$($t::SLOT),+];
            fn visit(&self, f: &mut dyn FnMut(*const ())) {
                $(f(core::ptr::from_ref(&self.$i).cast());)+
            }
        }
        abi_tuples!(@parts ($($t),+) $($t $i)+);
    )*};
    (@parts $all:tt $($t:ident $i:tt)+) => {$(
        abi_tuples!(@part $all $t $i);
    )+};
    (@part ($($all:ident),+) $t:ident $i:tt) => {
        impl<$($all: Abi),+> AbiPart<$i> for ($($all,)+) {
            type Part = $t;
        }
    };
}

abi_tuples!((A 0) (A 0, B 1) (A 0, B 1, C 2));

/// A type a `#[kernel]` parameter may have: it travels as one [`Abi`] primitive, or a few
/// ([`AbiTuple`]: the views, whose names `#[kernel]` knows).
///
/// On the host, `symmem` accepts an argument for a parameter only where it implements
/// `symmem::KernelArg` for that parameter type: a typed buffer or view for `*mut T`,
/// `*const T` and the views (same `T`), a peer table handle for [`PeerTable`], the number
/// itself for integers and floats.
pub trait Param: Sized + 'static {
    /// The primitives it crosses the ABI as.
    type Abi: AbiTuple;
    /// Rebuilds the parameter inside the kernel.
    ///
    /// # Safety
    /// `abi` is what the host lowered from an argument for this parameter type
    /// (`symmem::KernelArg`'s contract: for a view, live memory of its length; for a
    /// peer table, a table symmem uploaded), passed to the kernel's entry point unchanged.
    unsafe fn from_abi(abi: Self::Abi) -> Self;
}

impl<T: 'static> Param for *mut T {
    type Abi = (*mut T,);
    #[inline(always)]
    unsafe fn from_abi((abi,): (*mut T,)) -> *mut T {
        abi
    }
}

impl<T: 'static> Param for *const T {
    type Abi = (*const T,);
    #[inline(always)]
    unsafe fn from_abi((abi,): (*const T,)) -> *const T {
        abi
    }
}

/// A comparison travels as a number: [`cmp_to_abi`] on the host, this in the kernel.
impl Param for Cmp {
    type Abi = (u32,);
    #[inline(always)]
    unsafe fn from_abi((code,): (u32,)) -> Self {
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

/// Words before a device-resident peer table's first entry: the rank whose table it is,
/// then the number of entries (the world size). symmem uploads every table so (the heap's,
/// a registration's, an external one's), which lets [`PeerTable`] check a rank in the
/// kernel; the entries stay a plain array of `u64` at the table's address.
pub const TABLE_HEADER_WORDS: usize = 2;

/// A device-resident peer-base table, as a kernel parameter: entry `r` is the address,
/// in this rank's address space, of the buffer it belongs to on rank `r`
/// (`base(my_rank)` is the local pointer), 0 for a peer this rank does not map (another
/// node). Any provider's table (the symmetric heap, a rendezvous, NVSHMEM, torch) has
/// this shape; translation is `p - base(cur) + base(to)`.
///
/// The host passes a table handle for it, never a plain buffer, and symmem uploads every
/// table with its length and owner in front of it ([`TABLE_HEADER_WORDS`]): so
/// [`PeerTable::base`] checks the rank it is given, and yields nothing for a peer it
/// cannot reach, from safe code.
#[derive(Clone, Copy, Debug)]
pub struct PeerTable {
    bases: *const u64,
}

impl Param for PeerTable {
    type Abi = (*const u64,);
    #[inline(always)]
    unsafe fn from_abi((bases,): (*const u64,)) -> Self {
        Self { bases }
    }
}

impl PeerTable {
    /// The table's device address (its first entry).
    #[inline(always)]
    pub const fn as_ptr(self) -> *const u64 {
        self.bases
    }

    /// Header word `i` (counted back from the first entry).
    #[inline(always)]
    fn header(self, back: usize) -> usize {
        // SAFETY: every `PeerTable` a kernel holds came from the host's upload of a
        // table with its header in front (`Param::from_abi`'s contract).
        unsafe { self.bases.sub(back).read() as usize }
    }

    /// Its number of entries: the world size.
    #[inline(always)]
    pub fn len(self) -> usize {
        self.header(1)
    }

    /// Whether it has no entry (never: a world has a rank).
    #[inline(always)]
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The rank whose table it is (whose entry is the local pointer).
    #[inline(always)]
    pub fn rank(self) -> usize {
        self.header(2)
    }

    /// Entry `rank`: the buffer's address on rank `rank`, as mapped here; `None` for a
    /// rank outside the table or a peer this rank does not map (its entry is 0: another
    /// node), never an address computed from a 0 entry.
    #[inline(always)]
    pub fn base(self, rank: usize) -> Option<u64> {
        if rank >= self.len() {
            return None;
        }
        // SAFETY: `rank` is inside the table (just checked).
        let entry = unsafe { self.bases.add(rank).read() };
        (entry != 0).then_some(entry)
    }

    /// Entry `rank`, unchecked: for a loop that proved its bounds.
    ///
    /// # Safety
    /// `rank` is less than the table's length (the world size).
    #[inline(always)]
    pub unsafe fn base_unchecked(self, rank: usize) -> u64 {
        // SAFETY: the caller keeps `rank` inside the table.
        unsafe { self.bases.add(rank).read() }
    }

    /// The byte offset from this rank's copy to rank `to`'s: `base(to) - base(rank())`,
    /// or `None` where [`PeerTable::base`] gives nothing for `to`.
    ///
    /// Two memory latencies, not four: both header words are read at once, then both
    /// entries at once (a rank out of range reads this rank's entry instead, and the
    /// answer is `None`), with no branch between the reads.
    #[inline(always)]
    pub fn offset_to(self, to: usize) -> Option<usize> {
        let (len, rank) = (self.len(), self.rank());
        let inside = to < len;
        // SAFETY: the table's own rank is inside it, and `to` is read only when inside.
        let (mine, target) = unsafe {
            (
                self.base_unchecked(rank),
                self.base_unchecked(if inside { to } else { rank }),
            )
        };
        (inside && target != 0).then(|| target.wrapping_sub(mine) as usize)
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
    /// The tuple of the parameters' [`AbiTuple`]s.
    type Abi: Copy;
    /// Each parameter's slots, in order (one for most, more for a view).
    const SLOTS: &'static [&'static [Slot]];
    /// Calls `f` with the address of each primitive of `abi`, in order, every
    /// parameter's in turn (what `cuLaunchKernel`'s `kernelParams` holds).
    fn visit(abi: &Self::Abi, f: &mut dyn FnMut(*const ()));
}

/// Every slot of `P`, in order: the entry point's parameters as the ABI lays them out.
pub fn slots<P: Params>() -> impl Iterator<Item = Slot> {
    P::SLOTS.iter().flat_map(|param| param.iter().copied())
}

macro_rules! params {
    ($($p:ident $i:tt),*) => {
        impl<$($p: Param),*> Params for ($($p,)*) {
            type Abi = ($($p::Abi,)*);
            const SLOTS: &'static [&'static [Slot]] = &[$(<$p::Abi as AbiTuple>::SLOTS),*];
            #[allow(unused_variables)]
            fn visit(abi: &Self::Abi, f: &mut dyn FnMut(*const ())) {
                $(abi.$i.visit(f);)*
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
    /// What `#[kernel]` expands to on the host for a safe `fn`.
    ///
    /// # Safety
    /// The code objects of crate `crate_name` export a kernel `name` whose parameters
    /// are `P` and whose body is the one `host` runs; and that body is sound for any
    /// arguments that keep the promises of `P`'s types (a kernel declared as a safe
    /// `fn`, or an [`UnsafeKernel`] whose launch meets its contract).
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

/// A kernel declared with `#[kernel]` on an `unsafe fn`: its `# Safety` section is a
/// contract its parameters' types do not keep (a pointer's length, a rank of a table),
/// so the host launches it only from `unsafe` code (`symmem::Module::launch_unchecked`),
/// whose caller states that the arguments meet that contract. A safe `Module::launch`
/// does not take it (it takes a [`Kernel`]).
pub struct UnsafeKernel<P: Params>(Kernel<P>);

impl<P: Params> UnsafeKernel<P> {
    /// What `#[kernel]` expands to on the host for an `unsafe fn`.
    ///
    /// # Safety
    /// As [`Kernel::new`].
    #[doc(hidden)]
    pub const unsafe fn new(
        crate_name: &'static str,
        name: &'static str,
        host: fn(&HostThread<'_>, P::Abi),
    ) -> Self {
        // SAFETY: forwarded from the caller.
        Self(unsafe { Kernel::new(crate_name, name, host) })
    }

    /// The exported symbol.
    pub const fn name(&self) -> &'static str {
        self.0.name
    }

    /// The crate that declares it.
    pub const fn crate_name(&self) -> &'static str {
        self.0.crate_name
    }

    /// The kernel, to launch.
    ///
    /// # Safety
    /// Every launch of it meets its `# Safety` section (a safe launch path takes a
    /// [`Kernel`] on the promise that its parameters' types are the whole contract).
    pub const unsafe fn assume_checked(self) -> Kernel<P> {
        self.0
    }
}

impl<P: Params> Clone for UnsafeKernel<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: Params> Copy for UnsafeKernel<P> {}

impl<P: Params> fmt::Debug for UnsafeKernel<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UnsafeKernel({}::{})", self.0.crate_name, self.0.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{SymViewMut, View};

    #[test]
    fn every_comparison_survives_the_abi() {
        for cmp in [Cmp::Eq, Cmp::Ne, Cmp::Gt, Cmp::Ge, Cmp::Lt, Cmp::Le] {
            // SAFETY: a comparison's number carries no promise.
            assert_eq!(unsafe { Cmp::from_abi((cmp_to_abi(cmp),)) }, cmp);
        }
    }

    #[test]
    fn slots_follow_the_parameter_types() {
        // A pointer, a table, numbers, a view (two primitives), a symmetric view (three).
        type P = (
            *mut f32,
            PeerTable,
            u32,
            f64,
            View<u8>,
            SymViewMut<u16>,
            i64,
        );
        let per_param: [usize; 7] = core::array::from_fn(|i| P::SLOTS[i].len());
        assert_eq!(per_param, [1, 1, 1, 1, 2, 3, 1]);
        let mut kinds = [AbiKind::Int; 10];
        let mut sizes = [0; 10];
        for (i, slot) in slots::<P>().enumerate() {
            kinds[i] = slot.kind;
            sizes[i] = slot.size;
        }
        use AbiKind::{Float, Int, Pointer};
        assert_eq!(
            kinds,
            [
                Pointer, Pointer, Int, Float, Pointer, Int, Pointer, Int, Pointer, Int
            ]
        );
        assert_eq!(sizes, [8, 8, 4, 8, 8, 8, 8, 8, 8, 8]);
        let abi: <P as Params>::Abi = (
            (core::ptr::null_mut(),),
            (core::ptr::null(),),
            (7,),
            (2.5,),
            (core::ptr::null(), 33),
            (core::ptr::null_mut(), 44, core::ptr::null()),
            (-3,),
        );
        let mut seen = [core::ptr::null::<()>(); 10];
        let mut n = 0;
        P::visit(&abi, &mut |p| {
            seen[n] = p;
            n += 1;
        });
        assert_eq!(n, 10);
        // SAFETY: these addresses are of the u32, the f64, the view's length, the
        // symmetric view's length and the i64 of `abi`, in the visiting order.
        unsafe {
            assert_eq!(seen[2].cast::<u32>().read(), 7);
            assert_eq!(seen[3].cast::<f64>().read(), 2.5);
            assert_eq!(seen[5].cast::<u64>().read(), 33);
            assert_eq!(seen[7].cast::<u64>().read(), 44);
            assert_eq!(seen[9].cast::<i64>().read(), -3);
        }
    }
}
