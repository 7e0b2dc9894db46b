//! NVSHMEM's device API, for kernels of a crate built with NVSHMEM (this crate's
//! `nvshmem` feature, `symmem-device`'s of the same name, and
//! `symmem_build::KernelCrate::nvshmem` in the build script, which links NVSHMEM's device
//! library into the `sm_…` code objects): the functions as NVSHMEM's headers declare them
//! (`nvshmem.h`, `nvshmemx.h`), on nvptx64 only. The RMA layer's off-node path calls them
//! itself where the world's transport is NVSHMEM ([`crate::engine`]); a kernel needs
//! them directly only for what `Team` does not offer.
//!
//! Addresses are NVSHMEM's symmetric addresses: in a symmem world, a heap address `p` is
//! `p - heap_base + alias` for the [`crate::engine::NvshmemHeap`] the host wrote.
//! A world whose transport is NVSHMEM initialises each loaded module's NVSHMEM state;
//! calling these in a module of another world, or before that, is undefined (as in C).
//! symmem's own waits stay symmem's (bounded); NVSHMEM's wait functions are not declared
//! here for that reason.

use core::ffi::{c_int, c_void};

unsafe extern "C" {
    /// `nvshmem_putmem_nbi`: `bytes` from local `source` to `dest` (symmetric) on `pe`,
    /// complete at the next `nvshmem_quiet`.
    pub fn nvshmem_putmem_nbi(dest: *mut c_void, source: *const c_void, bytes: usize, pe: c_int);
    /// `nvshmem_getmem`: `bytes` from `source` (symmetric) on `pe` into local `dest`,
    /// complete on return.
    pub fn nvshmem_getmem(dest: *mut c_void, source: *const c_void, bytes: usize, pe: c_int);
    /// `nvshmem_getmem_nbi`: as `nvshmem_getmem`, complete at the next `nvshmem_quiet`.
    pub fn nvshmem_getmem_nbi(dest: *mut c_void, source: *const c_void, bytes: usize, pe: c_int);
    /// `nvshmem_putmem_signal_nbi`: a put, then `sig_op` (NVSHMEM's `NVSHMEM_SIGNAL_SET`
    /// or `NVSHMEM_SIGNAL_ADD`) of `signal` on `sig_addr` on `pe`, ordered after the data.
    pub fn nvshmem_putmem_signal_nbi(
        dest: *mut c_void,
        source: *const c_void,
        bytes: usize,
        sig_addr: *mut u64,
        signal: u64,
        sig_op: c_int,
        pe: c_int,
    );
    /// `nvshmem_uint64_atomic_fetch_add` on `dest` (symmetric) on `pe`.
    pub fn nvshmem_uint64_atomic_fetch_add(dest: *mut u64, value: u64, pe: c_int) -> u64;
    /// `nvshmem_uint64_atomic_add` on `dest` (symmetric) on `pe`.
    pub fn nvshmem_uint64_atomic_add(dest: *mut u64, value: u64, pe: c_int);
    /// `nvshmem_uint64_atomic_compare_swap` on `dest` (symmetric) on `pe`.
    pub fn nvshmem_uint64_atomic_compare_swap(
        dest: *mut u64,
        cond: u64,
        value: u64,
        pe: c_int,
    ) -> u64;
    /// `nvshmemx_putmem_nbi_block`: as `nvshmem_putmem_nbi`, by every thread of the block
    /// together (each calls it with the same arguments).
    pub fn nvshmemx_putmem_nbi_block(
        dest: *mut c_void,
        source: *const c_void,
        bytes: usize,
        pe: c_int,
    );
    /// `nvshmemx_getmem_block`: as `nvshmem_getmem`, by every thread of the block
    /// together; the bytes are in `dest` for the whole block on return.
    pub fn nvshmemx_getmem_block(dest: *mut c_void, source: *const c_void, bytes: usize, pe: c_int);
    /// `nvshmem_uint8_g`: the byte at `source` (symmetric) on `pe`.
    pub fn nvshmem_uint8_g(source: *const u8, pe: c_int) -> u8;
    /// `nvshmem_uint16_g`.
    pub fn nvshmem_uint16_g(source: *const u16, pe: c_int) -> u16;
    /// `nvshmem_uint32_g`.
    pub fn nvshmem_uint32_g(source: *const u32, pe: c_int) -> u32;
    /// `nvshmem_uint64_g`.
    pub fn nvshmem_uint64_g(source: *const u64, pe: c_int) -> u64;
    /// `nvshmem_uint8_p`: stores `value` at `dest` (symmetric) on `pe`.
    pub fn nvshmem_uint8_p(dest: *mut u8, value: u8, pe: c_int);
    /// `nvshmem_uint16_p`.
    pub fn nvshmem_uint16_p(dest: *mut u16, value: u16, pe: c_int);
    /// `nvshmem_uint32_p`.
    pub fn nvshmem_uint32_p(dest: *mut u32, value: u32, pe: c_int);
    /// `nvshmem_uint64_p`.
    pub fn nvshmem_uint64_p(dest: *mut u64, value: u64, pe: c_int);
    /// `nvshmem_uint32_atomic_fetch`: an atomic load of `source` (symmetric) on `pe`.
    pub fn nvshmem_uint32_atomic_fetch(source: *const u32, pe: c_int) -> u32;
    /// `nvshmem_uint32_atomic_set`: an atomic store to `dest` (symmetric) on `pe`.
    pub fn nvshmem_uint32_atomic_set(dest: *mut u32, value: u32, pe: c_int);
    /// `nvshmem_uint32_atomic_swap`.
    pub fn nvshmem_uint32_atomic_swap(dest: *mut u32, value: u32, pe: c_int) -> u32;
    /// `nvshmem_uint32_atomic_fetch_add`.
    pub fn nvshmem_uint32_atomic_fetch_add(dest: *mut u32, value: u32, pe: c_int) -> u32;
    /// `nvshmem_uint32_atomic_add` (no value returned).
    pub fn nvshmem_uint32_atomic_add(dest: *mut u32, value: u32, pe: c_int);
    /// `nvshmem_uint32_atomic_fetch_and`.
    pub fn nvshmem_uint32_atomic_fetch_and(dest: *mut u32, value: u32, pe: c_int) -> u32;
    /// `nvshmem_uint32_atomic_and` (no value returned).
    pub fn nvshmem_uint32_atomic_and(dest: *mut u32, value: u32, pe: c_int);
    /// `nvshmem_uint32_atomic_fetch_or`.
    pub fn nvshmem_uint32_atomic_fetch_or(dest: *mut u32, value: u32, pe: c_int) -> u32;
    /// `nvshmem_uint32_atomic_or` (no value returned).
    pub fn nvshmem_uint32_atomic_or(dest: *mut u32, value: u32, pe: c_int);
    /// `nvshmem_uint32_atomic_fetch_xor`.
    pub fn nvshmem_uint32_atomic_fetch_xor(dest: *mut u32, value: u32, pe: c_int) -> u32;
    /// `nvshmem_uint32_atomic_xor` (no value returned).
    pub fn nvshmem_uint32_atomic_xor(dest: *mut u32, value: u32, pe: c_int);
    /// `nvshmem_uint32_atomic_compare_swap`.
    pub fn nvshmem_uint32_atomic_compare_swap(
        dest: *mut u32,
        cond: u32,
        value: u32,
        pe: c_int,
    ) -> u32;
    /// `nvshmem_uint64_atomic_fetch`: an atomic load of `source` (symmetric) on `pe`.
    pub fn nvshmem_uint64_atomic_fetch(source: *const u64, pe: c_int) -> u64;
    /// `nvshmem_uint64_atomic_set`: an atomic store to `dest` (symmetric) on `pe`.
    pub fn nvshmem_uint64_atomic_set(dest: *mut u64, value: u64, pe: c_int);
    /// `nvshmem_uint64_atomic_swap`.
    pub fn nvshmem_uint64_atomic_swap(dest: *mut u64, value: u64, pe: c_int) -> u64;
    /// `nvshmem_uint64_atomic_fetch_and`.
    pub fn nvshmem_uint64_atomic_fetch_and(dest: *mut u64, value: u64, pe: c_int) -> u64;
    /// `nvshmem_uint64_atomic_and` (no value returned).
    pub fn nvshmem_uint64_atomic_and(dest: *mut u64, value: u64, pe: c_int);
    /// `nvshmem_uint64_atomic_fetch_or`.
    pub fn nvshmem_uint64_atomic_fetch_or(dest: *mut u64, value: u64, pe: c_int) -> u64;
    /// `nvshmem_uint64_atomic_or` (no value returned).
    pub fn nvshmem_uint64_atomic_or(dest: *mut u64, value: u64, pe: c_int);
    /// `nvshmem_uint64_atomic_fetch_xor`.
    pub fn nvshmem_uint64_atomic_fetch_xor(dest: *mut u64, value: u64, pe: c_int) -> u64;
    /// `nvshmem_uint64_atomic_xor` (no value returned).
    pub fn nvshmem_uint64_atomic_xor(dest: *mut u64, value: u64, pe: c_int);
    /// `nvshmem_fence`: this thread's puts and atomics to each PE are delivered in order.
    pub fn nvshmem_fence();
    /// `nvshmem_quiet`: this thread's non-blocking operations are complete.
    pub fn nvshmem_quiet();
    /// `nvshmem_ptr`: `ptr` (symmetric) on `pe` as loads and stores reach it, or null.
    pub fn nvshmem_ptr(ptr: *const c_void, pe: c_int) -> *mut c_void;
    /// `nvshmem_my_pe`.
    pub fn nvshmem_my_pe() -> c_int;
    /// `nvshmem_n_pes`.
    pub fn nvshmem_n_pes() -> c_int;
}
