//! The wire format between proxies: a request's header words and data, a reply's words
//! and data, and the checks a target makes of a peer's request before its heap is
//! touched.

use crate::backend::{HeapDone, HeapOp};
use crate::error::{Error, Result};
use symmem_rma::engine::{STAGING_BYTES, kind, request};

/// Words of a request message's header: request, offset, len, operand, compare.
const HEADER_WORDS: usize = 5;
/// Words of a reply's header: result, result_hi.
pub(super) const REPLY_WORDS: usize = 2;

pub(super) fn words_to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The two words of an inline request as its 16 data bytes (little-endian, as the
/// device packs them).
pub(super) fn inline_bytes(words: &[u64; 2]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&words[0].to_le_bytes());
    out[8..].copy_from_slice(&words[1].to_le_bytes());
    out
}

pub(super) fn word(bytes: &[u8], i: usize) -> u64 {
    bytes
        .get(i * 8..i * 8 + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// The heap operation `message`, a request from rank `from`, asks of this rank's heap of
/// `heap_len` bytes. Every field is checked before the heap is touched: a range outside
/// the heap, a put or get of more than a slot's staging (all a device sends as a
/// request) or a put whose data is not its length, an atomic that is not an aligned 4-
/// or 8-byte element, or an unknown kind is [`Error::Engine`] naming `from`.
pub(super) fn parse(message: &[u8], heap_len: usize, from: usize) -> Result<HeapOp> {
    let [req, offset, len, operand, compare] = std::array::from_fn(|i| word(message, i));
    let payload = message.get(HEADER_WORDS * 8..).unwrap_or(&[]);
    let refuse = |what: String| Error::Engine {
        peer: Some(from),
        what,
    };
    let end = offset
        .checked_add(len)
        .filter(|&end| end <= heap_len as u64);
    if end.is_none() {
        return Err(refuse(format!(
            "a request for {len} bytes at heap offset {offset:#x} is outside the heap"
        )));
    }
    let (offset, len) = (offset as usize, len as usize);
    let kind = request::kind(req);
    if matches!(kind, kind::PUT | kind::GET) && len > STAGING_BYTES {
        return Err(refuse(format!(
            "a request to move {len} bytes, more than a slot's {STAGING_BYTES} bytes of \
             staging"
        )));
    }
    match kind {
        kind::ATOMIC => {
            let size = request::size(req);
            if offset % len.max(1) != 0 || !matches!(len, 4 | 8) || size != len as u64 {
                return Err(refuse(format!(
                    "a {len}-byte atomic (element of {size} bytes) at offset {offset:#x}: not \
                     an aligned 4- or 8-byte element"
                )));
            }
            Ok(HeapOp::Atomic {
                offset,
                request: req,
                operand,
                compare,
            })
        }
        kind::PUT => {
            if payload.len() != len {
                return Err(refuse(format!(
                    "a put of {len} bytes that carries {} bytes",
                    payload.len()
                )));
            }
            Ok(HeapOp::Write {
                offset,
                at: HEADER_WORDS * 8,
                len,
            })
        }
        kind::GET => Ok(HeapOp::Read { offset, len }),
        other => Err(refuse(format!("an unknown request kind {other}"))),
    }
}

/// The reply to a request whose heap operation finished with `done`: the result words
/// (the old value of an atomic), then a get's bytes.
pub(super) fn reply_to(done: HeapDone) -> Vec<u8> {
    let mut reply = words_to_bytes(&[done.old, 0]);
    reply.extend_from_slice(&done.bytes);
    reply
}

/// The result words and the staged bytes of `reply`, a target's answer to this rank's
/// request (an inline get's data, at most 16 bytes, comes back as the words). Missing
/// bytes read as zeroes.
pub(super) fn read_reply(reply: &[u8], inline_get: bool) -> ([u64; 2], &[u8]) {
    let (head, data) = reply.split_at((REPLY_WORDS * 8).min(reply.len()));
    if inline_get {
        let mut inline = [0u8; 16];
        let n = data.len().min(16);
        inline[..n].copy_from_slice(&data[..n]);
        ([word(&inline, 0), word(&inline, 1)], &[])
    } else {
        ([word(head, 0), word(head, 1)], data)
    }
}
