//! The allocator-agnostic kernel: it takes a symmetric view, which carries its buffer's
//! peer-base table, and reaches a peer's copy through it, so any provider of such a table
//! (the symmetric heap, a rendezvous of plain allocations, NVSHMEM, torch) drives it.
//!
//! A safe kernel: the views carry their lengths, and a peer this rank cannot reach with
//! loads and stores (a rank outside the world, or one on another node, whose table entry
//! is 0, as `nvshmem_ptr` gives no address for it) yields nothing, so the kernel writes
//! nothing there.
#![no_std]
#![cfg_attr(
    any(target_arch = "amdgpu", target_arch = "nvptx64"),
    feature(abi_gpu_kernel)
)]

use symmem_device::{Arch, SymViewMut, View, kernel};

// The README's kernel, word for word (`host/tests/docs.rs` checks that they match), so CI
// launches it from safe code past its buffer's end and runs its body under Miri.

/// Adds `value` to elements `0..n` of rank `to`'s copy of `data` (those it has).
#[kernel]
pub fn add_to_peer(arch: &impl Arch, data: SymViewMut<u32>, to: u32, n: u32, value: u32) {
    let i = arch.global_id();
    if i >= n as usize {
        return;
    }
    if let Some(peer) = data.peer(to as usize)
        && let Some(old) = peer.get(i)
    {
        peer.set(i, old.wrapping_add(value));
    }
}

/// This rank copies its `src` into rank `to`'s copy of `data`, at elements
/// `rank * n .. (rank + 1) * n` (`n` = `src.len()`), 16 bytes per store where both are
/// 16-aligned; nothing where that slot lies outside `data` or rank `to` is not reachable.
///
/// Rank `to`'s copy is this rank's pointer offset by `bases[to] - bases[rank]`
/// ([`SymViewMut::peer`]): an address rebuilt from an integer would lose the global
/// address space, and the stores would become flat ones on AMD GPUs.
#[kernel]
pub fn ring_put(arch: &impl Arch, data: SymViewMut<u32>, src: View<u32>, to: u32) {
    let (rank, n) = (data.table().rank(), src.len());
    let slot = data
        .peer(to as usize)
        .and_then(|remote| remote.slice(rank.checked_mul(n)?, n));
    if let Some(slot) = slot {
        slot.copy_from(arch, src);
    }
}

/// The README kernel's body on host threads (as the CPU backend runs it), under Miri in
/// CI: with `n` past the buffer's end, and a rank outside the table or on another node,
/// it writes nothing outside the buffer.
#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;
    use symmem_device::arch::host::{BlockBarrier, HostThread};

    struct NoBarrier;
    impl BlockBarrier for NoBarrier {
        fn wait(&self) {}
    }

    /// Two ranks' copies of a 64-element buffer inside one region, each followed by a
    /// guard of 64 elements; every rank adds to the other's copy with `n = 256`.
    #[test]
    fn add_to_peer_past_the_end_writes_nothing_outside_the_buffer() {
        const LEN: usize = 64;
        let mut region = std::vec![0u32; 4 * LEN];
        let base = region.as_mut_ptr();
        let copies = [base, base.wrapping_add(2 * LEN)];
        let bases: Vec<u64> = copies.iter().map(|p| p.addr() as u64).collect();
        for (rank, &copy) in copies.iter().enumerate() {
            // The table as symmem uploads it: its rank and length, then the entries.
            let table: Vec<u64> = [rank as u64, 2]
                .into_iter()
                .chain(bases.iter().copied())
                .collect();
            let entries = table.as_ptr().wrapping_add(2);
            // To the other rank, to a rank outside the table, and to one with entry 0.
            for to in [1 - rank as u32, 2, 7] {
                for thread in 0..256 {
                    // SAFETY: one thread of a one-block launch of 256 threads, alone.
                    let arch = unsafe { HostThread::new(thread, 0, 256, 1, &NoBarrier) };
                    let abi = (
                        (copy, LEN as u64, entries),
                        (to,),
                        (256,),
                        (rank as u32 + 1,),
                    );
                    // SAFETY: the lowered arguments of a symmetric view of `LEN` elements
                    // (every copy inside `region`) with its table, and numbers.
                    unsafe { super::add_to_peer.run_on_host(&arch, abi) };
                }
            }
        }
        for (rank, chunk) in region.chunks(LEN).enumerate() {
            // Chunks 0 and 2 are the copies: rank 1 added 2 to rank 0's, rank 0 added 1 to
            // rank 1's. Chunks 1 and 3 are the guards after them.
            let want = match rank {
                0 => 2,
                2 => 1,
                _ => 0,
            };
            assert!(chunk.iter().all(|&x| x == want), "chunk {rank}: {chunk:?}");
        }
    }
}
