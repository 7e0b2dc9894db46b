//! Who is at the other end of a UNIX socket, by the kernel's word (`SO_PEERCRED`), and
//! who this process is: what the handshake ([`super::auth`]) and the bootstraps believe
//! about a peer before any byte of its own.

use std::fmt;
use std::io;
use std::os::fd::AsFd;

/// The kernel's word on the process at the other end of a socket (`SO_PEERCRED`: its
/// credentials when it connected or listened).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its process id (in this process's PID namespace; 0 if it is in none of ours).
    pub pid: u32,
    /// Its user id.
    pub uid: u32,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} uid {}", self.pid, self.uid)
    }
}

/// The process at the other end of `stream`.
///
/// Read with libc's `getsockopt`, not rustix's `socket_peercred`: rustix's `UCred` holds
/// the pid as a non-zero `Pid`, and the kernel reports pid 0 for a peer in a PID
/// namespace this process cannot see, which that type cannot hold (undefined behaviour).
pub(crate) fn peer_of(stream: &impl AsFd) -> io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a live socket; `cred` and `len` are valid out-pointers, `len` its size.
    let status = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&stream.as_fd()),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if status != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != size_of::<libc::ucred>() {
        return Err(io::Error::other("SO_PEERCRED gave a short answer"));
    }
    Ok(Peer {
        pid: u32::try_from(cred.pid).unwrap_or(0),
        uid: cred.uid,
    })
}

/// This process's user.
pub(crate) fn my_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    /// The variable that makes `peer_in_a_pid_namespace_we_cannot_see_is_pid_0` its own
    /// child, run in a new PID namespace: the name of the parent's listening socket.
    const NAMESPACED: &str = "SYMMEM_TEST_PEERCRED_SOCKET";

    /// A peer in a PID namespace this process cannot see (here: the parent of a new
    /// namespace, seen from inside it) has pid 0 by the kernel's word: read without
    /// undefined behaviour, as "no pid". The child half runs under `unshare --pid --fork`
    /// (root, as CI); where that cannot run, it says so and passes.
    #[test]
    fn peer_in_a_pid_namespace_we_cannot_see_is_pid_0() {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixListener};
        if let Ok(name) = std::env::var(NAMESPACED) {
            let address = SocketAddr::from_abstract_name(name.as_bytes()).expect("a name");
            let stream = UnixStream::connect_addr(&address).expect("connect to the parent");
            let peer = peer_of(&stream).expect("SO_PEERCRED");
            assert_eq!(peer.pid, 0, "the parent, outside this namespace: {peer}");
            assert_eq!(peer.uid, my_uid());
            return;
        }
        let name = format!("symmem-peercred-test-{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).expect("a name");
        let listener = UnixListener::bind_addr(&address).expect("bind");
        let test = "bootstrap::credentials::tests::peer_in_a_pid_namespace_we_cannot_see_is_pid_0";
        let child = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--"])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture"])
            .env(NAMESPACED, &name)
            .output();
        let child = match child {
            Ok(out) if out.status.success() => out,
            Ok(out) if String::from_utf8_lossy(&out.stderr).contains("unshare failed") => {
                return println!(
                    "skipped: no new PID namespace here: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok(out) => panic!(
                "the child failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => return println!("skipped: unshare(1) cannot run: {e}"),
        };
        let (from_child, _) = listener.accept().expect("the child connected");
        let seen = peer_of(&from_child).expect("SO_PEERCRED");
        assert_ne!(seen.pid, 0, "the child, inside a namespace of ours: {seen}");
        assert!(String::from_utf8_lossy(&child.stdout).contains("1 passed"));
    }
}
