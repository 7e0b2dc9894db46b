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
    /// The heap has no free range that large left now; freeing may help. Dropped
    /// buffers come back to the heap only at a [`World::barrier`](crate::World::barrier)
    /// (once every rank has dropped them), so `pending` bytes will be free after the next
    /// one.
    OutOfHeap {
        /// Bytes asked for (after rounding).
        requested: usize,
        /// Free bytes in the heap.
        available: usize,
        /// Bytes of buffers this rank has dropped that no barrier has released yet.
        pending: usize,
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
    /// Ranks made different collective calls (allocation sizes, alignments or order,
    /// provider lengths, launch shapes). Every rank gets this error, naming the same
    /// ranks. Where the heaps differ (allocations), the world refuses every symmetric
    /// operation with it from then on; a call whose parameters alone differed (a
    /// provider's length) fails by itself.
    CollectiveMismatch {
        /// The ranks whose history differs from the majority's (where no history has a
        /// majority, from the largest group's; ties go to the group with the lowest rank).
        ranks: Vec<usize>,
        /// Number of collective heap operations this rank has made.
        ops: u64,
    },
    /// A one-sided operation on a symmetric allocation that no barrier or collective has
    /// confirmed yet: until every rank is known to have made the same allocation, a
    /// peer's copy may not exist or may belong to something else. Call
    /// [`World::barrier`](crate::World::barrier) after allocating (NVSHMEM and OpenSHMEM
    /// allocations include that barrier).
    NotAgreed {
        /// Offset of the allocation in the heap.
        offset: usize,
    },
    /// Other ranks failed their part of a collective call (its exchange still completed,
    /// so every rank stays in step); each of them returns its own error.
    PeerFailed {
        /// The ranks that failed.
        ranks: Vec<usize>,
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
    /// Ranks asked for different node splits
    /// ([`crate::Config::ranks_per_node`]).
    NodeSplitMismatch {
        /// The first rank that differs from rank 0.
        rank: usize,
        /// Rank 0's split.
        expected: Option<usize>,
        /// That rank's split.
        found: Option<usize>,
    },
    /// A peer on another node ([`crate::topology`]), which this rank does not map: a host
    /// call that needs its address (`translate`, `peer_ptr`, `read_peer`) is refused.
    /// Kernels reach it through the off-node engine.
    OffNode {
        /// The peer.
        rank: usize,
    },
    /// The off-node engine failed: an MPI call returned an error (the proxy runs MPI with
    /// `MPI_ERRORS_RETURN`), or a peer's request was malformed. The rank's waiting
    /// kernels were aborted.
    Engine {
        /// The peer the failed operation involved, when there was one.
        peer: Option<usize>,
        /// What failed, with MPI's message.
        what: String,
    },
    /// A kernel named a peer it cannot reach: its table entry is 0 and the world runs no
    /// engine, or the address is outside the symmetric heap (the only memory off-node
    /// peers reach). Nothing was sent; the kernel's later waits returned at once.
    Unreachable {
        /// The peer, when the request named one.
        peer: Option<usize>,
        /// The address in this rank's copy that the request named.
        address: u64,
    },
    /// The world spans several nodes but cannot run the off-node engine here.
    NoEngine(&'static str),
    /// Runtime calls failed while a world's memory, modules and backend were released
    /// (`World::finalize`); everything was released that could be.
    Teardown {
        /// How many calls failed.
        failures: u64,
        /// The last failure, as text.
        last: String,
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
        /// The kernel crate.
        module: &'static str,
        /// The device's architecture name.
        arch: String,
    },
    /// A loaded code object has no kernel of this name (built from an older version of
    /// its crate, or for a different crate).
    KernelNotFound {
        /// The kernel crate.
        module: &'static str,
        /// The kernel.
        kernel: &'static str,
    },
    /// A kernel launched through the module of another kernel crate.
    WrongModule {
        /// The kernel.
        kernel: &'static str,
        /// The crate that declares it.
        kernel_crate: &'static str,
        /// The crate of the module it was launched through.
        module: &'static str,
    },
    /// A wait inside a kernel of this rank outlived the world's `wait_deadline`: the
    /// peer it waited for never came (lost, or it skipped the call). The world is
    /// poisoned: every later call returns this error.
    WaitTimedOut {
        /// The rank it waited for, when the wait knew it.
        peer: Option<usize>,
        /// How long it waited.
        waited: Duration,
        /// The device address of the signal word it waited on.
        signal: u64,
        /// The value it waited for.
        value: u64,
        /// The value it last saw.
        seen: u64,
    },
    /// Two views that must have the same length do not.
    LengthMismatch {
        /// Elements of the destination.
        dst: usize,
        /// Elements of the source.
        src: usize,
    },
    /// A buffer or table of another world (another rank's, in a process of several
    /// ranks) was passed to this world.
    ForeignHandle,
    /// A peer table whose buffer or provider has been dropped was passed to a kernel.
    TableDropped,
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
    /// A call that cannot be recorded into a graph ([`crate::World::capture`]), made while
    /// one is being recorded: only launches (kernels, collectives, RMA) are recorded.
    Capturing {
        /// The call.
        call: &'static str,
    },
    /// Ranks that never joined the bootstrap group: it stopped waiting for them after
    /// `waited`. Every rank that did join gets this error, naming the same ranks.
    NeverJoined {
        /// The ranks that did not arrive, in order.
        ranks: Vec<usize>,
        /// How long this rank waited.
        waited: Duration,
    },
    /// A bootstrap message longer than the group's limit: the length a peer announced is
    /// refused before anything is allocated for it (see
    /// [`bootstrap::ENV_MAX_FRAME_BYTES`](crate::bootstrap::ENV_MAX_FRAME_BYTES)). Every
    /// rank of a UNIX-socket or MPI group gets this error, naming the same rank.
    FrameTooLarge {
        /// The rank whose message it was, when known.
        rank: Option<usize>,
        /// The length it announced.
        bytes: u64,
        /// The limit.
        limit: usize,
    },
    /// `MpiBootstrap::new` found MPI initialised by the application: a world over the
    /// application's MPI comes from `MpiBootstrap::from_communicator`.
    MpiAlreadyInitialised,
    /// `MpiBootstrap::from_communicator` found MPI not initialised, or finalised.
    MpiNotInitialised,
    /// The MPI library provides a lower thread level than symmem needs (a world may be
    /// used, and dropped, on any thread, one call at a time: `MPI_THREAD_SERIALIZED`).
    MpiThreadLevel {
        /// The level symmem needs.
        required: &'static str,
        /// The level the MPI library provides.
        provided: &'static str,
    },
    /// Memory a peer shared cannot back the mapping asked for: it is smaller than
    /// needed, or the peer could still shrink it under the mapping (a CPU-backend memfd
    /// without `F_SEAL_SHRINK`), where touching it would kill this process with `SIGBUS`.
    BadPeerMemory {
        /// Bytes this rank maps.
        needed: usize,
        /// The memory's size (as the peer announced it, or as `fstat` found it).
        size: u64,
        /// What is wrong.
        why: &'static str,
    },
    /// This process has as many file descriptors open as `RLIMIT_NOFILE` allows (the
    /// soft limit was raised to the hard one first, where it was lower).
    FdLimit {
        /// What needed a descriptor.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
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
                pending,
            } => write!(
                f,
                "symmetric heap exhausted: requested {requested} bytes, {available} bytes \
                 free, {pending} bytes dropped and released at the next barrier"
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
            Self::CollectiveMismatch { ranks, ops } => write!(
                f,
                "ranks {ranks:?} made different collective calls than the others \
                 ({ops} calls so far here)"
            ),
            Self::NotAgreed { offset } => write!(
                f,
                "the symmetric allocation at heap offset {offset:#x} has not been through a \
                 barrier yet: call World::barrier after allocating, before reaching a peer's copy"
            ),
            Self::PeerFailed { ranks } => {
                write!(
                    f,
                    "ranks {ranks:?} failed their part of this collective call"
                )
            }
            Self::HeapSizeMismatch {
                rank,
                expected,
                found,
            } => write!(
                f,
                "rank {rank} asked for a heap of {found} bytes, rank 0 for {expected}"
            ),
            Self::NodeSplitMismatch {
                rank,
                expected,
                found,
            } => write!(
                f,
                "rank {rank} splits nodes into {found:?} ranks, rank 0 into {expected:?}"
            ),
            Self::OffNode { rank } => write!(
                f,
                "rank {rank} is on another node: it is not reachable with loads and stores"
            ),
            Self::Engine {
                peer: Some(peer),
                what,
            } => write!(f, "off-node engine, with rank {peer}: {what}"),
            Self::Engine { peer: None, what } => write!(f, "off-node engine: {what}"),
            Self::Unreachable { peer, address } => {
                write!(f, "a kernel's request for address {address:#x}")?;
                if let Some(peer) = peer {
                    write!(f, " on rank {peer}")?;
                }
                write!(
                    f,
                    " cannot be made: the peer is not mapped and no engine reaches it, or the \
                     address is outside the symmetric heap"
                )
            }
            Self::NoEngine(why) => write!(f, "the world spans several nodes, but {why}"),
            Self::Teardown { failures, last } => write!(
                f,
                "{failures} runtime call(s) failed while the world was released (the last: \
                 {last}); the device may hold memory until the process ends"
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
            Self::NoCodeObject { module, arch } => {
                write!(f, "the kernels of {module} have no code object for {arch}")
            }
            Self::KernelNotFound { module, kernel } => write!(
                f,
                "the code object of {module} has no kernel {kernel} (rebuild it, or load the crate that declares it)"
            ),
            Self::WrongModule {
                kernel,
                kernel_crate,
                module,
            } => write!(
                f,
                "kernel {kernel} is declared by {kernel_crate} but launched through the module of {module}"
            ),
            Self::WaitTimedOut {
                peer,
                waited,
                signal,
                value,
                seen,
            } => {
                write!(f, "a device wait gave up after {waited:?}")?;
                if let Some(peer) = peer {
                    write!(f, " waiting for rank {peer}")?;
                }
                write!(
                    f,
                    " (signal {signal:#x}: waited for {value}, saw {seen}); the world is poisoned"
                )
            }
            Self::LengthMismatch { dst, src } => {
                write!(f, "the destination has {dst} elements but the source {src}")
            }
            Self::ForeignHandle => write!(f, "a buffer or table of another world was passed"),
            Self::TableDropped => write!(
                f,
                "a peer table was passed to a kernel after its buffer or provider was dropped"
            ),
            Self::Os { what, source } => write!(f, "{what}: {source}"),
            Self::Bootstrap(msg) => write!(f, "bootstrap: {msg}"),
            Self::Unsupported(what) => write!(f, "unsupported: {what}"),
            Self::Capturing { call } => write!(
                f,
                "{call} while a graph is being captured (only launches are recorded)"
            ),
            Self::NeverJoined { ranks, waited } => {
                write!(
                    f,
                    "ranks {ranks:?} never joined the group (waited {waited:?})"
                )
            }
            Self::FrameTooLarge { rank, bytes, limit } => {
                let from = rank.map_or("a peer".into(), |r| format!("rank {r}"));
                write!(
                    f,
                    "{from} sent a bootstrap message of {bytes} bytes, over the limit of \
                     {limit} bytes"
                )
            }
            Self::MpiAlreadyInitialised => write!(
                f,
                "MPI is already initialised by this program: form the world from one of its \
                 communicators with MpiBootstrap::from_communicator, not MpiBootstrap::new"
            ),
            Self::MpiNotInitialised => write!(
                f,
                "MPI is not initialised (or already finalised): MpiBootstrap::from_communicator \
                 takes a communicator of an MPI the program initialised and has not finalised; \
                 MpiBootstrap::new initialises MPI itself"
            ),
            Self::MpiThreadLevel { required, provided } => write!(
                f,
                "the MPI library provides {provided}; symmem needs {required}"
            ),
            Self::BadPeerMemory { needed, size, why } => write!(
                f,
                "peer memory of {size} bytes cannot back a mapping of {needed} bytes: {why}"
            ),
            Self::FdLimit { what, limit } => write!(
                f,
                "{what}: out of file descriptors (RLIMIT_NOFILE is {limit})"
            ),
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
