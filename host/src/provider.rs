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
//!
//! Both are collective objects of their world: every rank makes them at the same point,
//! their creation is an agreement (the same length everywhere; a rank whose part fails
//! still completes the exchange, and the others get [`Error::PeerFailed`]), and dropping
//! one frees nothing at once: the memory it holds is released at the first
//! [`World::barrier`] at which every rank has dropped it (a rendezvous' own allocation
//! only after every peer has unmapped it), as for symmetric buffers; where ranks of one
//! process share a GPU (whose frees wait for every kernel on it), the frees themselves
//! happen at the next barrier, before its exchange, where no peer waits for this rank.

use crate::backend::{Backend, DeviceRegion};
use crate::error::{Error, Result};
use crate::ledger::Record;
use crate::memory::{AsSymSlice, DeviceBuffer, SymSlice};
use crate::table::{DeviceTable, ObjectTag, PeerBaseProvider, PeerBases};
use crate::world::{Call, Registration, World};
use std::marker::PhantomData;

/// What a provider holds for its world, let go of as one collective object on drop.
struct Held<B: Backend> {
    world: World<B>,
    id: u64,
    mappings: Vec<B::Mapping>,
    memories: Vec<B::DeviceMemory>,
    /// The application's memory a registration shares, kept until every peer unmapped it.
    kept: Vec<Box<dyn std::any::Any + Send>>,
    exported: bool,
}

impl<B: Backend> Drop for Held<B> {
    fn drop(&mut self) {
        self.world.retire_object(
            self.id,
            std::mem::take(&mut self.mappings),
            std::mem::take(&mut self.memories),
            std::mem::take(&mut self.kept),
            self.exported,
        );
    }
}

/// Memory a [`Rendezvous`] can share ([`World::register`]): this rank's device memory
/// of `T`s as the application holds it, which the rendezvous takes and keeps where it is
/// until every rank has let go.
///
/// Implemented for symmem's [`DeviceBuffer`] (exported as the backend exports its own
/// allocations: ranks as processes map it on every backend), for cudarc's `CudaSlice<T>`
/// on the CUDA backend, and for [`RawRange`], any range of device memory the caller
/// vouches for. The GPU backends share an application's range through the runtime's
/// IPC handle of the allocation that holds it (`cuIpcGetMemHandle`,
/// `hipIpcGetMemHandle`: `cuMemAlloc`/`cudaMalloc`/`hipMalloc` memory and caching
/// allocators' blocks of it); memory the runtime gives no IPC handle (cuMemAllocAsync's
/// stream-ordered pool, where cudarc allocates, and VMM memory) is shared only among
/// ranks that are threads of one process, and a rank in another process gets
/// [`Error::NotShareable`]. On the CPU backend the application's plain host memory
/// ([`RawRange`]) is likewise shared among threads only.
///
/// Sealed: the trait's method is symmem's own.
pub trait Registrable<T, B: Backend> {
    /// Where the memory lies on `world`'s device, how peers map it and what keeps it
    /// alive: symmem's own business.
    #[doc(hidden)]
    fn share(self, world: &World<B>) -> Result<Sharing<B>>;
}

/// What [`Registrable::share`] gives a rendezvous: the range, its export and what keeps
/// the memory alive. Only symmem makes one.
#[doc(hidden)]
pub struct Sharing<B: Backend> {
    ptr: u64,
    bytes: usize,
    export: Result<crate::backend::Shareable>,
    keep: Keep<B>,
}

/// What keeps a registration's memory alive, and its export good, until every peer has
/// unmapped it.
enum Keep<B: Backend> {
    /// symmem's own allocation.
    Memory(B::DeviceMemory),
    /// The application's memory (its drop frees it; none for a [`RawRange`]) and the
    /// export's hold ([`RangeExport::hold`](crate::backend::RangeExport)).
    App(Vec<Box<dyn std::any::Any + Send>>),
}

impl<B: Backend> Sharing<B> {
    /// The application's `bytes` at `ptr`, exported through [`Backend::export_range`],
    /// kept alive by `keep` (dropped once every peer has let go).
    ///
    /// # Safety
    /// `ptr..ptr + bytes` is memory of `world`'s device that stays allocated while
    /// `keep` lives.
    pub(crate) unsafe fn application(
        world: &World<B>,
        ptr: u64,
        bytes: usize,
        keep: Option<Box<dyn std::any::Any + Send>>,
    ) -> Self {
        let mut kept: Vec<_> = keep.into_iter().collect();
        let export = if bytes == 0 {
            Err(Error::ZeroSize)
        } else {
            // SAFETY: forwarded from the caller.
            unsafe { world.backend().export_range(ptr, bytes) }.map(|export| {
                kept.extend(export.hold);
                export.shareable
            })
        };
        Self {
            ptr,
            bytes,
            export,
            keep: Keep::App(kept),
        }
    }
}

impl<T: bytemuck::Pod, B: Backend> Registrable<T, B> for DeviceBuffer<T, B> {
    fn share(self, world: &World<B>) -> Result<Sharing<B>> {
        world.check_own(self.world())?;
        let (world, memory, elements) = self.into_parts();
        let export = world.backend().export_device_memory(&memory);
        Ok(Sharing {
            ptr: memory.base(),
            bytes: elements * size_of::<T>(),
            export,
            keep: Keep::Memory(memory),
        })
    }
}

/// `len` elements of `T` at a device address the caller vouches for, as
/// [`World::register`] takes them: memory another allocator made (a framework's caching
/// allocator, a C library), which stays the caller's to free after the rendezvous is
/// gone.
#[derive(Clone, Copy, Debug)]
pub struct RawRange<T> {
    ptr: u64,
    len: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> RawRange<T> {
    /// The range of `len` elements of `T` at `ptr`.
    ///
    /// # Safety
    /// `ptr` is the address of `len` elements of `T`, aligned for `T`, in memory of the
    /// device of the world it is registered with, that stays allocated until the
    /// rendezvous made of it has been dropped on every rank and a [`World::barrier`]
    /// has passed after that; kernels of every rank write through it meanwhile.
    pub unsafe fn new(ptr: u64, len: usize) -> Self {
        Self {
            ptr,
            len,
            _t: PhantomData,
        }
    }
}

impl<T: 'static, B: Backend> Registrable<T, B> for RawRange<T> {
    fn share(self, world: &World<B>) -> Result<Sharing<B>> {
        let bytes = self
            .len
            .checked_mul(size_of::<T>())
            .ok_or(Error::TooLarge {
                requested: usize::MAX,
                capacity: isize::MAX as usize,
            })?;
        // SAFETY: `RawRange::new`'s contract.
        Ok(unsafe { Sharing::application(world, self.ptr, bytes, None) })
    }
}

/// A rendezvous of one allocation per rank: `len` elements of `T` each, this rank's
/// own memory shared with every rank of the world. It keeps this rank's memory (a
/// [`DeviceBuffer`], the application's cudarc slice, ...: [`Registrable`]); dropping the
/// rendezvous unmaps the peers' copies and releases the memory at the first barrier at
/// which every rank has dropped its rendezvous (and every peer has unmapped it).
///
/// The collectives ([`crate::collectives::Collectives`]) read and write a rendezvous
/// through its table, as they do symmetric buffers: the all-reduce stages none of it.
///
/// # Examples
/// ```
/// use symmem::{Config, Rendezvous, backend::cpu::Cpu};
/// symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |world| {
///     let (rank, peer) = (world.rank(), 1 - world.rank());
///     let mine = world.device_from_slice(&[rank as u32; 8])?; // a plain allocation
///     let shared = Rendezvous::new(mine)?; // collective: every rank maps every other's
///     world.barrier()?; // every rank's data is written
///     let got = world.device_zeros::<u32>(8)?;
///     world.get(&got, &shared, peer)?; // the peer's allocation, through its table
///     assert_eq!(world.read(&got)?, [peer as u32; 8]);
///     Ok(())
/// })
/// .unwrap();
/// ```
pub struct Rendezvous<T, B: Backend> {
    table: ExternalTable<T, B>,
}

impl<T: bytemuck::Pod, B: Backend> Rendezvous<T, B> {
    /// Collective: shares `buffer` (this rank's allocation, of the same length on every
    /// rank) with every rank of its world: [`World::register`] of the buffer.
    ///
    /// # Errors
    /// As [`World::register`].
    pub fn new(buffer: DeviceBuffer<T, B>) -> Result<Self> {
        let world = buffer.world().clone();
        world.register(buffer)
    }

    /// The rendezvous of what `sharing` shares, `elements` of `T` on every rank (see
    /// [`World::register`]).
    fn share(world: &World<B>, sharing: Result<Sharing<B>>) -> Result<Self> {
        let id = world.create_object(Record::Rendezvous);
        let (local, bytes, export, keep) = match sharing {
            Ok(s) => (s.ptr, s.bytes, s.export, s.keep),
            Err(e) => (0, 0, Err(e), Keep::App(Vec::new())),
        };
        let mut held = Held {
            world: world.clone(),
            id,
            mappings: Vec::new(),
            memories: Vec::new(),
            kept: Vec::new(),
            exported: false,
        };
        match keep {
            Keep::Memory(memory) => held.memories.push(memory),
            Keep::App(app) => held.kept.extend(app),
        }
        let elements = bytes / size_of::<T>().max(1);
        let checked = export.and_then(|handle| {
            if bytes == 0 {
                return Err(Error::ZeroSize);
            }
            if !local.is_multiple_of(align_of::<T>() as u64) {
                return Err(Error::BadPeerTable {
                    rank: world.rank(),
                    addr: local,
                    why: "this rank's memory is not aligned for its element type",
                });
            }
            Ok(handle)
        });
        let handle = world.agree_on(Call::Rendezvous, &[bytes as u64], checked)?;
        let handles = world.all_gather_shareable(handle)?;
        // From here on peers may map this rank's memory: every path out releases it
        // collectively.
        held.exported = true;
        let mut entries = Vec::with_capacity(handles.len());
        let mut mapped = Ok(());
        for (peer, handle) in handles.into_iter().enumerate() {
            if peer == world.rank() {
                entries.push(local);
            } else if !world.topology().reaches(peer) {
                // Another node: not mapped, entry 0 (see `crate::topology`).
                entries.push(0);
            } else {
                match world
                    .backend()
                    .import_device_memory(handle, bytes, world.sender(peer))
                {
                    Ok(mapping) => {
                        entries.push(mapping.base());
                        held.mappings.push(mapping);
                    }
                    Err(e) => {
                        mapped = Err(e);
                        break;
                    }
                }
            }
        }
        // Every rank learns whether every rank mapped every peer: a rank that could
        // not gets its error, the others `PeerFailed`, and none keeps a table that
        // points where a peer's kernels cannot reach.
        let mapped = mapped.and_then(|()| congruent(local, &entries));
        world.agree_on(Call::RendezvousMapped, &[bytes as u64], mapped)?;
        let table = ExternalTable::upload(held, local, elements, entries)?;
        world.add_registration(Registration {
            id,
            local,
            bytes,
            table: table.table.clone(),
        });
        tracing::debug!(
            rank = world.rank(),
            id,
            bytes,
            local,
            "registered: collectives reach this memory through its own peer table"
        );
        Ok(Self { table })
    }

    /// Elements on every rank.
    pub fn len(&self) -> usize {
        self.table.len
    }

    /// True for no elements (never: allocations are not empty).
    pub fn is_empty(&self) -> bool {
        self.table.len == 0
    }

    /// The device-resident peer table of the shared allocations.
    pub fn peer_bases(&self) -> &PeerBases {
        &self.table.table
    }

    /// Elements `range` of the shared allocation, on every rank.
    pub fn slice(&self, range: impl std::ops::RangeBounds<usize>) -> Result<SymSlice<'_, T, B>> {
        self.as_sym_slice().slice(range)
    }
}

impl<T, B: Backend> AsSymSlice<T, B> for Rendezvous<T, B> {
    fn as_sym_slice(&self) -> SymSlice<'_, T, B> {
        self.table.as_sym_slice()
    }
}

impl<T, B: Backend> PeerBaseProvider for Rendezvous<T, B> {
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

impl<B: Backend> World<B> {
    /// Collective: makes `memory` (this rank's device memory that the application
    /// allocated, of the same length on every rank: a [`DeviceBuffer`], a cudarc
    /// `CudaSlice` on CUDA, a [`RawRange`]) symmetric: every rank maps every other rank's,
    /// and the [`Rendezvous`] returned holds the peer table, which the collectives and
    /// kernels use as they use a symmetric buffer's. The rendezvous keeps the memory
    /// until every rank has dropped it (see [`Rendezvous`]).
    ///
    /// # Errors
    /// [`Error::NotShareable`] for memory that cannot be shared (not one
    /// allocation of this rank's device; a GPU allocation without an IPC handle or the
    /// CPU backend's plain host memory, where ranks are processes),
    /// [`Error::ForeignHandle`] for another world's buffer, [`Error::ZeroSize`],
    /// [`Error::BadPeerTable`] for memory not aligned for `T`,
    /// [`Error::CollectiveMismatch`] if ranks pass different lengths (the differing ranks
    /// named), [`Error::PeerFailed`] where another rank's part failed (on every other
    /// rank: none keeps a rendezvous), [`Error::PeerLost`], and the backend's mapping
    /// errors.
    ///
    /// ```
    /// use symmem::collectives::{Algorithm, Collectives, ReduceOp};
    /// use symmem::{Config, backend::cpu::Cpu};
    /// let sums = symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |world| {
    ///     let coll = Collectives::new(&world)?;
    ///     // The application's own buffer (here a plain allocation), made symmetric...
    ///     let x = world.register(world.device_from_slice(&[world.rank() as f32 + 1.0; 64])?)?;
    ///     world.barrier()?;
    ///     // ...and reduced where it is, through its own peer table: nothing is staged.
    ///     coll.all_reduce_in_place(&x, 64, ReduceOp::Sum, Algorithm::TwoShot)?;
    ///     assert_eq!(coll.staging_bytes(), 0);
    ///     world.read(&x)
    /// })
    /// .unwrap();
    /// assert!(sums.iter().all(|sum| sum.as_ref().unwrap() == &[3.0; 64]));
    /// ```
    pub fn register<T: bytemuck::Pod>(
        &self,
        memory: impl Registrable<T, B>,
    ) -> Result<Rendezvous<T, B>> {
        Rendezvous::share(self, memory.share(self))
    }
}

/// A peer-base table that another library built, checked and uploaded by symmem: `len`
/// elements of `T` on every rank. The memory it names stays that library's: it must
/// outlive this value and every kernel launched over it. Dropping it frees only the
/// uploaded table (at the next barrier at which every rank has dropped its table).
///
/// # Examples
/// ```
/// use symmem::{Config, ExternalTable, backend::cpu::Cpu};
/// symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |world| {
///     // Addresses another library mapped; here, a symmetric buffer's own.
///     let (buffer, bases) = world.allocate_symmetric::<f32>(32)?;
///     let entries = bases.entries().to_vec();
///     // SAFETY: entry `r` is `buffer` on rank `r` as mapped here; it outlives `table`.
///     let table = unsafe { ExternalTable::<f32, _>::new(&world, buffer.ptr(), 32, &entries)? };
///     assert_eq!(world.read_table(table.peer_bases())?, entries);
///     Ok(())
/// })
/// .unwrap();
/// ```
pub struct ExternalTable<T, B: Backend> {
    table: PeerBases,
    local: u64,
    len: usize,
    held: Held<B>,
    _t: PhantomData<T>,
}

impl<T, B: Backend> ExternalTable<T, B> {
    /// Collective: uploads `entries` (entry `r` = the allocation's address on rank `r` as
    /// mapped in this process, each holding `len` elements of `T`) as this rank's device-resident
    /// table, after checking the contract: one entry per rank, `entries[rank] == local`,
    /// 0 for exactly the peers on other nodes (as `nvshmem_ptr` gives null for them; see
    /// [`crate::topology`]), entries congruent modulo 16, and the same `len` on every rank.
    ///
    /// # Errors
    /// [`Error::ZeroSize`]; [`Error::TooLarge`] for more bytes than an allocation
    /// can hold; [`Error::BadPeerTable`] for a table of the wrong length, a null entry for
    /// a peer on this node or a non-null one for a peer on another, an own entry that is
    /// not `local`, or an allocation that would run past the end of the address space;
    /// [`Error::PeerMisaligned`];
    /// [`Error::CollectiveMismatch`] if ranks pass different `len`s (the differing ranks
    /// named); [`Error::PeerFailed`] on the other ranks when one rank's table breaks the
    /// contract; [`Error::PeerLost`].
    ///
    /// # Safety
    /// Every entry is the address, in this process, of device memory holding `len`
    /// elements of `T` (the own entry of this rank's device), aligned for `T`, that stays
    /// allocated while this value lives and until a barrier after it is dropped; kernels
    /// write through these addresses.
    pub unsafe fn new(world: &World<B>, local: u64, len: usize, entries: &[u64]) -> Result<Self> {
        let id = world.create_object(Record::ExternalTable);
        // Bytes no allocation can hold are refused (and agreed on as the most there are).
        let bytes = len
            .checked_mul(size_of::<T>())
            .filter(|&b| b <= isize::MAX as usize);
        let topology = world.topology();
        let on_node: Vec<bool> = (0..world.world_size())
            .map(|r| topology.reaches(r))
            .collect();
        let checked = check_table(world.rank(), &on_node, local, bytes, entries);
        world.agree_on(
            Call::ExternalTable,
            &[bytes.unwrap_or(usize::MAX) as u64],
            checked,
        )?;
        let held = Held {
            world: world.clone(),
            id,
            mappings: Vec::new(),
            memories: Vec::new(),
            kept: Vec::new(),
            exported: false,
        };
        Self::upload(held, local, len, entries.to_vec())
    }

    /// Uploads `entries` (checked by the caller) as the table of what `held` holds
    /// (`len` elements of `T` on every rank).
    fn upload(mut held: Held<B>, local: u64, len: usize, entries: Vec<u64>) -> Result<Self> {
        let world = held.world.clone();
        let backend = world.backend();
        let memory = backend.alloc_device(DeviceTable::bytes(entries.len()))?;
        let words = DeviceTable::words(world.rank(), &entries);
        // SAFETY: the allocation just made holds the header and one u64 per entry.
        unsafe { backend.upload(memory.base(), bytemuck::cast_slice(&words))? };
        let device = DeviceTable::entries_at(memory.base());
        held.memories.push(memory);
        let tag = ObjectTag::new(held.id, 0);
        Ok(Self {
            table: PeerBases::new(device, entries.into(), world.serial(), Some(tag)),
            local,
            len,
            held,
            _t: PhantomData,
        })
    }

    /// The uploaded device-resident peer table.
    pub fn peer_bases(&self) -> &PeerBases {
        &self.table
    }

    /// Elements on every rank.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no elements (never: an empty table is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T, B: Backend> Drop for ExternalTable<T, B> {
    fn drop(&mut self) {
        self.table.mark_dropped();
    }
}

impl<T, B: Backend> AsSymSlice<T, B> for ExternalTable<T, B> {
    fn as_sym_slice(&self) -> SymSlice<'_, T, B> {
        SymSlice::new(&self.held.world, self.local, self.len, &self.table)
    }
}

/// The table contract, checked on rank `rank` alone: `entries` (user input) has one
/// entry per rank of `on_node` (whether this rank reaches each with loads and stores),
/// 0 for exactly the peers it does not reach, `local` for its own, each the start of
/// `bytes` (`None`: more than an allocation can hold) that end inside the address space,
/// all congruent modulo 16.
fn check_table(
    rank: usize,
    on_node: &[bool],
    local: u64,
    bytes: Option<usize>,
    entries: &[u64],
) -> Result<()> {
    let bytes = match bytes {
        None => {
            return Err(Error::TooLarge {
                requested: usize::MAX,
                capacity: isize::MAX as usize,
            });
        }
        Some(0) => return Err(Error::ZeroSize),
        Some(b) => b as u64,
    };
    let bad = |rank, addr, why| Err(Error::BadPeerTable { rank, addr, why });
    if entries.len() != on_node.len() {
        return bad(entries.len(), 0, "the table's length is not the world size");
    }
    // A peer on another node is not mapped here: its entry is 0 (the engine reaches it),
    // and only its.
    let entry = entries.iter().copied().zip(on_node.iter().copied());
    if let Some(r) = entry.clone().position(|(e, near)| e == 0 && near) {
        return bad(r, 0, "a null address for a peer on this node");
    }
    if let Some(r) = entry.clone().position(|(e, near)| e != 0 && !near) {
        return bad(
            r,
            entries[r],
            "an address for a peer on another node (not mapped here: its entry is 0)",
        );
    }
    match entries.get(rank) {
        Some(&own) if own == local => {}
        own => {
            let own = own.copied().unwrap_or(0);
            return bad(rank, own, "this rank's entry is not the local pointer");
        }
    }
    if let Some(r) = entries.iter().position(|e| e.checked_add(bytes).is_none()) {
        return bad(
            r,
            entries[r],
            "the allocation would run past the end of the address space",
        );
    }
    congruent(local, entries)
}

/// [`Error::PeerMisaligned`] for the first entry not congruent to `local` modulo 16:
/// kernels choose their vector path from local pointers, so the alignment must survive
/// translation (allocators align far more).
fn congruent(local: u64, entries: &[u64]) -> Result<()> {
    match entries
        .iter()
        .enumerate()
        .find(|(_, e)| **e != 0 && !(*e ^ local).is_multiple_of(16))
    {
        Some((rank, &addr)) => Err(Error::PeerMisaligned { rank, addr }),
        None => Ok(()),
    }
}

crate::local_copy_is_a_device_slice!(Rendezvous<T, B>, ExternalTable<T, B>);

impl<T, B: Backend> PeerBaseProvider for ExternalTable<T, B> {
    fn table(&self) -> &PeerBases {
        &self.table
    }
    fn local_ptr(&self) -> u64 {
        self.local
    }
    fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }
}

/// Checks the table contract on arbitrary input (a user's), comparing [`check_table`]
/// with the contract as [`ExternalTable::new`] states it: `Ok` exactly when the input
/// keeps it, otherwise one of the typed errors the documentation names. The oracle of
/// the property tests below and of the `peer_table` fuzz target.
///
/// # Panics
/// Where `check_table` and the contract disagree.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_external_table(
    rank: usize,
    on_node: &[bool],
    local: u64,
    bytes: Option<usize>,
    entries: &[u64],
) {
    let got = check_table(rank, on_node, local, bytes, entries);
    let size = bytes.unwrap_or(0) as u64;
    let keeps = size > 0
        && entries.len() == on_node.len()
        && entries.get(rank) == Some(&local)
        && entries
            .iter()
            .zip(on_node)
            .all(|(&e, &near)| (e == 0) != near)
        && entries.iter().all(|e| e.checked_add(size).is_some())
        && entries
            .iter()
            .all(|&e| e == 0 || (e ^ local).is_multiple_of(16));
    match got {
        Ok(()) => assert!(keeps, "a table that breaks the contract accepted"),
        Err(e) => {
            assert!(!keeps, "a table that keeps the contract refused: {e:?}");
            assert!(
                matches!(
                    e,
                    Error::ZeroSize
                        | Error::TooLarge { .. }
                        | Error::BadPeerTable { .. }
                        | Error::PeerMisaligned { .. }
                ),
                "{e:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// A table that keeps the contract: `(rank, on_node, local, bytes, entries)`.
    type Table = (usize, Vec<bool>, u64, Option<usize>, Vec<u64>);

    fn table() -> impl Strategy<Value = Table> {
        (1usize..6)
            .prop_flat_map(|n| {
                (
                    0..n,
                    vec(any::<bool>(), n),
                    vec(1u64..1 << 40, n),
                    0u64..16,
                    1usize..1 << 30,
                )
            })
            .prop_map(|(rank, mut on_node, bases, offset, bytes)| {
                on_node[rank] = true;
                let entries: Vec<u64> = bases
                    .iter()
                    .zip(&on_node)
                    .map(|(&b, &near)| if near { b * 16 + offset } else { 0 })
                    .collect();
                (rank, on_node, entries[rank], Some(bytes), entries)
            })
    }

    /// A table with one thing changed, likely breaking the contract.
    fn mutated((rank, on_node, local, bytes, entries): Table) -> impl Strategy<Value = Table> {
        let n = entries.len();
        (0..n, 0u8..7, any::<u64>()).prop_map(move |(at, how, x)| {
            let (mut rank, mut on_node, mut local, mut bytes, mut entries) =
                (rank, on_node.clone(), local, bytes, entries.clone());
            match how {
                0 => entries[at] = x,
                1 => entries[at] = u64::MAX - x % 64,
                2 => on_node[at] = !on_node[at],
                3 => rank = at + x as usize % 2 * n,
                4 => bytes = [None, Some(0), Some(usize::MAX), Some(x as usize)][x as usize % 4],
                5 => local ^= 1 << (x % 64),
                _ => {
                    entries.truncate(at);
                    on_node.truncate(x as usize % (n + 1));
                }
            }
            (rank, on_node, local, bytes, entries)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_table_is_accepted_exactly_when_it_keeps_the_contract(
            (rank, on_node, local, bytes, entries) in prop_oneof![
                table(),
                table().prop_flat_map(mutated),
                (0usize..4, vec(any::<bool>(), 0..4), any::<u64>(),
                    proptest::option::of(any::<usize>()), vec(any::<u64>(), 0..4)),
            ],
        ) {
            check_external_table(rank, &on_node, local, bytes, &entries);
        }

        #[test]
        fn tables_that_keep_the_contract_are_accepted((rank, on_node, local, bytes, entries) in table()) {
            prop_assert!(check_table(rank, &on_node, local, bytes, &entries).is_ok());
        }
    }

    #[test]
    fn external_table_past_the_end_of_the_address_space_is_refused() {
        // Found by review: an entry whose allocation wraps past u64::MAX was accepted,
        // and so was a length whose bytes overflow usize (ExternalTable::new saturated
        // them, and `byte_len` then overflowed).
        let local = 0x1000;
        let entries = [local, u64::MAX - 15];
        let refused = check_table(0, &[true, true], local, Some(32), &entries);
        assert!(
            matches!(refused, Err(Error::BadPeerTable { rank: 1, .. })),
            "{refused:?}"
        );
        let bytes = usize::MAX
            .checked_mul(4)
            .filter(|&b| b <= isize::MAX as usize);
        let refused = check_table(0, &[true], local, bytes, &[local]);
        assert!(
            matches!(refused, Err(Error::TooLarge { .. })),
            "{refused:?}"
        );
        assert!(check_table(0, &[true, true], local, Some(15), &entries).is_ok());
    }
}
