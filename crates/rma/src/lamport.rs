//! A barrier-free one-shot all-reduce (sum of `f32`, [`bf16`] or [`struct@f16`]), in the Lamport style of
//! TensorRT-LLM and FlashInfer: no barrier on entry or exit, readers spin on the data.
//!
//! Each rank owns a symmetric **workspace** ([`workspace_bytes`]): a header, then three
//! buffers of `world` slots of `capacity` bytes. Call `k` of a rank uses buffer `k % 3`:
//!
//! 1. every rank writes its input, as 32-bit words, into slot `rank` of buffer `k % 3`
//!    on every rank (itself included);
//! 2. it clears its own buffer `(k + 2) % 3` (the one call `k - 1` used) back to the
//!    [`SENTINEL`], over the words that call wrote;
//! 3. it reads every slot of its own buffer `k % 3`, spinning on each word until it is no
//!    longer the sentinel, and sums the slots in rank order into `dst`.
//!
//! Why three buffers are enough: a rank clears buffer `k - 1` in call `k`, after its call
//! `k - 1` read all of it (so every peer's write into it had landed); a peer writes into
//! that buffer again only in call `k + 2`, which it starts after reading this rank's data
//! of call `k + 1`, which this rank writes after its call `k` (the clearing) completed.
//!
//! The call counter, and how many words each buffer holds, live in the workspace's
//! header and advance on the device (the last block of a call to arrive bumps them), so
//! a launch recorded once in a graph is correct at every replay.
//!
//! **The sentinel** is the word `0x8000_0000` (`-0.0` as `f32`). Before sending, every
//! `-0.0` is made `+0.0` (for `bf16` and `f16`, each half-word `0x8000`), so no word of
//! data is ever the sentinel (for a 16-bit type a word is two elements, and a word with a
//! `-0.0` half is never sent). The sums start from `+0.0`, as [`crate::collectives`]' do,
//! so the result equals the one-shot all-reduce's bit for bit, `-0.0` inputs included.
//!
//! **Not `f64`** (nor the integers): every 32-bit pattern, the sentinel included, is half
//! of some finite `f64` (`0x8000_0000` is the upper word of small negative subnormals and
//! the lower word of many ordinary values), so no change of an input's bits short of a
//! change of its value keeps the sentinel out, and a reader tests each 32-bit word on its
//! own (a 16-byte vector is not written as one indivisible access on every target). The
//! host refuses those sums barrier-free and runs them one-shot or two-shot.
//!
//! Every wait is bounded like the [`crate::Team`] waits ([`crate::watch`]).

use crate::collectives::{ReduceOp, Reducible};
use crate::copy::share;
use crate::{AtomicInt, Order, Scope, Team, U32x4, bf16, f16};
use symmem_arch::Arch;

/// The word a workspace slot holds where no data has arrived.
pub const SENTINEL: u32 = 0x8000_0000;

/// The workspace header: the call counter, the blocks of this call that are done, and
/// the words each of the three buffers holds (64 bytes, so buffers stay 16-aligned).
pub const HEADER_BYTES: usize = 64;

/// Header word: the rank's Lamport call counter.
const CALLS: usize = 0;
/// Header word: blocks of the current call that have finished.
const DONE: usize = 1;
/// Header words `USED..USED + 3`: the words each buffer holds.
const USED: usize = 2;

/// Bytes of a workspace for `world` ranks with slots of `capacity` bytes (a multiple of
/// 16): the header and three buffers of `world` slots; `None` if that overflows.
pub const fn workspace_bytes(world: usize, capacity: usize) -> Option<usize> {
    match capacity.checked_mul(world) {
        Some(slots) => match slots.checked_mul(3) {
            Some(buffers) => buffers.checked_add(HEADER_BYTES),
            None => None,
        },
        None => None,
    }
}

/// Slots a reader loads at once before testing any (see step 3 of [`all_reduce`]).
const GROUP: usize = 4;

/// The 32-bit words that `count` elements of `T` occupy (a last word of a 16-bit type may
/// hold one).
pub const fn words<T>(count: usize) -> usize {
    (count * core::mem::size_of::<T>()).div_ceil(4)
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for crate::bf16 {}
    impl Sealed for crate::f16 {}
}

/// An element type the Lamport all-reduce supports: `f32`, [`bf16`] and [`struct@f16`] (see the
/// module docs for why not `f64`).
pub trait Lamport: Reducible + sealed::Sealed {
    /// `word` with every `-0.0` element made `+0.0`: never the [`SENTINEL`].
    fn canonical(word: u32) -> u32;
    /// Word `w` of `src[0..count]` (the missing half of a last 16-bit word is 0).
    ///
    /// # Safety
    /// `src[0..count]` readable, `w < words::<Self>(count)`.
    unsafe fn load_word(src: *const Self, count: usize, w: usize) -> u32;
    /// Writes word `w` into `dst[0..count]` (only the element of a last 16-bit word that
    /// lies inside).
    ///
    /// # Safety
    /// `dst[0..count]` writable, `w < words::<Self>(count)`.
    unsafe fn store_word(dst: *mut Self, count: usize, w: usize, word: u32);
}

impl Lamport for f32 {
    #[inline(always)]
    fn canonical(word: u32) -> u32 {
        if word == SENTINEL { 0 } else { word }
    }
    #[inline(always)]
    unsafe fn load_word(src: *const f32, _count: usize, w: usize) -> u32 {
        // SAFETY: w < count.
        unsafe { src.add(w).read() }.to_bits()
    }
    #[inline(always)]
    unsafe fn store_word(dst: *mut f32, _count: usize, w: usize, word: u32) {
        // SAFETY: w < count.
        unsafe { dst.add(w).write(f32::from_bits(word)) }
    }
}

/// `Lamport` for a 16-bit float: two elements per word, `-0.0` is the half-word `0x8000`.
macro_rules! lamport_half {
    ($t:ty) => {
        impl Lamport for $t {
            #[inline(always)]
            fn canonical(word: u32) -> u32 {
                let half = |h: u32| if h == 0x8000 { 0 } else { h };
                half(word & 0xffff) | (half(word >> 16) << 16)
            }
            #[inline(always)]
            unsafe fn load_word(src: *const $t, count: usize, w: usize) -> u32 {
                // SAFETY: 2w < count; 2w + 1 is read only when inside.
                unsafe {
                    let lo = u32::from(src.add(2 * w).read().to_bits());
                    let hi = if 2 * w + 1 < count {
                        u32::from(src.add(2 * w + 1).read().to_bits())
                    } else {
                        0
                    };
                    lo | (hi << 16)
                }
            }
            #[inline(always)]
            unsafe fn store_word(dst: *mut $t, count: usize, w: usize, word: u32) {
                // SAFETY: as above.
                unsafe {
                    dst.add(2 * w).write(<$t>::from_bits(word as u16));
                    if 2 * w + 1 < count {
                        dst.add(2 * w + 1)
                            .write(<$t>::from_bits((word >> 16) as u16));
                    }
                }
            }
        }
    };
}

lamport_half!(bf16);
lamport_half!(f16);

/// Writes a vector that another rank polls. nvptx: one 16-byte volatile store
/// (`st.volatile.global.v4`, relaxed at system scope in PTX). amdgcn: two 8-byte relaxed
/// system-scope stores, which bypass the writer's caches (a plain store could wait in
/// its L2; LLVM keeps a volatile access in the flat address space). Host: four relaxed
/// atomic stores (ranks are threads there, and the reader races by design).
#[inline(always)]
unsafe fn publish_vector(p: *mut U32x4, v: U32x4) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: the caller passes a writable, 16-aligned vector.
    unsafe {
        p.write_volatile(v)
    };
    #[cfg(target_arch = "amdgpu")]
    {
        let [a, b, c, d] = v.to_array();
        let p = p.cast::<u64>();
        // SAFETY: as above; every rank accesses these words atomically.
        unsafe {
            u64::store(
                p,
                u64::from(a) | (u64::from(b) << 32),
                Order::Relaxed,
                Scope::System,
            );
            u64::store(
                p.add(1),
                u64::from(c) | (u64::from(d) << 32),
                Order::Relaxed,
                Scope::System,
            );
        }
    }
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    for (k, w) in v.to_array().into_iter().enumerate() {
        // SAFETY: as above; each word is accessed atomically by every rank.
        unsafe { publish_word(p.cast::<u32>().add(k), w) };
    }
}

/// Writes a word that another rank polls (a relaxed system-scope store).
#[inline(always)]
unsafe fn publish_word(p: *mut u32, w: u32) {
    // SAFETY: the caller passes a writable, aligned word.
    unsafe { u32::store(p, w, Order::Relaxed, Scope::System) }
}

/// Reads a polled vector (not cached, not hoisted out of the wait): nvptx one 16-byte
/// volatile load, amdgcn two 8-byte relaxed system-scope loads, the host four relaxed
/// atomic loads (see [`publish_vector`]).
#[inline(always)]
unsafe fn poll_vector(p: *const U32x4) -> U32x4 {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: the caller passes a readable, 16-aligned vector.
        unsafe { p.read_volatile() }
    }
    #[cfg(target_arch = "amdgpu")]
    {
        let p = p.cast::<u64>();
        // SAFETY: as above.
        let (lo, hi) = unsafe {
            (
                u64::load(p, Order::Relaxed, Scope::System),
                u64::load(p.add(1), Order::Relaxed, Scope::System),
            )
        };
        U32x4::from_array([lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32])
    }
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    // SAFETY: as above.
    U32x4::from_array(core::array::from_fn(|k| unsafe {
        u32::load(p.cast::<u32>().add(k), Order::Relaxed, Scope::System)
    }))
}

/// Words `w..w + 4` of `src[0..count]`, element by element: the path for a vector that
/// is not 16-aligned or not whole. Out of line, so the aligned path keeps its one vector
/// load (inlined, the compiler merged both into four scalar loads).
///
/// # Safety
/// `src[0..count]` readable, `w + 3 < words::<T>(count)`.
#[inline(never)]
unsafe fn gather_words<T: Lamport>(src: *const T, count: usize, w: usize) -> U32x4 {
    // SAFETY: forwarded.
    unsafe {
        U32x4::from_array([
            T::load_word(src, count, w),
            T::load_word(src, count, w + 1),
            T::load_word(src, count, w + 2),
            T::load_word(src, count, w + 3),
        ])
    }
}

/// Writes `v` as words `w..w + 4` of `dst[0..count]`, element by element (see
/// [`gather_words`]).
///
/// # Safety
/// `dst[0..count]` writable, `w + 3 < words::<T>(count)`.
#[inline(never)]
unsafe fn scatter_words<T: Lamport>(dst: *mut T, count: usize, w: usize, v: U32x4) {
    let [a, b, c, d] = v.to_array();
    // SAFETY: forwarded.
    unsafe {
        T::store_word(dst, count, w, a);
        T::store_word(dst, count, w + 1, b);
        T::store_word(dst, count, w + 2, c);
        T::store_word(dst, count, w + 3, d);
    }
}

/// Spins until no word of `read()` is the sentinel; returns it. Bounded like every wait
/// ([`crate::watch`]): if the rank's waits give up, returns what it saw last.
#[inline(always)]
fn arrived(peer: usize, mut read: impl FnMut() -> U32x4) -> U32x4 {
    let mut watch = crate::watch::Watch::new();
    let mut spins = 0;
    loop {
        let v = read();
        if !v.to_array().contains(&SENTINEL) {
            return v;
        }
        crate::spin(&mut spins);
        if watch.give_up(
            spins,
            core::ptr::null(),
            0,
            u64::from(SENTINEL),
            peer as u64,
        ) {
            return v;
        }
    }
}

/// The barrier-free one-shot all-reduce: `dst[0..count]` (local) gets the sum over every
/// rank of `src[0..count]` (local), in rank order, bit for bit the result of
/// [`crate::collectives::all_reduce_one_shot`] with [`ReduceOp::Sum`].
///
/// # Safety
/// `src` readable and `dst` writable for `count` elements, not overlapping; `ws` this
/// rank's copy of a symmetric workspace of [`workspace_bytes`]`(world, capacity)` bytes,
/// 16-aligned, filled with [`SENTINEL`] words and a zero header before its first call,
/// used only by this function; `words::<T>(count) * 4 <= capacity`; every rank calls it
/// the same number of times, with the same `count` each time (the grids may differ).
#[inline(always)]
pub unsafe fn all_reduce<A: Arch, T: Lamport>(
    arch: &A,
    team: &Team<'_>,
    dst: *mut T,
    src: *const T,
    count: usize,
    ws: *mut u8,
    capacity: usize,
) {
    let (world, rank) = (team.world(), team.rank());
    let header = ws.cast::<u64>();
    // SAFETY: header words of the workspace; the last block of a call to arrive writes
    // them, after every block has read them (just below).
    let calls = unsafe { u64::load(header.add(CALLS), Order::Relaxed, Scope::Device) };
    let (current, previous) = ((calls % 3) as usize, ((calls + 2) % 3) as usize);
    // SAFETY: as above.
    let used_before =
        unsafe { u64::load(header.add(USED + previous), Order::Relaxed, Scope::Device) } as usize;
    let slot = |buffer: usize, s: usize| {
        ws.wrapping_add(HEADER_BYTES + (buffer * world + s) * capacity)
            .cast::<u32>()
    };
    let n = words::<T>(count);
    let (tid, threads) = (arch.thread_id() as usize, arch.block_dim() as usize);
    let (block, blocks) = (arch.block_id() as usize, arch.grid_dim() as usize);

    // 0. Several blocks: the last to arrive advances the counter and records the words
    // this call sends (read only by later kernels of this rank: the kernel boundary
    // orders them). Counting on arrival, not at the end, keeps the count's fence off the
    // tail of the call: nothing of this call is written yet, so the release waits for
    // nothing. (A block alone does it at the end, with no count: step 4.)
    if blocks > 1 {
        // Every thread's header reads come before the block's count. At system scope, so
        // the releases of the waits below (their control-block records) stay behind a
        // per-wave write-back on AMD (see `Arch::sync_block_release`).
        arch.sync_block_release(Scope::System);
        // SAFETY: a header word, only ever accessed atomically.
        let arrived = tid == 0
            && unsafe {
                u64::fetch_op(
                    header.add(DONE),
                    crate::AtomicOp::Add,
                    1,
                    Order::AcqRel,
                    Scope::Device,
                )
            } + 1
                == blocks as u64;
        if arrived {
            // SAFETY: header words, written by this thread alone, after every block read
            // them.
            unsafe { advance(header, current, n, calls) };
        }
    }

    let (start, len) = share(n, 4, block, blocks);
    let vectors = len / 4;
    // A vector is moved whole where the local side is 16-aligned and the vector's 16
    // bytes lie inside (not so for the last word of an odd count of a 16-bit type).
    let bytes = size_of::<T>() * count;
    let whole = |p: usize, w: usize| p.is_multiple_of(16) && 4 * (w + 4) <= bytes;

    // 1. Send: this block's words into slot `rank` of buffer `current` on every rank.
    let mine = slot(current, rank);
    let mut j = tid;
    while j < vectors {
        let w = start + 4 * j;
        let v = if whole(src.addr(), w) {
            // SAFETY: 16 bytes at word w lie inside src.
            unsafe { src.cast::<u8>().add(4 * w).cast::<U32x4>().read() }
        } else {
            // SAFETY: w + 3 < n.
            unsafe { gather_words(src, count, w) }
        };
        let v = U32x4::from_array(v.to_array().map(T::canonical));
        for k in 0..world {
            let to = (rank + 1 + k) % world;
            // SAFETY: word w of the slot is inside the capacity; the workspace is symmetric.
            unsafe { publish_vector(team.translate(mine.add(w), to).cast::<U32x4>(), v) };
        }
        j += threads;
    }
    let mut w = start + 4 * vectors + tid;
    while w < start + len {
        // SAFETY: w < n.
        let word = T::canonical(unsafe { T::load_word(src, count, w) });
        for k in 0..world {
            let to = (rank + 1 + k) % world;
            // SAFETY: as above.
            unsafe { publish_word(team.translate(mine.add(w), to), word) };
        }
        w += threads;
    }

    // 2. Clear this block's share of the words the previous call left in its buffer.
    let (clear_start, clear_len) = share(used_before, 4, block, blocks);
    for s in 0..world {
        let old = slot(previous, s);
        let mut j = tid;
        while j < clear_len / 4 {
            // SAFETY: inside the slot; no rank reads or writes it now (module docs).
            unsafe {
                publish_vector(
                    old.add(clear_start + 4 * j).cast::<U32x4>(),
                    U32x4::splat(SENTINEL),
                )
            };
            j += threads;
        }
        let mut w = clear_start + 4 * (clear_len / 4) + tid;
        while w < clear_start + clear_len {
            // SAFETY: as above.
            unsafe { publish_word(old.add(w), SENTINEL) };
            w += threads;
        }
    }

    // 3. Receive: sum every rank's slot, in rank order, from +0.0.
    let zero = T::unpack(U32x4::splat(0));
    let mut j = tid;
    while j < vectors {
        let w = start + 4 * j;
        let mut acc = zero;
        // SAFETY: inside slot s of this rank's buffer, for every s < world.
        let at = |s: usize| unsafe { slot(current, s).add(w).cast::<U32x4>() };
        // Slots in groups of `GROUP`: the group's loads are issued together, before any is
        // tested (a test between them would wait for each in turn), then the group is
        // folded in rank order, spinning on a slot only if its data had not arrived.
        let mut first = 0;
        while first < world {
            let group: [U32x4; GROUP] = core::array::from_fn(|k| {
                // SAFETY: see `at`.
                unsafe { poll_vector(at((first + k).min(world - 1))) }
            });
            // Named and taken one by one, not indexed in a loop: the group stays in
            // registers (a loop around the spin is not unrolled, and its array spills).
            let [g0, g1, g2, g3] = group;
            let mut take = |k: usize, seen: U32x4| {
                let s = first + k;
                if s < world {
                    let v = if seen.to_array().contains(&SENTINEL) {
                        // SAFETY: see `at`.
                        arrived(s, || unsafe { poll_vector(at(s)) })
                    } else {
                        seen
                    };
                    acc = T::combine_lanes(ReduceOp::Sum, acc, T::unpack(v));
                }
            };
            take(0, g0);
            take(1, g1);
            take(2, g2);
            take(3, g3);
            first += GROUP;
        }
        let v = T::pack(acc);
        if whole(dst.addr(), w) {
            // SAFETY: as for the source.
            unsafe { dst.cast::<u8>().add(4 * w).cast::<U32x4>().write(v) };
        } else {
            // SAFETY: w + 3 < n.
            unsafe { scatter_words(dst, count, w, v) };
        }
        j += threads;
    }
    let mut w = start + 4 * vectors + tid;
    while w < start + len {
        let mut acc = zero;
        for s in 0..world {
            let v = arrived(s, || {
                // SAFETY: inside slot s.
                let word =
                    unsafe { u32::load(slot(current, s).add(w), Order::Relaxed, Scope::System) };
                U32x4::from_array([word, 0, 0, 0])
            });
            acc = T::combine_lanes(ReduceOp::Sum, acc, T::unpack(v));
        }
        // SAFETY: w < n.
        unsafe { T::store_word(dst, count, w, T::pack(acc).to_array()[0]) };
        w += threads;
    }

    // 4. A block alone advances the counter once every thread has read the header.
    if blocks == 1 {
        arch.sync_block();
        if tid == 0 {
            // SAFETY: header words, written by this thread alone, after the block read
            // them.
            unsafe { advance(header, current, n, calls) };
        }
    }
}

/// Advances a workspace's call counter past call `calls`, which sent `n` words into
/// buffer `current`, and resets the arrival count.
///
/// # Safety
/// `header` is a workspace header no other thread reads or writes now.
#[inline(always)]
unsafe fn advance(header: *mut u64, current: usize, n: usize, calls: u64) {
    // SAFETY: the caller's contract; read only by later kernels (ordered by the kernel
    // boundary).
    unsafe {
        let store = |i: usize, v: u64| u64::store(header.add(i), v, Order::Relaxed, Scope::Device);
        store(USED + current, n as u64);
        store(DONE, 0);
        store(CALLS, calls + 1);
    }
}
