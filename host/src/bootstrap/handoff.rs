//! Handing a group's secret from [`spawn`](super::unix::spawn) to the ranks it starts,
//! and to nobody else: not through the environment (which every process a rank starts
//! inherits, and a `Command`'s `Debug` prints), but through a pipe each child inherits
//! alone and reads once.
//!
//! For each child, the launcher writes the secret into a new pipe, closes the write end,
//! and lets the child inherit the read end only (the pipe is close-on-exec in this
//! process; a `pre_exec` hook clears the flag in the child it is meant for, between fork
//! and exec, so a process another thread starts meanwhile never gets it). The child's
//! environment names the descriptor and the pipe's inode
//! ([`ENV_SECRET_FD`](super::unix::ENV_SECRET_FD), `fd:inode`), which hold no secret; the
//! child checks that the descriptor is that very pipe, reads the secret and closes it, so
//! the processes it starts get neither.

use super::auth::{SECRET_BYTES, Secret};
use crate::error::{Error, Result};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use zeroize::Zeroizing;

/// The launcher's side: a `pre_exec` hook installed once on the caller's `Command`, and
/// the descriptor it lets the next child inherit.
pub(crate) struct Handoff {
    /// The read end the next child inherits; -1 for none (the hook then does nothing,
    /// so it is inert on the caller's `Command` once [`spawn`](super::unix::spawn) is
    /// done).
    next: Arc<AtomicI32>,
}

impl Handoff {
    /// Installs the hook on `command`.
    pub(crate) fn install(command: &mut Command) -> Self {
        let next = Arc::new(AtomicI32::new(-1));
        let hook = Arc::clone(&next);
        // SAFETY: the hook runs in the child between fork and exec, where only
        // async-signal-safe work is allowed: it loads an atomic and makes one `fcntl`
        // system call (rustix's raw syscall), allocating nothing and taking no lock. The
        // descriptor it names is open in the child, inherited from this process, where the
        // launcher keeps it open until the child has started.
        unsafe {
            command.pre_exec(move || {
                let fd = hook.load(Ordering::Relaxed);
                if fd >= 0 {
                    let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
                }
                Ok(())
            });
        }
        Self { next }
    }

    /// A pipe holding `secret` for the next child, its read end armed for the hook, and
    /// the value of [`ENV_SECRET_FD`](super::unix::ENV_SECRET_FD) that names it. Keep the
    /// returned descriptor until that child has started, then [`disarm`](Self::disarm).
    pub(crate) fn arm(&self, secret: &Secret) -> Result<(OwnedFd, String)> {
        let os = |what| {
            move |e: rustix::io::Errno| Error::Os {
                what,
                source: e.into(),
            }
        };
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(os("a pipe for a rank's secret"))?;
        // 64 bytes, less than a pipe's atomic write and its buffer: one write, no wait.
        let hex = secret.to_hex();
        let written =
            rustix::io::write(&write, hex.as_bytes()).map_err(os("writing a rank's secret"))?;
        if written != hex.len() {
            return Err(Error::Os {
                what: "writing a rank's secret (short write)",
                source: std::io::ErrorKind::WriteZero.into(),
            });
        }
        drop(write);
        let inode = rustix::fs::fstat(&read)
            .map_err(os("a pipe for a rank's secret"))?
            .st_ino;
        self.next.store(read.as_raw_fd(), Ordering::Relaxed);
        let named = format!("{}:{inode}", read.as_raw_fd());
        Ok((read, named))
    }

    /// No child inherits anything from here on.
    pub(crate) fn disarm(&self) {
        self.next.store(-1, Ordering::Relaxed);
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        self.disarm();
    }
}

/// The child's side: the secret from the pipe `named` (`fd:inode`, from
/// [`ENV_SECRET_FD`](super::unix::ENV_SECRET_FD)), read once, its descriptor closed.
/// `None` where `named` names no such pipe of this process (malformed, closed already,
/// its number taken by another file) or the pipe holds no secret.
pub(crate) fn take(named: &str) -> Option<Secret> {
    let (fd, inode) = named.split_once(':')?;
    let (fd, inode): (i32, u64) = (fd.parse().ok()?, inode.parse().ok()?);
    if fd < 3 {
        return None;
    }
    // SAFETY: `fcntl(F_GETFD)` and `fstat` on a descriptor number are sound for any
    // number (a closed one is `EBADF`); `stat` is plain data that `fstat` fills in.
    let is_that_pipe = unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        libc::fcntl(fd, libc::F_GETFD) >= 0
            && libc::fstat(fd, &mut stat) == 0
            && stat.st_mode & libc::S_IFMT == libc::S_IFIFO
            && stat.st_ino == inode
    };
    if !is_that_pipe {
        return None;
    }
    // SAFETY: `fd` is the pipe the launcher made for this process (its inode, checked
    // just above), inherited across exec: no code of this process opened it, so nothing
    // else owns it; it is taken once, and closed when `pipe` drops.
    let mut pipe = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut hex = Zeroizing::new([0u8; 2 * SECRET_BYTES + 1]);
    let mut got = 0;
    while got < hex.len() {
        match pipe.read(&mut hex[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Secret::from_hex(std::str::from_utf8(&hex[..got]).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_armed_for_a_child_gives_the_secret_once_and_only_by_its_inode() {
        let secret = Secret::random().expect("random");
        let mut command = Command::new("true");
        let handoff = Handoff::install(&mut command);
        let (read, named) = handoff.arm(&secret).expect("arm");
        // Another inode at the same number: not taken (and the pipe stays open).
        let fd = read.as_raw_fd();
        assert_eq!(take(&format!("{fd}:1")).map(drop), None);
        assert_eq!(take(&format!("{fd}")).map(drop), None);
        // The one named: the secret, once; the descriptor is closed by then.
        let fd = std::mem::ManuallyDrop::new(read).as_raw_fd();
        assert_eq!(take(&named), Some(secret));
        assert_eq!(take(&named).map(drop), None, "the pipe was read once");
        // SAFETY: a number only, never used: `take` closed that descriptor.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) }, -1);
        handoff.disarm();
    }
}
