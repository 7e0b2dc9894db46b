//! Shared scaffolding for the `rma_*` tests: a world of CPU ranks whose symmetric heaps
//! live at distinct addresses, each rank's kernel body run on its own launch of
//! `symmem::backend::cpu::threads`, all ranks concurrently.
//!
//! All heaps are carved out of ONE allocation (at uneven distances, so every peer delta
//! differs): translation is a pointer offset from the local heap, and staying inside one
//! allocation keeps that offset within the pointer's provenance (sound under Miri's
//! rules too, not just "works on x86").
#![allow(dead_code)]

use symmem::Grid;
use symmem::backend::cpu::threads;
use symmem_arch::host::HostThread;
use symmem_rma::{PeerBases, Team, U32x4};

/// The world sizes every test runs at.
pub const WORLDS: [usize; 5] = [1, 2, 3, 4, 8];

/// The transfer sizes that hit every head/middle/tail path.
pub const SIZES: [usize; 7] = [0, 1, 15, 16, 17, 4095, (1 << 20) + 3];

/// Guard byte around every checked range.
pub const FILL: u8 = 0xEE;

/// `ranks` symmetric heaps of `heap` bytes each.
pub struct World {
    pub ranks: usize,
    pub heap: usize,
    base: *mut u8,
    offsets: Vec<usize>,
    bases: Vec<u64>,
    _mem: Vec<U32x4>,
}

// SAFETY: the raw pointer is into `_mem`, owned by the World; tests synchronise every
// access to it through the library's operations or by joining threads.
unsafe impl Sync for World {}
// SAFETY: as above.
unsafe impl Send for World {}

impl World {
    /// Heaps filled with [`FILL`].
    pub fn new(ranks: usize, heap: usize) -> Self {
        let heap = heap.next_multiple_of(16);
        // Rank r starts at r * (heap + 4096) + 48 r: distinct, 16-aligned, uneven.
        let offsets: Vec<usize> = (0..ranks).map(|r| r * (heap + 4096) + 48 * r).collect();
        let total = offsets.last().copied().unwrap_or(0) + heap + 16;
        let mut mem = vec![U32x4::splat(u32::from_ne_bytes([FILL; 4])); total / 16 + 1];
        let base = mem.as_mut_ptr().cast::<u8>();
        let bases = offsets
            .iter()
            .map(|&o| base.wrapping_add(o).addr() as u64)
            .collect();
        Self {
            ranks,
            heap,
            base,
            offsets,
            bases,
            _mem: mem,
        }
    }

    /// Rank `r`'s heap base (its local pointer to offset 0).
    pub fn heap_ptr(&self, r: usize) -> *mut u8 {
        self.base.wrapping_add(self.offsets[r])
    }

    /// The peer-base table (the same on every rank: one address space).
    pub fn bases(&self) -> &[u64] {
        &self.bases
    }

    /// Rank `r`'s heap bytes. Only while no kernel runs.
    pub fn bytes(&self, r: usize) -> &[u8] {
        // SAFETY: the heap lies inside `_mem`; no kernel runs (the caller's promise).
        unsafe { std::slice::from_raw_parts(self.heap_ptr(r), self.heap) }
    }

    /// Rank `r`'s heap bytes, writable. Only while no kernel runs.
    #[allow(clippy::mut_from_ref)]
    pub fn bytes_mut(&self, r: usize) -> &mut [u8] {
        // SAFETY: as in `bytes`; the caller holds no other view.
        unsafe { std::slice::from_raw_parts_mut(self.heap_ptr(r), self.heap) }
    }

    /// Rank `r`'s heap as `T`s from byte offset `at`, `n` of them. Only while no
    /// kernel runs.
    pub fn read<T: bytemuck::Pod>(&self, r: usize, at: usize, n: usize) -> Vec<T> {
        let bytes = &self.bytes(r)[at..at + n * size_of::<T>()];
        bytes
            .chunks_exact(size_of::<T>())
            .map(bytemuck::pod_read_unaligned)
            .collect()
    }

    /// Writes `v` to rank `r`'s heap at byte offset `at`. Only while no kernel runs.
    pub fn write<T: bytemuck::Pod>(&self, r: usize, at: usize, v: &[T]) {
        self.bytes_mut(r)[at..at + std::mem::size_of_val(v)]
            .copy_from_slice(bytemuck::cast_slice(v));
    }

    /// Runs `body(arch, team, rank)` on every thread of a `grid` launch on every rank,
    /// all ranks at once, and returns when all are done.
    pub fn run<F>(&self, grid: Grid, body: F)
    where
        F: Fn(&HostThread<'_>, &Team<'_>, usize) + Sync,
    {
        let bases = self.bases();
        std::thread::scope(|s| {
            for rank in 0..self.ranks {
                let body = &body;
                s.spawn(move || {
                    let team = Team::new(PeerBases::new(bases), rank).expect("rank in range");
                    threads::run(grid, |arch| body(arch, &team, rank)).expect("kernel threads");
                });
            }
        });
    }

    /// Runs `body` on rank `rank` alone.
    pub fn run_one<F>(&self, rank: usize, grid: Grid, body: F)
    where
        F: Fn(&HostThread<'_>, &Team<'_>) + Sync,
    {
        let team = Team::new(PeerBases::new(self.bases()), rank).expect("rank in range");
        threads::run(grid, |arch| body(arch, &team)).expect("kernel threads");
    }
}

/// A raw pointer that closures may share across threads.
#[derive(Clone, Copy, Debug)]
pub struct Shared<T>(pub *mut T);
// SAFETY: tests partition or synchronise every access through the pointer.
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The pointer (a method, so closures capture the whole `Shared`).
    pub fn get(&self) -> *mut T {
        self.0
    }
}

/// Deterministic pattern byte `i` of rank `r`'s data, never [`FILL`].
pub fn pattern(r: usize, i: usize) -> u8 {
    let v = (i.wrapping_mul(31) ^ (r * 97 + 13) ^ (i >> 8)) as u8;
    if v == FILL { 0x11 } else { v }
}

/// Asserts `got` equals `want`, reporting the first difference.
pub fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i} of {}: got {:#04x}, want {:#04x}",
            got.len(),
            got[i],
            want[i]
        );
    }
}

/// Generates one `#[test]` per world size in [`WORLDS`], named `<name>_world_<n>`,
/// each calling `$f(n)`.
#[macro_export]
macro_rules! per_world {
    ($($name:ident => $f:expr;)*) => {
        $(
            mod $name {
                #[test] fn world_1() { ($f)(1) }
                #[test] fn world_2() { ($f)(2) }
                #[test] fn world_3() { ($f)(3) }
                #[test] fn world_4() { ($f)(4) }
                #[test] fn world_8() { ($f)(8) }
            }
        )*
    };
}
