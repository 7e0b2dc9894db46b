//! The allocator-agnostic kernel: it takes a buffer and that buffer's peer-base table as
//! two ordinary arguments and translates itself, so any provider of such a table (the
//! symmetric heap, a rendezvous of plain allocations, NVSHMEM, torch) drives it.
//!
//! An entry of 0 is a peer this rank cannot reach with loads and stores (it is on another
//! node: symmem's tables, like `nvshmem_ptr`, give no address for it); a kernel that
//! translates by hand checks the entry before it uses it, as this one does.
#![no_std]
#![cfg_attr(
    any(target_arch = "amdgpu", target_arch = "nvptx64"),
    feature(abi_gpu_kernel)
)]

use symmem_device::{Arch, PeerTable, U32x4, kernel};

/// Rank `cur` copies its `n` elements of `src` into rank `to`'s copy of `data`, at
/// elements `cur * n .. (cur + 1) * n`, 16 bytes per store.
///
/// `data` is this rank's copy of a buffer of `world * n` `u32`s whose table is `bases`;
/// the address on rank `to` is `p - bases[cur] + bases[to]`, computed here as a byte
/// offset added to the local pointer (an address rebuilt from an integer would lose the
/// global address space, and the stores would become flat ones on AMD GPUs).
///
/// # Safety
/// `n` is a multiple of 4, `data` and `src` are 16-byte aligned, `src` holds `n`
/// elements, `data` is the local copy of the buffer `bases` describes with
/// `(cur + 1) * n` elements or more, and `cur`, `to` are ranks of that table.
#[kernel]
pub unsafe fn ring_put(
    arch: &impl Arch,
    data: *mut u32,
    src: *const u32,
    bases: PeerTable,
    cur: u32,
    to: u32,
    n: u32,
) {
    // SAFETY: the caller's contract above.
    unsafe {
        let target = bases.base(to as usize);
        if target == 0 {
            // Not reachable with loads and stores (another node): nothing to write.
            return;
        }
        let offset = target.wrapping_sub(bases.base(cur as usize));
        let remote = data.wrapping_byte_add(offset as usize);
        let dst = remote.add(cur as usize * n as usize).cast::<U32x4>();
        let src = src.cast::<U32x4>();
        let mut i = arch.global_id();
        while i < n as usize / 4 {
            dst.add(i).write(src.add(i).read());
            i += arch.global_threads();
        }
    }
}
