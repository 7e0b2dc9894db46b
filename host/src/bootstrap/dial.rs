//! Connecting to a group's socket within a deadline.
//!
//! A blocking `connect(2)` to a UNIX socket whose backlog is full waits until the listener
//! accepts, with no timeout: a stranger that fills a rank's backlog would hold the rank
//! forever. A non-blocking one returns `EAGAIN` at once instead (and `ECONNREFUSED` where
//! nobody listens yet), so [`connect_by`] retries until its deadline. std has no
//! non-blocking connect for UNIX sockets, hence rustix's.

use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::{Duration, Instant};

/// How long to wait between attempts while the listener is full or absent.
const RETRY: Duration = Duration::from_millis(2);

/// A connection to the abstract socket `addr`, in blocking mode, made by `deadline`:
/// tried again while the listener's backlog is full or nobody listens yet.
///
/// # Errors
/// `TimedOut` once the deadline passes without a connection; any other failure of the
/// socket calls as it is.
pub(crate) fn connect_by(addr: &SocketAddr, deadline: Instant) -> io::Result<UnixStream> {
    let name = addr
        .as_abstract_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not an abstract name"))?;
    let target = SocketAddrUnix::new_abstract_name(name)?;
    loop {
        let socket = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )?;
        match rustix::net::connect(&socket, &target) {
            Ok(()) => {
                let stream = UnixStream::from(socket);
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(Errno::INTR) => {}
            // The backlog is full, or nobody listens yet: again, until the deadline.
            Err(Errno::AGAIN | Errno::CONNREFUSED) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                std::thread::sleep(left.min(RETRY));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn name(tag: &str) -> SocketAddr {
        let random: [u8; 8] = crate::bootstrap::auth::random_bytes().expect("random");
        SocketAddr::from_abstract_name(format!("symmem-test-dial-{tag}-{random:02x?}"))
            .expect("a name")
    }

    #[test]
    fn a_full_backlog_gives_timed_out_by_the_deadline() {
        let addr = name("full");
        let _listener = UnixListener::bind_addr(&addr).expect("bind");
        // Fill the backlog: connections nobody accepts, until the listener takes no more.
        let mut held = Vec::new();
        loop {
            match connect_by(&addr, Instant::now()) {
                Ok(stream) => held.push(stream),
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
                    break;
                }
            }
            assert!(held.len() < 100_000, "the backlog never filled");
        }
        let start = Instant::now();
        let full = connect_by(&addr, start + Duration::from_millis(300));
        let waited = start.elapsed();
        assert_eq!(
            full.map(drop).map_err(|e| e.kind()),
            Err(io::ErrorKind::TimedOut)
        );
        assert!(
            waited >= Duration::from_millis(290) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
    }

    #[test]
    fn a_listener_that_binds_late_is_reached_and_none_times_out() {
        let addr = name("late");
        let late = {
            let addr = addr.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                UnixListener::bind_addr(&addr).expect("bind")
            })
        };
        let stream = connect_by(&addr, Instant::now() + Duration::from_secs(5));
        let _listener = late.join().expect("the binding thread");
        assert!(stream.is_ok(), "{stream:?}");
        let nobody = connect_by(&name("none"), Instant::now() + Duration::from_millis(20));
        assert_eq!(
            nobody.map(drop).map_err(|e| e.kind()),
            Err(io::ErrorKind::TimedOut)
        );
    }
}
