//! The rendezvous provider: a peer-base table for allocations the user already made
//! outside the symmetric heap, one per rank.
//!
//! Collectively, every rank exports its allocation, receives everyone's handles, maps
//! each peer's allocation into its own address space and uploads the table. The kernels
//! that run over a heap buffer's table run over this one unchanged: the table is the
//! whole contract ([`PeerBaseProvider`]).

use crate::backend::{Backend, DeviceRegion};
use crate::error::{Error, Result};
use crate::world::{PeerBaseProvider, PeerBases, World};

/// A rendezvous of one user allocation per rank. Dropping it unmaps the peers' copies
/// (the user's own allocation is untouched).
pub struct Rendezvous<B: Backend> {
    table: PeerBases,
    local: u64,
    len: usize,
    _mappings: Vec<B::Mapping>,
    _table_memory: B::DeviceMemory,
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
        let lens = world.all_gather_bytes(&(len as u64).to_le_bytes())?;
        if let Some(rank) = lens.iter().position(|l| *l != lens[0]) {
            return Err(Error::CollectiveMismatch { rank, ops: 0 });
        }
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
        // The table contract: entries congruent modulo 16, so kernels keep their vector
        // path after translation. Allocators align far more; refuse anything else.
        if let Some((rank, &addr)) = entries
            .iter()
            .enumerate()
            .find(|(_, e)| (*e ^ entries[0]) % 16 != 0)
        {
            return Err(Error::PeerMisaligned { rank, addr });
        }
        let table_memory = backend.alloc_device(entries.len() * 8)?;
        backend.upload(table_memory.base(), bytemuck::cast_slice(&entries))?;
        let table = PeerBases::new(table_memory.base(), entries.into());
        Ok(Self {
            table,
            local: memory.base(),
            len,
            _mappings: mappings,
            _table_memory: table_memory,
        })
    }
}

impl<B: Backend> PeerBaseProvider for Rendezvous<B> {
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
