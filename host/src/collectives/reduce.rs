//! The reductions: the all-reduce (its path, by algorithm and by where its buffers lie),
//! the reduce-scatter, and the across-nodes and barrier-free launches they take.

use super::exchange::Place;
use super::launching::local;
use super::route::{Route, STAGED_KERNEL_MAX_BYTES};
use super::staging::Need;
use super::{Algorithm, Call, Collectives, Element, LamportParams, ReduceOp, element};
use crate::backend::{Backend, Grid};
use crate::error::{Error, Result};
use crate::memory::{AsDeviceSlice, DeviceSlice};
use symmem_device::UnsafeKernel;
use symmem_rma::lamport;

#[cfg(doc)]
use crate::world::World;

impl<B: Backend> Collectives<B> {
    /// All-reduce: every rank's `dst[0..count]` gets `op` folded over every rank's
    /// `src[0..count]`, in rank order (so all ranks get bit-identical results; integer
    /// sums wrap; `bf16` and `f16` are accumulated in `f32` and rounded once). Both are any
    /// device memory of this rank, and may be the same memory (in place:
    /// [`Collectives::all_reduce_in_place`]). The barrier-free path reads and writes this
    /// rank's memory only and copies nothing; the one-shot, two-shot and across-nodes
    /// paths read peers' `src` (and the two-shot writes peers' `dst`), so a `src` that is
    /// not symmetric memory of this world's heap, or is `dst`, is first copied into this
    /// handle's staging scratch; a two-shot where either is neither symmetric nor
    /// registered copies `src` into the scratch, reduces there and copies the result out
    /// (in its one kernel up to [`STAGED_KERNEL_MAX_BYTES`]), unless the ranks share one
    /// address space, where its kernel exchanges the addresses instead (see [memory the application owns](Collectives#memory-the-application-owns)).
    /// Collective.
    ///
    /// # Errors
    /// Either view shorter than `count`, [`Error::OverlappingBuffers`] for `dst`
    /// and `src` that partly overlap, [`Error::LamportUnavailable`] for
    /// [`Algorithm::Lamport`] where its kernel cannot serve the call,
    /// [`Error::Capturing`] inside [`World::capture`] across nodes (the hierarchical path
    /// uploads its table of copies on every call) or where the staging scratch must grow,
    /// and the scratch's allocation errors.
    pub fn all_reduce<T: Element>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        count: usize,
        op: ReduceOp,
        algorithm: Algorithm,
    ) -> Result<()> {
        self.world.collectively(|| {
            let bytes = count * size_of::<T>();
            let checked = (|| {
                let (d, s) = (local(dst, count)?, local(src, count)?);
                let (dp, sp, len) = (d.ptr(), s.ptr(), bytes as u64);
                if count > 0 && dp != sp && dp < sp + len && sp < dp + len {
                    return Err(Error::OverlappingBuffers {
                        rank: self.world.rank(),
                        dst: dp,
                        src: sp,
                        bytes,
                    });
                }
                Ok((d, s))
            })();
            // Where each lies, looked up once: the heap's ids the agreement names, and the
            // registrations the unstaged paths reach.
            let places = [self.place(dst), self.place(src)];
            let objects = (places[0].heap_id(), places[1].heap_id());
            let call = [
                Call::AllReduce as u64,
                count as u64,
                element::<T>(),
                op as u64,
                algorithm as u64,
            ];
            let chosen = |chose: &str| {
                tracing::debug!(
                    rank = self.world.rank(),
                    world_size = self.world.world_size(),
                    bytes,
                    op = ?op,
                    asked = ?algorithm,
                    algorithm = chose,
                    "all_reduce"
                );
            };
            let route = match self.reduce_route::<T>(algorithm, op, bytes) {
                Ok(route) => route,
                Err(e) => {
                    let ids: Vec<u64> = objects.0.into_iter().chain(objects.1).collect();
                    return self.agreed(&call, &ids, checked.and(Err(e)));
                }
            };
            let in_place = dst.as_device_slice().ptr() == src.as_device_slice().ptr();
            let registered = places.iter().any(|p| matches!(p, Place::Registered(..)));
            match route {
                Route::OneShot(_) if !in_place && matches!(places[1], Place::Registered(..)) => {
                    chosen("one-shot (registered source, nothing staged)");
                    let sources = self.table_of(&places[1]).unwrap_or(self.bases());
                    self.unstaged(&call, [&places[0], &places[1]], checked, |d, s| {
                        // SAFETY: the views were checked for `count` elements (`local`) and
                        // agreed, staged where the path needs the heap, with the heap's or
                        // their own tables, this handle's grid and signal array, on one
                        // node where the kernel is a one-node one: the kernel's `# Safety`.
                        unsafe {
                            self.launch(
                                T::all_reduce_gathered(op),
                                (
                                    d,
                                    s,
                                    self.bases(),
                                    sources,
                                    self.world_u32(),
                                    self.rank_u32(),
                                    count as u64,
                                    &self.signals,
                                ),
                            )
                        }
                    })
                }
                Route::TwoShot(kernel) => {
                    let tables = (self.table_of(&places[0]), self.table_of(&places[1]));
                    let exchanged = self.exchanged(tables);
                    match tables {
                        (Some(_), Some(_)) if registered || in_place => {
                            chosen("two-shot (through each buffer's table, nothing staged)");
                            self.through_tables(&call, &places, checked, 0, count, op)
                        }
                        (Some(_), Some(_)) => {
                            chosen("two-shot");
                            // Both symmetric, apart: nothing to stage.
                            self.staged(&call, objects, checked, true, &[], |d, s| {
                                // SAFETY: the views were checked for `count` elements
                                // (`local`) and agreed, staged where the path needs the
                                // heap, with the heap's or their own tables, this handle's
                                // grid and signal array, on one node where the kernel is a
                                // one-node one: the kernel's `# Safety`.
                                unsafe { self.launch(kernel, self.reducing(d, s, count)) }
                            })
                        }
                        _ if exchanged != 0 => {
                            chosen(
                                "two-shot (plain memory's addresses exchanged in the kernel: the \
                                 ranks share one address space; nothing staged)",
                            );
                            self.through_tables(&call, &places, checked, exchanged, count, op)
                        }
                        _ if bytes > STAGED_KERNEL_MAX_BYTES => {
                            chosen("two-shot (staged: copied in and out around the kernel)");
                            let needs = [Need::Src { copy: true }, Need::Dst];
                            self.staged(&call, objects, checked, true, &needs, |d, s| {
                                // SAFETY: the views were checked for `count` elements
                                // (`local`) and agreed, staged where the path needs the
                                // heap, with the heap's or their own tables, this handle's
                                // grid and signal array, on one node where the kernel is a
                                // one-node one: the kernel's `# Safety`.
                                unsafe { self.launch(kernel, self.reducing(d, s, count)) }
                            })
                        }
                        _ => {
                            chosen("two-shot (through scratch, copied in and out by the kernel)");
                            self.through_scratch(&call, objects, checked, |d, s, stage| {
                                // SAFETY: the views were checked for `count` elements
                                // (`local`) and agreed, staged where the path needs the
                                // heap, with the heap's or their own tables, this handle's
                                // grid and signal array, on one node where the kernel is a
                                // one-node one: the kernel's `# Safety`.
                                unsafe {
                                    self.launch(
                                        T::all_reduce_staged(op),
                                        (
                                            d,
                                            s,
                                            self.bases(),
                                            stage,
                                            self.world_u32(),
                                            self.rank_u32(),
                                            count as u64,
                                            &self.signals,
                                        ),
                                    )
                                }
                            })
                        }
                    }
                }
                Route::Lamport(kernel) => {
                    chosen("lamport");
                    // Local memory only: nothing is staged, and in place is safe (every word
                    // is read before the same thread writes it).
                    self.staged(&call, objects, checked, true, &[], |d, s| {
                        self.all_reduce_lamport(kernel, d, s, count)
                    })
                }
                Route::AcrossNodes => {
                    chosen("hierarchical (across nodes)");
                    let needs = [Need::Src { copy: true }];
                    self.staged(&call, objects, checked, true, &needs, |d, s| {
                        self.all_reduce_across_nodes(d, s, count, op)
                    })
                }
                Route::OneShot(kernel) => {
                    chosen("one-shot");
                    let needs = [Need::Src { copy: true }];
                    self.staged(&call, objects, checked, true, &needs, |d, s| {
                        // SAFETY: the views were checked for `count` elements (`local`) and
                        // agreed, staged where the path needs the heap, with the heap's or
                        // their own tables, this handle's grid and signal array, on one
                        // node where the kernel is a one-node one: the kernel's `# Safety`.
                        unsafe { self.launch(kernel, self.reducing(d, s, count)) }
                    })
                }
            }
        })
    }

    /// [`Collectives::all_reduce`] with `buffer` as both source and destination, like
    /// cudarc's `Comm::all_reduce_in_place`: the barrier-free path reduces it where it is;
    /// the others stage the source first. Collective.
    ///
    /// # Errors
    /// As [`Collectives::all_reduce`].
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buffer: &impl AsDeviceSlice<T, B>,
        count: usize,
        op: ReduceOp,
        algorithm: Algorithm,
    ) -> Result<()> {
        self.all_reduce(buffer, buffer, count, op, algorithm)
    }

    /// Reduce-scatter: this rank's `dst[0..count]` gets `op` folded, in rank order, over
    /// chunk `rank` (elements `rank*count..(rank+1)*count`) of every rank's `src`. Both are
    /// any device memory of this rank; a `src` that is not symmetric memory of this
    /// world's heap is first copied into this handle's staging scratch. Collective.
    ///
    /// # Errors
    /// `src` shorter than `world * count`, `dst` shorter than `count`,
    /// [`Error::Capturing`] inside [`World::capture`] across nodes (as
    /// [`Collectives::all_reduce`]) or where the staging scratch must grow, and the
    /// scratch's allocation errors.
    pub fn reduce_scatter<T: Element>(
        &self,
        dst: &impl AsDeviceSlice<T, B>,
        src: &impl AsDeviceSlice<T, B>,
        count: usize,
        op: ReduceOp,
    ) -> Result<()> {
        self.world.collectively(|| {
            let total = self.times_world(count);
            let checked = local(src, total).and_then(|s| Ok((local(dst, count)?, s)));
            let objects = self.objects(dst, src);
            let call = [
                Call::ReduceScatter as u64,
                count as u64,
                element::<T>(),
                op as u64,
            ];
            let needs = [Need::Src { copy: true }];
            self.staged(&call, objects, checked, false, &needs, |d, s| {
                if self.world.topology().nodes() > 1 {
                    // This rank's chunk, reduced over every rank: the all-reduce of that chunk.
                    let me = self.world.rank();
                    let chunk = s.slice(me * count..(me + 1) * count)?;
                    return self.all_reduce_across_nodes(d, &chunk, count, op);
                }
                // SAFETY: the views were checked for `count` elements (`local`) and agreed,
                // staged where the path needs the heap, with the heap's or their own
                // tables, this handle's grid and signal array, on one node where the kernel
                // is a one-node one: the kernel's `# Safety`.
                unsafe { self.launch(T::reduce_scatter(op), self.reducing(d, s, count)) }
            })
        })
    }

    /// The all-reduce of a world that spans nodes, hierarchical: every rank fetches each
    /// off-node rank's whole `src` in bulk through the engine (one get per rank, after a
    /// device barrier that says every `src` is final), then reduces in one pass, reading
    /// the on-node ranks' `src` with loads and the off-node ones from its local copies
    /// (`symmem_all_reduce_gathered_*`, whose second table points at them). Also the
    /// reduce-scatter across nodes, with `src` this rank's chunk.
    fn all_reduce_across_nodes<T: Element>(
        &self,
        dst: &DeviceSlice<'_, T, B>,
        src: &DeviceSlice<'_, T, B>,
        count: usize,
        op: ReduceOp,
    ) -> Result<()> {
        let w = &self.world;
        // It allocates its copies on first use and uploads their table on every call,
        // neither of which a graph can record: refused as such, not as the allocation or
        // the write a user did not make (the soak's graphs across emulated nodes).
        w.not_capturing("an all-reduce or reduce-scatter across nodes")?;
        let (me, n) = (w.rank(), w.world_size());
        let bytes = count * size_of::<T>();
        let far: Vec<usize> = (0..n).filter(|&r| !w.topology().reaches(r)).collect();
        // Copies start where `src` does modulo 16, so they align as it does.
        let skew = (src.ptr() % 16) as usize;
        let slot = bytes.next_multiple_of(16);
        let mut g = self.gathered.lock().unwrap_or_else(|p| p.into_inner());
        let need = skew + far.len() * slot;
        if g.copies.as_ref().is_none_or(|c| c.len() < need) {
            g.copies = None;
            g.copies = Some(w.device_zeros::<u8>(need.max(16))?);
        }
        if g.table.is_none() {
            let words = crate::table::DeviceTable::bytes(n) / 8;
            g.table = Some(w.device_zeros::<u64>(words)?);
        }
        let (Some(copies), Some(table_memory)) = (&g.copies, &g.table) else {
            unreachable!("both made above");
        };
        self.barrier()?;
        let heap = self.bases();
        let src_offset = src.ptr() - heap.entries()[me];
        let mut table = heap.entries().to_vec();
        for (k, &r) in far.iter().enumerate() {
            let copy = copies.slice(skew + k * slot..skew + k * slot + bytes)?;
            // The handle's grid, not one sized by the bytes: every request goes through
            // the engine, and a get kernel that filled the GPU would leave no room for the
            // one-thread kernel with which a target's proxy applies a peer's signal, while
            // that target's copies queue behind it (a 1 MiB all-reduce at 2 nodes x 2 on
            // one H200 hung so: four ranks' 256-block gets spinning on replies).
            // SAFETY: `r` is a rank of the world, `src` this rank's checked view of the
            // heap (staged there by the caller) and `copy` holds its `bytes`.
            unsafe {
                w.kernels().launch_unchecked(
                    symmem_kernels::symmem_rma_get,
                    self.grid,
                    (
                        &copy,
                        &src.as_bytes(),
                        heap,
                        self.world_u32(),
                        self.rank_u32(),
                        bytes as u64,
                        r as u32,
                    ),
                )
            }?;
            // Rank r's `src + i` translates to `copy + i`.
            table[r] = copy.ptr().wrapping_sub(src_offset);
        }
        w.write(
            table_memory,
            0,
            &crate::table::DeviceTable::words(me, &table),
        )?;
        let entries = crate::table::DeviceTable::entries_at(table_memory.ptr());
        let sources = crate::table::PeerBases::new(entries, table.into(), w.serial(), None);
        // SAFETY: the views were checked for `count` elements (`local`) and agreed, staged
        // where the path needs the heap, with the heap's or their own tables, this handle's
        // grid and signal array, on one node where the kernel is a one-node one: the
        // kernel's `# Safety`.
        unsafe {
            self.launch(
                T::all_reduce_gathered(op),
                (
                    dst,
                    src,
                    heap,
                    &sources,
                    self.world_u32(),
                    self.rank_u32(),
                    count as u64,
                    &self.signals,
                ),
            )
        }
    }

    /// Launches the barrier-free all-reduce `kernel` of `dst[0..count]` from
    /// `src[0..count]` (both this rank's, checked and agreed), with as much of the
    /// handle's grid as the data fills (at least one block).
    fn all_reduce_lamport<T: Element>(
        &self,
        kernel: UnsafeKernel<LamportParams<T>>,
        dst: &DeviceSlice<'_, T, B>,
        src: &DeviceSlice<'_, T, B>,
        count: usize,
    ) -> Result<()> {
        // As many warps as there are vectors, up to the handle's grid: a small message
        // runs as one block of one warp, which needs no cross-block count.
        let vectors = lamport::words::<T>(count).div_ceil(4);
        let threads = vectors
            .next_multiple_of(32)
            .clamp(1, self.grid.threads as usize);
        let blocks = vectors
            .div_ceil(threads)
            .clamp(1, self.grid.blocks as usize);
        // SAFETY: both views were checked for `count` elements, the bytes fit the
        // handle's workspace (the route checked `lamport_capacity`), which only this
        // handle's barrier-free calls use, and every rank makes the same calls.
        unsafe {
            self.world.kernels().launch_unchecked(
                kernel,
                Grid::new(blocks as u32, threads as u32),
                (
                    dst,
                    src,
                    self.bases(),
                    self.world_u32(),
                    self.rank_u32(),
                    count as u64,
                    &self.lamport,
                    self.lamport_capacity as u64,
                ),
            )
        }
    }
}
