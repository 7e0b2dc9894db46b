//! The one error type of the host API. Every variant says what was asked and what
//! stood in the way; none is ever a wrong address.

use std::fmt;
use std::time::Duration;

/// Result of every fallible host call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a host call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An alignment larger than every heap base is aligned to, so no offset could give
    /// that alignment on every rank.
    AlignmentTooLarge {
        /// The alignment asked for.
        align: usize,
        /// The largest alignment available.
        max: usize,
    },
    /// A request for zero bytes (or zero elements).
    ZeroSize,
    /// An alignment that is not a power of two.
    BadAlignment {
        /// The alignment asked for.
        align: usize,
    },
    /// The heap has no free range that large left now; freeing may help.
    OutOfHeap {
        /// Bytes asked for (after rounding).
        requested: usize,
        /// Free bytes in the heap.
        available: usize,
    },
    /// The request can never fit: it is larger than the whole heap.
    TooLarge {
        /// Bytes asked for.
        requested: usize,
        /// The heap's capacity.
        capacity: usize,
    },
    /// A pointer that is not inside any live symmetric allocation of this world.
    NotSymmetric {
        /// The address.
        addr: u64,
    },
    /// A rank outside `0..world`.
    RankOutOfRange {
        /// The rank asked for.
        rank: usize,
        /// The world size.
        world: usize,
    },
    /// An element range outside a buffer.
    OutOfBounds {
        /// First element asked for.
        start: usize,
        /// Elements asked for.
        len: usize,
        /// Elements in the buffer.
        capacity: usize,
    },
    /// A peer's address that is not congruent to the others modulo 16 (a table entry
    /// that would break 16-byte alignment after translation).
    PeerMisaligned {
        /// The rank.
        rank: usize,
        /// Its address.
        addr: u64,
    },
    /// A peer-base table handed to symmem that breaks the table contract.
    BadPeerTable {
        /// The offending entry (the table's length when the length is wrong).
        rank: usize,
        /// Its address (0 when there is none).
        addr: u64,
        /// What is wrong.
        why: &'static str,
    },
    /// A symmetric buffer freed twice, or one that belongs to another world.
    NotAllocated {
        /// Offset of the buffer in the heap.
        offset: usize,
    },
    /// Ranks made different collective calls (allocation sizes, order, frees).
    CollectiveMismatch {
        /// The first rank whose history differs from rank 0's.
        rank: usize,
        /// Number of collective heap operations this rank has made.
        ops: u64,
    },
    /// Ranks asked for heaps of different sizes.
    HeapSizeMismatch {
        /// The first rank that differs from rank 0.
        rank: usize,
        /// Rank 0's heap size.
        expected: usize,
        /// That rank's heap size.
        found: usize,
    },
    /// A peer left (exited, crashed or was killed) or did not answer in time.
    PeerLost {
        /// The rank that was lost, when known.
        rank: Option<usize>,
        /// How long this rank waited.
        waited: Duration,
    },
    /// A backend with no usable device on this machine.
    NoDevice {
        /// The backend.
        backend: &'static str,
    },
    /// A backend whose runtime library cannot be loaded.
    LibraryMissing {
        /// The library looked for.
        library: &'static str,
    },
    /// A device-runtime call failed.
    Driver {
        /// The call.
        call: &'static str,
        /// Its result code.
        code: i64,
        /// The runtime's description of the code.
        message: String,
    },
    /// This rank's device cannot reach the memory of a peer's device (no peer-to-peer
    /// path between the two GPUs), so mapping that peer's memory here would fault.
    PeerUnreachable {
        /// This rank's device ordinal.
        device: usize,
        /// The ordinal of the device that holds the peer's memory.
        peer_device: usize,
    },
    /// No code object of the project's kernels for this device's architecture.
    NoCodeObject {
        /// The device's architecture name.
        arch: String,
    },
    /// An operating-system call failed.
    Os {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A bootstrap message was malformed or out of sequence.
    Bootstrap(String),
    /// The backend cannot do this.
    Unsupported(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroSize => write!(f, "zero-sized allocation"),
            Self::AlignmentTooLarge { align, max } => write!(
                f,
                "alignment {align} is larger than the heaps' alignment {max}"
            ),
            Self::BadAlignment { align } => write!(f, "alignment {align} is not a power of two"),
            Self::OutOfHeap {
                requested,
                available,
            } => write!(
                f,
                "symmetric heap exhausted: requested {requested} bytes, {available} bytes free"
            ),
            Self::TooLarge {
                requested,
                capacity,
            } => write!(
                f,
                "requested {requested} bytes, larger than the whole heap of {capacity} bytes"
            ),
            Self::NotSymmetric { addr } => {
                write!(f, "address {addr:#x} is not in any symmetric allocation")
            }
            Self::RankOutOfRange { rank, world } => {
                write!(f, "rank {rank} is out of range for a world of {world}")
            }
            Self::OutOfBounds {
                start,
                len,
                capacity,
            } => write!(
                f,
                "elements {start}..{start}+{len} are outside a buffer of {capacity}"
            ),
            Self::PeerMisaligned { rank, addr } => write!(
                f,
                "rank {rank}'s address {addr:#x} is not congruent to the others modulo 16"
            ),
            Self::BadPeerTable { rank, addr, why } => {
                write!(f, "peer-base table entry {rank} ({addr:#x}): {why}")
            }
            Self::NotAllocated { offset } => {
                write!(f, "no live symmetric allocation at heap offset {offset:#x}")
            }
            Self::CollectiveMismatch { rank, ops } => write!(
                f,
                "rank {rank} made different collective heap calls than rank 0 ({ops} calls so far)"
            ),
            Self::HeapSizeMismatch {
                rank,
                expected,
                found,
            } => write!(
                f,
                "rank {rank} asked for a heap of {found} bytes, rank 0 for {expected}"
            ),
            Self::PeerLost {
                rank: Some(rank),
                waited,
            } => {
                write!(f, "rank {rank} was lost (waited {waited:?})")
            }
            Self::PeerLost { rank: None, waited } => {
                write!(f, "a peer was lost or did not answer within {waited:?}")
            }
            Self::NoDevice { backend } => write!(f, "{backend}: no device found"),
            Self::LibraryMissing { library } => write!(f, "cannot load {library}"),
            Self::Driver {
                call,
                code,
                message,
            } => write!(f, "{call} failed: {code} ({message})"),
            Self::PeerUnreachable {
                device,
                peer_device,
            } => write!(
                f,
                "device {device} has no peer-to-peer access to device {peer_device}"
            ),
            Self::NoCodeObject { arch } => write!(f, "no symmem code object for {arch}"),
            Self::Os { what, source } => write!(f, "{what}: {source}"),
            Self::Bootstrap(msg) => write!(f, "bootstrap: {msg}"),
            Self::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Error {
    /// An `Os` error from the current `errno`.
    pub(crate) fn last_os(what: &'static str) -> Self {
        Self::Os {
            what,
            source: std::io::Error::last_os_error(),
        }
    }
}
