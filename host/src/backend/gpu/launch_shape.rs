//! The default launch shape of a grid-stride kernel that moves bytes.

use crate::backend::Grid;

/// Threads per block of the default launch shape.
pub(in crate::backend) const THREADS: u32 = 256;
/// Bytes one thread moves in the default launch shape (one 16-byte vector).
const BYTES_PER_THREAD: u64 = 16;

/// The default launch shape for moving `bytes`: [`THREADS`] threads per block and about
/// one 16-byte vector per thread (DESIGN.md, finding 3), at least one block and at most
/// `max_blocks` (the runtime's limit; the kernels are grid-stride loops, so fewer blocks
/// still cover all).
pub(in crate::backend) fn grid_for_bytes(bytes: u64, max_blocks: u64) -> Grid {
    let threads = bytes.div_ceil(BYTES_PER_THREAD);
    let blocks = threads.div_ceil(u64::from(THREADS)).clamp(1, max_blocks);
    Grid {
        blocks: blocks as u32,
        threads: THREADS,
    }
}
