//! Collective entry points over `symmem_rma::collectives`. Every rank launches the
//! same kernel with the same grid and counts; `sig` is the symmetric signal array of
//! `symmem_rma::collectives::signal_words(world, grid_dim)` `u64`s, zeroed once.
//! Reductions have one kernel per (operator, type):
//! `symmem_{all_reduce_one_shot,all_reduce_two_shot,reduce_scatter}_{sum,min,max}_{ty}`,
//! the all-reduce across nodes, `symmem_all_reduce_gathered_{sum,min,max}_{ty}`, the
//! all-reduce of registered memory, `symmem_all_reduce_tables_{sum,min,max}_{ty}`, the
//! all-reduce through symmetric scratch, `symmem_all_reduce_staged_{sum,min,max}_{ty}`, for
//! `ty` in `f32`, `bf16`, `i32`, `f16`, `f64`, and the barrier-free sum,
//! `symmem_all_reduce_lamport_sum_{f32,bf16,f16}`: all generated
//! from one list of element types (`reductions!` below), which also gives the host its
//! table of them, [`ReductionKernels`].

#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
use symmem_device::UnsafeKernel;
use symmem_device::{Arch, PeerTable, kernel, paste_idents};
use symmem_rma::collectives::{self, ReduceOp};
use symmem_rma::lamport;
use symmem_rma::{bf16, f16};

/// The name prefixes of the one-node collectives: the reductions whose bodies a build for
/// worlds across nodes leaves out (`symmem_rma::ONE_NODE_KERNELS`), each family generated
/// by a macro below (`reduction!` for the first three, `tables!`, `staged!`, `lamport!`).
/// The codegen tests check the objects against it both ways.
const ONE_NODE_FAMILIES: [&str; 6] = [
    "symmem_all_reduce_one_shot_",
    "symmem_all_reduce_two_shot_",
    "symmem_reduce_scatter_",
    "symmem_all_reduce_tables_",
    "symmem_all_reduce_staged_",
    "symmem_all_reduce_lamport_",
];

/// Whether kernel `name` is one of the one-node collectives: a world on one node runs it,
/// and the build for worlds across nodes (`symmem::backend::code_objects::KERNELS`) has it
/// as an entry point that only records its launch as an error.
pub fn one_node_only(name: &str) -> bool {
    ONE_NODE_FAMILIES.iter().any(|f| name.starts_with(f))
}

/// All-gather of `n` bytes per rank (local `src`, symmetric `dst` of `world * n`).
///
/// # Safety
/// See `symmem_rma::collectives::all_gather`.
#[kernel]
pub unsafe fn symmem_all_gather(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    sig: *mut u64,
) {
    // SAFETY: forwarded from the host launch.
    unsafe {
        let team = bases.team(world, rank);
        collectives::all_gather(arch, &team, dst, src, n as usize, sig)
    }
}

/// All-to-all of `n` bytes per rank pair (local `src`, symmetric `dst`, `world * n`
/// each).
///
/// # Safety
/// See `symmem_rma::collectives::all_to_all`.
#[kernel]
pub unsafe fn symmem_all_to_all(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    sig: *mut u64,
) {
    // SAFETY: forwarded from the host launch.
    unsafe {
        let team = bases.team(world, rank);
        collectives::all_to_all(arch, &team, dst, src, n as usize, sig)
    }
}

/// Broadcast of `n` bytes from rank `root`'s symmetric `src` into every local `dst`.
///
/// # Safety
/// See `symmem_rma::collectives::broadcast`.
#[kernel]
pub unsafe fn symmem_broadcast(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    sig: *mut u64,
    root: u32,
) {
    // SAFETY: forwarded from the host launch.
    unsafe {
        let team = bases.team(world, rank);
        collectives::broadcast(arch, &team, dst, src, n as usize, root as usize, sig)
    }
}

/// `symmem_{body}_{sum,min,max}_{suffix}`: `collectives::{body}` for each operator.
macro_rules! reduction {
    ($body:ident, $suffix:ident, $t:ty) => {
        reduction!($body, $suffix, $t, sum Sum, min Min, max Max);
    };
    ($body:ident, $suffix:ident, $t:ty, $($op:ident $variant:ident),*) => {$(paste_idents! {
        /// A reduction collective; see the `symmem_rma::collectives` function this
        /// name starts with for the buffers' roles and sizes (`count` in elements).
        ///
        /// # Safety
        /// See that function.
        #[kernel]
        pub unsafe fn [<symmem_ $body _ $op _ $suffix>](
            arch: &impl Arch,
            dst: *mut $t,
            src: *const $t,
            bases: PeerTable,
            world: u32,
            rank: u32,
            count: u64,
            sig: *mut u64,
        ) {
            if symmem_rma::one_node_kernel_left_out() {
                return;
            }
            // SAFETY: forwarded from the host launch.
            unsafe {
                let team = bases.team(world, rank);
                collectives::$body(arch, &team, ReduceOp::$variant, dst, src, count as usize, sig)
            }
        }
    })*};
}

/// `symmem_all_reduce_gathered_{sum,min,max}_{suffix}`: the all-reduce across nodes.
macro_rules! gathered {
    ($suffix:ident, $t:ty) => {
        gathered!($suffix, $t, sum Sum, min Min, max Max);
    };
    ($suffix:ident, $t:ty, $($op:ident $variant:ident),*) => {$(paste_idents! {
        /// The one-shot all-reduce across nodes: synchronises through `bases` (the heap
        /// table) and reads every rank's `src` where `sources` translates it (the
        /// off-node ranks' copies fetched here beforehand); see
        /// `symmem_rma::collectives::all_reduce_one_shot_from`.
        ///
        /// # Safety
        /// See that function.
        #[kernel]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn [<symmem_all_reduce_gathered_ $op _ $suffix>](
            arch: &impl Arch,
            dst: *mut $t,
            src: *const $t,
            bases: PeerTable,
            sources: PeerTable,
            world: u32,
            rank: u32,
            count: u64,
            sig: *mut u64,
        ) {
            // SAFETY: forwarded from the host launch.
            unsafe {
                let team = bases.team(world, rank);
                let sources = sources.team(world, rank);
                collectives::all_reduce_one_shot_from(
                    arch,
                    &team,
                    &sources,
                    ReduceOp::$variant,
                    dst,
                    src,
                    count as usize,
                    sig,
                )
            }
        }
    })*};
}

/// `symmem_all_reduce_tables_{sum,min,max}_{suffix}`: the two-shot all-reduce of memory
/// with tables of its own (registered memory), or whose addresses the kernel exchanges
/// (plain memory where ranks share one address space and device), nothing staged.
macro_rules! tables {
    ($suffix:ident, $t:ty) => {
        tables!($suffix, $t, sum Sum, min Min, max Max);
    };
    ($suffix:ident, $t:ty, $($op:ident $variant:ident),*) => {$(paste_idents! {
        /// The two-shot all-reduce reading every rank's `src` through `sources` and
        /// writing every rank's `dst` through `destinations` (each the table of the
        /// memory it lies in: the heap's, or a registration's), synchronising through
        /// `bases` (the heap table); `dst` may be `src`. The arguments `exchanged` names
        /// (bit 0 `dst`, bit 1 `src`) are reached through tables the kernel makes in the
        /// symmetric `exchange` instead (their table arguments are not read). See
        /// `symmem_rma::collectives::all_reduce_two_shot_exchanging`.
        ///
        /// # Safety
        /// See that function.
        #[kernel]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn [<symmem_all_reduce_tables_ $op _ $suffix>](
            arch: &impl Arch,
            dst: *mut $t,
            src: *const $t,
            bases: PeerTable,
            destinations: PeerTable,
            sources: PeerTable,
            exchange: *mut u64,
            exchanged: u32,
            world: u32,
            rank: u32,
            count: u64,
            sig: *mut u64,
        ) {
            if symmem_rma::one_node_kernel_left_out() {
                return;
            }
            // SAFETY: forwarded from the host launch.
            unsafe {
                let team = bases.team(world, rank);
                let destinations = destinations.team(world, rank);
                let sources = sources.team(world, rank);
                collectives::all_reduce_two_shot_exchanging(
                    arch,
                    &team,
                    (&destinations, &sources),
                    (exchange, exchanged),
                    ReduceOp::$variant,
                    dst,
                    src,
                    count as usize,
                    sig,
                )
            }
        }
    })*};
}

/// `symmem_all_reduce_staged_{sum,min,max}_{suffix}`: the two-shot all-reduce of memory
/// peers cannot reach, through the caller's symmetric scratch.
macro_rules! staged {
    ($suffix:ident, $t:ty) => {
        staged!($suffix, $t, sum Sum, min Min, max Max);
    };
    ($suffix:ident, $t:ty, $($op:ident $variant:ident),*) => {$(paste_idents! {
        /// The two-shot all-reduce of local `src` into local `dst` (`dst` may be `src`)
        /// through `stage`, symmetric scratch of `count` elements: copied in, reduced
        /// there in place, copied out, in one kernel. See
        /// `symmem_rma::collectives::all_reduce_two_shot_staged`.
        ///
        /// # Safety
        /// See that function.
        #[kernel]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn [<symmem_all_reduce_staged_ $op _ $suffix>](
            arch: &impl Arch,
            dst: *mut $t,
            src: *const $t,
            bases: PeerTable,
            stage: *mut $t,
            world: u32,
            rank: u32,
            count: u64,
            sig: *mut u64,
        ) {
            if symmem_rma::one_node_kernel_left_out() {
                return;
            }
            // SAFETY: forwarded from the host launch.
            unsafe {
                let team = bases.team(world, rank);
                collectives::all_reduce_two_shot_staged(
                    arch,
                    &team,
                    ReduceOp::$variant,
                    dst,
                    src,
                    stage,
                    count as usize,
                    sig,
                )
            }
        }
    })*};
}

/// `symmem_all_reduce_lamport_sum_{suffix}`: the barrier-free all-reduce, for a type
/// listed with `lamport`.
macro_rules! lamport {
    (lamport, $suffix:ident, $t:ty) => {paste_idents! {
        /// The barrier-free one-shot all-reduce (sum): local `dst` gets the sum of every
        /// rank's local `src` through the symmetric workspace `ws` (slots of `capacity`
        /// bytes). No signal array: the workspace's own header counts the calls.
        ///
        /// # Safety
        /// See `symmem_rma::lamport::all_reduce`.
        #[kernel]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn [<symmem_all_reduce_lamport_sum_ $suffix>](
            arch: &impl Arch,
            dst: *mut $t,
            src: *const $t,
            bases: PeerTable,
            world: u32,
            rank: u32,
            count: u64,
            ws: *mut u8,
            capacity: u64,
        ) {
            if symmem_rma::one_node_kernel_left_out() {
                return;
            }
            // SAFETY: forwarded from the host launch.
            unsafe {
                let team = bases.team(world, rank);
                lamport::all_reduce(arch, &team, dst, src, count as usize, ws, capacity as usize)
            }
        }
    }};
}

/// The [`ReductionKernels`] of one listed element type (host only: on a GPU a kernel is
/// an entry point, not a value).
macro_rules! table {
    ($suffix:ident, $t:ty, $($lamport:ident)?) => {
        #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
        impl sealed::Sealed for $t {}

        #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
        impl ReductionKernels for $t {
            fn all_reduce_one_shot(op: ReduceOp) -> UnsafeKernel<ReductionParams<Self>> {
                by_op!(op, symmem_all_reduce_one_shot, $suffix)
            }
            fn all_reduce_two_shot(op: ReduceOp) -> UnsafeKernel<ReductionParams<Self>> {
                by_op!(op, symmem_all_reduce_two_shot, $suffix)
            }
            fn reduce_scatter(op: ReduceOp) -> UnsafeKernel<ReductionParams<Self>> {
                by_op!(op, symmem_reduce_scatter, $suffix)
            }
            fn all_reduce_gathered(op: ReduceOp) -> UnsafeKernel<GatheredParams<Self>> {
                by_op!(op, symmem_all_reduce_gathered, $suffix)
            }
            fn all_reduce_tables(op: ReduceOp) -> UnsafeKernel<TablesParams<Self>> {
                by_op!(op, symmem_all_reduce_tables, $suffix)
            }
            fn all_reduce_staged(op: ReduceOp) -> UnsafeKernel<StagedParams<Self>> {
                by_op!(op, symmem_all_reduce_staged, $suffix)
            }
            fn all_reduce_lamport(op: ReduceOp) -> Option<UnsafeKernel<LamportParams<Self>>> {
                match op {
                    ReduceOp::Sum => lamport_sum!($suffix, $($lamport)?),
                    ReduceOp::Min | ReduceOp::Max => None,
                }
            }
        }
    };
}

/// The kernel `{prefix}_{op}_{suffix}` for the operator `op` names.
macro_rules! by_op {
    ($op:ident, $prefix:ident, $suffix:ident) => {
        paste_idents! {
            match $op {
                ReduceOp::Sum => [<$prefix _sum_ $suffix>],
                ReduceOp::Min => [<$prefix _min_ $suffix>],
                ReduceOp::Max => [<$prefix _max_ $suffix>],
            }
        }
    };
}

/// The barrier-free sum of a type listed with `lamport`, else `None`.
macro_rules! lamport_sum {
    ($suffix:ident, lamport) => {
        paste_idents! { Some([<symmem_all_reduce_lamport_sum_ $suffix>]) }
    };
    ($suffix:ident,) => {
        None
    };
}

/// The element types of the reductions are listed once, in the `reductions!` call below;
/// every (operation, element type) kernel and the host's table of them
/// ([`ReductionKernels`]) are generated from that list, so adding an element type is one
/// line there. Each line reads `suffix: Type`, then `, lamport` where the barrier-free
/// sum exists (the type implements `symmem_rma::lamport::Lamport`). The kernels
/// come out in the order operation, then element type, then operator (sum, min, max);
/// every one is named `symmem_{operation}_{operator}_{suffix}`.
macro_rules! reductions {
    ($($suffix:ident: $t:ty $(, $lamport:ident)?;)*) => {
        $(reduction!(all_reduce_one_shot, $suffix, $t);)*
        $(reduction!(all_reduce_two_shot, $suffix, $t);)*
        $(reduction!(reduce_scatter, $suffix, $t);)*
        $(gathered!($suffix, $t);)*
        $(tables!($suffix, $t);)*
        $($(lamport!($lamport, $suffix, $t);)?)*
        $(staged!($suffix, $t);)*
        $(table!($suffix, $t, $($lamport)?);)*
    };
}

// New types go last: the kernels of the types before them keep their order in the code
// objects (easier to compare across a change).
reductions! {
    f32: f32, lamport;
    bf16: bf16, lamport;
    i32: i32;
    f16: f16, lamport;
    f64: f64;
}

/// The parameters of every reduction kernel: `dst`, `src`, the heap table, `world`,
/// `rank`, `count`, the signal array.
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub type ReductionParams<T> = (*mut T, *const T, PeerTable, u32, u32, u64, *mut u64);

/// The parameters of the all-reduce across nodes: `dst`, `src`, the heap table, the
/// table `src` is read through, `world`, `rank`, `count`, the signal array.
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub type GatheredParams<T> = (
    *mut T,
    *const T,
    PeerTable,
    PeerTable,
    u32,
    u32,
    u64,
    *mut u64,
);

/// The parameters of the all-reduce of registered memory: `dst`, `src`, the heap table,
/// the tables `dst` and `src` are reached through, the symmetric address-exchange slots
/// (`symmem_rma::collectives::exchange_words(world, blocks)` `u64`s) and which arguments
/// go through them (bit 0 `dst`, bit 1 `src`), `world`, `rank`, `count`, the signal
/// array.
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub type TablesParams<T> = (
    *mut T,
    *const T,
    PeerTable,
    PeerTable,
    PeerTable,
    *mut u64,
    u32,
    u32,
    u32,
    u64,
    *mut u64,
);

/// The parameters of the staged all-reduce: `dst`, `src`, the heap table, the scratch,
/// `world`, `rank`, `count`, the signal array.
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub type StagedParams<T> = (*mut T, *const T, PeerTable, *mut T, u32, u32, u64, *mut u64);

/// The parameters of the barrier-free all-reduce: `dst`, `src`, the heap table, `world`,
/// `rank`, `count`, the workspace, its slot capacity in bytes.
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub type LamportParams<T> = (*mut T, *const T, PeerTable, u32, u32, u64, *mut u8, u64);

/// An element type's reduction kernels, as host values to launch: each method returns
/// the kernel generated for this type from the list in this module,
/// `symmem_{method}_{operator}_{suffix}`. Implemented for exactly the listed types
/// (sealed): `f32`, `bf16`, `i32`, `f16`, `f64`.
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub trait ReductionKernels: Sized + 'static + sealed::Sealed {
    /// The one-shot all-reduce kernel for `op`.
    fn all_reduce_one_shot(op: ReduceOp) -> UnsafeKernel<ReductionParams<Self>>;
    /// The two-shot all-reduce kernel for `op`.
    fn all_reduce_two_shot(op: ReduceOp) -> UnsafeKernel<ReductionParams<Self>>;
    /// The reduce-scatter kernel for `op`.
    fn reduce_scatter(op: ReduceOp) -> UnsafeKernel<ReductionParams<Self>>;
    /// The all-reduce kernel across nodes for `op`.
    fn all_reduce_gathered(op: ReduceOp) -> UnsafeKernel<GatheredParams<Self>>;
    /// The two-shot all-reduce kernel of registered memory for `op`.
    fn all_reduce_tables(op: ReduceOp) -> UnsafeKernel<TablesParams<Self>>;
    /// The two-shot all-reduce kernel through symmetric scratch for `op`.
    fn all_reduce_staged(op: ReduceOp) -> UnsafeKernel<StagedParams<Self>>;
    /// The barrier-free all-reduce kernel for `op`, if there is one (sums of the types
    /// listed with `lamport`).
    fn all_reduce_lamport(op: ReduceOp) -> Option<UnsafeKernel<LamportParams<Self>>>;
}

#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
mod sealed {
    /// Implemented for the listed element types only.
    pub trait Sealed {}
}

/// Prepares a Lamport workspace of `bytes` bytes (this rank's copy): a zero header and
/// every slot word the sentinel. Before the workspace's first call, and before any peer
/// can write into it (a barrier after it).
///
/// # Safety
/// `ws` writable for `bytes` bytes, 16-aligned, no kernel using it concurrently.
#[kernel]
pub unsafe fn symmem_lamport_reset(arch: &impl Arch, ws: *mut u8, bytes: u64) {
    let words = bytes as usize / 4;
    let header = lamport::HEADER_BYTES / 4;
    let mut w = arch.global_id();
    while w < words {
        let value = if w < header { 0 } else { lamport::SENTINEL };
        // SAFETY: w < bytes / 4.
        unsafe { ws.cast::<u32>().add(w).write(value) };
        w += arch.global_threads();
    }
}

/// A kernel that does nothing: the launch floor the small-message benchmarks measure
/// against.
#[kernel]
pub fn symmem_empty(_arch: &impl Arch) {}
