//! symmem's own kernels, declared with `#[kernel]` exactly as a user's kernel crate
//! declares its own: `symmem-build` builds this crate into the code objects the `symmem`
//! host crate embeds, and the host launches each kernel through the same checked path a
//! user's launch takes.
//!
//! * [`symmem_put`], [`symmem_get`], [`symmem_copy`]: translated put and get, and the
//!   direct copy they are measured against: safe kernels over views
//!   ([`SymViewMut::put_from`](symmem_device::SymViewMut::put_from) and
//!   [`ViewMut::copy_from`](symmem_device::ViewMut::copy_from), a grid-stride loop,
//!   correct for any launch geometry; the fast geometry on a GPU is about one 16-byte
//!   vector per thread, where the loop runs once).
//! * `rma`: device RMA entry points (put, get, put with signal, the cross-rank barrier,
//!   atomics under contention, a signal wait, the put-until-delivered loop of the engine
//!   benchmark) over `symmem-rma`, and the off-node engine's atomic
//!   (`symmem_engine_atomic`, launched by a target's proxy on a GPU heap).
//! * `collectives`: all-gather, all-to-all, broadcast and the reductions, one kernel per
//!   (operator, element type).
//! * `probes`: one library operation each, for the codegen tests.
//!
//! The `symmem-rma` entry points take their arguments in one order: buffers, the
//! peer-base table, `world`, `rank`, counts, the signal array, then extra ranks or
//! values.
//!
//! # Which kernels are safe
//!
//! A kernel is a safe `fn` where its parameters keep it safe (views that carry their
//! length and table, checked peer access); the rest are `unsafe fn`s with a `# Safety`
//! section, launched only through `Module::launch_unchecked` by the host call that checks
//! that section:
//!
//! | kernels | form | why |
//! | --- | --- | --- |
//! | `symmem_put`, `symmem_get`, `symmem_copy`, `symmem_table_probe`, `symmem_empty` | safe | views and a table bound every access; a rank out of range or off the node reaches nothing |
//! | the collectives: `symmem_barrier_all`, `symmem_all_gather`, `symmem_all_to_all`, `symmem_broadcast`, every reduction (`symmem_all_reduce_*`, `symmem_reduce_scatter_*`), `symmem_lamport_reset` | `unsafe` | their contract spans ranks (every rank launches the same call with the same counts and grid, the signal array or workspace is one handle's alone, the staged or exchanged buffers are the call's), which no parameter type states; `Collectives` checks each call's counts against its views, agrees it across ranks, then launches |
//! | the RMA entry points (`symmem_rma_*`), `symmem_engine_atomic` | `unsafe` | raw pointers and ranks of a team whose off-node peers the engine reaches; `World::put`/`get`, `Collectives` and the engine check ranges and ranks before they launch |
//! | the probes (`symmem_probe_*`) | `unsafe` | codegen exhibits only; no host code launches them |
#![no_std]
#![cfg_attr(
    any(target_arch = "amdgpu", target_arch = "nvptx64"),
    feature(abi_gpu_kernel)
)]

mod collectives;
mod probes;
mod rma;

pub use collectives::*;
pub use probes::*;
pub use rma::*;

use symmem_device::{PeerTable, SymView, SymViewMut, View, ViewMut, kernel};

use symmem_arch::Arch;

/// Translated put: `src` (this rank's bytes) into rank `to`'s copy of `dst`, as many
/// bytes as both views hold; nothing for a rank `to` out of range or on another node
/// (its entry is 0). Safe: the views carry their lengths and `dst` its own table.
#[kernel]
pub fn symmem_put(arch: &impl Arch, dst: SymViewMut<u8>, src: View<u8>, to: u32) {
    dst.put_from(arch, to as usize, src);
}

/// Translated get: rank `from`'s copy of `src` into `dst` (this rank's bytes), as many
/// bytes as both views hold; nothing for a rank out of range or on another node. Safe,
/// as [`symmem_put`].
#[kernel]
pub fn symmem_get(arch: &impl Arch, dst: ViewMut<u8>, src: SymView<u8>, from: u32) {
    if let Some(remote) = src.peer(from as usize) {
        dst.copy_from(arch, remote);
    }
}

/// What a peer table says in the kernel: `out[0]` its length, `out[1]` its rank, `out[2]`
/// entry `at` ([`PeerTable::base`]: 0 for a rank out of range or a peer on another
/// node). Safe: the table's header bounds every read. For the host's tests of table
/// arguments (a foreign, dropped or unagreed table is refused before launch) and layout.
#[kernel]
pub fn symmem_table_probe(arch: &impl Arch, table: PeerTable, at: u32, out: ViewMut<u64>) {
    if arch.global_id() == 0 {
        out.set(0, table.len() as u64);
        out.set(1, table.rank() as u64);
        out.set(2, table.base(at as usize).unwrap_or(0));
    }
}

/// Direct copy with no translation, the baseline the translated kernels are measured
/// against: `src` into `dst`, as many bytes as both hold. Safe: the views carry their
/// lengths.
#[kernel]
pub fn symmem_copy(arch: &impl Arch, dst: ViewMut<u8>, src: View<u8>) {
    dst.copy_from(arch, src);
}

#[cfg(test)]
mod declarations {
    extern crate std;
    use std::vec::Vec;

    #[test]
    #[cfg_attr(miri, ignore = "reads section bounds the linker makes")]
    fn every_kernel_is_declared_once_with_its_slots() {
        let ours: Vec<_> = symmem_device::declarations()
            .filter(|d| d.crate_name == "symmem_kernels")
            .collect();
        let put = ours
            .iter()
            .find(|d| d.name == "symmem_put")
            .expect("symmem_put");
        // A symmetric view (address, length, table), a view (address, length), a rank.
        let primitives: Vec<usize> = put.slots.iter().map(|p| p.len()).collect();
        assert_eq!(primitives, [3, 2, 1]);
        let mut names: Vec<_> = ours.iter().map(|d| d.name).collect();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "a kernel is recorded twice");
        // 3 point-to-point + the table probe + 8 rma (with the put-until-delivered
        // benchmark loop and the copy between two peers) + the engine's atomic + 3 data
        // collectives + 45 reductions (3 shapes x 3 operators x 5 element types) + 15 all-reduces across
        // nodes + 15 all-reduces of registered memory (through tables of their own) + 15
        // all-reduces through scratch (staged) + 3 barrier-free all-reduces (f32, bf16,
        // f16), their reset, the empty kernel + 4 probes.
        assert_eq!(count, 115, "{names:?}");
    }
}
