//! NVSHMEM's device API, for kernels of a crate built with NVSHMEM (this crate's
//! `nvshmem` feature, and `symmem_build::KernelCrate::nvshmem` in the build script, which
//! links NVSHMEM's device library into the `sm_…` code objects): the functions as NVSHMEM's
//! headers declare them (`nvshmem.h`, `nvshmemx.h`), on nvptx64 only.
//!
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
