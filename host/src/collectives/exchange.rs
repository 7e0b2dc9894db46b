//! Reaching an argument on peers without staging it: where it lies (the heap, a
//! registration, neither), the table peers reach it through, and the two-shot all-reduce
//! through each buffer's table, or through the addresses its kernel exchanges where the
//! ranks share one address space.

use super::{Collectives, Element, ReduceOp};
use crate::backend::Backend;
use crate::error::Result;
use crate::memory::{AsDeviceSlice, DeviceSlice};
use crate::table::PeerBases;

#[cfg(doc)]
use crate::world::World;

impl<B: Backend> Collectives<B> {
    /// Where `view` lies: in a symmetric allocation of the heap, in a registration
    /// ([`World::register`]), or neither.
    pub(super) fn place<T>(&self, view: &impl AsDeviceSlice<T, B>) -> Place {
        let v = view.as_device_slice();
        if let Some(id) = self.world.heap_object(v.ptr(), v.byte_len()) {
            return Place::Heap(id);
        }
        match self.world.registration_of(v.ptr(), v.byte_len()) {
            Some((id, table)) => Place::Registered(id, table),
            None => Place::Local,
        }
    }

    /// The table each of `places` is reached through on peers, if it needs no staging:
    /// the heap's or its registration's.
    pub(super) fn table_of<'p>(&'p self, place: &'p Place) -> Option<&'p PeerBases> {
        match place {
            Place::Heap(_) => Some(self.bases()),
            Place::Registered(_, table) => Some(table),
            Place::Local => None,
        }
    }

    /// Runs `run` on `(dst, src)` after the agreement of `call` over `places`, staging
    /// nothing: each argument is reached on peers through its own table. The ledger
    /// records the places' kinds, so a rank that passed other kinds of memory is named
    /// at the next agreement.
    pub(super) fn unstaged<T: bytemuck::Pod + 'static>(
        &self,
        call: &[u64],
        places: [&Place; 2],
        checked: Result<(DeviceSlice<'_, T, B>, DeviceSlice<'_, T, B>)>,
        run: impl FnOnce(&DeviceSlice<'_, T, B>, &DeviceSlice<'_, T, B>) -> Result<()>,
    ) -> Result<()> {
        let ids: Vec<u64> = places.iter().filter_map(|p| p.id()).collect();
        let mut words = call.to_vec();
        // Above the staged path's bits: 4 and 8 say each argument is registered.
        words.push(places.iter().enumerate().fold(0, |acc, (i, p)| {
            acc | u64::from(matches!(p, Place::Registered(..))) << (2 + i)
        }));
        let (d, s) = self.agreed(&words, &ids, checked)?;
        run(&d, &s)
    }

    /// Which arguments of a two-shot all-reduce whose tables are `tables` (`None` for
    /// plain memory) its kernel reaches through their exchanged addresses: bit 0 `dst`,
    /// bit 1 `src`.
    pub(super) fn exchanged(&self, tables: (Option<&PeerBases>, Option<&PeerBases>)) -> u32 {
        // Where every rank's kernels dereference every rank's memory as it is,
        // the kernel exchanges plain memory's addresses (bit 0 `dst`, bit 1 `src`)
        // instead of staging it.
        if self.world.shares_address_space() {
            u32::from(tables.0.is_none()) | u32::from(tables.1.is_none()) << 1
        } else {
            0
        }
    }

    /// The two-shot all-reduce of `dst[0..count]` from `src[0..count]` (lying at
    /// `places`), staging nothing: each argument is reached on peers through its own
    /// table, or, where `exchanged` says so ([`Collectives::exchanged`]), through the
    /// address the kernel exchanges.
    pub(super) fn through_tables<T: Element>(
        &self,
        call: &[u64],
        places: &[Place; 2],
        checked: Result<(DeviceSlice<'_, T, B>, DeviceSlice<'_, T, B>)>,
        exchanged: u32,
        count: usize,
        op: ReduceOp,
    ) -> Result<()> {
        let tables = (self.table_of(&places[0]), self.table_of(&places[1]));
        self.unstaged(call, [&places[0], &places[1]], checked, |d, s| {
            // SAFETY: both views were checked for `count` elements and agreed; each table
            // is its argument's own (or unread where the kernel exchanges that address);
            // the exchange slots and signals are this handle's: the kernel's `# Safety`.
            unsafe {
                self.launch(
                    T::all_reduce_tables(op),
                    (
                        d,
                        s,
                        self.bases(),
                        // An exchanged argument's table is not read.
                        tables.0.unwrap_or(self.bases()),
                        tables.1.unwrap_or(self.bases()),
                        &self.exchange,
                        exchanged,
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

/// Where an argument of a collective lies, which decides how peers reach it.
pub(super) enum Place {
    /// In the symmetric allocation of the heap with this ledger id.
    Heap(u64),
    /// In the registration with this ledger id and table ([`World::register`]).
    Registered(u64, PeerBases),
    /// Anywhere else: staged where peers must reach it.
    Local,
}

impl Place {
    /// Its ledger id where it is symmetric memory of the heap.
    pub(super) fn heap_id(&self) -> Option<u64> {
        match self {
            Place::Heap(id) => Some(*id),
            Place::Registered(..) | Place::Local => None,
        }
    }

    /// Its ledger id, unless it is `Local`.
    fn id(&self) -> Option<u64> {
        match self {
            Place::Heap(id) | Place::Registered(id, _) => Some(*id),
            Place::Local => None,
        }
    }
}
