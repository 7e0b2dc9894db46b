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

/// What a frame means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A contribution (bytes and maybe an fd).
    Data = 0,
    /// The sender gives up; the payload says why (the UNIX-socket bootstrap's verdict).
    Abort = 1,
}

const HEADER: usize = 9;

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

/// Receives one frame whose payload is at most `max` bytes. End of stream is
/// `UnexpectedEof`.
pub(crate) fn recv(stream: &mut UnixStream, max: usize) -> Result<(Kind, Shareable), RecvError> {
    let mut header = [0u8; HEADER];
    let mut space = [MaybeUninit::uninit(); CMSG_SPACE];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        &*stream,
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
    stream.read_exact(&mut header[got..])?;
    let kind = match header[0] {
        0 => Kind::Data,
        1 => Kind::Abort,
        other => {
            return Err(
                io::Error::new(io::ErrorKind::InvalidData, format!("frame kind {other}")).into(),
            );
        }
    };
    let announced = u64::from_le_bytes(header[1..].try_into().expect("8 bytes"));
    let len = usize::try_from(announced)
        .ok()
        .filter(|&len| len <= max)
        .ok_or(RecvError::TooLarge {
            bytes: announced,
            limit: max,
        })?;
    let mut bytes = vec![0u8; len];
    stream.read_exact(&mut bytes)?;
    Ok((kind, Shareable { bytes, fd }))
}
