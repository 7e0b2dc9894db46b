//! [`Team`]'s point operations: one element loaded from or stored to a peer, a batch of
//! them with one translation, and the `Lanes` that carry an element to or from the
//! off-node engine in registers.

use super::Team;
use crate::engine;
use symmem_arch::LaneGroup;

/// An element of at most 16 bytes as four 32-bit lanes, so that it stays in registers
/// on its way to or from the two words of an inline engine request (byte `i` in bits
/// `8 * (i % 8)` of word `i / 8`). Lanes rather than words: a value that meets a
/// 16-byte vector load of the on-node path keeps that load's `4 x u32` shape.
#[repr(C)]
union Lanes<T: Copy> {
    value: T,
    lanes: [u32; 4],
}

impl<T: Copy> Lanes<T> {
    /// The value whose bytes are the first `size_of::<T>()` bytes of `[lo, hi]`.
    ///
    /// # Safety
    /// `size_of::<T>() <= 16`; those bytes are a valid `T`.
    #[inline(always)]
    unsafe fn from_words([lo, hi]: [u64; 2]) -> T {
        let lanes = [lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32];
        // SAFETY: forwarded from the caller.
        unsafe { Lanes { lanes }.value }
    }

    /// `v`'s bytes as two words, zero beyond `size_of::<T>()`.
    ///
    /// # Safety
    /// `size_of::<T>() <= 16`; `T` has no padding (every byte read is initialised).
    #[inline(always)]
    unsafe fn words(v: T) -> [u64; 2] {
        let mut l = Lanes { lanes: [0; 4] };
        l.value = v;
        // SAFETY: every byte is initialised: `v`'s, then the zeros.
        let [a, b, c, d] = unsafe { l.lanes };
        [
            u64::from(a) | u64::from(b) << 32,
            u64::from(c) | u64::from(d) << 32,
        ]
    }
}

impl Team<'_> {
    /// Reads the element at symmetric `p` on rank `from` (a plain load of `T`: one
    /// 16-byte vector load for [`crate::U32x4`]).
    ///
    /// # Safety
    /// `from < world`; `p` symmetric and aligned for `T`; no concurrent write to it; `T`
    /// plain data (any bytes a valid value, as heap elements are).
    #[inline(always)]
    pub unsafe fn load<T: Copy>(&self, p: *const T, from: usize) -> T {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p.cast_mut(), from) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { q.read() },
            None if size_of::<T>() <= 16 => {
                // In registers: one word per inline get (a local buffer handed to the
                // engine would be stack memory in a GPU kernel).
                let (addr, n) = (p.addr() as u64, size_of::<T>());
                // SAFETY: the element's bytes on the peer; an unsent request gives zeros,
                // and `T` is plain data (kernel arguments and heap elements).
                unsafe {
                    let lo = engine::load_word(addr, n.min(8), from);
                    let hi = if n > 8 {
                        engine::load_word(addr + 8, n - 8, from)
                    } else {
                        0
                    };
                    Lanes::<T>::from_words([lo, hi])
                }
            }
            None => {
                let mut v = core::mem::MaybeUninit::<T>::zeroed();
                // SAFETY: a `T`'s bytes from the peer into `v`; an unsent request leaves
                // them zero, and `T` is plain data (kernel arguments and heap elements).
                unsafe {
                    engine::get(v.as_mut_ptr().cast(), p.addr() as u64, size_of::<T>(), from);
                    v.assume_init()
                }
            }
        }
    }

    /// Writes `v` to the element at symmetric `p` on rank `to` (a plain store).
    ///
    /// # Safety
    /// `to < world`; `p` symmetric and aligned for `T`; no concurrent access to it; `T`
    /// plain data without padding (its bytes travel as words to an off-node peer).
    #[inline(always)]
    pub unsafe fn store<T: Copy>(&self, p: *mut T, v: T, to: usize) {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p, to) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { q.write(v) },
            None if size_of::<T>() <= 16 => {
                // SAFETY: `T` is plain data without padding, at most 16 bytes; the
                // element's bytes go in the request.
                unsafe { engine::store_words(p.addr() as u64, Lanes::words(v), size_of::<T>(), to) }
            }
            // SAFETY: `v`'s bytes, kept until the put has read them.
            None => unsafe {
                engine::put(
                    p.addr() as u64,
                    (&raw const v).cast(),
                    size_of::<T>(),
                    to,
                    true,
                    LaneGroup::ALONE,
                )
            },
        }
    }

    /// [`Team::load`] of the `V` at symmetric `p.add(at[u])` on rank `from` for every
    /// `u`, translating `p` once: the loads of a batch are issued together, with one
    /// check of the table entry instead of one branch each.
    ///
    /// # Safety
    /// As [`Team::load`] for every `p.add(at[u])`.
    #[inline(always)]
    pub(crate) unsafe fn load_each<T: Copy, V: Copy, const N: usize>(
        &self,
        p: *const T,
        at: &[usize; N],
        from: usize,
    ) -> [V; N] {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p.cast_mut(), from) } {
            // SAFETY: forwarded from the caller.
            Some(q) => core::array::from_fn(|u| unsafe { q.add(at[u]).cast::<V>().read() }),
            // SAFETY: forwarded from the caller.
            None => core::array::from_fn(|u| unsafe { self.load(p.add(at[u]).cast::<V>(), from) }),
        }
    }

    /// [`Team::store`] of `vs[u]` at symmetric `p.add(at[u])` on rank `to` for each
    /// `u < real`, translating `p` once: the stores of a batch do not each reload the
    /// table (which the compiler must assume a store may have changed). Whole arrays
    /// and a count, not slices, so that the batch stays in registers.
    ///
    /// # Safety
    /// As [`Team::store`] for every `p.add(at[u])` with `u < real`.
    #[inline(always)]
    pub(crate) unsafe fn store_each<T: Copy, V: Copy, const N: usize>(
        &self,
        p: *mut T,
        (at, vs, real): (&[usize; N], &[V; N], usize),
        to: usize,
    ) {
        // SAFETY: forwarded from the caller.
        match unsafe { self.reach(p, to) } {
            // SAFETY: forwarded from the caller.
            Some(q) => unsafe { write_each(q, (at, vs, real)) },
            None => {
                for u in 0..N {
                    if u < real {
                        // SAFETY: forwarded from the caller.
                        unsafe { self.store(p.add(at[u]).cast::<V>(), vs[u], to) }
                    }
                }
            }
        }
    }
}

/// Writes `vs[u]` at `p.add(at[u])` (plain stores of `V`) for each `u < real`: a batch
/// of [`Team::store_each`] once translated, or of a thread's own memory. Whole arrays
/// and a count, not slices, so that the batch stays in registers.
///
/// # Safety
/// Every `p.add(at[u])` with `u < real` writable for a `V`, aligned for it.
#[inline(always)]
pub(crate) unsafe fn write_each<T, V: Copy, const N: usize>(
    p: *mut T,
    (at, vs, real): (&[usize; N], &[V; N], usize),
) {
    for u in 0..N {
        if u < real {
            // SAFETY: forwarded from the caller.
            unsafe { p.add(at[u]).cast::<V>().write(vs[u]) }
        }
    }
}
