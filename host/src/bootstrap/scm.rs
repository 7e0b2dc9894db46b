//! Framed messages over a UNIX stream socket, each carrying at most one file descriptor
//! (SCM_RIGHTS). A frame is a 9-byte header (kind, payload length) sent with the
//! descriptor attached, then the payload. The receiver names the longest payload it
//! accepts: a longer announced length is an error before anything is allocated, and the
//! stream is out of step from then on (its payload is left unread), so it is dropped.

use crate::backend::Shareable;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// What a frame means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A contribution (bytes and maybe an fd).
    Data = 0,
    /// The sender gives up; the payload says why (the UNIX-socket bootstrap's verdict).
    Abort = 1,
}

const HEADER: usize = 9;

/// The most a receiver reserves for a payload before its bytes arrive.
const READ_AHEAD: usize = 64 << 10;

/// Room for the control message of one descriptor.
const CMSG_SPACE: usize = rustix::cmsg_space!(ScmRights(1));

/// Sends one frame.
pub(crate) fn send(stream: &mut UnixStream, kind: Kind, item: &Shareable) -> io::Result<()> {
    let mut header = [0u8; HEADER];
    header[0] = kind as u8;
    header[1..].copy_from_slice(&(item.bytes.len() as u64).to_le_bytes());
    let fd = item.fd.as_ref().map(AsFd::as_fd);
    let mut space = [MaybeUninit::uninit(); CMSG_SPACE];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if let Some(fd) = &fd {
        // The buffer is sized for exactly this message.
        if !control.push(SendAncillaryMessage::ScmRights(std::slice::from_ref(fd))) {
            return Err(io::Error::other(
                "no room for a descriptor in the control buffer",
            ));
        }
    }
    let sent = rustix::net::sendmsg(
        &*stream,
        &[IoSlice::new(&header)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent < HEADER {
        // The descriptor went with the first byte; the rest of the header is plain data.
        stream.write_all(&header[sent..])?;
    }
    stream.write_all(&item.bytes)
}

/// Why [`recv`] failed.
#[derive(Debug)]
pub(crate) enum RecvError {
    /// The socket failed, timed out or ended (`UnexpectedEof`), or the frame is malformed.
    Io(io::Error),
    /// The frame announced a payload longer than the receiver's limit.
    TooLarge {
        /// The announced length.
        bytes: u64,
        /// The limit.
        limit: usize,
    },
}

impl From<io::Error> for RecvError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// The kind and payload length a frame's `header` announces, if the payload is at most
/// `max` bytes.
fn parse_header(header: [u8; HEADER], max: usize) -> Result<(Kind, usize), RecvError> {
    let [kind, len @ ..] = header;
    let kind = match kind {
        0 => Kind::Data,
        1 => Kind::Abort,
        other => {
            return Err(
                io::Error::new(io::ErrorKind::InvalidData, format!("frame kind {other}")).into(),
            );
        }
    };
    let announced = u64::from_le_bytes(len);
    let len = usize::try_from(announced)
        .ok()
        .filter(|&len| len <= max)
        .ok_or(RecvError::TooLarge {
            bytes: announced,
            limit: max,
        })?;
    Ok((kind, len))
}

/// `stream` read with one deadline for everything read through it: each read may wait
/// only for the time left, so a sender that trickles a byte at a time (each just inside
/// a per-read timeout) is cut off at the deadline all the same.
struct ByDeadline<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
}

impl ByDeadline<'_> {
    /// Bounds the next read by the time left (`TimedOut` once none is).
    fn arm(&self) -> io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        // Zero means "no timeout" to the socket: never ask for less than a millisecond.
        self.stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
    }
}

impl Read for ByDeadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm()?;
        (&*self.stream).read(buf)
    }
}

/// Receives one frame whose payload is at most `max` bytes, whole by `deadline` (one
/// deadline for the frame, not one per read). End of stream is `UnexpectedEof`; the
/// deadline passing, `TimedOut` or `WouldBlock`.
pub(crate) fn recv(
    stream: &mut UnixStream,
    max: usize,
    deadline: Instant,
) -> Result<(Kind, Shareable), RecvError> {
    let mut timed = ByDeadline { stream, deadline };
    let mut header = [0u8; HEADER];
    let mut space = [MaybeUninit::uninit(); CMSG_SPACE];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    timed.arm()?;
    let got = rustix::net::recvmsg(
        timed.stream,
        &mut [IoSliceMut::new(&mut header)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?
    .bytes;
    if got == 0 {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    // The descriptor the frame carries (the last, should there be more; any other is
    // closed as it drops).
    let mut fd: Option<OwnedFd> = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            fd = fds.last().or(fd);
        }
    }
    timed.read_exact(&mut header[got..])?;
    let (kind, len) = parse_header(header, max)?;
    // Grows with the bytes that arrive, not with the length announced (a frame that
    // announces `max` and ends early costs only what it sent).
    let mut bytes = Vec::with_capacity(len.min(READ_AHEAD));
    Read::take(&mut timed, len as u64).read_to_end(&mut bytes)?;
    if bytes.len() != len {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    Ok((kind, Shareable { bytes, fd }))
}

/// Receives frames from `bytes`, a peer's whole stream, until an error, and checks each
/// against a reading of the bytes as the module documentation describes them: a frame
/// of at most `max` bytes, or an error (`TooLarge` naming the length, the stream's end,
/// an unknown kind), never a panic. The oracle of the property tests below and of the
/// `bootstrap` fuzz target.
///
/// # Panics
/// Where `recv` and the description disagree.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_stream(bytes: &[u8], max: usize) {
    let (mut tx, mut rx) = UnixStream::pair().expect("a socket pair");
    // What fits in the socket's buffer, without a reader: then end of stream.
    tx.set_nonblocking(true).expect("a non-blocking socket");
    let mut sent = 0;
    while let Ok(n @ 1..) = tx.write(&bytes[sent..]) {
        sent += n;
    }
    drop(tx);
    rx.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("a read timeout");
    let mut rest = &bytes[..sent];
    loop {
        let got = recv(&mut rx, max, Instant::now() + Duration::from_secs(10));
        let Some((header, after)) = rest.split_first_chunk::<HEADER>() else {
            assert!(
                matches!(&got, Err(RecvError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof),
                "{} bytes, less than a header: {got:?}",
                rest.len()
            );
            return;
        };
        let (kind, announced) = (
            header[0],
            u64::from_le_bytes(header[1..].try_into().unwrap()),
        );
        match got {
            Ok((got_kind, item)) => {
                assert_eq!(got_kind as u8, kind);
                assert!(announced <= max as u64 && item.fd.is_none());
                assert!(
                    announced <= after.len() as u64,
                    "a payload past the stream's end"
                );
                let (payload, next) = after.split_at(item.bytes.len());
                assert_eq!(
                    (item.bytes.len() as u64, &item.bytes[..]),
                    (announced, payload)
                );
                rest = next;
            }
            Err(RecvError::TooLarge { bytes, limit }) => {
                assert!(kind <= 1 && bytes == announced && bytes > max as u64 && limit == max);
                return;
            }
            Err(RecvError::Io(e)) if e.kind() == io::ErrorKind::InvalidData => {
                assert!(kind > 1, "a known kind {kind} refused: {e}");
                return;
            }
            Err(RecvError::Io(e)) => {
                assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
                assert!(kind <= 1 && announced <= max as u64 && (after.len() as u64) < announced);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bad_bytes::{bytes_near, huge_u64};
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Frames as `send` writes them (no descriptors), one after the other.
    fn frames() -> impl Strategy<Value = Vec<u8>> {
        vec((0u8..2, vec(any::<u8>(), 0..64)), 0..4).prop_map(|frames| {
            let mut out = Vec::new();
            for (kind, payload) in frames {
                out.push(kind);
                out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
                out.extend_from_slice(&payload);
            }
            out
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_stream_gives_frames_or_an_error(
            bytes in bytes_near(frames()),
            max in prop_oneof![0usize..80, Just(usize::MAX)],
        ) {
            check_stream(&bytes, max);
        }

        #[test]
        fn a_huge_announced_length_is_refused_before_any_allocation(
            kind in 0u8..2,
            announced in huge_u64(),
        ) {
            let mut header = [kind, 0, 0, 0, 0, 0, 0, 0, 0];
            header[1..].copy_from_slice(&announced.to_le_bytes());
            let max = DEFAULT_MAX;
            let parsed = parse_header(header, max);
            prop_assert!(
                matches!(
                    parsed,
                    Err(RecvError::TooLarge { bytes, limit }) if bytes == announced && limit == max
                ),
                "{:?}",
                parsed
            );
            check_stream(&header, max);
        }

        #[test]
        fn sent_frames_round_trip(
            abort in any::<bool>(),
            payload in vec(any::<u8>(), 0..2048),
            with_fd in any::<bool>(),
        ) {
            let (mut tx, mut rx) = UnixStream::pair().unwrap();
            let kind = if abort { Kind::Abort } else { Kind::Data };
            let fd = with_fd.then(|| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
            send(&mut tx, kind, &Shareable { bytes: payload.clone(), fd }).unwrap();
            let (got, item) = recv(&mut rx, payload.len(), Instant::now() + Duration::from_secs(10)).unwrap();
            prop_assert_eq!(got, kind);
            prop_assert_eq!(item.bytes, payload);
            prop_assert_eq!(item.fd.is_some(), with_fd);
        }
    }

    /// The receiver's limit in these tests: what `bootstrap` uses by default.
    const DEFAULT_MAX: usize = crate::bootstrap::DEFAULT_MAX_FRAME_BYTES;
}
