//! Framed messages over a UNIX stream socket, each carrying at most one file descriptor
//! (SCM_RIGHTS). A frame is a 9-byte header (kind, payload length) sent with the
//! descriptor attached, then the payload. The receiver names the longest payload it
//! accepts: a longer announced length is an error before anything is allocated, and the
//! stream is out of step from then on (its payload is left unread), so it is dropped.

use crate::backend::Shareable;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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

fn cmsg_space() -> usize {
    // SAFETY: CMSG_SPACE is a pure size computation.
    unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize }
}

/// Sends one frame.
pub(crate) fn send(stream: &mut UnixStream, kind: Kind, item: &Shareable) -> io::Result<()> {
    let mut header = [0u8; HEADER];
    header[0] = kind as u8;
    header[1..].copy_from_slice(&(item.bytes.len() as u64).to_le_bytes());
    let mut iov = libc::iovec {
        iov_base: header.as_mut_ptr().cast(),
        iov_len: HEADER,
    };
    let mut control = vec![0u8; cmsg_space()];
    // SAFETY: msghdr is plain data; zero is a valid empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = &item.fd {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len() as _;
        // SAFETY: the control buffer has room for one cmsg carrying one int.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
            libc::CMSG_DATA(cmsg)
                .cast::<libc::c_int>()
                .write_unaligned(fd.as_raw_fd());
        }
    }
    // SAFETY: msg points at live buffers for the duration of the call.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    if (sent as usize) < HEADER {
        // The descriptor went with the first byte; the rest of the header is plain data.
        stream.write_all(&header[sent as usize..])?;
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
    let mut iov = libc::iovec {
        iov_base: header.as_mut_ptr().cast(),
        iov_len: HEADER,
    };
    let mut control = vec![0u8; cmsg_space()];
    // SAFETY: msghdr is plain data; zero is a valid empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    // SAFETY: msg points at live buffers for the duration of the call.
    let got = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if got < 0 {
        return Err(io::Error::last_os_error().into());
    }
    if got == 0 {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    let mut fd = None;
    // SAFETY: walking the control messages the kernel filled in.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let raw = libc::CMSG_DATA(cmsg).cast::<libc::c_int>().read_unaligned();
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    stream.read_exact(&mut header[got as usize..])?;
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
