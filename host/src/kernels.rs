//! The catalogue of kernels a backend can launch, with their arguments.
//!
//! One [`KernelCall`] names a kernel of `device/kernels` and carries its arguments in
//! the order the kernel's ABI takes them. GPU backends look the kernel up by
//! [`KernelCall::name`] in the loaded code object and pack [`KernelCall::args`]; the CPU
//! backend runs the same body from `symmem-kernels` on host threads.

/// One kernel argument, as the kernel's ABI lays it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelArg {
    /// A 64-bit value: a device address or a length.
    U64(u64),
    /// A 32-bit value: a rank or a world size.
    U32(u32),
}

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
}

impl KernelCall {
    /// The kernel's exported symbol.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Put { .. } => "symmem_put",
            Self::Get { .. } => "symmem_get",
            Self::Copy { .. } => "symmem_copy",
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
        }
    }

    /// Bytes the kernel moves: what a GPU launch sizes its grid by.
    pub fn bytes(&self) -> u64 {
        match *self {
            Self::Put { bytes, .. } | Self::Get { bytes, .. } | Self::Copy { bytes, .. } => bytes,
        }
    }
}
