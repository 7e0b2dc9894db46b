//! Views: kernel parameters that carry their length, so a kernel written as a safe `fn`
//! reaches only memory its host arguments hold.
//!
//! [`View`] and [`ViewMut`] are this rank's memory (the host passes a typed buffer or a
//! view of one); [`SymView`] and [`SymViewMut`] are a rank's copy of symmetric memory
//! with its peer table (the host passes a symmetric buffer, a registration or a view of
//! either), and reach peers' copies through [`SymViewMut::peer`], which yields nothing
//! for a rank out of range or a peer on another node. Every access checks its index
//! against the length (one compare); `unsafe` unchecked forms serve loops that prove
//! their bounds. `split_vectors` reinterprets 16-aligned memory as 16-byte vectors, the
//! accesses that lower to one `ld/st.global.v4` (NVIDIA) or `global_load/store_dwordx4`
//! (AMD).
//!
//! `#[kernel]` knows these types by name (each crosses the kernel ABI as two or three
//! primitives): write them as `View<T>`, `ViewMut<T>`, `SymView<T>`, `SymViewMut<T>`
//! (a path ending in that name), not through a type alias.
//!
//! Device memory is not Rust memory: the threads of a launch, and other ranks' kernels,
//! read and write it concurrently, as GPU threads do, and a race gives whatever values
//! the hardware gives (as two symmem kernels racing would). What a view guarantees is the
//! bounds: no access leaves the memory its argument holds.

use crate::param::{Param, PeerTable};
use bytemuck::Pod;
use symmem_arch::Arch;
use symmem_translate::U32x4;

/// `len` elements of `T` of this rank's device memory, to read.
#[derive(Debug)]
pub struct View<T> {
    ptr: *const T,
    len: usize,
}

/// `len` elements of `T` of this rank's device memory (or, from [`SymViewMut::peer`], of
/// a peer's copy), to read and write.
#[derive(Debug)]
pub struct ViewMut<T> {
    ptr: *mut T,
    len: usize,
}

/// This rank's copy of `len` elements of `T` of symmetric memory, to read, with the
/// peer table of the memory that holds it.
#[derive(Debug)]
pub struct SymView<T> {
    ptr: *const T,
    len: usize,
    table: PeerTable,
}

/// This rank's copy of `len` elements of `T` of symmetric memory, to read and write,
/// with the peer table of the memory that holds it: every rank's copy is reached through
/// [`SymViewMut::peer`].
#[derive(Debug)]
pub struct SymViewMut<T> {
    ptr: *mut T,
    len: usize,
    table: PeerTable,
}

macro_rules! copy_clone {
    ($($view:ident),*) => {$(
        impl<T> Clone for $view<T> {
            #[inline(always)]
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $view<T> {}
    )*};
}

copy_clone!(View, ViewMut, SymView, SymViewMut);

impl<T: 'static> Param for View<T> {
    type Abi = (*const T, u64);
    #[inline(always)]
    unsafe fn from_abi((ptr, len): (*const T, u64)) -> Self {
        Self {
            ptr,
            len: len as usize,
        }
    }
}

impl<T: 'static> Param for ViewMut<T> {
    type Abi = (*mut T, u64);
    #[inline(always)]
    unsafe fn from_abi((ptr, len): (*mut T, u64)) -> Self {
        Self {
            ptr,
            len: len as usize,
        }
    }
}

impl<T: 'static> Param for SymView<T> {
    type Abi = (*const T, u64, *const u64);
    #[inline(always)]
    unsafe fn from_abi((ptr, len, table): (*const T, u64, *const u64)) -> Self {
        Self {
            ptr,
            len: len as usize,
            // SAFETY: forwarded: the host lowered the table with the view.
            table: unsafe { PeerTable::from_abi((table,)) },
        }
    }
}

impl<T: 'static> Param for SymViewMut<T> {
    type Abi = (*mut T, u64, *const u64);
    #[inline(always)]
    unsafe fn from_abi((ptr, len, table): (*mut T, u64, *const u64)) -> Self {
        Self {
            ptr,
            len: len as usize,
            // SAFETY: forwarded: the host lowered the table with the view.
            table: unsafe { PeerTable::from_abi((table,)) },
        }
    }
}

/// The whole 16-byte vectors at the start of `len` elements of `T` at `addr`, and the
/// elements they hold; `None` unless `addr` is 16-aligned and `T`'s size divides 16 (so
/// the vectors end on an element).
#[inline(always)]
fn vectors_of<T>(addr: usize, len: usize) -> Option<(usize, usize)> {
    let size = size_of::<T>();
    if size == 0 || !16usize.is_multiple_of(size) || !addr.is_multiple_of(16) {
        return None;
    }
    let vectors = len / (16 / size);
    Some((vectors, vectors * (16 / size)))
}

impl<T: Pod> View<T> {
    /// The view of `len` elements at `ptr`.
    ///
    /// # Safety
    /// `ptr` addresses `len` readable elements of `T` that stay allocated while the view
    /// (or a copy) is used.
    #[inline(always)]
    pub const unsafe fn from_raw_parts(ptr: *const T, len: usize) -> Self {
        Self { ptr, len }
    }

    /// Its elements.
    #[inline(always)]
    pub fn len(self) -> usize {
        self.len
    }

    /// Whether it has none.
    #[inline(always)]
    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// Element `i`, or `None` past the end.
    #[inline(always)]
    pub fn get(self, i: usize) -> Option<T> {
        // SAFETY: `i` is inside (checked).
        (i < self.len).then(|| unsafe { self.get_unchecked(i) })
    }

    /// Element `i`, unchecked.
    ///
    /// # Safety
    /// `i < self.len()`.
    #[inline(always)]
    pub unsafe fn get_unchecked(self, i: usize) -> T {
        // SAFETY: the caller keeps `i` inside the view's memory.
        unsafe { self.ptr.add(i).read() }
    }

    /// The address of its first element.
    #[inline(always)]
    pub fn as_ptr(self) -> *const T {
        self.ptr
    }

    /// Elements `start..start + len`, or `None` where they do not all lie inside.
    #[inline(always)]
    pub fn slice(self, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| Self {
            ptr: self.ptr.wrapping_add(start),
            len,
        })
    }

    /// The view as whole 16-byte vectors and the elements after them (a tail shorter than
    /// 16 bytes); `None` unless its memory is 16-aligned and `T`'s size divides 16.
    #[inline(always)]
    pub fn split_vectors(self) -> Option<(View<U32x4>, View<T>)> {
        let (vectors, head) = vectors_of::<T>(self.ptr.addr(), self.len)?;
        Some((
            View {
                ptr: self.ptr.cast(),
                len: vectors,
            },
            View {
                ptr: self.ptr.wrapping_add(head),
                len: self.len - head,
            },
        ))
    }
}

impl<T: Pod> ViewMut<T> {
    /// The view of `len` elements at `ptr`.
    ///
    /// # Safety
    /// `ptr` addresses `len` readable and writable elements of `T` that stay allocated
    /// while the view (or a copy) is used.
    #[inline(always)]
    pub const unsafe fn from_raw_parts(ptr: *mut T, len: usize) -> Self {
        Self { ptr, len }
    }

    /// Its elements.
    #[inline(always)]
    pub fn len(self) -> usize {
        self.len
    }

    /// Whether it has none.
    #[inline(always)]
    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// Element `i`, or `None` past the end.
    #[inline(always)]
    pub fn get(self, i: usize) -> Option<T> {
        self.as_view().get(i)
    }

    /// Writes `value` into element `i`; `false` (nothing written) past the end.
    #[inline(always)]
    pub fn set(self, i: usize, value: T) -> bool {
        let inside = i < self.len;
        if inside {
            // SAFETY: `i` is inside (checked).
            unsafe { self.set_unchecked(i, value) };
        }
        inside
    }

    /// Element `i`, unchecked.
    ///
    /// # Safety
    /// `i < self.len()`.
    #[inline(always)]
    pub unsafe fn get_unchecked(self, i: usize) -> T {
        // SAFETY: forwarded.
        unsafe { self.as_view().get_unchecked(i) }
    }

    /// Writes `value` into element `i`, unchecked.
    ///
    /// # Safety
    /// `i < self.len()`.
    #[inline(always)]
    pub unsafe fn set_unchecked(self, i: usize, value: T) {
        // SAFETY: the caller keeps `i` inside the view's memory.
        unsafe { self.ptr.add(i).write(value) }
    }

    /// The address of its first element.
    #[inline(always)]
    pub fn as_mut_ptr(self) -> *mut T {
        self.ptr
    }

    /// The same memory, to read.
    #[inline(always)]
    pub fn as_view(self) -> View<T> {
        View {
            ptr: self.ptr,
            len: self.len,
        }
    }

    /// Copies `src` into this view, as many elements as both hold, the whole grid
    /// cooperating in a grid-stride loop (right for any launch shape; fastest with about
    /// one 16-byte vector per thread): as 16-byte vectors, one load and one store each,
    /// where both are 16-aligned, then the elements after the last whole vector; one
    /// element per thread otherwise.
    #[inline(always)]
    pub fn copy_from<A: Arch>(self, arch: &A, src: View<T>) {
        self.copy_from_loaded(arch, src, None);
    }

    /// [`ViewMut::copy_from`], where `loaded` is this thread's first vector of `src`
    /// (vector `arch.global_id()` of `src.split_vectors()`) if the caller read it already.
    #[inline(always)]
    fn copy_from_loaded<A: Arch>(self, arch: &A, src: View<T>, loaded: Option<U32x4>) {
        let n = self.len.min(src.len);
        let (dst, src) = (Self { len: n, ..self }, View { len: n, ..src });
        let (stride, first) = (arch.global_threads(), arch.global_id());
        let (dst, src) = match (dst.split_vectors(), src.split_vectors()) {
            (Some((dv, dst_tail)), Some((sv, src_tail))) => {
                let vectors = dv.len.min(sv.len);
                let mut i = first;
                if let Some(vector) = loaded
                    && i < vectors
                {
                    // SAFETY: `i` is below both views' vector counts.
                    unsafe { dv.set_unchecked(i, vector) };
                    i += stride;
                }
                while i < vectors {
                    // SAFETY: `i` is below both views' vector counts.
                    unsafe { dv.set_unchecked(i, sv.get_unchecked(i)) };
                    i += stride;
                }
                (dst_tail, src_tail)
            }
            _ => (dst, src),
        };
        let elements = dst.len.min(src.len);
        let mut i = first;
        while i < elements {
            // SAFETY: `i` is below both views' lengths.
            unsafe { dst.set_unchecked(i, src.get_unchecked(i)) };
            i += stride;
        }
    }

    /// Elements `start..start + len`, or `None` where they do not all lie inside.
    #[inline(always)]
    pub fn slice(self, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| Self {
            ptr: self.ptr.wrapping_add(start),
            len,
        })
    }

    /// The view as whole 16-byte vectors and the elements after them; `None` unless its
    /// memory is 16-aligned and `T`'s size divides 16.
    #[inline(always)]
    pub fn split_vectors(self) -> Option<(ViewMut<U32x4>, ViewMut<T>)> {
        let (vectors, head) = vectors_of::<T>(self.ptr.addr(), self.len)?;
        Some((
            ViewMut {
                ptr: self.ptr.cast(),
                len: vectors,
            },
            ViewMut {
                ptr: self.ptr.wrapping_add(head),
                len: self.len - head,
            },
        ))
    }
}

impl<T: Pod> SymView<T> {
    /// Its elements, on every rank.
    #[inline(always)]
    pub fn len(self) -> usize {
        self.len
    }

    /// Whether it has none.
    #[inline(always)]
    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// The peer table of the memory that holds it.
    #[inline(always)]
    pub fn table(self) -> PeerTable {
        self.table
    }

    /// This rank's copy.
    #[inline(always)]
    pub fn local(self) -> View<T> {
        View {
            ptr: self.ptr,
            len: self.len,
        }
    }

    /// Rank `to`'s copy, as mapped here; `None` for a rank out of range or a peer this
    /// rank does not map (another node).
    #[inline(always)]
    pub fn peer(self, to: usize) -> Option<View<T>> {
        let offset = self.table.offset_to(to)?;
        Some(View {
            ptr: self.ptr.wrapping_byte_add(offset),
            len: self.len,
        })
    }
}

impl<T: Pod> SymViewMut<T> {
    /// Its elements, on every rank.
    #[inline(always)]
    pub fn len(self) -> usize {
        self.len
    }

    /// Whether it has none.
    #[inline(always)]
    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// The peer table of the memory that holds it.
    #[inline(always)]
    pub fn table(self) -> PeerTable {
        self.table
    }

    /// This rank's copy.
    #[inline(always)]
    pub fn local(self) -> ViewMut<T> {
        ViewMut {
            ptr: self.ptr,
            len: self.len,
        }
    }

    /// The same memory, to read.
    #[inline(always)]
    pub fn as_view(self) -> SymView<T> {
        SymView {
            ptr: self.ptr,
            len: self.len,
            table: self.table,
        }
    }

    /// Rank `to`'s copy, as mapped here (the local pointer offset by
    /// `base(to) - base(rank)`, so it keeps its address space); `None` for a rank out of
    /// range or a peer this rank does not map (another node).
    #[inline(always)]
    pub fn peer(self, to: usize) -> Option<ViewMut<T>> {
        let offset = self.table.offset_to(to)?;
        Some(ViewMut {
            ptr: self.ptr.wrapping_byte_add(offset),
            len: self.len,
        })
    }

    /// Put: copies `src` (this rank's memory) into rank `to`'s copy, as many elements as
    /// both hold, the whole grid cooperating as in [`ViewMut::copy_from`]; `false`
    /// (nothing written) where [`SymViewMut::peer`] gives nothing. The same as
    /// `peer(to)` then `copy_from`, one memory latency sooner: each thread's first
    /// source vector is read before the peer table, so the two reads overlap (the
    /// vector path is chosen from the local address, which every rank's copy shares
    /// modulo 16: the host refuses a table whose entries are not congruent).
    #[inline(always)]
    pub fn put_from<A: Arch>(self, arch: &A, to: usize, src: View<T>) -> bool {
        let n = self.len.min(src.len);
        let local = ViewMut {
            ptr: self.ptr,
            len: n,
        };
        let first = arch.global_id();
        let loaded = match (
            local.split_vectors(),
            (View { len: n, ..src }).split_vectors(),
        ) {
            (Some((dv, _)), Some((sv, _))) if first < dv.len.min(sv.len) => {
                // SAFETY: `first` is below both views' vector counts.
                Some(unsafe { sv.get_unchecked(first) })
            }
            _ => None,
        };
        let Some(remote) = self.peer(to) else {
            return false;
        };
        remote.copy_from_loaded(arch, src, loaded);
        true
    }
}
