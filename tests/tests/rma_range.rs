//! Block-cooperative put/get/copy (blocking and non-blocking) at every world size, for
//! sizes and offsets that hit every head/middle/tail path and every relative alignment
//! (16-byte vectors, 8, 4, 2 and single bytes), plus the grid-level forms.
#![allow(clippy::needless_range_loop)] // rank-indexed loops read best in tests

mod rma_common;
use rma_common::*;
use symmem::Grid;
use symmem_rma::collectives;

/// (destination offset, source offset): relative alignment 16 (aligned and not), 8,
/// 4, 2, and odd.
const OFFSETS: [(usize, usize); 7] = [(0, 0), (3, 3), (4, 12), (2, 6), (0, 2), (1, 6), (7, 0)];

const BLOCK: Grid = Grid {
    blocks: 1,
    threads: 4,
};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Put,
    Get,
    Copy,
}

/// The source region is heap[0..region], the destination region heap[region..2 region].
fn region(n: usize) -> usize {
    (n + 64).next_multiple_of(16)
}

fn local_buffers(world: usize, len: usize, fill: impl Fn(usize, usize) -> u8) -> Vec<Vec<u8>> {
    (0..world)
        .map(|r| (0..len).map(|i| fill(r, i)).collect())
        .collect()
}

/// 16-aligned local buffers (one allocation each, as a rank's private memory).
struct Locals(Vec<Vec<symmem_rma::U32x4>>);
impl Locals {
    fn new(world: usize, len: usize) -> Self {
        Self(
            (0..world)
                .map(|_| {
                    vec![symmem_rma::U32x4::splat(u32::from_ne_bytes([FILL; 4])); len / 16 + 1]
                })
                .collect(),
        )
    }
    fn ptrs(&mut self) -> Vec<Shared<u8>> {
        self.0
            .iter_mut()
            .map(|v| Shared(v.as_mut_ptr().cast()))
            .collect()
    }
    fn bytes(&self, r: usize) -> &[u8] {
        bytemuck::cast_slice(&self.0[r][..])
    }
    fn bytes_mut(&mut self, r: usize) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.0[r][..])
    }
}

fn run_kind(world: usize, kind: Kind) {
    for n in SIZES {
        let reg = region(n);
        let w = World::new(world, 2 * reg + 64);
        let mut locals = Locals::new(world, reg + 32);
        let pats: Vec<Vec<u8>> = (0..world)
            .map(|r| (0..n).map(|i| pattern(r, i)).collect())
            .collect();
        // The 1 MiB case runs the three distinct engines (16-byte aligned, 16-byte with a
        // head, bytes); the short ones every relative alignment.
        let offsets: &[(usize, usize)] = if n > 1 << 16 {
            &[(0, 0), (3, 3), (1, 6)]
        } else {
            &OFFSETS
        };
        for (k, &(dof, sof)) in offsets.iter().enumerate() {
            let nbi = k % 2 == 1;
            let what = format!("{kind:?} nbi={nbi} world={world} n={n} dst+{dof} src+{sof}");
            let lof = 16 + dof; // where a get lands in the local buffer
            // Reset: sources carry the rank's pattern, everything else FILL.
            for r in 0..world {
                let heap = w.bytes_mut(r);
                heap.fill(FILL);
                heap[sof..sof + n].copy_from_slice(&pats[r]);
                let local = locals.bytes_mut(r);
                local.fill(FILL);
                if kind == Kind::Put {
                    local[sof..sof + n].copy_from_slice(&pats[r]);
                }
            }
            let lp = locals.ptrs();
            w.run(BLOCK, |arch, team, r| {
                let heap = w.heap_ptr(r);
                let local = lp[r].get();
                let (next, next2) = ((r + 1) % world, (r + 2) % world);
                // SAFETY: every range lies in its heap or local buffer; each destination
                // is written by exactly one rank.
                unsafe {
                    match kind {
                        Kind::Put if nbi => {
                            team.put_nbi_block(arch, heap.add(reg + dof), local.add(sof), n, next)
                        }
                        Kind::Put => {
                            team.put_block(arch, heap.add(reg + dof), local.add(sof), n, next)
                        }
                        Kind::Get if nbi => {
                            team.get_nbi_block(arch, local.add(lof), heap.add(sof), n, next)
                        }
                        Kind::Get => team.get_block(arch, local.add(lof), heap.add(sof), n, next),
                        Kind::Copy if nbi => team.copy_nbi_block(
                            arch,
                            heap.add(reg + dof),
                            heap.add(sof),
                            n,
                            next,
                            next2,
                        ),
                        Kind::Copy => team.copy_block(
                            arch,
                            heap.add(reg + dof),
                            heap.add(sof),
                            n,
                            next,
                            next2,
                        ),
                    }
                    if nbi {
                        team.quiet_block(arch);
                    }
                }
            });
            for t in 0..world {
                let (prev, next) = ((t + world - 1) % world, (t + 1) % world);
                let (buf, at, want) = match kind {
                    // Rank t-1 put its local data into t; rank t-2 copied t-1's heap into t.
                    Kind::Put | Kind::Copy => (w.bytes(t), reg + dof, &pats[prev]),
                    // Rank t got rank t+1's heap data.
                    Kind::Get => (locals.bytes(t), lof, &pats[next]),
                };
                let what = format!("{what}: rank {t}");
                assert_bytes(&buf[at..at + n], want, &what);
                assert_eq!(
                    buf[at - 1],
                    FILL,
                    "{what}: byte before the range was written"
                );
                assert_eq!(
                    buf[at + n],
                    FILL,
                    "{what}: byte after the range was written"
                );
            }
            // Sources are untouched.
            for r in 0..world {
                assert_bytes(
                    &w.bytes(r)[sof..sof + n],
                    &pats[r],
                    &format!("{what}: rank {r} source"),
                );
            }
        }
    }
}

/// The grid-level put and get (each block its share), with 3 blocks of 3 threads.
fn grid_put_get(world: usize) {
    let grid = Grid {
        blocks: 3,
        threads: 3,
    };
    for n in SIZES {
        let reg = region(n);
        let w = World::new(world, 2 * reg + 64);
        for r in 0..world {
            for i in 0..n {
                w.bytes_mut(r)[5 + i] = pattern(r, i);
            }
        }
        let mut locals = local_buffers(world, n + 8, |_, _| FILL);
        let lp: Vec<Shared<u8>> = locals.iter_mut().map(|v| Shared(v.as_mut_ptr())).collect();
        // Put: heap[5..] of rank r -> heap[reg + 5..] of rank r+1 (local source = own heap).
        w.run(grid, |arch, team, r| {
            let heap = w.heap_ptr(r);
            // SAFETY: in-range, disjoint destinations per rank.
            unsafe {
                collectives::put(
                    arch,
                    team,
                    heap.add(reg + 5),
                    heap.add(5),
                    n,
                    (r + 1) % world,
                )
            };
        });
        // Get: heap[reg + 5..] of rank r+1 -> local[3..] of rank r.
        w.run(grid, |arch, team, r| {
            // SAFETY: as above.
            unsafe {
                collectives::get(
                    arch,
                    team,
                    lp[r].get().add(3),
                    w.heap_ptr(r).add(reg + 5),
                    n,
                    (r + 1) % world,
                )
            };
        });
        for t in 0..world {
            let want: Vec<u8> = (0..n)
                .map(|i| pattern((t + world - 1) % world, i))
                .collect();
            assert_bytes(
                &w.bytes(t)[reg + 5..reg + 5 + n],
                &want,
                &format!("grid put n={n} rank {t}"),
            );
            let want: Vec<u8> = (0..n).map(|i| pattern(t, i)).collect();
            assert_bytes(
                &locals[t][3..3 + n],
                &want,
                &format!("grid get n={n} rank {t}"),
            );
            assert_eq!(locals[t][3 + n], FILL);
        }
    }
}

per_world! {
    put => |w| super::run_kind(w, super::Kind::Put);
    get => |w| super::run_kind(w, super::Kind::Get);
    copy => |w| super::run_kind(w, super::Kind::Copy);
    grid_put_get => super::grid_put_get;
}
