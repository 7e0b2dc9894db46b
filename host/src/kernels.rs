//! The catalogue of kernels a backend can launch, with their arguments.
//!
//! One [`KernelCall`] names a kernel of `device/kernels` and carries its arguments in
//! the order the kernel's ABI takes them. GPU backends look the kernel up by
//! [`KernelCall::name`] in the loaded code object and pack [`KernelCall::args`]; the CPU
//! backend runs the same body from `symmem-kernels` or `symmem-rma` on host threads.
//!
//! The `symmem-rma` kernels (every variant after [`KernelCall::Copy`]) take their
//! arguments in one order: buffer addresses, the peer-base table, `world`, `rank`,
//! counts, the signal array, then any extra ranks or values. Their symmetric addresses
//! are translated through `bases`, so every symmetric address of one call (data and
//! signals) must lie in the allocation or heap that table describes: the host's
//! [`crate::collectives`] passes the heap-base table. See `symmem_rma::collectives` for
//! each kernel's contract; [`crate::collectives::Collectives`] checks it on the host.

pub use symmem_rma::Cmp;
pub use symmem_rma::collectives::ReduceOp;

/// One kernel argument, as the kernel's ABI lays it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelArg {
    /// A 64-bit value: a device address or a length.
    U64(u64),
    /// A 32-bit value: a rank or a world size.
    U32(u32),
}

/// The element type of a reduction kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// IEEE-754 binary32.
    F32,
    /// bfloat16 (`symmem_rma::Bf16`), reduced in `f32` and rounded once.
    Bf16,
    /// 32-bit signed integer, sums wrapping.
    I32,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            Self::F32 | Self::I32 => 4,
            Self::Bf16 => 2,
        }
    }

    fn index(self) -> usize {
        match self {
            Self::F32 => 0,
            Self::Bf16 => 1,
            Self::I32 => 2,
        }
    }
}

fn op_index(op: ReduceOp) -> usize {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Min => 1,
        ReduceOp::Max => 2,
    }
}

/// The number a [`Cmp`] travels as (`symmem_rma_signal_wait_until`'s `cmp`).
pub const fn cmp_code(cmp: Cmp) -> u32 {
    match cmp {
        Cmp::Eq => 0,
        Cmp::Ne => 1,
        Cmp::Gt => 2,
        Cmp::Ge => 3,
        Cmp::Lt => 4,
        Cmp::Le => 5,
    }
}

/// Kernel names of the reductions, indexed `[operator][dtype]` (`Sum, Min, Max` x
/// `F32, Bf16, I32`).
type Names = [[&'static str; 3]; 3];

const ALL_REDUCE_ONE_SHOT: Names = [
    [
        "symmem_all_reduce_one_shot_sum_f32",
        "symmem_all_reduce_one_shot_sum_bf16",
        "symmem_all_reduce_one_shot_sum_i32",
    ],
    [
        "symmem_all_reduce_one_shot_min_f32",
        "symmem_all_reduce_one_shot_min_bf16",
        "symmem_all_reduce_one_shot_min_i32",
    ],
    [
        "symmem_all_reduce_one_shot_max_f32",
        "symmem_all_reduce_one_shot_max_bf16",
        "symmem_all_reduce_one_shot_max_i32",
    ],
];

const ALL_REDUCE_TWO_SHOT: Names = [
    [
        "symmem_all_reduce_two_shot_sum_f32",
        "symmem_all_reduce_two_shot_sum_bf16",
        "symmem_all_reduce_two_shot_sum_i32",
    ],
    [
        "symmem_all_reduce_two_shot_min_f32",
        "symmem_all_reduce_two_shot_min_bf16",
        "symmem_all_reduce_two_shot_min_i32",
    ],
    [
        "symmem_all_reduce_two_shot_max_f32",
        "symmem_all_reduce_two_shot_max_bf16",
        "symmem_all_reduce_two_shot_max_i32",
    ],
];

const REDUCE_SCATTER: Names = [
    [
        "symmem_reduce_scatter_sum_f32",
        "symmem_reduce_scatter_sum_bf16",
        "symmem_reduce_scatter_sum_i32",
    ],
    [
        "symmem_reduce_scatter_min_f32",
        "symmem_reduce_scatter_min_bf16",
        "symmem_reduce_scatter_min_i32",
    ],
    [
        "symmem_reduce_scatter_max_f32",
        "symmem_reduce_scatter_max_bf16",
        "symmem_reduce_scatter_max_i32",
    ],
];

/// A kernel launch request: which kernel, with which arguments. Addresses are device
/// addresses in the launching rank's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelCall {
    /// `symmem_put`: `bytes` from local `src` into rank `to`'s copy of the symmetric
    /// buffer at local `dst`; `bases` is that buffer's device-resident peer-base table.
    Put {
        /// Local address inside the symmetric buffer.
        dst: u64,
        /// Local source.
        src: u64,
        /// Bytes to move.
        bytes: u64,
        /// Device address of the buffer's peer-base table (`world` u64 entries).
        bases: u64,
        /// World size (entries in the table).
        world: u32,
        /// The launching rank.
        cur: u32,
        /// The destination rank.
        to: u32,
    },
    /// `symmem_get`: `bytes` from rank `from`'s copy of the symmetric buffer at local
    /// `src` into local `dst`.
    Get {
        /// Local destination.
        dst: u64,
        /// Local address inside the symmetric buffer.
        src: u64,
        /// Bytes to move.
        bytes: u64,
        /// Device address of the buffer's peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        cur: u32,
        /// The source rank.
        from: u32,
    },
    /// `symmem_copy`: a direct copy with no translation (the benchmark baseline).
    Copy {
        /// Destination.
        dst: u64,
        /// Source.
        src: u64,
        /// Bytes to move.
        bytes: u64,
    },
    /// `symmem_rma_put`: grid-level put of `bytes` from local `src` to symmetric `dst`
    /// on rank `to` (each block moves its share).
    RmaPut {
        /// Symmetric destination (local address).
        dst: u64,
        /// Local source.
        src: u64,
        /// Device address of the peer-base table (`world` u64 entries).
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Bytes to move.
        bytes: u64,
        /// The destination rank.
        to: u32,
    },
    /// `symmem_rma_get`: grid-level get of `bytes` from symmetric `src` on rank `from`
    /// into local `dst`.
    RmaGet {
        /// Local destination.
        dst: u64,
        /// Symmetric source (local address).
        src: u64,
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Bytes to move.
        bytes: u64,
        /// The source rank.
        from: u32,
    },
    /// `symmem_rma_put_signal_add`: every block puts its share of `bytes` from local
    /// `src` to symmetric `dst` on rank `to`, then adds `value` to the symmetric signal
    /// word `sig` there (release): the data is complete once the word grew by
    /// `blocks * value`.
    PutSignalAdd {
        /// Symmetric destination (local address).
        dst: u64,
        /// Local source.
        src: u64,
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Bytes to move.
        bytes: u64,
        /// Symmetric signal word (local address, 8-aligned).
        sig: u64,
        /// The destination rank.
        to: u32,
        /// Added to the signal by every block.
        value: u64,
    },
    /// `symmem_barrier_all`: a barrier across all ranks over the symmetric signal array
    /// `sig` (`signal_words(world, blocks)` words); every rank launches the same grid.
    BarrierAll {
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Symmetric signal array (local address).
        sig: u64,
    },
    /// `symmem_all_gather`: rank `r`'s local `src[0..bytes]` lands in every rank's
    /// symmetric `dst[r*bytes..(r+1)*bytes]`.
    AllGather {
        /// Symmetric destination of `world * bytes` bytes.
        dst: u64,
        /// Local source of `bytes` bytes.
        src: u64,
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Bytes per rank.
        bytes: u64,
        /// Symmetric signal array.
        sig: u64,
    },
    /// `symmem_all_to_all`: chunk `j` of rank `i`'s local `src` lands in chunk `i` of
    /// rank `j`'s symmetric `dst` (chunks of `bytes`).
    AllToAll {
        /// Symmetric destination of `world * bytes` bytes.
        dst: u64,
        /// Local source of `world * bytes` bytes.
        src: u64,
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Bytes per chunk.
        bytes: u64,
        /// Symmetric signal array.
        sig: u64,
    },
    /// `symmem_broadcast`: rank `root`'s symmetric `src[0..bytes]` lands in every
    /// rank's local `dst`.
    Broadcast {
        /// Local destination of `bytes` bytes.
        dst: u64,
        /// Symmetric source of `bytes` bytes.
        src: u64,
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Bytes to broadcast.
        bytes: u64,
        /// Symmetric signal array.
        sig: u64,
        /// The root rank.
        root: u32,
    },
    /// `symmem_all_reduce_one_shot_{op}_{dtype}`: every rank reads every rank's
    /// symmetric `src[0..count]` and writes the reduction into its local `dst`.
    AllReduceOneShot {
        /// The operator (selects the kernel).
        op: ReduceOp,
        /// The element type (selects the kernel).
        dtype: DType,
        /// Local destination of `count` elements.
        dst: u64,
        /// Symmetric source of `count` elements.
        src: u64,
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Elements.
        count: u64,
        /// Symmetric signal array.
        sig: u64,
    },
    /// `symmem_all_reduce_two_shot_{op}_{dtype}`: reduce-scatter then all-gather,
    /// fused; `src` and `dst` both symmetric.
    AllReduceTwoShot {
        /// The operator (selects the kernel).
        op: ReduceOp,
        /// The element type (selects the kernel).
        dtype: DType,
        /// Symmetric destination of `count` elements.
        dst: u64,
        /// Symmetric source of `count` elements.
        src: u64,
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Elements.
        count: u64,
        /// Symmetric signal array.
        sig: u64,
    },
    /// `symmem_reduce_scatter_{op}_{dtype}`: rank `r`'s local `dst[0..count]` gets the
    /// reduction over every rank of chunk `r` of the symmetric `src`.
    ReduceScatter {
        /// The operator (selects the kernel).
        op: ReduceOp,
        /// The element type (selects the kernel).
        dtype: DType,
        /// Local destination of `count` elements.
        dst: u64,
        /// Symmetric source of `world * count` elements.
        src: u64,
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Elements per rank.
        count: u64,
        /// Symmetric signal array.
        sig: u64,
    },
    /// `symmem_rma_atomic_add_all`: every thread adds 1 to the symmetric `u64` counter
    /// on every rank, `iters` times (`AcqRel`, system scope).
    AtomicAddAll {
        /// Symmetric counter (local address, 8-aligned).
        counter: u64,
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Adds per thread per rank.
        iters: u32,
    },
    /// `symmem_rma_signal_wait_until`: one thread waits until this rank's local signal
    /// word `sig` satisfies `cmp` against `value` (acquire, system scope).
    SignalWaitUntil {
        /// Device address of the peer-base table.
        bases: u64,
        /// World size.
        world: u32,
        /// The launching rank.
        rank: u32,
        /// Local signal word (8-aligned).
        sig: u64,
        /// The condition.
        cmp: Cmp,
        /// The value compared with.
        value: u64,
    },
}

impl KernelCall {
    /// The kernel's exported symbol.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Put { .. } => "symmem_put",
            Self::Get { .. } => "symmem_get",
            Self::Copy { .. } => "symmem_copy",
            Self::RmaPut { .. } => "symmem_rma_put",
            Self::RmaGet { .. } => "symmem_rma_get",
            Self::PutSignalAdd { .. } => "symmem_rma_put_signal_add",
            Self::BarrierAll { .. } => "symmem_barrier_all",
            Self::AllGather { .. } => "symmem_all_gather",
            Self::AllToAll { .. } => "symmem_all_to_all",
            Self::Broadcast { .. } => "symmem_broadcast",
            Self::AllReduceOneShot { op, dtype, .. } => {
                ALL_REDUCE_ONE_SHOT[op_index(*op)][dtype.index()]
            }
            Self::AllReduceTwoShot { op, dtype, .. } => {
                ALL_REDUCE_TWO_SHOT[op_index(*op)][dtype.index()]
            }
            Self::ReduceScatter { op, dtype, .. } => REDUCE_SCATTER[op_index(*op)][dtype.index()],
            Self::AtomicAddAll { .. } => "symmem_rma_atomic_add_all",
            Self::SignalWaitUntil { .. } => "symmem_rma_signal_wait_until",
        }
    }

    /// The arguments in ABI order.
    pub fn args(&self) -> Vec<KernelArg> {
        use KernelArg::{U32, U64};
        match *self {
            Self::Put {
                dst,
                src,
                bytes,
                bases,
                world,
                cur,
                to: peer,
            }
            | Self::Get {
                dst,
                src,
                bytes,
                bases,
                world,
                cur,
                from: peer,
            } => {
                vec![
                    U64(dst),
                    U64(src),
                    U64(bytes),
                    U64(bases),
                    U32(world),
                    U32(cur),
                    U32(peer),
                ]
            }
            Self::Copy { dst, src, bytes } => vec![U64(dst), U64(src), U64(bytes)],
            Self::RmaPut {
                dst,
                src,
                bases,
                world,
                rank,
                bytes,
                to: peer,
            }
            | Self::RmaGet {
                dst,
                src,
                bases,
                world,
                rank,
                bytes,
                from: peer,
            } => vec![
                U64(dst),
                U64(src),
                U64(bases),
                U32(world),
                U32(rank),
                U64(bytes),
                U32(peer),
            ],
            Self::PutSignalAdd {
                dst,
                src,
                bases,
                world,
                rank,
                bytes,
                sig,
                to,
                value,
            } => vec![
                U64(dst),
                U64(src),
                U64(bases),
                U32(world),
                U32(rank),
                U64(bytes),
                U64(sig),
                U32(to),
                U64(value),
            ],
            Self::BarrierAll {
                bases,
                world,
                rank,
                sig,
            } => vec![U64(bases), U32(world), U32(rank), U64(sig)],
            Self::AllGather {
                dst,
                src,
                bases,
                world,
                rank,
                bytes,
                sig,
            }
            | Self::AllToAll {
                dst,
                src,
                bases,
                world,
                rank,
                bytes,
                sig,
            } => vec![
                U64(dst),
                U64(src),
                U64(bases),
                U32(world),
                U32(rank),
                U64(bytes),
                U64(sig),
            ],
            Self::Broadcast {
                dst,
                src,
                bases,
                world,
                rank,
                bytes,
                sig,
                root,
            } => vec![
                U64(dst),
                U64(src),
                U64(bases),
                U32(world),
                U32(rank),
                U64(bytes),
                U64(sig),
                U32(root),
            ],
            Self::AllReduceOneShot {
                dst,
                src,
                bases,
                world,
                rank,
                count,
                sig,
                ..
            }
            | Self::AllReduceTwoShot {
                dst,
                src,
                bases,
                world,
                rank,
                count,
                sig,
                ..
            }
            | Self::ReduceScatter {
                dst,
                src,
                bases,
                world,
                rank,
                count,
                sig,
                ..
            } => vec![
                U64(dst),
                U64(src),
                U64(bases),
                U32(world),
                U32(rank),
                U64(count),
                U64(sig),
            ],
            Self::AtomicAddAll {
                counter,
                bases,
                world,
                rank,
                iters,
            } => vec![U64(counter), U64(bases), U32(world), U32(rank), U32(iters)],
            Self::SignalWaitUntil {
                bases,
                world,
                rank,
                sig,
                cmp,
                value,
            } => vec![
                U64(bases),
                U32(world),
                U32(rank),
                U64(sig),
                U32(cmp_code(cmp)),
                U64(value),
            ],
        }
    }

    /// Bytes the kernel moves per rank and peer: what a GPU backend's default launch
    /// shape is sized by (zero for barriers, atomics and waits). Collectives launch
    /// with the fixed grid of their [`crate::collectives::Collectives`] instead.
    pub fn bytes(&self) -> u64 {
        match *self {
            Self::Put { bytes, .. }
            | Self::Get { bytes, .. }
            | Self::Copy { bytes, .. }
            | Self::RmaPut { bytes, .. }
            | Self::RmaGet { bytes, .. }
            | Self::PutSignalAdd { bytes, .. }
            | Self::AllGather { bytes, .. }
            | Self::AllToAll { bytes, .. }
            | Self::Broadcast { bytes, .. } => bytes,
            Self::AllReduceOneShot { dtype, count, .. }
            | Self::AllReduceTwoShot { dtype, count, .. }
            | Self::ReduceScatter { dtype, count, .. } => count * dtype.size() as u64,
            Self::BarrierAll { .. } | Self::AtomicAddAll { .. } | Self::SignalWaitUntil { .. } => 0,
        }
    }
}
