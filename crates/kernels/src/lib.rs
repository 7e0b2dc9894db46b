//! symmem's own kernels, declared with `#[kernel]` exactly as a user's kernel crate
//! declares its own: `symmem-build` builds this crate into the code objects the `symmem`
//! host crate embeds, and the host launches each kernel through the same checked path a
//! user's launch takes.
//!
//! * [`symmem_put`], [`symmem_get`], [`symmem_copy`]: translated put and get, and the
//!   direct copy they are measured against, over the grid-level bodies [`put`], [`get`]
//!   and [`copy`] below. Every body is a grid-stride loop, so it is correct for any
//!   launch geometry; the fast geometry on a GPU is about one 16-byte vector per thread,
//!   where the loop runs once.
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

use symmem_device::{PeerTable, kernel};

use symmem_arch::Arch;
use symmem_translate::{PeerBases, U32x4};

/// Bytes one thread moves per loop iteration on the vector path.
pub const VECTOR_BYTES: usize = core::mem::size_of::<U32x4>();

/// Copies `n` bytes from `src` to `dst`, the whole grid cooperating.
///
/// When both pointers are 16-byte aligned the bulk moves as [`U32x4`] (one vector load
/// and store per element) and the last `n % 16` bytes move one byte per thread; otherwise
/// every byte moves on its own.
///
/// # Safety
/// `src..src+n` must be readable and `dst..dst+n` writable by every thread of the
/// launch, the ranges must not overlap, and nothing else may write `dst..dst+n` during
/// the launch.
#[inline(always)]
pub unsafe fn copy<A: Arch>(arch: &A, dst: *mut u8, src: *const u8, n: usize) {
    let aligned = (dst.addr() | src.addr()).is_multiple_of(VECTOR_BYTES);
    // SAFETY: forwarded from the caller; `aligned` was computed from these pointers.
    unsafe { copy_with(arch, dst, src, n, aligned) }
}

/// [`copy`] with the vector-path decision made by the caller.
///
/// # Safety
/// As [`copy`]; `aligned` may be true only if both `dst` and `src` are 16-byte aligned.
#[inline(always)]
unsafe fn copy_with<A: Arch>(arch: &A, dst: *mut u8, src: *const u8, n: usize, aligned: bool) {
    let stride = arch.global_threads();
    let mut i = arch.global_id();
    if aligned {
        let vectors = n / VECTOR_BYTES;
        let (vdst, vsrc) = (dst.cast::<U32x4>(), src.cast::<U32x4>());
        while i < vectors {
            // SAFETY: i < n / 16 keeps both 16-byte accesses in range; both aligned.
            unsafe { vdst.add(i).write(vsrc.add(i).read()) };
            i += stride;
        }
        let done = vectors * VECTOR_BYTES;
        let mut tail = arch.global_id();
        while tail < n - done {
            // SAFETY: done + tail < n.
            unsafe { dst.add(done + tail).write(src.add(done + tail).read()) };
            tail += stride;
        }
    } else {
        while i < n {
            // SAFETY: i < n.
            unsafe { dst.add(i).write(src.add(i).read()) };
            i += stride;
        }
    }
}

/// Put: copies `n` bytes from the local `src` into rank `to`'s copy of the symmetric
/// buffer whose local address is `dst`.
///
/// # Safety
/// `bases`' entries are congruent modulo 16 (every provider guarantees it);
/// `cur` and `to` are ranks of `bases`; `dst..dst+n` lies in a symmetric allocation whose
/// peer-base table is `bases` (so `bases[cur] <= dst`), rank `to`'s copy is mapped; plus
/// the requirements of [`copy`] on the translated destination.
#[inline(always)]
pub unsafe fn put<A: Arch>(
    arch: &A,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    bases: PeerBases<'_>,
    cur: usize,
    to: usize,
) {
    // The vector path is chosen from the local pointers, before the table is read, so
    // the first source loads do not wait for the table loads. Valid because peer-base
    // entries are congruent modulo 16 (the provider contract, see `PeerBases`): the
    // translated destination has the local one's alignment.
    let aligned = (dst.addr() | src.addr()).is_multiple_of(VECTOR_BYTES);
    // SAFETY: forwarded from the caller; alignment carries over through translation.
    unsafe { copy_with(arch, bases.remote_unchecked(dst, cur, to), src, n, aligned) }
}

/// Get: copies `n` bytes from rank `from`'s copy of the symmetric buffer whose local
/// address is `src` into the local `dst`.
///
/// # Safety
/// As [`put`], with the roles of source and destination swapped.
#[inline(always)]
pub unsafe fn get<A: Arch>(
    arch: &A,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    bases: PeerBases<'_>,
    cur: usize,
    from: usize,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        copy(
            arch,
            dst,
            bases.remote_unchecked(src.cast_mut(), cur, from),
            n,
        )
    }
}

/// Translated put: `n` bytes from local `src` into rank `to`'s copy of the symmetric
/// buffer at local address `dst`, whose peer-base table is `bases` (`world` entries).
///
/// # Safety
/// See [`put`].
#[kernel]
#[allow(clippy::too_many_arguments)]
pub unsafe fn symmem_put(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    n: u64,
    bases: PeerTable,
    world: u32,
    cur: u32,
    to: u32,
) {
    // SAFETY: forwarded from the host launch, which checked ranks and ranges.
    unsafe {
        let bases = bases.bases(world as usize);
        put(arch, dst, src, n as usize, bases, cur as usize, to as usize)
    }
}

/// Translated get: `n` bytes from rank `from`'s copy of the symmetric buffer at local
/// address `src` into local `dst`.
///
/// # Safety
/// See [`get`].
#[kernel]
#[allow(clippy::too_many_arguments)]
pub unsafe fn symmem_get(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    n: u64,
    bases: PeerTable,
    world: u32,
    cur: u32,
    from: u32,
) {
    // SAFETY: forwarded from the host launch, which checked ranks and ranges.
    unsafe {
        let bases = bases.bases(world as usize);
        get(
            arch,
            dst,
            src,
            n as usize,
            bases,
            cur as usize,
            from as usize,
        )
    }
}

/// Direct copy with no translation: the baseline the translated kernels are measured
/// against.
///
/// # Safety
/// See [`copy`].
#[kernel]
pub unsafe fn symmem_copy(arch: &impl Arch, dst: *mut u8, src: *const u8, n: u64) {
    // SAFETY: forwarded from the host launch.
    unsafe { copy(arch, dst, src, n as usize) }
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
        assert_eq!(put.slots.len(), 7);
        let mut names: Vec<_> = ours.iter().map(|d| d.name).collect();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "a kernel is recorded twice");
        // 3 point-to-point + 8 rma (with the put-until-delivered benchmark loop and the
        // copy between two peers) + the engine's atomic + 3 data collectives + 45
        // reductions (3 shapes x 3 operators x 5 element types) + 15 all-reduces across
        // nodes + 15 all-reduces of registered memory (through tables of their own) + 15
        // all-reduces through scratch (staged) + 3 barrier-free all-reduces (f32, bf16,
        // f16), their reset, the empty kernel + 4 probes.
        assert_eq!(count, 114, "{names:?}");
    }
}
