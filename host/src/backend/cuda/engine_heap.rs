//! The off-node engine's access to a CUDA heap from the proxy thread: the target's side
//! of staged puts and gets and of every atomic, for a transport that cannot reach device
//! memory itself.
//!
//! It drives a [`Cuda`] instance of its own on the rank's device (the same primary
//! context, its own non-blocking stream; the instance's upload ring goes unused, as every
//! copy here is from or into this value's own slots), so nothing it does waits
//! behind the rank's kernels, which may be spinning on the very signal it is about to
//! apply. Operations are pipelined on that stream, [`CAPACITY`] at most, each with a
//! page-locked slot of this value's, which is also where its request was received (the
//! inbox): a write is a copy from there (the bytes the wire left, read by the copy
//! engine: no copy on the host), a read a copy into the slot, an atomic a one-thread
//! launch of
//! `symmem_engine_atomic` (a device atomic like the ones the rank's kernels use on the
//! same word; a host write could tear or race with them) whose old value is copied into
//! such a slot. An event recorded behind each says when it is complete; the stream runs
//! them in the order they were started.

use super::driver::{self, Event};
use super::{Cuda, CudaDeviceMemory, CudaModule};
use crate::backend::gpu::DeviceScope;
use crate::backend::{Backend, DeviceRegion, Grid, HeapAccess, HeapDone, HeapOp, INBOX_BYTES};
use crate::error::{Error, Result};
use std::collections::VecDeque;

/// Operations under way at once (each holds a page-locked slot of [`INBOX_BYTES`]).
const CAPACITY: usize = 16;

/// What a started operation gives back once its event has completed.
#[derive(Debug)]
enum Pending {
    /// Its bytes are read from its page-locked slot until it is complete.
    Write,
    /// `len` bytes in page-locked slot `slot`.
    Read { slot: usize, len: usize },
    /// The old value, 8 bytes in page-locked slot `slot`.
    Atomic { slot: usize },
}

/// The proxy's way into one rank's CUDA heap.
pub(crate) struct CudaEngineHeap {
    // Field order is drop order: the pending work is waited for (`Drop`), then the words
    // and the module go before their backend.
    /// Started operations, oldest first, with the event behind each.
    pending: VecDeque<(Event, Pending)>,
    /// Events not in use.
    idle: Vec<Event>,
    /// Page-locked memory: [`CAPACITY`] slots of [`INBOX_BYTES`].
    host: *mut u8,
    /// The slot the next operation takes, the inbox (slots are taken and freed in order).
    next_slot: usize,
    /// One device word per slot, where an atomic's old value lands.
    old: CudaDeviceMemory,
    module: CudaModule,
    cuda: Cuda,
    base: u64,
}

// SAFETY: `host` is page-locked memory owned by this value alone, touched only through
// `&mut self`; events are handles the driver lets any thread use.
unsafe impl Send for CudaEngineHeap {}

impl CudaEngineHeap {
    /// Access to the heap at device address `base` on device `ordinal`.
    pub(crate) fn new(ordinal: usize, base: u64) -> Result<Self> {
        let cuda = Cuda::new(ordinal)?;
        let module = cuda.load_module(&crate::backend::code_objects::KERNELS)?;
        let old = cuda.alloc_device(CAPACITY * size_of::<u64>())?;
        cuda.ctx.make_current()?;
        let host = driver::mem_host_alloc(CAPACITY * INBOX_BYTES)?;
        let mut heap = Self {
            pending: VecDeque::with_capacity(CAPACITY),
            idle: Vec::with_capacity(CAPACITY),
            host,
            next_slot: 0,
            old,
            module,
            cuda,
            base,
        };
        for _ in 0..CAPACITY {
            // On failure `heap` drops and frees what was made so far.
            heap.idle.push(driver::event_create_untimed()?);
        }
        Ok(heap)
    }

    /// The next page-locked slot, the inbox. Slots are taken in order and the proxy
    /// starts at most [`CAPACITY`] operations before finishing the oldest, so no pending
    /// copy reads or writes it.
    fn take_slot(&mut self) -> usize {
        let slot = self.next_slot;
        self.next_slot = (slot + 1) % CAPACITY;
        slot
    }

    /// The start of page-locked slot `slot` ([`INBOX_BYTES`] bytes).
    fn slot_ptr(&self, slot: usize) -> *mut u8 {
        debug_assert!(slot < CAPACITY);
        self.host.wrapping_add(slot * INBOX_BYTES)
    }

    /// The device address of slot `slot`'s old-value word.
    fn old_word(&self, slot: usize) -> u64 {
        self.old.base() + (slot * size_of::<u64>()) as u64
    }
}

impl HeapAccess for CudaEngineHeap {
    fn capacity(&self) -> usize {
        CAPACITY
    }

    fn inbox(&mut self) -> &mut [u8] {
        // SAFETY: the next slot, which no pending operation uses (`take_slot`), borrowed
        // with `self`.
        unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(self.next_slot), INBOX_BYTES) }
    }

    fn start(&mut self, op: HeapOp) -> Result<()> {
        let Some(event) = self.idle.pop() else {
            return Err(Error::Engine {
                peer: None,
                what: format!("more than the heap's {CAPACITY} operations started at once"),
            });
        };
        let started = self.cuda.ctx.make_current().and_then(|()| {
            let pending = self.enqueue(op)?;
            driver::event_record(event, self.stream())?;
            Ok(pending)
        });
        match started {
            Ok(pending) => {
                self.pending.push_back((event, pending));
                Ok(())
            }
            Err(e) => {
                self.idle.push(event);
                Err(e)
            }
        }
    }

    fn finish(&mut self) -> Result<Option<HeapDone>> {
        let Some((event, _)) = self.pending.front() else {
            return Ok(None);
        };
        if !driver::event_query(*event)? {
            return Ok(None);
        }
        let (event, pending) = self.pending.pop_front().expect("looked at above");
        self.idle.push(event);
        // SAFETY: the event behind the operation has completed, so its copy into the slot
        // has; the slot is not taken again before this returns.
        let slot = |slot: usize, len: usize| unsafe {
            std::slice::from_raw_parts(self.slot_ptr(slot), len)
        };
        Ok(Some(match pending {
            Pending::Write => HeapDone::default(),
            Pending::Read { slot: s, len } => HeapDone {
                old: 0,
                bytes: slot(s, len).to_vec(),
            },
            Pending::Atomic { slot: s } => HeapDone {
                old: u64::from_ne_bytes(slot(s, 8).try_into().expect("8 bytes")),
                bytes: Vec::new(),
            },
        }))
    }
}

impl CudaEngineHeap {
    /// Enqueues `op` on the instance's stream (its context current).
    fn enqueue(&mut self, op: HeapOp) -> Result<Pending> {
        match op {
            HeapOp::Write { offset, at, len } => {
                if at.checked_add(len).is_none_or(|end| end > INBOX_BYTES) {
                    return Err(Error::Engine {
                        peer: None,
                        what: format!("a write of {len} bytes at {at} outside the inbox"),
                    });
                }
                let slot = self.take_slot();
                // SAFETY: inside the slot (checked above), page-locked; the slot is taken
                // again only after this operation's event, recorded behind the copy, has
                // completed.
                let bytes = unsafe { std::slice::from_raw_parts(self.slot_ptr(slot).add(at), len) };
                // SAFETY: inside the heap (the proxy checks every request's range); the heap
                // outlives the engine.
                unsafe {
                    driver::memcpy_htod_async(self.base + offset as u64, bytes, self.stream())?
                };
                Ok(Pending::Write)
            }
            HeapOp::Read { offset, len } => {
                let src = self.base + offset as u64;
                let slot = self.take_slot();
                // SAFETY: `src` is inside the heap (checked by the proxy).
                unsafe { self.copy_to_slot(slot, src, len)? };
                Ok(Pending::Read { slot, len })
            }
            HeapOp::Atomic {
                offset,
                request,
                operand,
                compare,
            } => {
                let slot = self.take_slot();
                let word = self.old_word(slot);
                let at =
                    std::ptr::without_provenance_mut::<u8>((self.base + offset as u64) as usize);
                let old = std::ptr::without_provenance_mut::<u64>(word as usize);
                // SAFETY: `at` is an aligned element inside the heap (checked by the
                // proxy), `old` a device word of this instance; both outlive the launch,
                // which the event recorded behind it says has completed: the kernel's
                // contract.
                unsafe {
                    crate::backend::launch_lowered(
                        &self.cuda,
                        &self.module,
                        symmem_kernels::symmem_engine_atomic.assume_checked(),
                        Grid::new(1, 1),
                        ((at,), (request,), (operand,), (compare,), (old,)),
                    )?;
                }
                // SAFETY: the word the launch before it on the same stream writes.
                unsafe { self.copy_to_slot(slot, word, size_of::<u64>())? };
                Ok(Pending::Atomic { slot })
            }
        }
    }

    /// Enqueues the copy of `len <= INBOX_BYTES` device bytes at `src` into page-locked
    /// slot `slot`, on the instance's stream (its context current); the slot is read only
    /// after the event recorded behind the operation has completed.
    ///
    /// # Safety
    /// `src..src + len` is device memory this context reads, written by nothing the
    /// stream does not order before the copy.
    unsafe fn copy_to_slot(&self, slot: usize, src: u64, len: usize) -> Result<()> {
        debug_assert!(len <= INBOX_BYTES);
        // SAFETY: inside the slot, which no pending copy writes (`take_slot`); `src` is
        // the caller's.
        unsafe {
            let dst = std::slice::from_raw_parts_mut(self.slot_ptr(slot), len);
            driver::memcpy_dtoh_async(dst, src, self.stream())
        }
    }

    /// The instance's stream, where every operation runs.
    fn stream(&self) -> driver::Stream {
        self.cuda.rank.stream()
    }
}

impl Drop for CudaEngineHeap {
    fn drop(&mut self) {
        let drop_errors = &self.cuda.ctx.drop_errors;
        drop_errors.record(self.cuda.ctx.make_current());
        for (event, _) in std::mem::take(&mut self.pending) {
            drop_errors.record(driver::event_synchronize(event));
            self.idle.push(event);
        }
        for event in self.idle.drain(..) {
            // SAFETY: every event has completed (waited above) and is not used again.
            drop_errors.record(unsafe { driver::event_destroy(event) });
        }
        // SAFETY: no copy into the slots is pending (every operation's event was waited
        // above).
        drop_errors.record(unsafe { driver::mem_free_host(self.host) });
    }
}
