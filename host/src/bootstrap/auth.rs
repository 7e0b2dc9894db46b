//! Who may join a group: the handshake every connection to a group's socket passes before
//! any frame, byte of a contribution or file descriptor crosses it.
//!
//! A group has a [`Secret`] (32 bytes from the operating system's random source) that only
//! its members hold: [`unix::spawn`](super::unix::spawn) hands it to each rank it starts
//! through a pipe the rank alone inherits and reads once
//! ([`ENV_SECRET_FD`](super::unix::ENV_SECRET_FD) names it); the MPI bootstrap's rank 0
//! makes one and broadcasts it over MPI, whose launcher already admits only its job's
//! ranks. A connection is admitted when both hold:
//!
//! 1. **Same user.** The kernel's credentials of the process at the other end
//!    (`SO_PEERCRED`) name this process's user: a process of another user gets nothing,
//!    not even a challenge, whichever end it holds.
//! 2. **Both ends hold the secret, and neither sends it.** The listening end sends a fresh
//!    random nonce (a `Challenge`); the connecting end answers with the rank it claims, a
//!    nonce of its own and a MAC (keyed BLAKE3, the crate made for keyed hashing) over both
//!    nonces, the rank, the world size and the group's name (an `Answer`); the listening
//!    end checks it, in constant time, and answers with a MAC of its own over the same
//!    (a `Proof`), which the connecting end checks before it sends anything else. A
//!    recorded answer is worth nothing against another nonce, and a squatter on a group's
//!    name learns nothing it could replay.
//!
//! Every message of the handshake has a fixed length, and the whole handshake one deadline
//! (not one per read): a peer that trickles a byte at a time cannot hold a rank past it.
//! A listener (`Doorman`) runs the handshakes of all its pending connections at once,
//! so a silent or slow stranger never delays a member; it accepts a bounded batch a round,
//! so a flood cannot keep it accepting. Every refusal is counted: the first of each kind
//! (user and why) in a second is a tracing `warn` naming the process (pid, uid) and why,
//! the rest of that second one line with their count.

mod doorman;

pub use super::credentials::Peer;
use super::credentials::{my_uid, peer_of};
use crate::error::{Error, Result};
pub(crate) use doorman::Doorman;
pub use doorman::{Admitted, admit};
use rustix::event::{PollFd, PollFlags, Timespec};
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Bytes of a group's secret.
pub const SECRET_BYTES: usize = 32;

/// Bytes of a handshake nonce.
const NONCE_BYTES: usize = 16;

/// Bytes of a MAC (BLAKE3's output).
const MAC_BYTES: usize = 32;

/// What every message of the handshake starts with: the protocol and its version, and the
/// message's letter.
const MAGIC: [u8; 7] = *b"symmem1";

/// A group's shared secret: members hold it, strangers do not. Its `Debug` shows no byte
/// of it, and its bytes are wiped when it is dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_BYTES]);

impl Drop for Secret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl Secret {
    /// A new secret from the operating system's random source (`getrandom(2)`).
    ///
    /// # Errors
    /// [`Error::Os`] if the kernel has no random source to give.
    pub fn random() -> Result<Self> {
        Ok(Self(random_bytes()?))
    }

    /// The secret of these bytes (a launcher that made them itself).
    pub fn from_bytes(bytes: [u8; SECRET_BYTES]) -> Self {
        Self(bytes)
    }

    /// The secret as 64 lower-case hexadecimal digits, as [`spawn`](super::unix::spawn)
    /// passes it to its ranks; wiped when dropped.
    pub fn to_hex(&self) -> zeroize::Zeroizing<String> {
        let mut hex = String::with_capacity(2 * SECRET_BYTES);
        for b in &self.0 {
            hex.push(char::from_digit(u32::from(b >> 4), 16).expect("a nibble"));
            hex.push(char::from_digit(u32::from(b & 0xf), 16).expect("a nibble"));
        }
        zeroize::Zeroizing::new(hex)
    }

    /// The secret written by [`to_hex`](Self::to_hex); `None` for anything else.
    pub fn from_hex(hex: &str) -> Option<Self> {
        let digits = hex.as_bytes();
        if digits.len() != 2 * SECRET_BYTES {
            return None;
        }
        let mut out = zeroize::Zeroizing::new([0u8; SECRET_BYTES]);
        for (byte, pair) in out.iter_mut().zip(digits.as_chunks::<2>().0) {
            let pair = std::str::from_utf8(pair).ok()?;
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(Self(*out))
    }

    /// The MAC that `role` of a handshake sends, over everything both ends must agree on.
    fn mac(&self, role: Role, context: &Context<'_>, nonces: &Nonces, rank: u64) -> blake3::Hash {
        let mut hasher = blake3::Hasher::new_keyed(&self.0);
        hasher
            .update(role.tag())
            .update(&(context.group.len() as u64).to_le_bytes())
            .update(context.group)
            .update(&(context.world as u64).to_le_bytes())
            .update(&nonces.listener)
            .update(&nonces.connector)
            .update(&rank.to_le_bytes());
        hasher.finalize()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// `N` bytes from the operating system's random source.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut out = [0u8; N];
    let mut filled = 0;
    while filled < N {
        match rustix::rand::getrandom(&mut out[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(Error::Os {
                    what: "getrandom (a group's secret or a handshake nonce)",
                    source: e.into(),
                });
            }
        }
    }
    Ok(out)
}

/// What a handshake is about: the group's name and its size. Both ends must agree on it,
/// or the MACs differ.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Context<'a> {
    /// The group's socket name (or the MPI job's), as bytes.
    pub group: &'a [u8],
    /// The number of ranks.
    pub world: usize,
}

/// Which end of a handshake a MAC comes from.
#[derive(Clone, Copy)]
enum Role {
    Connector,
    Listener,
}

impl Role {
    fn tag(self) -> &'static [u8] {
        match self {
            Role::Connector => b"symmem handshake v1: connector",
            Role::Listener => b"symmem handshake v1: listener",
        }
    }
}

/// Both ends' nonces.
struct Nonces {
    listener: [u8; NONCE_BYTES],
    connector: [u8; NONCE_BYTES],
}

/// Why a handshake failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Refusal {
    /// The process at the other end runs as another user.
    OtherUser,
    /// A message that is not the handshake's (another protocol, garbage, a version of
    /// symmem that speaks another handshake).
    Malformed,
    /// A MAC that does not match: the other end does not hold this group's secret (or is
    /// of another group, or claims another world size).
    BadProof,
    /// The other end sent too little before the deadline, or closed.
    Silent,
    /// The credentials could not be read, or the socket failed.
    Io,
    /// Dropped unanswered for a newer connection: too many were waiting for their
    /// handshakes at once.
    Crowded,
    /// A member, but not the process its launcher named for the rank it proved (the MPI
    /// bootstrap's check; the UNIX-socket hub names the processes itself).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    NotTheRank,
}

impl Refusal {
    /// Why, in words, for logs and errors.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Refusal::OtherUser => "it runs as another user",
            Refusal::Malformed => "it did not speak symmem's handshake",
            Refusal::BadProof => "it does not hold the group's secret",
            Refusal::Silent => {
                "it closed or went silent during the handshake (it may refuse this rank's secret)"
            }
            Refusal::Io => "its socket failed",
            Refusal::Crowded => {
                "too many connections were waiting for their handshakes: it had not answered"
            }
            Refusal::NotTheRank => "it is not the process the launcher named for its rank",
        }
    }
}

/// The listener's first message: a fresh nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Challenge {
    nonce: [u8; NONCE_BYTES],
}

impl Challenge {
    const BYTES: usize = 8 + NONCE_BYTES;

    fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[..7].copy_from_slice(&MAGIC);
        out[7] = b'C';
        out[8..].copy_from_slice(&self.nonce);
        out
    }

    /// The challenge in `bytes`; `None` for anything else.
    fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; Self::BYTES] = bytes.try_into().ok()?;
        let (head, nonce) = bytes.split_first_chunk::<8>()?;
        (head[..7] == MAGIC && head[7] == b'C').then(|| Self {
            nonce: nonce.try_into().expect("the rest is a nonce"),
        })
    }
}

/// The connector's answer: the rank it claims, its nonce and its MAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    rank: u64,
    nonce: [u8; NONCE_BYTES],
    mac: [u8; MAC_BYTES],
}

impl Answer {
    const BYTES: usize = 8 + 8 + NONCE_BYTES + MAC_BYTES;

    fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[..7].copy_from_slice(&MAGIC);
        out[7] = b'A';
        out[8..16].copy_from_slice(&self.rank.to_le_bytes());
        out[16..16 + NONCE_BYTES].copy_from_slice(&self.nonce);
        out[16 + NONCE_BYTES..].copy_from_slice(&self.mac);
        out
    }

    /// The answer in `bytes`; `None` for anything else.
    fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; Self::BYTES] = bytes.try_into().ok()?;
        if bytes[..7] != MAGIC || bytes[7] != b'A' {
            return None;
        }
        Some(Self {
            rank: u64::from_le_bytes(bytes[8..16].try_into().ok()?),
            nonce: bytes[16..16 + NONCE_BYTES].try_into().ok()?,
            mac: bytes[16 + NONCE_BYTES..].try_into().ok()?,
        })
    }
}

/// The listener's last message: its MAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Proof {
    mac: [u8; MAC_BYTES],
}

impl Proof {
    const BYTES: usize = 8 + MAC_BYTES;

    fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[..7].copy_from_slice(&MAGIC);
        out[7] = b'P';
        out[8..].copy_from_slice(&self.mac);
        out
    }

    /// The proof in `bytes`; `None` for anything else.
    fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; Self::BYTES] = bytes.try_into().ok()?;
        (bytes[..7] == MAGIC && bytes[7] == b'P').then(|| Self {
            mac: bytes[8..].try_into().expect("the rest is a MAC"),
        })
    }
}

/// Reads exactly `buf.len()` bytes from `stream` before `deadline` (one deadline for all
/// of them, however they trickle in).
fn read_by(stream: &mut UnixStream, buf: &mut [u8], deadline: Instant) -> Result<(), Refusal> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(Refusal::Silent)?;
        if !wait_readable(stream, left).map_err(|_| Refusal::Io)? {
            return Err(Refusal::Silent);
        }
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(Refusal::Silent),
            Ok(n) => got += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return Err(Refusal::Io),
        }
    }
    Ok(())
}

/// Whether `fd` became readable (data or its end) within `left`.
fn wait_readable(fd: &impl AsFd, left: Duration) -> io::Result<bool> {
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    poll(&mut fds, left)?;
    Ok(!fds[0].revents().is_empty())
}

/// Waits at most `left` (whole milliseconds, rounded up, as poll(2) takes them) until one
/// of `fds` is ready; an interrupted wait returns early with none ready.
pub(crate) fn poll(fds: &mut [PollFd<'_>], left: Duration) -> io::Result<()> {
    let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i64;
    let timeout = Timespec {
        tv_sec: ms / 1000,
        tv_nsec: ms % 1000 * 1_000_000,
    };
    match rustix::event::poll(fds, Some(&timeout)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The connecting end's handshake over `stream`, a connection to the socket of group
/// `group` (of `world` ranks), as rank `rank`, finished by `deadline`: what
/// [`UnixBootstrap::connect`](super::unix::UnixBootstrap::connect) does before it sends
/// anything, for a program that speaks to a group's socket itself. Returns the
/// listener's credentials once it has proved that it holds `secret`; by then nothing but
/// this end's answer (no secret) has crossed the socket.
///
/// # Errors
/// [`Error::StrangerRefused`] naming the listener's process and why (another
/// user, no proof of the secret, silence past `deadline`).
pub fn join(
    stream: &mut UnixStream,
    secret: &Secret,
    group: &str,
    world: usize,
    rank: usize,
    deadline: Instant,
) -> Result<Peer> {
    let context = Context {
        group: group.as_bytes(),
        world,
    };
    connect_as(stream, secret, &context, rank, deadline)
        .map_err(|refusal| stranger_error("the process at the listening socket", refusal))
}

/// The connecting end's handshake, as rank `rank` of `context`'s group, finished by
/// `deadline`: checks the listener's user, answers its challenge and checks its proof.
/// Returns the listener's credentials once it has proved that it holds `secret`; nothing
/// but the answer has crossed the socket by then.
pub(crate) fn connect_as(
    stream: &mut UnixStream,
    secret: &Secret,
    context: &Context<'_>,
    rank: usize,
    deadline: Instant,
) -> std::result::Result<Peer, (Refusal, Option<Peer>)> {
    let peer = peer_of(stream).map_err(|_| (Refusal::Io, None))?;
    if peer.uid != my_uid() {
        return Err((Refusal::OtherUser, Some(peer)));
    }
    let fail = |r| (r, Some(peer));
    let mut challenge = [0u8; Challenge::BYTES];
    read_by(stream, &mut challenge, deadline).map_err(fail)?;
    let challenge = Challenge::decode(&challenge).ok_or(fail(Refusal::Malformed))?;
    let nonces = Nonces {
        listener: challenge.nonce,
        connector: random_bytes().map_err(|_| fail(Refusal::Io))?,
    };
    let rank = rank as u64;
    let answer = Answer {
        rank,
        nonce: nonces.connector,
        mac: *secret
            .mac(Role::Connector, context, &nonces, rank)
            .as_bytes(),
    };
    stream
        .write_all(&answer.encode())
        .map_err(|_| fail(Refusal::Io))?;
    let mut proof = [0u8; Proof::BYTES];
    read_by(stream, &mut proof, deadline).map_err(fail)?;
    let proof = Proof::decode(&proof).ok_or(fail(Refusal::Malformed))?;
    // `Hash`'s equality is constant-time.
    if secret.mac(Role::Listener, context, &nonces, rank) != blake3::Hash::from(proof.mac) {
        return Err(fail(Refusal::BadProof));
    }
    Ok(peer)
}

/// The error a connecting rank returns when the listener it reached is no member.
pub(crate) fn stranger_error(what: &'static str, (why, peer): (Refusal, Option<Peer>)) -> Error {
    Error::StrangerRefused {
        what,
        pid: peer.map(|p| p.pid),
        uid: peer.map(|p| p.uid),
        why: why.why(),
    }
}

/// Decodes `bytes` as each handshake message, checking that one that decodes re-encodes to
/// the very bytes it came from, and that a listener refuses an answer made with another
/// secret. The oracle of the property tests below and of the `bootstrap` fuzz target.
///
/// # Panics
/// Where a decoder breaks that.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_handshake(bytes: &[u8]) {
    if let Some(c) = Challenge::decode(bytes) {
        assert_eq!(&c.encode()[..], bytes);
    }
    if let Some(a) = Answer::decode(bytes) {
        assert_eq!(&a.encode()[..], bytes);
        // An answer made without the secret (these bytes) does not pass a MAC check with
        // another secret, except by a 2^-256 chance.
        let secret = Secret([7; SECRET_BYTES]);
        let context = Context {
            group: b"fuzz",
            world: 2,
        };
        let nonces = Nonces {
            listener: [0; NONCE_BYTES],
            connector: a.nonce,
        };
        assert_ne!(
            secret.mac(Role::Connector, &context, &nonces, a.rank),
            blake3::Hash::from(a.mac)
        );
    }
    if let Some(p) = Proof::decode(bytes) {
        assert_eq!(&p.encode()[..], bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bad_bytes::bytes_near;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn messages() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<[u8; NONCE_BYTES]>().prop_map(|nonce| Challenge { nonce }.encode().to_vec()),
            (
                any::<u64>(),
                any::<[u8; NONCE_BYTES]>(),
                vec(any::<u8>(), MAC_BYTES)
            )
                .prop_map(|(rank, nonce, mac)| Answer {
                    rank,
                    nonce,
                    mac: mac.try_into().unwrap(),
                }
                .encode()
                .to_vec()),
            vec(any::<u8>(), MAC_BYTES).prop_map(|mac| Proof {
                mac: mac.try_into().unwrap()
            }
            .encode()
            .to_vec()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_bytes_are_a_handshake_message_or_none(bytes in bytes_near(messages())) {
            check_handshake(&bytes);
        }

        #[test]
        fn secrets_round_trip_through_hex(bytes in any::<[u8; SECRET_BYTES]>()) {
            let secret = Secret::from_bytes(bytes);
            prop_assert_eq!(Secret::from_hex(&secret.to_hex()), Some(secret));
        }
    }

    #[test]
    fn a_secret_shows_no_byte_and_bad_hex_is_none() {
        let secret = Secret::random().unwrap();
        assert_eq!(format!("{secret:?}"), "Secret(..)");
        assert_ne!(secret, Secret::random().unwrap());
        assert!(Secret::from_hex("00").is_none());
        assert!(Secret::from_hex(&"g".repeat(64)).is_none());
    }

    #[test]
    fn a_listener_without_the_secret_gets_no_more_than_the_answer() {
        let secret = Secret::from_bytes([1; SECRET_BYTES]);
        let context = Context {
            group: b"test",
            world: 2,
        };
        let (mut squatter, mut connector_end) = UnixStream::pair().unwrap();
        let connector = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(5);
            connect_as(&mut connector_end, &secret, &context, 1, deadline).map_err(|(r, _)| r)
        });
        // The squatter challenges and, without the secret, proves with garbage.
        squatter
            .write_all(
                &Challenge {
                    nonce: [9; NONCE_BYTES],
                }
                .encode(),
            )
            .unwrap();
        let mut answer = [0u8; Answer::BYTES];
        squatter.read_exact(&mut answer).unwrap();
        squatter
            .write_all(
                &Proof {
                    mac: [5; MAC_BYTES],
                }
                .encode(),
            )
            .unwrap();
        assert_eq!(connector.join().unwrap(), Err(Refusal::BadProof));
        // What the squatter received: the answer alone, whose MAC is useless under
        // another nonce; nothing follows it.
        squatter.set_nonblocking(true).unwrap();
        let mut rest = Vec::new();
        let _ = squatter.read_to_end(&mut rest);
        assert_eq!(rest, b"");
    }

    #[test]
    fn a_trickle_is_cut_at_one_deadline_for_the_whole_handshake() {
        let secret = Secret::from_bytes([1; SECRET_BYTES]);
        let context = Context {
            group: b"test",
            world: 2,
        };
        let (mut slow, mut connector_end) = UnixStream::pair().unwrap();
        let trickle = std::thread::spawn(move || {
            // One byte every 100 ms: each read would be "on time"; the whole is not.
            let challenge = Challenge {
                nonce: [1; NONCE_BYTES],
            }
            .encode();
            for b in challenge {
                if slow.write_all(&[b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let start = Instant::now();
        let deadline = start + Duration::from_millis(500);
        let got = connect_as(&mut connector_end, &secret, &context, 1, deadline);
        assert!(matches!(got, Err((Refusal::Silent, Some(_)))), "{got:?}");
        assert!(start.elapsed() < Duration::from_secs(1));
        drop(connector_end);
        trickle.join().unwrap();
    }
}
