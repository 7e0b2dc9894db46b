//! Peer tables: the device-resident `u64` table of one allocation ([`PeerBases`]), entry
//! `r` its address on rank `r` as mapped here, and the whole provider contract
//! ([`PeerBaseProvider`]): anything that produces such a table drives the same kernels.

use crate::error::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The device-resident peer-base table of one allocation: entry `r` is the allocation's
/// address on rank `r` as mapped in this address space. Entry `rank` is the local
/// pointer. The device copy lives as long as the buffer (or provider) it came from; a
/// kernel launch refuses a table whose owner has been dropped ([`Error::TableDropped`]).
#[derive(Clone, Debug)]
pub struct PeerBases {
    device: u64,
    entries: Arc<[u64]>,
    /// The world it belongs to ([`crate::World`]'s serial number).
    world: u64,
    /// The collective object it is the table of; `None` for the heap's own table.
    object: Option<Arc<ObjectTag>>,
}

/// Which collective object a table belongs to, and whether it has been let go of.
#[derive(Debug)]
pub(crate) struct ObjectTag {
    id: u64,
    offset: usize,
    dropped: AtomicBool,
}

impl ObjectTag {
    pub(crate) fn new(id: u64, offset: usize) -> Arc<Self> {
        Arc::new(Self {
            id,
            offset,
            dropped: AtomicBool::new(false),
        })
    }
}

impl PartialEq for PeerBases {
    fn eq(&self, other: &Self) -> bool {
        self.device == other.device && self.entries == other.entries
    }
}

impl Eq for PeerBases {}

/// How symmem lays a table out in device memory: a header of
/// [`TABLE_HEADER_WORDS`](symmem_device::TABLE_HEADER_WORDS) words (the rank whose table
/// it is, the world size), then the entries. Kernels get the address of the first entry
/// (a plain `u64` array, as NVSHMEM's or torch's tables are), and read the header in
/// front of it to check a rank ([`symmem_device::PeerTable::base`]).
pub(crate) struct DeviceTable;

impl DeviceTable {
    /// Bytes of the device memory of a table of `world` entries, header included.
    pub(crate) const fn bytes(world: usize) -> usize {
        (symmem_device::TABLE_HEADER_WORDS + world) * 8
    }

    /// The words to upload at the start of that memory for rank `rank`'s table of
    /// `entries`.
    pub(crate) fn words(rank: usize, entries: &[u64]) -> Vec<u64> {
        [rank as u64, entries.len() as u64]
            .into_iter()
            .chain(entries.iter().copied())
            .collect()
    }

    /// The address kernels get, for a table whose memory starts at `memory`.
    pub(crate) const fn entries_at(memory: u64) -> u64 {
        memory + (symmem_device::TABLE_HEADER_WORDS * 8) as u64
    }

    /// Where the memory of the table whose entries are at `entries` starts (the inverse
    /// of [`DeviceTable::entries_at`]).
    pub(crate) const fn memory_of(entries: u64) -> u64 {
        entries - (symmem_device::TABLE_HEADER_WORDS * 8) as u64
    }
}

impl PeerBases {
    pub(crate) fn new(
        device: u64,
        entries: Arc<[u64]>,
        world: u64,
        object: Option<Arc<ObjectTag>>,
    ) -> Self {
        Self {
            device,
            entries,
            world,
            object,
        }
    }

    /// Marks the table's owner as let go of: kernels may no longer be launched with it.
    pub(crate) fn mark_dropped(&self) {
        if let Some(object) = &self.object {
            object.dropped.store(true, Ordering::Relaxed);
        }
    }

    /// The serial number of the world it belongs to.
    pub(crate) fn world_serial(&self) -> u64 {
        self.world
    }

    /// The collective object it is the table of, `(id, heap offset)`, unless it is the
    /// heap's own table; `Err(TableDropped)` once that object has been let go of.
    pub(crate) fn object(&self) -> Result<Option<(u64, usize)>> {
        match &self.object {
            Some(o) if o.dropped.load(Ordering::Relaxed) => Err(Error::TableDropped),
            Some(o) => Ok(Some((o.id, o.offset))),
            None => Ok(None),
        }
    }

    /// Device address of the table (`len()` u64 entries): what kernels take.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }
    /// The table's entries, as uploaded.
    pub fn entries(&self) -> &[u64] {
        &self.entries
    }
    /// Entries in the table (the world size).
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True for an empty table (never, for a live world).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Anything that can produce a device-resident peer-base table: the whole provider
/// contract. `table().entries()[world.rank()]` is the provider's local pointer.
pub trait PeerBaseProvider {
    /// The device-resident table, indexed by rank.
    fn table(&self) -> &PeerBases;
    /// The local pointer (`table().entries()[rank]`).
    fn local_ptr(&self) -> u64;
    /// Bytes of the allocation on every rank.
    fn byte_len(&self) -> usize;
}
