//! The one error type of the host API. Every variant says what was asked and what stood
//! in the way, with its values, and the rank that reported it where the world raised it;
//! where the user can remove the obstacle, the message names how (the `Config` field,
//! the environment variable, the call). None is ever a wrong address.

use std::time::Duration;

use symmem_rma::collectives::ReduceOp;

mod messages;
#[cfg(test)]
mod tests;

use messages::{
    built_targets, cuda_version, env_value, from_rank, on_rank, peer_lost, process, waiting_for,
    with_rank,
};

/// Result of every fallible host call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a host call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An alignment larger than every heap base is aligned to, so no offset could give
    /// that alignment on every rank.
    #[error("alignment {align} is larger than the heaps' alignment {max}: ask for at most {max}")]
    AlignmentTooLarge {
        /// The alignment asked for.
        align: usize,
        /// The largest alignment available.
        max: usize,
    },
    /// A request for zero bytes (or zero elements).
    #[error("zero-sized allocation: ask for at least one element")]
    ZeroSize,
    /// An alignment that is not a power of two.
    #[error("alignment {align} is not a power of two: pass a power of two")]
    BadAlignment {
        /// The alignment asked for.
        align: usize,
    },
    /// The heap has no free range that large left now; freeing may help. Dropped
    /// buffers come back to the heap only at a [`World::barrier`](crate::World::barrier)
    /// (once every rank has dropped them), so `pending` bytes will be free after the next
    /// one.
    #[error(
        "rank {rank}: symmetric heap exhausted: requested {requested} bytes, {available} \
         bytes free, {pending} bytes dropped and released at the next barrier; call \
         World::barrier, free buffers, or make the world with a larger Config::heap_bytes"
    )]
    OutOfHeap {
        /// The rank whose allocation failed.
        rank: usize,
        /// Bytes asked for (after rounding).
        requested: usize,
        /// Free bytes in the heap.
        available: usize,
        /// Bytes of buffers this rank has dropped that no barrier has released yet.
        pending: usize,
    },
    /// The request can never fit: it is larger than the whole heap.
    #[error(
        "requested {requested} bytes, larger than the whole heap of {capacity} bytes: raise \
         Config::heap_bytes, or split the data"
    )]
    TooLarge {
        /// Bytes asked for.
        requested: usize,
        /// The heap's capacity.
        capacity: usize,
    },
    /// A pointer that is not inside any live symmetric allocation of this world.
    #[error(
        "address {addr:#x} is not in any symmetric allocation of this world: pass a buffer \
         of its heap (allocate_symmetric, zeros), not a plain device allocation"
    )]
    NotSymmetric {
        /// The address.
        addr: u64,
    },
    /// A rank outside `0..world`.
    #[error("rank {rank} is out of range for a world of {world} (ranks are 0..{world})")]
    RankOutOfRange {
        /// The rank asked for.
        rank: usize,
        /// The world size.
        world: usize,
    },
    /// An element range outside a buffer.
    #[error(
        "elements {start}..{start}+{len} are outside a buffer of {capacity}: keep start + len \
         within the buffer"
    )]
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
    #[error(
        "rank {rank}'s address {addr:#x} is not congruent to the others modulo 16: allocate \
         the shared memory alike on every rank (a multiple of 16 from the same base alignment)"
    )]
    PeerMisaligned {
        /// The rank.
        rank: usize,
        /// Its address.
        addr: u64,
    },
    /// A peer-base table handed to symmem that breaks the table contract.
    #[error(
        "peer-base table entry {rank} ({addr:#x}): {why} (a table has one entry per rank, its \
         own the local pointer, 0 for exactly the off-node peers)"
    )]
    BadPeerTable {
        /// The offending entry (the table's length when the length is wrong).
        rank: usize,
        /// Its address (0 when there is none).
        addr: u64,
        /// What is wrong.
        why: &'static str,
    },
    /// A symmetric buffer freed twice, or one that belongs to another world.
    #[error(
        "no live symmetric allocation at heap offset {offset:#x} (freed twice, or of another \
         world): free each buffer once, in its own world"
    )]
    NotAllocated {
        /// Offset of the buffer in the heap.
        offset: usize,
    },
    /// Ranks made different collective calls (allocation sizes, alignments or order,
    /// provider lengths, launch shapes). Every rank gets this error, naming the same
    /// ranks. Where the heaps differ (allocations), the world refuses every symmetric
    /// operation with it from then on; a call whose parameters alone differed (a
    /// provider's length) fails by itself.
    #[error(
        "ranks {ranks:?} made different collective calls than the others ({ops} calls so far \
         here): every rank must make the same collective calls in the same order"
    )]
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
    #[error(
        "rank {rank}: the symmetric allocation at heap offset {offset:#x} has not been through \
         a barrier yet: call World::barrier after allocating, before reaching a peer's copy"
    )]
    NotAgreed {
        /// The rank that made the operation.
        rank: usize,
        /// Offset of the allocation in the heap.
        offset: usize,
    },
    /// Other ranks failed their part of a collective call (its exchange still completed,
    /// so every rank stays in step), or a device barrier this rank waited in found that a
    /// peer's wait had given up (the peer poisons its arrivals, so no rank goes on with
    /// what it sent after); each of them returns its own error.
    #[error(
        "rank {rank}: ranks {ranks:?} failed their part of this collective call: read the \
         error each of them returned"
    )]
    PeerFailed {
        /// The rank that reports it.
        rank: usize,
        /// The ranks that failed.
        ranks: Vec<usize>,
    },
    /// Ranks asked for heaps of different sizes.
    #[error(
        "rank {rank} asked for a heap of {found} bytes, rank 0 for {expected}: use the same \
         Config::heap_bytes on every rank"
    )]
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
    #[error(
        "rank {rank} splits nodes into {found:?} ranks, rank 0 into {expected:?}: set \
         Config::ranks_per_node (or SYMMEM_RANKS_PER_NODE) alike on every rank"
    )]
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
    #[error(
        "rank {rank} is on another node: it is not reachable with loads and stores; reach it \
         from a kernel (through the off-node engine) or with World::put and World::get"
    )]
    OffNode {
        /// The peer.
        rank: usize,
    },
    /// The off-node engine failed: an MPI call returned an error (the proxy runs MPI with
    /// `MPI_ERRORS_RETURN`), or a peer's request was malformed. The rank's waiting
    /// kernels were aborted.
    #[error("off-node engine{}: {what}", with_rank(*.peer))]
    Engine {
        /// The peer the failed operation involved, when there was one.
        peer: Option<usize>,
        /// What failed, with MPI's message.
        what: String,
    },
    /// A kernel named a peer it cannot reach: its table entry is 0 and the world runs no
    /// engine, or the address is outside the symmetric heap (the only memory off-node
    /// peers reach). Nothing was sent; the kernel's later waits returned at once.
    #[error(
        "rank {rank}: a kernel's request for address {address:#x}{} cannot be made: the peer \
         is not mapped and no engine reaches it, or the address is outside the symmetric \
         heap; reach off-node peers in symmetric heap buffers (not a Rendezvous)",
        on_rank(*.peer)
    )]
    Unreachable {
        /// The rank whose kernel made the request.
        rank: usize,
        /// The peer, when the request named one.
        peer: Option<usize>,
        /// The address in this rank's copy that the request named.
        address: u64,
    },
    /// The world spans several nodes but cannot run the off-node engine here.
    #[error("the world spans several nodes, but {0}")]
    NoEngine(&'static str),
    /// Runtime calls failed while a world's memory, modules and backend were released
    /// (`World::finalize`); everything was released that could be.
    #[error(
        "rank {rank}: {failures} runtime call(s) failed while the world was released (the \
         last: {last}); the device may hold memory until the process ends"
    )]
    Teardown {
        /// The rank whose world was released.
        rank: usize,
        /// How many calls failed.
        failures: u64,
        /// The last failure, as text.
        last: String,
    },
    /// A peer left (returned, exited, crashed or was killed) while this rank needed it,
    /// or did not answer in time.
    #[error("{}", peer_lost(*.rank, *.waited))]
    PeerLost {
        /// The rank that was lost, when known.
        rank: Option<usize>,
        /// How long this rank waited.
        waited: Duration,
    },
    /// A peer did not reach a collective call (a [`crate::World::collectively`] step, as
    /// every collective is) within the world's wait deadline, where ranks launch such a
    /// call's kernels together (threads of this process sharing a GPU).
    #[error(
        "rank {rank}: rank {peer} did not reach this collective call within {waited:?}: \
         check that every rank makes the same collective calls, or raise \
         Config::wait_deadline if a peer is legitimately that slow"
    )]
    NotReached {
        /// The rank that waited.
        rank: usize,
        /// The first rank that had not reached the call.
        peer: usize,
        /// How long this rank waited.
        waited: Duration,
    },
    /// More ranks of this process on one GPU than its context has hardware queues: ranks
    /// whose kernels wait for each other on one queue would deadlock.
    #[error(
        "device {device}: {ranks} ranks of this process would share its {queues} hardware \
         queues ({variable}), and ranks that wait for each other on one queue deadlock: set \
         {variable} to at least {ranks} before the process's first GPU call (symmem sets it \
         when it is unset and makes the context itself), or run the ranks as processes"
    )]
    HardwareQueues {
        /// The device ordinal.
        device: usize,
        /// Ranks of this process on the device, this one included.
        ranks: usize,
        /// Hardware queues its context has.
        queues: usize,
        /// The environment variable that sets them.
        variable: &'static str,
    },
    /// A backend with no usable device on this machine.
    #[error(
        "{backend}: no device found: use the CPU backend (backend::cpu::Cpu), or check the \
         driver"
    )]
    NoDevice {
        /// The backend.
        backend: &'static str,
    },
    /// NVSHMEM's host library (for the NVSHMEM transport) cannot be loaded, or lacks an
    /// entry point symmem calls.
    #[error(
        "cannot use NVSHMEM ({library}): {why}; install NVSHMEM 3.2 or later (a release, or \
         the nvidia-nvshmem-cu12/cu13 wheel) and add its lib folder to LD_LIBRARY_PATH, or \
         name the library in SYMMEM_NVSHMEM_LIB"
    )]
    NvshmemUnavailable {
        /// The library (a path or name), or which rank's library.
        library: String,
        /// What went wrong (the loader's message).
        why: String,
    },
    /// An NVSHMEM host call failed.
    #[error(
        "NVSHMEM's {call} failed (status {status}): run with NVSHMEM_DEBUG=INFO to see why \
         (for PEs on one machine: NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo; on one GPU, MPS)"
    )]
    NvshmemFailed {
        /// The call.
        call: &'static str,
        /// What it returned.
        status: i32,
    },
    /// The heap cannot be registered with NVSHMEM: NVSHMEM maps a registered buffer in
    /// whole units of its heap granularity, and would map past the end of this one.
    #[error(
        "the symmetric heap ({heap} bytes) is not a multiple of NVSHMEM's heap granularity \
         ({granularity} bytes, NVSHMEM_CUMEM_GRANULARITY): make Config::heap_bytes a multiple \
         of it, or set NVSHMEM_CUMEM_GRANULARITY on every rank to a power of two of at least \
         2 MiB that divides the heap"
    )]
    NvshmemHeapGranularity {
        /// The heap's length.
        heap: usize,
        /// NVSHMEM's granularity.
        granularity: usize,
    },
    /// One of symmem's one-node collective kernels (one-shot, two-shot, tables, staged or
    /// barrier-free all-reduce, reduce-scatter) was launched in a world across nodes,
    /// whose build of symmem's kernels leaves their bodies out
    /// (`symmem_rma::ONE_NODE_KERNELS`); nothing was computed.
    #[error(
        "rank {rank} launched a one-node collective kernel in a world across nodes, whose \
         kernels leave it out: call the collective through Collectives, which routes it \
         across nodes (the gathered kernel)"
    )]
    OneNodeKernel {
        /// The rank that launched it.
        rank: usize,
    },
    /// Ranks chose different off-node transports ([`Config::off_node`](crate::Config::off_node)).
    #[error(
        "rank {rank} chose off-node transport {found}, rank 0 chose {expected}: set \
         Config::off_node (or SYMMEM_OFF_NODE) alike on every rank"
    )]
    OffNodeMismatch {
        /// The first rank whose choice differs from rank 0's.
        rank: usize,
        /// Rank 0's choice.
        expected: &'static str,
        /// That rank's.
        found: &'static str,
    },
    /// A backend whose runtime library cannot be loaded.
    #[error(
        "cannot load {library}: install the GPU driver (or ROCm), or add its folder to \
         LD_LIBRARY_PATH"
    )]
    LibraryMissing {
        /// The library looked for.
        library: &'static str,
    },
    /// A runtime library that lacks an entry point symmem calls (older or newer than
    /// the versions symmem supports).
    #[error(
        "{library} has no {symbol}: install a runtime that provides it (HIP 5.x or later \
         for libamdhip64)"
    )]
    MissingSymbol {
        /// The library.
        library: &'static str,
        /// The entry point (or, where there are alternatives, all of them).
        symbol: &'static str,
    },
    /// A device-runtime call failed.
    #[error("{call} failed: {code} ({message})")]
    Driver {
        /// The call.
        call: &'static str,
        /// Its result code.
        code: i64,
        /// The runtime's description of the code.
        message: String,
    },
    /// This rank's device lacks a capability the backend needs.
    #[error(
        "device {device} has no {feature}, which this backend needs: use a GPU and driver \
         that provide it"
    )]
    DeviceLacks {
        /// The device's ordinal.
        device: usize,
        /// The capability.
        feature: &'static str,
    },
    /// A cudarc stream the CUDA backend cannot run a rank on
    /// (`Cuda::from_cudarc_stream`): its context is not the device's primary context,
    /// whose address space symmem's memory lives in, or it is a default stream, shared
    /// with every user of the context (or a different one on each thread) and not
    /// capturable into a graph.
    #[error(
        "cannot run symmem on this cudarc stream of device {device}: {why}; give each rank a          stream of its own in the primary context: CudaContext::new({device})?.new_stream()?"
    )]
    ForeignStream {
        /// The stream's device ordinal.
        device: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// This rank's device cannot reach the memory of a peer's device (no peer-to-peer
    /// path between the two GPUs), so mapping that peer's memory here would fault.
    #[error(
        "device {device} has no peer-to-peer access to device {peer_device}: run these ranks \
         on GPUs with a peer-to-peer path (nvidia-smi topo -p2p p), or on one GPU"
    )]
    PeerUnreachable {
        /// This rank's device ordinal.
        device: usize,
        /// The ordinal of the device that holds the peer's memory.
        peer_device: usize,
    },
    /// No code object of a kernel crate for this device's architecture: the program was
    /// built for other GPUs (by default, symmem-build builds for the build machine's GPUs,
    /// and none on a machine without one).
    #[error(
        "the kernels of {module} have no code object for {device} ({arch}); this program \
         was built with {}: rebuild it with SYMMEM_GPU_TARGETS={arch} (or \
         SYMMEM_GPU_TARGETS=default for every default target), or add {arch} to the build \
         script's symmem_build::KernelCrate::targets",
        built_targets(.built)
    )]
    NoCodeObject {
        /// The kernel crate.
        module: &'static str,
        /// The device's name.
        device: String,
        /// The device's architecture name.
        arch: String,
        /// The targets the program has code objects for.
        built: Vec<&'static str>,
    },
    /// An embedded code object that the backend cannot use: unreadable, or not what
    /// this version of symmem builds.
    #[error(
        "the {target} code object of {module} cannot be used: {why}; rebuild the program \
         that embeds it with this version of symmem-build (cargo clean, then cargo build)"
    )]
    BadCodeObject {
        /// The kernel crate.
        module: &'static str,
        /// The target it was built for.
        target: String,
        /// What is wrong.
        why: String,
    },
    /// A loaded code object has no kernel of this name (built from an older version of
    /// its crate, or for a different crate).
    #[error(
        "the code object of {module} has no kernel {kernel}: rebuild it, or load the crate \
         that declares it"
    )]
    KernelNotFound {
        /// The kernel crate.
        module: &'static str,
        /// The kernel.
        kernel: &'static str,
    },
    /// A kernel launched through the module of another kernel crate.
    #[error(
        "kernel {kernel} is declared by {kernel_crate} but launched through the module of \
         {module}: launch it through world.load() of {kernel_crate}'s code objects"
    )]
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
    #[error(
        "a device wait gave up after {waited:?}{} (signal {signal:#x}: waited for {value}, saw \
         {seen}); the world is poisoned: check that every rank makes the same calls, or \
         raise Config::wait_deadline if a peer is legitimately that slow",
        waiting_for(*.peer)
    )]
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
    /// A launch whose arguments do not match its kernel's parameters, or a kernel with
    /// more parameters than a backend passes. [`crate::Module::launch`] checks arguments
    /// against the kernel's signature at compile time; only a launch below it can be
    /// refused so.
    #[error(
        "kernel {kernel} launched with {args} argument(s) for {params} parameter(s) (a \
         backend passes at most {max}): launch it through Module::launch, which checks the \
         arguments against the kernel's signature"
    )]
    KernelArity {
        /// The kernel.
        kernel: &'static str,
        /// The arguments passed.
        args: usize,
        /// The kernel's parameters.
        params: usize,
        /// The most parameters a backend passes.
        max: usize,
    },
    /// A launch shape with no block or no thread.
    #[error(
        "a launch shape of {blocks} block(s) of {threads} thread(s) is empty: give at least \
         one block of one thread (Backend::grid_for_bytes picks one for a grid-stride kernel)"
    )]
    EmptyGrid {
        /// Blocks asked for.
        blocks: u32,
        /// Threads per block asked for.
        threads: u32,
    },
    /// A collectives handle with more blocks than
    /// [`collectives::MAX_BLOCKS`](crate::collectives::MAX_BLOCKS).
    #[error(
        "rank {rank}: a collectives grid of {blocks} blocks, more than collectives::MAX_BLOCKS \
         ({max}): pass at most {max} blocks to Collectives::with_grid"
    )]
    TooManyBlocks {
        /// The rank that made the handle.
        rank: usize,
        /// Blocks asked for.
        blocks: u32,
        /// The limit.
        max: u32,
    },
    /// A CPU-backend launch of more threads than it runs (one OS thread each).
    #[error(
        "a CPU-backend launch of {threads} threads, more than \
         backend::cpu::threads::MAX_THREADS ({max}): launch fewer threads (the CPU \
         backend's grid_for_bytes gives a grid-stride shape within the limit)"
    )]
    TooManyThreads {
        /// Threads asked for (blocks times threads per block).
        threads: u64,
        /// The limit.
        max: u64,
    },
    /// An all-reduce whose destination and source overlap without being the same memory:
    /// the result of some elements would land on sources of others.
    #[error(
        "rank {rank}: an all-reduce of {bytes} bytes whose dst ({dst:#x}) and src ({src:#x}) \
         partly overlap: reduce into a second buffer, or pass the same one for both (in \
         place: Collectives::all_reduce_in_place)"
    )]
    OverlappingBuffers {
        /// The rank that made the call.
        rank: usize,
        /// The destination's address.
        dst: u64,
        /// The source's address.
        src: u64,
        /// Bytes of each.
        bytes: usize,
    },
    /// [`Algorithm::Lamport`](crate::collectives::Algorithm::Lamport) asked for an
    /// all-reduce its barrier-free kernel cannot serve.
    #[error(
        "rank {rank}: a barrier-free (Algorithm::Lamport) all-reduce ({op:?}) of {bytes} \
         bytes of {element} cannot be served: {why}"
    )]
    LamportUnavailable {
        /// The rank that made the call.
        rank: usize,
        /// The element type.
        element: &'static str,
        /// The reduction.
        op: ReduceOp,
        /// Bytes per rank.
        bytes: usize,
        /// What stands in the way.
        why: LamportRefusal,
    },
    /// Two views that must have the same length do not.
    #[error(
        "the destination has {dst} elements but the source {src}: slice both to the same \
         length"
    )]
    LengthMismatch {
        /// Elements of the destination.
        dst: usize,
        /// Elements of the source.
        src: usize,
    },
    /// A buffer, table or graph of another world (another rank's, in a process of
    /// several ranks) was passed to this world.
    #[error(
        "a buffer, table or graph of another world (or another rank) was passed: use each \
         rank's own handles in its own world"
    )]
    ForeignHandle,
    /// A peer table whose buffer or provider has been dropped was passed to a kernel.
    #[error(
        "a peer table was passed to a kernel after its buffer or provider was dropped: keep \
         it alive while its table is used"
    )]
    TableDropped,
    /// A mapping of a peer's memory asked to be exported again: only the rank that owns
    /// memory exports it.
    #[error("{what} cannot be exported: export the memory on the rank that owns it")]
    NotExportable {
        /// What was to be exported.
        what: &'static str,
    },
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A message from a peer (a bootstrap message, an exported handle, an agreement)
    /// that is malformed or out of sequence: the peer is not a symmem rank of the same
    /// version, or the message was corrupted.
    #[error(
        "{} sent a malformed {what}: start every rank from the same build of symmem",
        from_rank(*.from)
    )]
    BadMessage {
        /// The rank that sent it, when known (the rank the message claims, where it
        /// names one).
        from: Option<usize>,
        /// What the message was, and what is wrong with it.
        what: &'static str,
    },
    /// An environment variable symmem reads holds a value it cannot use, or one that
    /// [`bootstrap::unix::spawn`](crate::bootstrap::unix::spawn) sets for its ranks is
    /// missing (see `docs/environment.md`).
    #[error("environment variable {name} {}: {expected}", env_value(.value.as_deref()))]
    BadEnv {
        /// The variable.
        name: &'static str,
        /// Its value (`None`: not set).
        value: Option<String>,
        /// What it must hold, and how to set it.
        expected: &'static str,
    },
    /// A [`Config`](crate::Config) field with a value no world can use.
    #[error("Config::{field}: {why}")]
    BadConfig {
        /// The field.
        field: &'static str,
        /// What is wrong, and what to set instead.
        why: &'static str,
    },
    /// A call that cannot be recorded into a graph ([`crate::World::capture`]), made while
    /// one is being recorded: only launches are recorded.
    #[error(
        "{call} while a graph is being captured (only launches are recorded): make it before \
         or after World::capture"
    )]
    Capturing {
        /// The call.
        call: &'static str,
    },
    /// A call that needs a recording in progress, made while none is
    /// ([`Backend::end_capture`](crate::backend::Backend::end_capture) without a
    /// `begin_capture`).
    #[error(
        "{call} while no graph is being captured: call Backend::begin_capture first (or use \
         World::capture)"
    )]
    NotCapturing {
        /// The call.
        call: &'static str,
    },
    /// A lock a thread panicked while holding: what it guards may be half-updated, so
    /// the rank does not use it again.
    #[error(
        "{what} is unusable: a thread panicked while it held it; drop this world and make a \
         new one"
    )]
    LockPoisoned {
        /// What the lock guards.
        what: &'static str,
    },
    /// The process at the other end of a group's socket is no member of the group: it
    /// runs as another user, or does not hold the group's secret
    /// ([`bootstrap::auth`](crate::bootstrap::auth)). This rank sent it nothing but its
    /// half of the handshake (no contribution, no file descriptor). On a spoke, the hub's
    /// name is held by a stranger (a squatter); the real hub cannot bind it and fails too.
    #[error(
        "{what} is no member of the group ({}): {why}; it got no data and no descriptor. Start every rank with the same launcher (bootstrap::unix::spawn, \
         or mpirun) and, with UnixBootstrap::connect, the same secret; find the process that \
         holds the name (ss -xlp) if a stranger took it",
        process(*.pid, *.uid)
    )]
    StrangerRefused {
        /// Who it was meant to be ("the process at the hub's socket").
        what: &'static str,
        /// Its process id, where the kernel gave its credentials.
        pid: Option<u32>,
        /// Its user id, likewise.
        uid: Option<u32>,
        /// Why it is no member.
        why: &'static str,
    },
    /// [`World::finalize`](crate::World::finalize) while other handles of the world are
    /// alive (clones of the `World`, its buffers, collectives, modules, graphs or
    /// providers): the world leaves only with its last handle, so it is still alive.
    #[error(
        "rank {rank}: World::finalize while {others} other handle(s) of the world are alive \
         (clones, buffers, collectives, modules, graphs, providers): drop them first; the \
         world leaves when its last handle is dropped"
    )]
    WorldInUse {
        /// This rank.
        rank: usize,
        /// How many other handles hold the world.
        others: usize,
    },
    /// The CUDA driver is older than what a call needs (versions as `cuDriverGetVersion`
    /// gives them: 12040 is CUDA 12.4).
    #[error(
        "the CUDA driver is version {} ({found}); {what} needs {} ({needed}) or newer: \
         update the NVIDIA driver",
        cuda_version(*.found),
        cuda_version(*.needed)
    )]
    DriverTooOld {
        /// The driver's version.
        found: i32,
        /// The version needed.
        needed: i32,
        /// What needs it.
        what: &'static str,
    },
    /// Ranks that never joined the bootstrap group: it stopped waiting for them after
    /// `waited`. Every rank that did join gets this error, naming the same ranks.
    #[error(
        "ranks {ranks:?} never joined the group (waited {waited:?}): start every rank (the \
         same mpirun -np, the same spawn count), or raise Config::timeout"
    )]
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
    #[error(
        "{} sent a bootstrap message of {bytes} bytes, over the limit of {limit} bytes: \
         raise SYMMEM_MAX_FRAME_BYTES alike on every rank",
        from_rank(*.rank)
    )]
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
    #[error(
        "MPI is already initialised by this program: form the world from one of its \
         communicators with MpiBootstrap::from_communicator, not MpiBootstrap::new"
    )]
    MpiAlreadyInitialised,
    /// `MpiBootstrap::from_communicator` found MPI not initialised, or finalised.
    #[error(
        "MPI is not initialised (or already finalised): MpiBootstrap::from_communicator \
         takes a communicator of an MPI the program initialised and has not finalised; \
         MpiBootstrap::new initialises MPI itself"
    )]
    MpiNotInitialised,
    /// The MPI library provides a lower thread level than symmem needs (a world may be
    /// used, and dropped, on any thread, one call at a time: `MPI_THREAD_SERIALIZED`).
    #[error(
        "the MPI library provides {provided}; symmem needs {required}: use an MPI built with \
         thread support (a program that initialises MPI itself asks for \
         rsmpi::Threading::Multiple)"
    )]
    MpiThreadLevel {
        /// The level symmem needs.
        required: &'static str,
        /// The level the MPI library provides.
        provided: &'static str,
    },
    /// Memory the application asked to share ([`crate::World::register`]) cannot be
    /// shared with every rank: it is not one allocation of this rank's device, or a
    /// peer in another process cannot map that kind of memory.
    #[error("{bytes} bytes at {addr:#x} cannot be shared with the other ranks: {why}")]
    NotShareable {
        /// Where the range starts (in the process that owns it).
        addr: u64,
        /// Its length in bytes.
        bytes: usize,
        /// Why, and what to do instead.
        why: String,
    },
    /// Memory a peer shared cannot back the mapping asked for: it is smaller than
    /// needed, or the peer could still shrink it under the mapping (a CPU-backend memfd
    /// without `F_SEAL_SHRINK`), where touching it would kill this process with `SIGBUS`.
    #[error(
        "peer memory of {size} bytes cannot back a mapping of {needed} bytes: {why}; the \
         peer is not a symmem rank of the same version: start every rank from the same build"
    )]
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
    #[error(
        "{what}: out of file descriptors (RLIMIT_NOFILE is {limit}): raise the hard limit \
         (ulimit -Hn), or make fewer, larger allocations"
    )]
    FdLimit {
        /// What needed a descriptor.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
}

/// Why [`Error::LamportUnavailable`]: what keeps the barrier-free all-reduce from a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LamportRefusal {
    /// No barrier-free kernel for this element type and reduction.
    #[error(
        "there is no barrier-free kernel for this element type and reduction; use \
         Algorithm::Auto (or OneShot, TwoShot)"
    )]
    NoKernel,
    /// More bytes than the handle's workspace holds per rank.
    #[error(
        "the handle's workspace holds {capacity} bytes per rank; make the handle with \
         Collectives::with_lamport_capacity and a larger capacity, or use Algorithm::Auto"
    )]
    OverCapacity {
        /// The handle's capacity
        /// ([`Collectives::lamport_capacity`](crate::collectives::Collectives::lamport_capacity)).
        capacity: usize,
    },
    /// The world spans several nodes; the kernel stores into every peer's workspace
    /// directly, so it runs on one node only.
    #[error(
        "the world spans {nodes} nodes and the barrier-free kernel stores into every peer's \
         memory directly; use Algorithm::Auto (hierarchical across nodes)"
    )]
    SeveralNodes {
        /// The world's nodes.
        nodes: usize,
    },
}

impl Error {
    /// True for the errors that say this machine has no usable device or driver for a
    /// backend ([`Error::LibraryMissing`], [`Error::NoDevice`]): what a program that falls
    /// back to the CPU backend, or a GPU test that skips, should accept. Any other error
    /// of a backend's initialisation is a failure on a machine that has the device.
    pub fn is_device_missing(&self) -> bool {
        matches!(self, Self::LibraryMissing { .. } | Self::NoDevice { .. })
    }

    /// An `Os` error from a failed call's `errno`, for `map_err`.
    pub(crate) fn errno(what: &'static str) -> impl Fn(rustix::io::Errno) -> Self {
        move |errno| Self::Os {
            what,
            source: errno.into(),
        }
    }
}
