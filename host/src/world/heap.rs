//! A world's heap: allocation, peer tables, retiring what ranks let go of (released by
//! an agreement: `super::agree`), and finding and translating symmetric addresses.

use super::World;
use crate::backend::{Backend, DeviceRegion};
use crate::error::{Error, Result};
use crate::ledger::{Ledger, Record};
use crate::offset_alloc::{AllocError, OffsetAllocator};
use crate::table::{DeviceTable, ObjectTag, PeerBases};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};

const TABLES_PER_CHUNK: usize = 1024;

/// Device-resident storage for peer tables: chunks of fixed-size slots.
pub(super) struct TableArena<M> {
    pub(super) chunks: Vec<M>,
    pub(super) free: Vec<u64>,
}

/// A live allocation: the serial number its buffer carries, its ledger id and the bytes
/// asked for.
#[derive(Clone, Copy)]
pub(super) struct Live {
    pub(super) serial: u64,
    pub(super) id: u64,
    pub(super) bytes: usize,
}

/// A collective object this rank has let go of, kept until an agreement at which every
/// rank has let go of it.
pub(super) struct Retired<B: Backend> {
    /// Its ledger id.
    pub(super) id: u64,
    /// A heap range (offset, bytes) and its table slot, still allocated meanwhile.
    pub(super) allocation: Option<(usize, usize, u64)>,
    /// Peers' memory mapped here; unmapped first.
    pub(super) mappings: Vec<B::Mapping>,
    /// This rank's memory (tables, a rendezvous' exported allocation); freed last.
    pub(super) memories: Vec<B::DeviceMemory>,
    /// True if peers mapped `memories`: then they are freed only after a further
    /// barrier, once every rank has unmapped.
    pub(super) exported: bool,
    /// Memory the application handed over with a registration, dropped (freed by its
    /// owner's drop) as `memories` are.
    pub(super) kept: Vec<Box<dyn std::any::Any + Send>>,
}

/// A live registration of memory outside the heap ([`crate::World::register`]): the
/// range this rank shared and its peer table, which the collectives read it through
/// instead of staging it.
pub(crate) struct Registration {
    /// Its ledger id.
    pub(crate) id: u64,
    /// This rank's address of the range.
    pub(crate) local: u64,
    /// Its length in bytes.
    pub(crate) bytes: usize,
    /// Its peer table.
    pub(crate) table: PeerBases,
}

/// Serial numbers of allocations and worlds, unique across every world of the process,
/// so a stale or foreign [`RawSymmetric`], buffer or table is recognised.
static SERIALS: AtomicU64 = AtomicU64::new(1);

/// A fresh serial number (see [`SERIALS`]).
pub(super) fn next_serial() -> u64 {
    SERIALS.fetch_add(1, Ordering::Relaxed)
}

pub(super) struct HeapState<B: Backend> {
    pub(super) allocator: OffsetAllocator,
    pub(super) live: std::collections::HashMap<usize, Live>,
    pub(super) tables: TableArena<B::DeviceMemory>,
    pub(super) ledger: Ledger,
    pub(super) retired: Vec<Retired<B>>,
    pub(super) registered: Vec<Registration>,
}

impl<B: Backend> HeapState<B> {
    /// The state of a fresh heap of `bytes`.
    pub(super) fn new(bytes: usize) -> Self {
        Self {
            allocator: OffsetAllocator::new(bytes),
            live: std::collections::HashMap::new(),
            tables: TableArena {
                chunks: Vec::new(),
                free: Vec::new(),
            },
            ledger: Ledger::new(),
            retired: Vec::new(),
            registered: Vec::new(),
        }
    }

    /// Bytes of heap held by retired allocations.
    fn pending_bytes(&self) -> usize {
        self.retired
            .iter()
            .filter_map(|r| r.allocation.map(|(_, bytes, _)| bytes))
            .sum()
    }
}

/// The world's error for the allocator's `e` on rank `rank`, with `pending` bytes
/// dropped and not yet released.
fn alloc_error(e: AllocError, rank: usize, pending: usize) -> Error {
    match e {
        AllocError::ZeroSize => Error::ZeroSize,
        AllocError::BadAlignment { align } => Error::BadAlignment { align },
        AllocError::OutOfMemory {
            requested,
            available,
        } => Error::OutOfHeap {
            rank,
            requested,
            available,
            pending,
        },
        AllocError::TooLarge {
            requested,
            capacity,
        } => Error::TooLarge {
            requested,
            capacity,
        },
        AllocError::NotAllocated { offset } => Error::NotAllocated { offset },
    }
}

/// One symmetric allocation, as the heap made it: the serial number its handle carries,
/// its ledger id, its heap offset and its peer table.
pub(crate) struct Allocation {
    pub(crate) serial: u64,
    pub(crate) id: u64,
    pub(crate) offset: usize,
    pub(crate) table: PeerBases,
}

impl<B: Backend> World<B> {
    pub(super) fn lock_state(&self) -> MutexGuard<'_, HeapState<B>> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allocates `bytes` at alignment `align` (checked by the caller) in every rank's
    /// heap, collectively: records it in the ledger, uploads its peer table (no
    /// device-to-host synchronisation) and returns the allocation.
    pub(crate) fn allocate_raw(&self, bytes: usize, align: usize) -> Result<Allocation> {
        let mut state = self.lock_state();
        let offset = match state.allocator.alloc(bytes, align) {
            Ok(offset) => offset,
            Err(e) => {
                let e = alloc_error(e, self.shared.rank, state.pending_bytes());
                tracing::debug!(rank = self.shared.rank, bytes, align, error = %e, "symmetric allocation refused");
                return Err(e);
            }
        };
        let id = self.create(
            &mut state.ledger,
            Record::Allocation,
            &[bytes as u64, align as u64, offset as u64],
        );
        let entries: Arc<[u64]> = self
            .shared
            .heap_bases
            .entries()
            .iter()
            // An off-node peer's entry stays 0 (see `crate::topology`).
            .map(|&b| if b == 0 { 0 } else { b + offset as u64 })
            .collect();
        let slot = match self.table_slot(&mut state) {
            Ok(slot) => slot,
            Err(e) => {
                // Undo locally; the ledger keeps the attempt so all ranks stay in step.
                let _ = state.allocator.free(offset);
                return Err(e);
            }
        };
        let serial = next_serial();
        state.live.insert(offset, Live { serial, id, bytes });
        drop(state);
        tracing::debug!(
            rank = self.shared.rank,
            bytes,
            align,
            offset,
            "symmetric allocation"
        );
        let words = DeviceTable::words(self.shared.rank, &entries);
        // SAFETY: a table slot holds a table's header and `world_size` u64s, and no
        // launch uses it before this.
        unsafe {
            self.shared
                .backend
                .upload(slot, bytemuck::cast_slice(&words))?
        };
        let table = PeerBases::new(
            DeviceTable::entries_at(slot),
            entries,
            self.shared.serial,
            Some(ObjectTag::new(id, offset)),
        );
        Ok(Allocation {
            serial,
            id,
            offset,
            table,
        })
    }

    fn table_slot(&self, state: &mut HeapState<B>) -> Result<u64> {
        if state.tables.free.is_empty() {
            let stride = DeviceTable::bytes(self.shared.world_size).next_multiple_of(64);
            let chunk = self
                .shared
                .backend
                .alloc_device(stride * TABLES_PER_CHUNK)?;
            state.tables.free.extend(
                (0..TABLES_PER_CHUNK)
                    .rev()
                    .map(|i| chunk.base() + (i * stride) as u64),
            );
            state.tables.chunks.push(chunk);
        }
        Ok(state.tables.free.pop().expect("refilled above"))
    }

    /// Records a collective object in `ledger`; returns its id. In a world of one rank
    /// it is agreed at once (there is nobody to disagree with).
    fn create(&self, ledger: &mut Ledger, record: Record, words: &[u64]) -> u64 {
        let id = ledger.create(record, words);
        if self.shared.world_size == 1 {
            ledger.agree_alone();
        }
        id
    }

    /// Records a collective object that is not a heap allocation (a provider); returns
    /// its id.
    pub(crate) fn create_object(&self, record: Record) -> u64 {
        self.create(&mut self.lock_state().ledger, record, &[])
    }

    /// Lets go of the allocation at `offset` if it is the one numbered `serial`: it is
    /// no longer symmetric here, and goes back to the heap at the first barrier at which
    /// every rank has let go of it.
    pub(crate) fn retire_allocation(&self, offset: usize, serial: u64, table: u64) -> Result<()> {
        let mut state = self.lock_state();
        let live = match state.live.get(&offset) {
            Some(live) if live.serial == serial => *live,
            _ => return Err(Error::NotAllocated { offset }),
        };
        state.live.remove(&offset);
        state.retired.push(Retired {
            id: live.id,
            allocation: Some((offset, live.bytes, table)),
            mappings: Vec::new(),
            memories: Vec::new(),
            exported: false,
            kept: Vec::new(),
        });
        Ok(())
    }

    /// Lets go of provider object `id` and what it holds: `mappings` of peers' memory,
    /// and this rank's `memories` and the application's memory `kept` (peers mapped them
    /// if `exported`). They are released at the first barrier at which every rank has
    /// let go of `id`; a registration of `id` ends now.
    pub(crate) fn retire_object(
        &self,
        id: u64,
        mappings: Vec<B::Mapping>,
        memories: Vec<B::DeviceMemory>,
        kept: Vec<Box<dyn std::any::Any + Send>>,
        exported: bool,
    ) {
        let mut state = self.lock_state();
        state.registered.retain(|r| r.id != id);
        state.retired.push(Retired {
            id,
            allocation: None,
            mappings,
            memories,
            exported,
            kept,
        });
    }

    /// Records registration `registration`: collectives reach its range through its
    /// table until its object is retired.
    pub(crate) fn add_registration(&self, registration: Registration) {
        self.lock_state().registered.push(registration);
    }

    /// The live registration that holds all of `ptr..ptr+bytes`, if one does: its
    /// ledger id and its peer table.
    pub(crate) fn registration_of(&self, ptr: u64, bytes: usize) -> Option<(u64, PeerBases)> {
        let state = self.lock_state();
        state
            .registered
            .iter()
            .find(|r| {
                ptr >= r.local
                    && (ptr - r.local)
                        .checked_add(bytes as u64)
                        .is_some_and(|end| end <= r.bytes as u64)
            })
            .map(|r| (r.id, r.table.clone()))
    }

    /// True when `ptr` is inside a live symmetric allocation of this rank's heap.
    pub fn is_symmetric(&self, ptr: u64) -> bool {
        self.locate(ptr).is_ok()
    }

    /// The ledger id of the live symmetric allocation that holds all of `ptr..ptr+bytes`
    /// (so every rank's copy of those bytes lies at the same heap offset), if one does.
    pub(crate) fn heap_object(&self, ptr: u64, bytes: usize) -> Option<u64> {
        let (start, len) = self.locate(ptr).ok()?;
        let offset = (ptr - self.shared.heap.base()) as usize;
        if offset - start + bytes > len {
            return None;
        }
        self.lock_state().live.get(&start).map(|live| live.id)
    }

    /// The live allocation (heap offset, length) that holds `ptr`.
    fn locate(&self, ptr: u64) -> Result<(usize, usize)> {
        let base = self.shared.heap.base();
        let offset = ptr
            .checked_sub(base)
            .filter(|&o| o < self.shared.heap.len() as u64);
        let state = self.lock_state();
        offset
            .and_then(|o| {
                let (start, _) = state.allocator.allocation(o as usize)?;
                let live = state.live.get(&start)?;
                (o as usize - start < live.bytes).then_some((start, live.bytes))
            })
            .ok_or(Error::NotSymmetric { addr: ptr })
    }

    /// Translates the local `ptr` (inside a live symmetric allocation) to rank `to`'s
    /// copy, as mapped in this address space: the checked host-side form.
    ///
    /// # Errors
    /// [`Error::RankOutOfRange`], [`Error::OffNode`] for a rank on another node
    /// (not mapped here), [`Error::NotSymmetric`].
    pub fn translate(&self, ptr: u64, to: usize) -> Result<u64> {
        self.check_rank(to)?;
        if !self.shared.topology.reaches(to) {
            return Err(Error::OffNode { rank: to });
        }
        self.locate(ptr)?;
        let bases = symmem_translate::PeerBases::new(self.shared.heap_bases.entries());
        let local = std::ptr::without_provenance_mut::<u8>(ptr as usize);
        bases
            .remote(
                local,
                self.shared.heap.len(),
                self.shared.world_size,
                self.shared.rank,
                to,
            )
            .map(|p| p.addr() as u64)
            .map_err(|_| Error::NotSymmetric { addr: ptr })
    }
}
