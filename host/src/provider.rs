//! Providers of peer-base tables besides the symmetric heap, one allocation per rank:
//!
//! - [`Rendezvous`]: allocations the user already made outside the heap. Collectively,
//!   every rank exports its allocation, receives everyone's handles, maps each peer's
//!   allocation into its own address space and uploads the table.
//! - [`ExternalTable`]: a table another library built (NVSHMEM's `nvshmem_ptr`,
//!   rocSHMEM's `rocshmem_ptr`, PyTorch symmetric memory's `buffer_ptrs`, IPC mappings a
//!   program made itself). symmem checks the table contract and uploads it.
//!
//! The kernels that run over a heap buffer's table run over these unchanged: the table is
//! the whole contract ([`PeerBaseProvider`]).

use crate::backend::{Backend, DeviceRegion};
use crate::error::{Error, Result};
use crate::world::{PeerBaseProvider, PeerBases, World};

/// A rendezvous of one user allocation per rank. Dropping it unmaps the peers' copies
/// (the user's own allocation is untouched).
pub struct Rendezvous<B: Backend> {
    // Field order is drop order: the peers' mappings go before the uploaded table.
    _mappings: Vec<B::Mapping>,
    table: ExternalTable<B>,
}

impl<B: Backend> Rendezvous<B> {
    /// Collective: shares `memory` (this rank's allocation, `len` bytes of it) with every
    /// rank of `world`. Errors: `CollectiveMismatch` if ranks pass different lengths
    /// (rank named), `PeerLost`, and the backend's mapping errors.
    pub fn new(world: &World<B>, memory: &B::DeviceMemory, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(Error::ZeroSize);
        }
        if len > memory.len() {
            return Err(Error::OutOfBounds {
                start: 0,
                len,
                capacity: memory.len(),
            });
        }
        same_len_everywhere(world, len)?;
        let backend = world.backend();
        let handles = world.all_gather_shareable(backend.export_device_memory(memory)?)?;
        let mut entries = Vec::with_capacity(handles.len());
        let mut mappings = Vec::new();
        for (peer, handle) in handles.into_iter().enumerate() {
            if peer == world.rank() {
                entries.push(memory.base());
            } else {
                let mapping = backend.import_device_memory(handle, len)?;
                entries.push(mapping.base());
                mappings.push(mapping);
            }
        }
        Ok(Self {
            _mappings: mappings,
            table: ExternalTable::upload(world, memory.base(), len, entries)?,
        })
    }
}

impl<B: Backend> PeerBaseProvider for Rendezvous<B> {
    fn table(&self) -> &PeerBases {
        self.table.table()
    }
    fn local_ptr(&self) -> u64 {
        self.table.local_ptr()
    }
    fn byte_len(&self) -> usize {
        self.table.byte_len()
    }
}

/// [`Error::CollectiveMismatch`] naming the first rank whose `len` differs from rank 0's.
fn same_len_everywhere<B: Backend>(world: &World<B>, len: usize) -> Result<()> {
    let lens = world.all_gather_bytes(&(len as u64).to_le_bytes())?;
    match lens.iter().position(|l| *l != lens[0]) {
        Some(rank) => Err(Error::CollectiveMismatch { rank, ops: 0 }),
        None => Ok(()),
    }
}

/// A peer-base table that another library built, checked and uploaded by symmem. The
/// memory it names stays that library's: it must outlive this value and every kernel
/// launched over it. Dropping it frees only the uploaded table.
pub struct ExternalTable<B: Backend> {
    table: PeerBases,
    local: u64,
    len: usize,
    _table_memory: B::DeviceMemory,
}

impl<B: Backend> ExternalTable<B> {
    /// Collective: uploads `entries` (entry `r` = the allocation's address on rank `r` as
    /// mapped in this process, each valid for `len` bytes) as this rank's device-resident
    /// table, after checking the contract: one entry per rank, `entries[rank] == local`,
    /// no null entry, entries congruent modulo 16, and the same `len` on every rank.
    ///
    /// Errors: [`Error::ZeroSize`]; [`Error::BadPeerTable`] for a table of the wrong length,
    /// a null entry, or an own entry that is not `local`; [`Error::PeerMisaligned`];
    /// [`Error::CollectiveMismatch`] if ranks pass different `len`s (rank named);
    /// [`Error::PeerLost`].
    pub fn new(world: &World<B>, local: u64, len: usize, entries: &[u64]) -> Result<Self> {
        if len == 0 {
            return Err(Error::ZeroSize);
        }
        let (rank, n) = (world.rank(), world.world_size());
        let bad = |rank, addr, why| Err(Error::BadPeerTable { rank, addr, why });
        if entries.len() != n {
            return bad(entries.len(), 0, "the table's length is not the world size");
        }
        if let Some(r) = entries.iter().position(|&e| e == 0) {
            return bad(r, 0, "a null address");
        }
        if entries[rank] != local {
            return bad(
                rank,
                entries[rank],
                "this rank's entry is not the local pointer",
            );
        }
        same_len_everywhere(world, len)?;
        Self::upload(world, local, len, entries.to_vec())
    }

    /// Checks that `entries` are congruent modulo 16 to this rank's own entry, `local`
    /// (kernels choose their vector path from local pointers, so it must survive
    /// translation; allocators align far more), and uploads them.
    fn upload(world: &World<B>, local: u64, len: usize, entries: Vec<u64>) -> Result<Self> {
        if let Some((rank, &addr)) = entries
            .iter()
            .enumerate()
            .find(|(_, e)| !(*e ^ local).is_multiple_of(16))
        {
            return Err(Error::PeerMisaligned { rank, addr });
        }
        let backend = world.backend();
        let memory = backend.alloc_device(entries.len() * 8)?;
        backend.upload(memory.base(), bytemuck::cast_slice(&entries))?;
        Ok(Self {
            table: PeerBases::new(memory.base(), entries.into()),
            local,
            len,
            _table_memory: memory,
        })
    }
}

impl<B: Backend> PeerBaseProvider for ExternalTable<B> {
    fn table(&self) -> &PeerBases {
        &self.table
    }
    fn local_ptr(&self) -> u64 {
        self.local
    }
    fn byte_len(&self) -> usize {
        self.len
    }
}
