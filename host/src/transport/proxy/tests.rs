//! The proxy's tests: any request a target receives is applied inside its heap or
//! refused, and a rank's requests stream and complete in ticket order.

use super::message::{REPLY_WORDS, read_reply, words_to_bytes};
use super::oracle::{CheckedHeap, apply, check_wire};
use super::worker::Proxy;
use super::{IN_FLIGHT, RING_SLOTS, Wire};
use crate::bad_bytes::{bytes_near, huge_u64};
use crate::control::AbortWord;
use crate::error::{Error, Result};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use symmem_rma::engine::{Ring, STAGING_BYTES, Slot, atomic, atomic_code, kind, request, state};

/// Requests as a proxy sends them for a heap of `HEAP` bytes.
fn request_message() -> impl Strategy<Value = Vec<u8>> {
    let put = (0..HEAP as u64 - 64, 0u64..64, any::<u8>()).prop_map(|(offset, len, b)| {
        let req = request::pack(kind::PUT, 0, 0, request::STAGED);
        let mut m = words_to_bytes(&[req, offset, len, 0, 0]);
        m.resize(m.len() + len as usize, b);
        m
    });
    let get = (0..HEAP as u64 - 64, 0u64..64).prop_map(|(offset, len)| {
        let req = request::pack(kind::GET, 0, 0, request::REPLY | request::STAGED);
        words_to_bytes(&[req, offset, len, 0, 0])
    });
    let atomics = (
        0..HEAP as u64 / 8,
        0u64..11,
        any::<bool>(),
        any::<[u64; 2]>(),
    )
        .prop_map(|(element, code, wide, [operand, compare])| {
            let size = if wide { 8 } else { 4 };
            let req = request::pack(kind::ATOMIC, code, size, request::REPLY);
            words_to_bytes(&[req, element * size, size, operand, compare])
        });
    prop_oneof![put, get, atomics]
}

const HEAP: usize = 1 << 20;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_request_is_applied_inside_the_heap_or_refused(
        message in bytes_near(request_message()),
        reply in bytes_near(request_message()),
        heap_len in prop_oneof![Just(HEAP), Just(usize::MAX), 0usize..64],
        from in 0usize..8,
    ) {
        check_wire(&message, heap_len, from, &reply);
    }

    #[test]
    fn valid_requests_are_applied(message in request_message()) {
        let mut heap = CheckedHeap::new(HEAP);
        prop_assert!(apply(&mut heap, HEAP, &message, 1).is_ok());
    }

    #[test]
    fn a_huge_get_is_refused_before_its_reply_is_allocated(len in huge_u64()) {
        let req = request::pack(kind::GET, 0, 0, request::REPLY | request::STAGED);
        let message = words_to_bytes(&[req, 0, len, 0, 0]);
        check_wire(&message, usize::MAX, 3, &[]);
    }
}

/// What the proxy under test sent, and the replies the test hands it.
#[derive(Default)]
struct Fabric {
    sent: Vec<(usize, u64)>,
    /// Each request's data: where it was sent from, and how many bytes.
    data: Vec<(usize, usize)>,
    replies: VecDeque<(u64, Vec<u8>)>,
}

/// A wire that records requests and delivers the replies the test queues.
struct FakeWire(Arc<Mutex<Fabric>>);

impl Wire for FakeWire {
    fn has_window(&self) -> bool {
        false
    }
    unsafe fn put(&mut self, _: usize, _: u64, _: *const u8, _: usize) -> Result<()> {
        unreachable!("no window")
    }
    unsafe fn get(&mut self, _: usize, _: u64, _: *mut u8, _: usize) -> Result<()> {
        unreachable!("no window")
    }
    unsafe fn request(
        &mut self,
        peer: usize,
        _: Vec<u8>,
        data: *const u8,
        data_len: usize,
        _: usize,
        id: u64,
    ) -> Result<()> {
        let mut f = self.0.lock().unwrap();
        f.sent.push((peer, id));
        f.data.push((data.addr(), data_len));
        Ok(())
    }
    fn reply(&mut self) -> Result<Option<(u64, Vec<u8>)>> {
        Ok(self.0.lock().unwrap().replies.pop_front())
    }
    fn next_request(&mut self, _: &mut [u8]) -> Result<Option<(usize, usize)>> {
        Ok(None)
    }
    fn send_reply(&mut self, _: usize, _: Vec<u8>) -> Result<()> {
        Ok(())
    }
    fn close(&mut self, _: bool) {}
}

#[test]
fn requests_stream_and_complete_in_ticket_order() {
    // 24 staged puts, alternating between peers 1 and 2, all posted at once.
    let mut ring = Box::new(Ring {
        capacity: RING_SLOTS as u64,
        ..Ring::default()
    });
    let mut slots: Vec<Slot> = (0..RING_SLOTS).map(|_| Slot::default()).collect();
    let mut staging = vec![0u8; RING_SLOTS * STAGING_BYTES];
    let mut abort = 0u64;
    for (t, slot) in slots.iter_mut().enumerate().take(24) {
        slot.request = request::pack(kind::PUT, 0, 0, request::STAGED);
        slot.peer = 1 + t as u64 % 2;
        slot.offset = t as u64 * 64;
        slot.len = 64;
        slot.turn = state::FULL;
    }
    let fabric = Arc::new(Mutex::new(Fabric::default()));
    let mut proxy = Proxy {
        wire: Box::new(FakeWire(fabric.clone())),
        direct: false,
        ring: &raw mut *ring,
        slots: slots.as_mut_ptr(),
        staging: staging.as_mut_ptr(),
        heap: Box::new(CheckedHeap::new(1 << 20)),
        heap_len: 1 << 20,
        // SAFETY: a live, aligned word, accessed atomically, outliving the proxy.
        abort: unsafe { AbortWord::new(&raw mut abort) },
        failure: Arc::default(),
        head: 0,
        inflight: VecDeque::new(),
        serving: VecDeque::new(),
        failed: false,
        disowned: Arc::default(),
        closed: false,
    };
    let completed = |ring: &Ring| ring.completed;
    let reply = |ids: &mut dyn Iterator<Item = u64>| {
        let mut f = fabric.lock().unwrap();
        f.replies
            .extend(ids.map(|id| (id, vec![0u8; REPLY_WORDS * 8])));
    };

    assert!(proxy.step(true));
    let sent = fabric.lock().unwrap().sent.clone();
    let want: Vec<(usize, u64)> = (0..IN_FLIGHT as u64)
        .map(|t| (1 + t as usize % 2, t))
        .collect();
    assert_eq!(sent, want, "a window of requests on the wire at once");
    assert_eq!(completed(&ring), 0);
    let data = fabric.lock().unwrap().data.clone();
    let slots_staging: Vec<(usize, usize)> = (0..IN_FLIGHT)
        .map(|t| (staging.as_ptr().addr() + t * STAGING_BYTES, 64))
        .collect();
    assert_eq!(
        data, slots_staging,
        "each put's data is sent from its slot's staging, not copied"
    );

    // Peer 2 answers all of its requests first: none completes while ticket 0, peer
    // 1's, is still out, and no slot is handed back early.
    reply(&mut (1..IN_FLIGHT as u64).step_by(2));
    proxy.step(true);
    assert_eq!(completed(&ring), 0);
    assert_eq!(slots[1].turn, state::FULL);

    // Ticket 0's reply completes tickets 0 and 1 (1's reply was waiting), and two more
    // requests start.
    reply(&mut std::iter::once(0));
    proxy.step(true);
    assert_eq!(completed(&ring), 2);
    assert_eq!(slots[0].turn, 4 + state::FREE);
    assert_eq!(slots[1].turn, 4 + state::FREE);
    assert_eq!(fabric.lock().unwrap().sent.len(), IN_FLIGHT + 2);

    // Every request sent and not yet answered is answered, newest first, round by
    // round: all 24 complete, and never more than the window is out.
    let mut answered: Vec<u64> = (1..IN_FLIGHT as u64).step_by(2).chain([0]).collect();
    for _ in 0..8 {
        let sent: Vec<u64> = fabric.lock().unwrap().sent.iter().map(|s| s.1).collect();
        let open: Vec<u64> = sent.into_iter().filter(|t| !answered.contains(t)).collect();
        assert!(open.len() <= IN_FLIGHT);
        reply(&mut open.iter().rev().copied());
        answered.extend(open);
        proxy.step(true);
    }
    assert_eq!(completed(&ring), 24);
    assert!(proxy.inflight.is_empty());
    assert!(!proxy.failed);

    // A disowned rank (poisoned: its kernels' buffers may be freed) starts none of
    // its requests again, and what was already on the wire still completes.
    let post = |slot: &mut Slot| {
        slot.request = request::pack(kind::PUT, 0, 0, request::STAGED);
        slot.peer = 1;
        slot.len = 64;
        slot.turn = state::FULL;
    };
    slots[24..28].iter_mut().for_each(post);
    proxy.step(true);
    assert_eq!(fabric.lock().unwrap().sent.len(), 28);
    proxy.disowned.store(true, Ordering::Release);
    post(&mut slots[28]);
    reply(&mut (24..28));
    proxy.step(true);
    proxy.step(true);
    assert_eq!(completed(&ring), 28);
    assert_eq!(
        fabric.lock().unwrap().sent.len(),
        28,
        "ticket 28 never starts"
    );
    assert_eq!(slots[28].turn, state::FULL);
}

#[test]
fn engine_get_longer_than_staging_is_refused() {
    // Found by review: a get's reply was allocated at the length the request named,
    // up to the whole heap; a device never asks for more than a slot's staging.
    let mut heap = CheckedHeap::new(1 << 40);
    let get = request::pack(kind::GET, 0, 0, request::REPLY | request::STAGED);
    let message = words_to_bytes(&[get, 0, 1 << 39, 0, 0]);
    let refused = apply(&mut heap, 1 << 40, &message, 2);
    assert!(
        matches!(refused, Err(Error::Engine { peer: Some(2), .. })),
        "{refused:?}"
    );
    let message = words_to_bytes(&[get, 8, STAGING_BYTES as u64, 0, 0]);
    let reply = apply(&mut heap, 1 << 40, &message, 2).unwrap();
    assert_eq!(reply.len(), REPLY_WORDS * 8 + STAGING_BYTES);
}

#[test]
fn engine_put_shorter_than_its_length_is_refused() {
    // Found by review: a put whose message carried fewer bytes than its length wrote
    // what it carried and replied as if it had written them all.
    let mut heap = CheckedHeap::new(4096);
    let put = request::pack(kind::PUT, 0, 0, request::STAGED);
    let mut message = words_to_bytes(&[put, 64, 32, 0, 0]);
    message.extend_from_slice(&[7; 31]);
    let refused = apply(&mut heap, 4096, &message, 1);
    assert!(
        matches!(refused, Err(Error::Engine { peer: Some(1), .. })),
        "{refused:?}"
    );
    message.push(7);
    assert!(apply(&mut heap, 4096, &message, 1).is_ok());
}

#[test]
fn an_unaligned_or_odd_sized_atomic_is_refused() {
    let mut heap = CheckedHeap::new(4096);
    let add = atomic_code(symmem_rma::AtomicOp::Add);
    for (size, offset) in [(8, 4), (4, 2), (2, 0), (16, 0)] {
        let req = request::pack(kind::ATOMIC, add, size, request::REPLY);
        let message = words_to_bytes(&[req, offset, size, 1, 0]);
        assert!(
            apply(&mut heap, 4096, &message, 0).is_err(),
            "{size} at {offset}"
        );
    }
    let cas = request::pack(kind::ATOMIC, atomic::CAS, 8, request::REPLY);
    let reply = apply(&mut heap, 4096, &words_to_bytes(&[cas, 8, 8, 1, 0]), 0).unwrap();
    assert_eq!(read_reply(&reply, false).0, [u64::MAX, 0]);
}
