//! The request ring's layout, shared with the host: the [`Ring`] and its module global
//! ([`SYMMEM_ENGINE`]), NVSHMEM's view of the heap ([`NvshmemHeap`],
//! [`SYMMEM_NVSHMEM`]), a request's [`Slot`] and the words that fill it ([`state`],
//! [`kind`], [`atomic`], [`request`]).

use crate::atomic::AtomicOp;

/// A rank's request ring, written by the host when the world starts its engine.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Ring {
    /// Address of `capacity` [`Slot`]s (host-mapped memory).
    pub slots: u64,
    /// Number of slots: a power of two.
    pub capacity: u64,
    /// Address of the `u64` ticket counter (device memory; host memory on the CPU).
    pub tickets: u64,
    /// How many tickets the proxy has completed (the proxy stores it after each one).
    pub completed: u64,
    /// This rank's symmetric heap: requests carry offsets into it.
    pub heap_base: u64,
    /// The heap's length in bytes.
    pub heap_len: u64,
    /// Address of `capacity * STAGING_BYTES` staging bytes (host-mapped), slot `i`'s at
    /// `i * STAGING_BYTES`.
    pub staging: u64,
    /// Non-zero when the proxy reaches kernel memory itself (the CPU backend, or an MPI
    /// that is GPU-aware): puts and gets name the kernel's own addresses. Zero: data is
    /// staged through the slot's staging bytes.
    pub direct: u64,
    /// Non-zero where kernels run on host threads (the CPU backend): the address of an
    /// `unsafe extern "C" fn(u64)` that runs one round of the proxy's work, given
    /// [`Ring::help_context`], unless another thread is running one. The ring's waits
    /// call it, so a waiting thread completes the requests itself instead of handing
    /// them to the proxy's thread (a context switch each way where the two share a
    /// core). Zero on GPUs, whose waits never read it.
    pub help: u64,
    /// The argument [`Ring::help`] takes.
    pub help_context: u64,
    /// Address of the ring the proxy updates (its [`Ring::completed`]): this ring's own,
    /// or, in a module's copy ([`SYMMEM_ENGINE`]), the original's.
    pub live: u64,
}

// SAFETY: `repr(C)` of `u64`s only: no padding, and every bit pattern is a value.
unsafe impl bytemuck::Zeroable for Ring {}
// SAFETY: as above; `Copy` and `'static`.
unsafe impl bytemuck::Pod for Ring {}

impl Ring {
    /// No ring: every word zero (a module's [`SYMMEM_ENGINE`] until the host sets it).
    pub const NONE: Ring = Ring {
        slots: 0,
        capacity: 0,
        tickets: 0,
        completed: 0,
        heap_base: 0,
        heap_len: 0,
        staging: 0,
        direct: 0,
        help: 0,
        help_context: 0,
        live: 0,
    };
}

/// This rank's ring as a module global, on GPUs: a copy of its words (all constant but
/// [`Ring::completed`], which is read through [`Ring::live`]) that the host writes when it
/// loads the module ([`Ring::NONE`] without an engine). The ring itself is host memory,
/// and each read of it crosses the bus: the copy spares a request that many round trips
/// (reading the control block's `ring`, then the ring's words, on every operation).
///
/// Only GPU builds have it; the host's documentation shows it too.
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64", doc))]
#[unsafe(no_mangle)]
pub static mut SYMMEM_ENGINE: Ring = Ring::NONE;

/// Where NVSHMEM sees this rank's heap, for a world whose off-node transport is NVSHMEM:
/// the heap registered with NVSHMEM as symmetric memory (`nvshmemx_buffer_register_symmetric`)
/// is reached through NVSHMEM at `alias + (p - heap_base)` for every heap address `p`.
/// Every word zero: no NVSHMEM (the module global [`SYMMEM_NVSHMEM`] until the host sets
/// it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvshmemHeap {
    /// This rank's heap, as kernels address it.
    pub heap_base: u64,
    /// The heap's length in bytes.
    pub heap_len: u64,
    /// The heap's address in NVSHMEM's symmetric space (non-zero while the world runs).
    pub alias: u64,
}

// SAFETY: `repr(C)` of `u64`s only: no padding, and every bit pattern is a value.
unsafe impl bytemuck::Zeroable for NvshmemHeap {}
// SAFETY: as above; `Copy` and `'static`.
unsafe impl bytemuck::Pod for NvshmemHeap {}

impl NvshmemHeap {
    /// No NVSHMEM: every word zero.
    pub const NONE: NvshmemHeap = NvshmemHeap {
        heap_base: 0,
        heap_len: 0,
        alias: 0,
    };
}

/// This rank's heap as NVSHMEM sees it, as a module global of code objects built with
/// NVSHMEM (feature `nvshmem`, `sm_…` targets): written by the host when it loads the
/// module into a world whose transport is NVSHMEM, [`NvshmemHeap::NONE`] otherwise, so a
/// module built with NVSHMEM still runs in a world without it (through the ring, or
/// nowhere). Only such builds have it; the host's documentation shows it too.
#[cfg(any(all(feature = "nvshmem", target_arch = "nvptx64"), doc))]
#[unsafe(no_mangle)]
pub static mut SYMMEM_NVSHMEM: NvshmemHeap = NvshmemHeap::NONE;

/// One request. Field meanings per [`kind`]; see the module documentation for `turn`.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Slot {
    /// `lap * 4 + state` (see [`state`]).
    pub turn: u64,
    /// What to do: a [`request`] word.
    pub request: u64,
    /// The target rank.
    pub peer: u64,
    /// The byte offset in the target's symmetric heap.
    pub offset: u64,
    /// The local side of a put or get: a kernel address ([`Ring::direct`]), else unused
    /// (the data is in the slot's staging bytes, or inline in `operand`/`compare`).
    pub local: u64,
    /// Bytes moved by a put or get.
    pub len: u64,
    /// An atomic's operand; an inline put's first 8 bytes.
    pub operand: u64,
    /// A compare-and-swap's expected value; an inline put's second 8 bytes.
    pub compare: u64,
    /// The reply: an atomic's old value; an inline get's first 8 bytes.
    pub result: u64,
    /// An inline get's second 8 bytes.
    pub result_hi: u64,
}

/// Bytes of staging each slot owns: the largest piece one put request moves (a get's is
/// [`GET_CHUNK`]). Where the data is staged, each piece crosses the wire as a message of
/// its own, and messages this size move much faster than 64 KiB ones (`mpi_floor.c`: 5.9
/// against 3.4 GB/s on an H200's host, 4.95 against 3.41 on an H100's): a 64 MiB staged
/// put reached 0.53 of `MPI_Put` with 64 KiB pieces and 0.85 with these on the H200, 0.38
/// and 0.60-0.69 on the H100 (`BENCHMARKS.md`).
pub const STAGING_BYTES: usize = 256 << 10;
/// The largest piece one staged get requests: its reply is copied out of the ring's host
/// memory by the one thread that waits for it, and with replies of a whole slot
/// ([`STAGING_BYTES`]) a 16 MiB all-reduce at 2 nodes x 2 took 54-58 ms on an H100,
/// against 39-40 ms with these.
pub const GET_CHUNK: usize = 64 << 10;
/// Puts and gets of at most this many bytes travel inside the slot.
pub const INLINE_BYTES: usize = 16;

/// The states of a slot's `turn` word (added to `lap * 4`).
pub mod state {
    /// The slot is free for this lap's ticket.
    pub const FREE: u64 = 0;
    /// The request is filled in and waits for the proxy.
    pub const FULL: u64 = 1;
    /// The proxy completed the request and its reply is in the slot.
    pub const DONE: u64 = 2;
}

/// What a request does: the low byte of its [`request`] word.
pub mod kind {
    /// Bytes from here to the target.
    pub const PUT: u64 = 1;
    /// Bytes from the target to here.
    pub const GET: u64 = 2;
    /// An atomic on one element of the target, applied by the target.
    pub const ATOMIC: u64 = 3;
}

/// The atomic a request applies (bits 8-15 of its [`request`] word): an [`AtomicOp`]'s
/// index in [`AtomicOp::ALL`], or one of these.
pub mod atomic {
    /// Compare-and-swap.
    pub const CAS: u64 = 8;
    /// Atomic load.
    pub const LOAD: u64 = 9;
    /// Atomic store.
    pub const STORE: u64 = 10;
}

/// The packing of [`Slot::request`].
pub mod request {
    /// The request wants a reply: the proxy stores [`super::state::DONE`] and the thread
    /// frees the slot.
    pub const REPLY: u64 = 1 << 32;
    /// The data is inline in the slot (`operand`/`compare` for a put, `result`/
    /// `result_hi` for a get).
    pub const INLINE: u64 = 1 << 33;
    /// The data is in the slot's staging bytes.
    pub const STAGED: u64 = 1 << 34;
    /// An atomic's element is signed (min and max compare signed).
    pub const SIGNED: u64 = 1 << 35;

    /// A request word: `kind`, the atomic code, the element size in bytes, and flags.
    pub const fn pack(kind: u64, atomic: u64, size: u64, flags: u64) -> u64 {
        kind | (atomic << 8) | (size << 16) | flags
    }
    /// The request's kind.
    pub const fn kind(word: u64) -> u64 {
        word & 0xff
    }
    /// The request's atomic code.
    pub const fn atomic(word: u64) -> u64 {
        (word >> 8) & 0xff
    }
    /// The element size of an atomic.
    pub const fn size(word: u64) -> u64 {
        (word >> 16) & 0xff
    }
}

/// The index of `op` in [`AtomicOp::ALL`].
pub const fn atomic_code(op: AtomicOp) -> u64 {
    match op {
        AtomicOp::Add => 0,
        AtomicOp::Sub => 1,
        AtomicOp::Xchg => 2,
        AtomicOp::And => 3,
        AtomicOp::Or => 4,
        AtomicOp::Xor => 5,
        AtomicOp::Min => 6,
        AtomicOp::Max => 7,
    }
}
