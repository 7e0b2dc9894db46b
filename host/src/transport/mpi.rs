//! The MPI wire (cargo feature `mpi`): the proxied transport between ranks started by
//! `mpirun`, with MPI one-sided operations and messages on a duplicate of the bootstrap's
//! communicator.
//!
//! * **Window.** Where the proxy reaches kernel memory (the CPU backend, and CUDA under
//!   an MPI that says it is CUDA-aware: `MPIX_Query_cuda_support`), the rank's symmetric
//!   heap is an MPI window (`MPI_Win_create`, locked for every target once with
//!   `MPI_Win_lock_all`). Puts and gets are `MPI_Put`/`MPI_Get` on it, completed with
//!   `MPI_Win_flush` before the call returns.
//! * **Requests** (atomics, signals, staged data) travel as messages with tag
//!   `TAG_REQUEST`; the target's proxy answers with `TAG_REPLY`. A staged put's data
//!   above `DATA_IN_HEADER` bytes follows its header as a `TAG_DATA` message, sent from
//!   the ring's staging and received straight into the target heap's inbox.
//!
//! It needs `MPI_THREAD_MULTIPLE` (the proxy calls MPI while the world's own thread runs
//! bootstrap collectives): the MPI bootstrap checks before it offers it. Every MPI call's
//! error is returned (`MPI_ERRORS_RETURN`) as [`Error::Engine`].

use super::proxy::{Wire, start_proxy};
use super::{Attach, Link, Transport};
use crate::backend::BackendKind;
use crate::error::{Error, Result};
use mpi::ffi;
use std::collections::VecDeque;
use std::ffi::{c_int, c_void};

/// Message tags on the transport's communicator: a request's header, the data that
/// follows it (a staged put's, sent from where it lies), a reply.
const TAG_REQUEST: c_int = 1;
const TAG_REPLY: c_int = 2;
const TAG_DATA: c_int = 3;

/// Data up to this many bytes travels in its request's header message (a copy this small
/// costs less than a second message); longer data is a message of its own, sent from
/// where it lies and received where the target applies it.
const DATA_IN_HEADER: usize = 1024;

/// Bytes the wire adds at the end of a header message: how many bytes of data follow in a
/// `TAG_DATA` message (0: none).
const TRAILER: usize = size_of::<u64>();

/// Whether the MPI library moves CUDA device memory itself (a CUDA-aware build): Open
/// MPI's `MPIX_Query_cuda_support()` extension, looked up at run time, says so. An MPI
/// without it is taken not to be: data is then staged through host memory.
fn mpi_is_cuda_aware() -> bool {
    // The program and the libraries it started with, which include the MPI library (as
    // `dlsym(RTLD_DEFAULT, ..)` searches).
    let loaded = libloading::os::unix::Library::this();
    // SAFETY: read as an untyped address, which any symbol is.
    let symbol = unsafe { loaded.get::<*mut c_void>("MPIX_Query_cuda_support\0") }
        .map_or(std::ptr::null_mut(), |s| *s);
    if symbol.is_null() {
        return false;
    }
    // SAFETY: Open MPI's extension: `int MPIX_Query_cuda_support(void)`, callable after
    // MPI_Init.
    let query: unsafe extern "C" fn() -> c_int = unsafe { std::mem::transmute(symbol) };
    // SAFETY: as above.
    unsafe { query() == 1 }
}

/// The MPI transport of one rank, before it is attached: the bootstrap's communicator.
pub struct MpiTransport {
    comm: ffi::MPI_Comm,
}

// SAFETY: a communicator handle; MPI runs at MPI_THREAD_MULTIPLE (checked in `new`).
unsafe impl Send for MpiTransport {}

impl MpiTransport {
    /// The transport over communicator `comm` of an MPI initialised at thread level
    /// `provided` (its MPI name), `thread_multiple` if that is `MPI_THREAD_MULTIPLE`.
    ///
    /// # Errors
    /// [`Error::MpiThreadLevel`] below `MPI_THREAD_MULTIPLE`.
    pub(crate) fn new(
        comm: ffi::MPI_Comm,
        thread_multiple: bool,
        provided: &'static str,
    ) -> Result<Self> {
        if !thread_multiple {
            return Err(Error::MpiThreadLevel {
                required: "MPI_THREAD_MULTIPLE",
                provided,
            });
        }
        Ok(Self { comm })
    }
}

impl Transport for MpiTransport {
    fn name(&self) -> &'static str {
        "mpi"
    }

    fn reaches_device_memory(&self, kind: BackendKind) -> bool {
        kind == BackendKind::Cuda && mpi_is_cuda_aware()
    }

    /// Duplicates the communicator and creates the heap's window where data is not
    /// staged (both collective), then starts the proxy.
    fn attach(self: Box<Self>, attach: Attach<'_>) -> Result<Box<dyn Link>> {
        let mut comm = std::mem::MaybeUninit::uninit();
        check(
            // SAFETY: a valid communicator in, a fresh one out.
            unsafe { ffi::MPI_Comm_dup(self.comm, comm.as_mut_ptr()) },
            "MPI_Comm_dup",
            None,
        )?;
        // SAFETY: MPI_Comm_dup succeeded.
        let comm = unsafe { comm.assume_init() };
        check(
            // SAFETY: the fresh communicator.
            unsafe { ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN) },
            "MPI_Comm_set_errhandler",
            None,
        )?;
        let win = match attach.heap.direct {
            Some(base) => Some(window(comm, base, attach.heap.len)?),
            None => None,
        };
        let wire = MpiWire {
            comm,
            win,
            inflight: VecDeque::new(),
            outgoing: Vec::new(),
        };
        start_proxy(Box::new(wire), attach)
    }
}

/// The proxy's MPI handles and the messages under way.
struct MpiWire {
    comm: ffi::MPI_Comm,
    /// The heap's window, where the proxy reaches kernel memory.
    win: Option<ffi::MPI_Win>,
    /// This rank's requests waiting for their replies. A peer answers one rank's requests
    /// in order, and MPI matches its replies to the receives posted for them in order
    /// (messages between two ranks with one tag do not overtake each other).
    inflight: VecDeque<InFlight>,
    /// Replies being sent, kept until MPI is done with their buffers.
    outgoing: Vec<Outgoing>,
}

// SAFETY: MPI runs at MPI_THREAD_MULTIPLE (checked before a transport is made), so its
// handles may be used from the proxy thread.
unsafe impl Send for MpiWire {}

/// A request that waits for the target's reply: its receive, and its sends (the buffers
/// kept alive until all complete; the data's is the caller's).
struct InFlight {
    id: u64,
    request: ffi::MPI_Request,
    reply: Vec<u8>,
    sent: Vec<u8>,
    send: ffi::MPI_Request,
    /// The data's send (`MPI_REQUEST_NULL` where the data went in the header).
    data: ffi::MPI_Request,
    peer: usize,
}

/// A reply this proxy sends, kept until MPI is done with its buffer.
struct Outgoing {
    request: ffi::MPI_Request,
    _buffer: Vec<u8>,
}

fn check(code: c_int, what: &'static str, peer: Option<usize>) -> Result<()> {
    if code == ffi::MPI_SUCCESS as c_int {
        return Ok(());
    }
    let mut text = vec![0u8; 512];
    let mut len: c_int = 0;
    // SAFETY: a buffer of MPI_MAX_ERROR_STRING (256) bytes or more.
    unsafe { ffi::MPI_Error_string(code, text.as_mut_ptr().cast(), &mut len) };
    text.truncate(len.clamp(0, 512) as usize);
    Err(Error::Engine {
        peer,
        what: format!(
            "{what}: {} (MPI error {code})",
            String::from_utf8_lossy(&text)
        ),
    })
}

/// Exposes `len` bytes at `base` (the heap, at the kernels' addresses) as a window on
/// `comm` (collective), checks that its memory model is `MPI_WIN_UNIFIED` and locks it
/// for every target.
fn window(comm: ffi::MPI_Comm, base: *mut u8, len: usize) -> Result<ffi::MPI_Win> {
    // SAFETY: plain MPI calls on a live communicator and the live heap.
    unsafe {
        let mut win = std::mem::MaybeUninit::uninit();
        check(
            ffi::MPI_Win_create(
                base.cast(),
                len as ffi::MPI_Aint,
                1,
                ffi::RSMPI_INFO_NULL,
                comm,
                win.as_mut_ptr(),
            ),
            "MPI_Win_create over the symmetric heap",
            None,
        )?;
        let win = win.assume_init();
        check(
            ffi::MPI_Win_set_errhandler(win, ffi::RSMPI_ERRORS_RETURN),
            "MPI_Win_set_errhandler",
            None,
        )?;
        let mut model: *mut c_int = std::ptr::null_mut();
        let mut found: c_int = 0;
        check(
            ffi::MPI_Win_get_attr(
                win,
                ffi::MPI_WIN_MODEL as c_int,
                (&raw mut model).cast(),
                &mut found,
            ),
            "MPI_Win_get_attr(MPI_WIN_MODEL)",
            None,
        )?;
        if found == 0 || model.is_null() || *model != ffi::MPI_WIN_UNIFIED as c_int {
            return Err(Error::Engine {
                peer: None,
                what: "the MPI window's memory model is not MPI_WIN_UNIFIED: kernels \
                       would not see puts without MPI_Win_sync"
                    .into(),
            });
        }
        check(
            ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, win),
            "MPI_Win_lock_all",
            None,
        )?;
        Ok(win)
    }
}

impl MpiWire {
    /// `MPI_Put` (`put`) or `MPI_Get` of `len` bytes between `local` and `offset` in
    /// `peer`'s heap window, then `MPI_Win_flush`: complete at both ends on return.
    fn rma(&self, put: bool, local: *mut u8, peer: usize, offset: u64, len: usize) -> Result<()> {
        let win = self.win.ok_or_else(|| Error::Engine {
            peer: Some(peer),
            what: "a direct request, but the heap has no window (data is staged)".into(),
        })?;
        const CHUNK: usize = 1 << 30;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK);
            let (at, target) = (
                local.wrapping_add(done),
                (offset + done as u64) as ffi::MPI_Aint,
            );
            // SAFETY: the kernel's range (the caller's contract) and the peer's window.
            let code = unsafe {
                if put {
                    ffi::MPI_Put(
                        at.cast::<c_void>(),
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        peer as c_int,
                        target,
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        win,
                    )
                } else {
                    ffi::MPI_Get(
                        at.cast::<c_void>(),
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        peer as c_int,
                        target,
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        win,
                    )
                }
            };
            check(code, if put { "MPI_Put" } else { "MPI_Get" }, Some(peer))?;
            done += n;
        }
        // SAFETY: the proxy's window.
        check(
            unsafe { ffi::MPI_Win_flush(peer as c_int, win) },
            "MPI_Win_flush",
            Some(peer),
        )
    }
}

impl Wire for MpiWire {
    fn has_window(&self) -> bool {
        self.win.is_some()
    }

    unsafe fn put(&mut self, peer: usize, offset: u64, src: *const u8, len: usize) -> Result<()> {
        self.rma(true, src.cast_mut(), peer, offset, len)
    }

    unsafe fn get(&mut self, peer: usize, offset: u64, dst: *mut u8, len: usize) -> Result<()> {
        self.rma(false, dst, peer, offset, len)
    }

    unsafe fn request(
        &mut self,
        peer: usize,
        mut header: Vec<u8>,
        data: *const u8,
        data_len: usize,
        reply_len: usize,
        id: u64,
    ) -> Result<()> {
        // SAFETY: reading MPI's null-request constant.
        let null = unsafe { ffi::RSMPI_REQUEST_NULL };
        let follows = if data_len <= DATA_IN_HEADER {
            if data_len > 0 {
                // SAFETY: readable for `data_len` bytes (the caller's contract).
                header.extend_from_slice(unsafe { std::slice::from_raw_parts(data, data_len) });
            }
            0
        } else {
            data_len
        };
        header.extend_from_slice(&(follows as u64).to_le_bytes());
        self.inflight.push_back(InFlight {
            id,
            request: null,
            reply: vec![0u8; reply_len],
            sent: header,
            send: null,
            data: null,
            peer,
        });
        let f = self.inflight.back_mut().expect("pushed above");
        // SAFETY: both buffers live in `inflight` (their heap storage does not move with
        // the entry) until the requests complete.
        unsafe {
            check(
                ffi::MPI_Irecv(
                    f.reply.as_mut_ptr().cast(),
                    reply_len as c_int,
                    ffi::RSMPI_UINT8_T,
                    peer as c_int,
                    TAG_REPLY,
                    self.comm,
                    &mut f.request,
                ),
                "MPI_Irecv of a reply",
                Some(peer),
            )?;
            check(
                ffi::MPI_Isend(
                    f.sent.as_ptr().cast(),
                    f.sent.len() as c_int,
                    ffi::RSMPI_UINT8_T,
                    peer as c_int,
                    TAG_REQUEST,
                    self.comm,
                    &mut f.send,
                ),
                "MPI_Isend of a request",
                Some(peer),
            )?;
            if follows > 0 {
                check(
                    // The caller keeps the data until the reply, which comes after the
                    // target has received it.
                    ffi::MPI_Isend(
                        data.cast(),
                        follows as c_int,
                        ffi::RSMPI_UINT8_T,
                        peer as c_int,
                        TAG_DATA,
                        self.comm,
                        &mut f.data,
                    ),
                    "MPI_Isend of a request's data",
                    Some(peer),
                )?;
            }
            Ok(())
        }
    }

    fn reply(&mut self) -> Result<Option<(u64, Vec<u8>)>> {
        for i in 0..self.inflight.len() {
            let f = &mut self.inflight[i];
            let mut flag: c_int = 0;
            // SAFETY: an in-flight receive of this proxy.
            unsafe {
                check(
                    ffi::MPI_Test(&mut f.request, &mut flag, ffi::RSMPI_STATUS_IGNORE),
                    "MPI_Test of a reply",
                    Some(f.peer),
                )?;
            }
            if flag != 0 {
                // SAFETY: the sends completed before their reply could arrive.
                unsafe {
                    ffi::MPI_Wait(&mut f.send, ffi::RSMPI_STATUS_IGNORE);
                    ffi::MPI_Wait(&mut f.data, ffi::RSMPI_STATUS_IGNORE);
                };
                let f = self.inflight.remove(i).expect("an index in range");
                return Ok(Some((f.id, f.reply)));
            }
        }
        Ok(None)
    }

    /// Receives a header message into `inbox`, then, where its trailer says data follows,
    /// that data right after the header (`MPI_Recv`: the sender posted it with the
    /// header, and MPI delivers one sender's messages of a tag in order).
    fn next_request(&mut self, inbox: &mut [u8]) -> Result<Option<(usize, usize)>> {
        self.outgoing.retain_mut(|o| {
            let mut flag: c_int = 0;
            // SAFETY: a live request of this proxy.
            unsafe { ffi::MPI_Test(&mut o.request, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            flag == 0
        });
        let mut flag: c_int = 0;
        let mut message = std::mem::MaybeUninit::<ffi::MPI_Message>::uninit();
        let mut status = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
        // SAFETY: plain MPI calls on this proxy's communicator.
        unsafe {
            check(
                ffi::MPI_Improbe(
                    ffi::RSMPI_ANY_SOURCE,
                    TAG_REQUEST,
                    self.comm,
                    &mut flag,
                    message.as_mut_ptr(),
                    status.as_mut_ptr(),
                ),
                "MPI_Improbe",
                None,
            )?;
        }
        if flag == 0 {
            return Ok(None);
        }
        // SAFETY: a matched message and its status.
        let (mut message, status) = unsafe { (message.assume_init(), status.assume_init()) };
        let from = status.MPI_SOURCE as usize;
        let mut count: c_int = 0;
        // SAFETY: as above.
        unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) };
        let count = count.max(0) as usize;
        let room = inbox.len();
        let too_long = |bytes: usize| Error::Engine {
            peer: Some(from),
            what: format!("a request of {bytes} bytes, more than the inbox's {room}"),
        };
        if count > room {
            return Err(too_long(count));
        }
        if count < TRAILER {
            return Err(Error::Engine {
                peer: Some(from),
                what: format!("a request of {count} bytes, shorter than the wire's trailer"),
            });
        }
        check(
            // SAFETY: `count` bytes of the inbox.
            unsafe {
                ffi::MPI_Mrecv(
                    inbox.as_mut_ptr().cast(),
                    count as c_int,
                    ffi::RSMPI_UINT8_T,
                    &mut message,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            },
            "MPI_Mrecv of a request",
            Some(from),
        )?;
        let header = count - TRAILER;
        let follows = u64::from_le_bytes(
            inbox[header..count]
                .try_into()
                .expect("a trailer's 8 bytes"),
        );
        let total = usize::try_from(follows)
            .ok()
            .and_then(|f| f.checked_add(header))
            .filter(|&total| total <= room)
            .ok_or_else(|| too_long(header.saturating_add(follows as usize)))?;
        if total > header {
            check(
                // SAFETY: the inbox's bytes after the header (checked above).
                unsafe {
                    ffi::MPI_Recv(
                        inbox[header..].as_mut_ptr().cast(),
                        (total - header) as c_int,
                        ffi::RSMPI_UINT8_T,
                        from as c_int,
                        TAG_DATA,
                        self.comm,
                        ffi::RSMPI_STATUS_IGNORE,
                    )
                },
                "MPI_Recv of a request's data",
                Some(from),
            )?;
        }
        Ok(Some((from, total)))
    }

    fn send_reply(&mut self, to: usize, reply: Vec<u8>) -> Result<()> {
        // SAFETY: reading MPI's null-request constant.
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        check(
            // SAFETY: the buffer lives in `outgoing` until the send completes.
            unsafe {
                ffi::MPI_Isend(
                    reply.as_ptr().cast(),
                    reply.len() as c_int,
                    ffi::RSMPI_UINT8_T,
                    to as c_int,
                    TAG_REPLY,
                    self.comm,
                    &mut request,
                )
            },
            "MPI_Isend of a reply",
            Some(to),
        )?;
        self.outgoing.push(Outgoing {
            request,
            _buffer: reply,
        });
        Ok(())
    }

    /// Frees the window and the communicator (collective: every rank is past the world's
    /// final barrier) when `clean`; otherwise (this proxy failed) leaves them.
    fn close(&mut self, clean: bool) {
        if !clean {
            // A peer may still answer a request or take a reply: MPI keeps the buffers of
            // the receives and sends posted, so they are leaked rather than freed under it.
            std::mem::forget(std::mem::take(&mut self.inflight));
            std::mem::forget(std::mem::take(&mut self.outgoing));
            return;
        }
        // SAFETY: the proxy's own requests and handles.
        unsafe {
            for mut o in std::mem::take(&mut self.outgoing) {
                ffi::MPI_Wait(&mut o.request, ffi::RSMPI_STATUS_IGNORE);
            }
            if let Some(mut win) = self.win.take() {
                ffi::MPI_Win_unlock_all(win);
                ffi::MPI_Win_free(&mut win);
            }
            ffi::MPI_Comm_free(&mut self.comm);
        }
    }
}
