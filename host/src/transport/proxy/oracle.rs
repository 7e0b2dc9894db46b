//! The oracle of the wire's checks, for the property tests and the `transport` fuzz
//! target: a heap that checks every access a target makes against it, and [`check_wire`].

use super::message::{REPLY_WORDS, parse, read_reply, reply_to, word};
use crate::backend::{HeapAccess, HeapDone, HeapOp};
use crate::error::{Error, Result};
use std::collections::VecDeque;
use symmem_rma::engine::{STAGING_BYTES, kind, request};

/// A heap of `len` bytes that holds nothing and checks every access the target's side
/// makes against it (the checks [`parse`] promises to have made); every operation
/// finishes at once.
pub(super) struct CheckedHeap {
    len: usize,
    done: VecDeque<HeapDone>,
    inbox: Vec<u8>,
}

impl CheckedHeap {
    pub(super) fn new(len: usize) -> Self {
        Self {
            len,
            done: VecDeque::new(),
            inbox: vec![0; crate::backend::INBOX_BYTES],
        }
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(len <= STAGING_BYTES, "{len} bytes at once");
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
    }
}

impl HeapAccess for CheckedHeap {
    fn capacity(&self) -> usize {
        1
    }
    fn inbox(&mut self) -> &mut [u8] {
        &mut self.inbox
    }
    fn start(&mut self, op: HeapOp) -> Result<()> {
        let done = match op {
            HeapOp::Write { offset, at, len } => {
                assert!(
                    at.checked_add(len)
                        .is_some_and(|end| end <= self.inbox.len())
                );
                self.check(offset, len);
                HeapDone::default()
            }
            HeapOp::Read { offset, len } => {
                self.check(offset, len);
                HeapDone {
                    old: 0,
                    bytes: vec![0xa5; len],
                }
            }
            HeapOp::Atomic {
                offset, request, ..
            } => {
                let size = request::size(request) as usize;
                assert!(matches!(size, 4 | 8) && offset.is_multiple_of(size));
                self.check(offset, size);
                HeapDone {
                    old: u64::MAX,
                    bytes: Vec::new(),
                }
            }
        };
        self.done.push_back(done);
        Ok(())
    }
    fn finish(&mut self) -> Result<Option<HeapDone>> {
        Ok(self.done.pop_front())
    }
}

/// What a target's proxy does with `message` from rank `from`, on a heap that finishes
/// every operation at once: the reply, or the refusal.
pub(super) fn apply(
    heap: &mut dyn HeapAccess,
    heap_len: usize,
    message: &[u8],
    from: usize,
) -> Result<Vec<u8>> {
    let inbox = heap.inbox();
    let len = message.len().min(inbox.len());
    inbox[..len].copy_from_slice(&message[..len]);
    let op = parse(&inbox[..len], heap_len, from)?;
    heap.start(op)?;
    let done = heap
        .finish()?
        .expect("the heap finishes every operation at once");
    Ok(reply_to(done))
}

/// Applies `message` from rank `from` to a heap of `heap_len` bytes and reads `reply`
/// as a target's answer, checking that a request is refused with [`Error::Engine`]
/// naming `from` or touches only the heap's bytes, a put or get at most a slot's
/// staging, and that its reply has the size the requester expects. The oracle of the
/// property tests (`tests`) and of the `transport` fuzz target.
///
/// # Panics
/// Where `apply` or `read_reply` breaks that.
pub(crate) fn check_wire(message: &[u8], heap_len: usize, from: usize, reply: &[u8]) {
    let mut heap = CheckedHeap::new(heap_len);
    match apply(&mut heap, heap_len, message, from) {
        Ok(answer) => {
            let [req, _, len] = std::array::from_fn(|i| word(message, i));
            let data = if request::kind(req) == kind::GET {
                len
            } else {
                0
            };
            assert_eq!(answer.len() as u64, REPLY_WORDS as u64 * 8 + data);
        }
        Err(Error::Engine { peer, .. }) => assert_eq!(peer, Some(from)),
        Err(other) => panic!("{other:?}"),
    }
    for inline_get in [false, true] {
        let (_, staged) = read_reply(reply, inline_get);
        assert!(staged.len() <= reply.len() && (!inline_get || staged.is_empty()));
    }
}
