//! The one error type of the host API. Every variant says what was asked and what stood
//! in the way, with its values, and the rank that reported it where the world raised it;
//! where the user can remove the obstacle, the message names how (the `Config` field,
//! the environment variable, the call). None is ever a wrong address.

use std::time::Duration;

use symmem_rma::collectives::ReduceOp;

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

/// `, with rank N` where there is a rank.
fn with_rank(rank: Option<usize>) -> String {
    rank.map_or_else(String::new, |r| format!(", with rank {r}"))
}

/// ` on rank N` where there is a rank.
fn on_rank(rank: Option<usize>) -> String {
    rank.map_or_else(String::new, |r| format!(" on rank {r}"))
}

/// ` waiting for rank N` where there is a rank.
fn waiting_for(rank: Option<usize>) -> String {
    rank.map_or_else(String::new, |r| format!(" waiting for rank {r}"))
}

/// `rank N` or `a peer`.
fn from_rank(rank: Option<usize>) -> String {
    rank.map_or_else(|| "a peer".to_owned(), |r| format!("rank {r}"))
}

/// `pid P uid U`, or that the kernel did not say.
fn process(pid: Option<u32>, uid: Option<u32>) -> String {
    match (pid, uid) {
        (Some(pid), Some(uid)) => format!("pid {pid} uid {uid}"),
        _ => "its credentials unreadable".to_owned(),
    }
}

/// `12.4` for the driver version 12040.
fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// The targets a program was built with, or that it has none.
fn built_targets(built: &[&str]) -> String {
    if built.is_empty() {
        "no GPU target (built on a machine without a GPU)".to_owned()
    } else {
        format!("the targets {}", built.join(", "))
    }
}

/// `is not set` or `is "VALUE"`.
fn env_value(value: Option<&str>) -> String {
    value.map_or_else(|| "is not set".to_owned(), |v| format!("is {v:?}"))
}

/// [`Error::PeerLost`]'s message.
fn peer_lost(rank: Option<usize>, waited: Duration) -> String {
    match rank {
        Some(rank) => format!(
            "rank {rank} left or was lost while this rank needed it (waited {waited:?}): find \
             why it stopped (its own error or log, or a return before the calls its peers \
             made); if it only started slowly, raise Config::timeout"
        ),
        None => format!(
            "a peer was lost or did not answer within {waited:?}: find why it stopped (its \
             own error or log); if it only started slowly, raise Config::timeout"
        ),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One test per message: it names what happened, with its values, and what the user
    /// can do about it (the `Config` field, the environment variable, the call). Each
    /// fails if its message stops naming the fix.
    macro_rules! names_the_fix {
        ($($test:ident: $error:expr => [$($fix:expr),+ $(,)?];)+) => {$(
            #[test]
            fn $test() {
                let error: Error = $error;
                let message = error.to_string();
                $(assert!(
                    message.contains($fix),
                    "{error:?}: {message:?} does not name {:?}",
                    $fix
                );)+
                // Rust's convention for error messages: no trailing period.
                assert!(!message.ends_with('.'), "{message:?}");
            }
        )+};
    }

    names_the_fix! {
        alignment_too_large_names_the_largest: Error::AlignmentTooLarge { align: 1 << 30, max: 4096 }
            => ["alignment 1073741824", "ask for at most 4096"];
        zero_size_names_the_minimum: Error::ZeroSize => ["ask for at least one element"];
        bad_alignment_names_a_power_of_two: Error::BadAlignment { align: 3 }
            => ["alignment 3", "pass a power of two"];
        out_of_heap_names_heap_bytes_and_the_barrier: Error::OutOfHeap {
            rank: 2,
            requested: 4096,
            available: 256,
            pending: 1024,
        } => ["rank 2: ", "4096", "256", "1024", "Config::heap_bytes", "call World::barrier"];
        too_large_names_heap_bytes: Error::TooLarge { requested: 9, capacity: 8 }
            => ["requested 9 bytes", "of 8 bytes", "raise Config::heap_bytes"];
        not_symmetric_names_the_heap: Error::NotSymmetric { addr: 0x1000 }
            => ["0x1000", "a buffer of its heap (allocate_symmetric, zeros)"];
        rank_out_of_range_names_the_ranks: Error::RankOutOfRange { rank: 4, world: 4 }
            => ["rank 4", "ranks are 0..4"];
        out_of_bounds_names_the_range: Error::OutOfBounds { start: 2, len: 8, capacity: 4 }
            => ["2..2+8", "buffer of 4", "keep start + len within the buffer"];
        peer_misaligned_names_the_alignment: Error::PeerMisaligned { rank: 1, addr: 0x18 }
            => ["rank 1's address 0x18", "alike on every rank"];
        bad_peer_table_names_the_contract: Error::BadPeerTable { rank: 2, addr: 0, why: "null entry" }
            => ["entry 2", "null entry", "one entry per rank"];
        not_allocated_names_the_double_free: Error::NotAllocated { offset: 0x100 }
            => ["0x100", "free each buffer once"];
        collective_mismatch_names_the_rule: Error::CollectiveMismatch { ranks: vec![3], ops: 7 }
            => ["ranks [3]", "the same collective calls in the same order"];
        not_agreed_names_the_barrier: Error::NotAgreed { rank: 1, offset: 0x200 }
            => ["rank 1: ", "0x200", "call World::barrier after allocating"];
        peer_failed_names_the_ranks: Error::PeerFailed { rank: 0, ranks: vec![1, 2] }
            => ["rank 0: ", "ranks [1, 2]", "read the error each of them returned"];
        heap_size_mismatch_names_heap_bytes: Error::HeapSizeMismatch { rank: 1, expected: 8, found: 16 }
            => ["rank 1", "16 bytes", "the same Config::heap_bytes on every rank"];
        node_split_mismatch_names_the_setting: Error::NodeSplitMismatch {
            rank: 1,
            expected: None,
            found: Some(2),
        } => ["Config::ranks_per_node", "SYMMEM_RANKS_PER_NODE", "alike on every rank"];
        off_node_names_the_ways_there: Error::OffNode { rank: 3 }
            => ["rank 3", "from a kernel", "World::put and World::get"];
        engine_names_the_peer: Error::Engine { peer: Some(3), what: "MPI_Put: error".into() }
            => ["with rank 3", "MPI_Put: error"];
        unreachable_names_heap_buffers: Error::Unreachable { rank: 0, peer: Some(1), address: 0x40 }
            => ["rank 0: ", "0x40 on rank 1", "symmetric heap buffers (not a Rendezvous)"];
        teardown_names_the_rank: Error::Teardown { rank: 1, failures: 2, last: "cuMemFree".into() }
            => ["rank 1: ", "2 runtime call(s)", "cuMemFree"];
        peer_lost_names_the_timeout: Error::PeerLost { rank: Some(2), waited: Duration::from_secs(1) }
            => ["rank 2 left or was lost", "raise Config::timeout"];
        peer_lost_unknown_names_the_timeout: Error::PeerLost { rank: None, waited: Duration::from_secs(1) }
            => ["did not answer within 1s", "raise Config::timeout"];
        not_reached_names_the_peer_and_the_deadline: Error::NotReached { rank: 0, peer: 3, waited: Duration::from_secs(600) }
            => ["rank 0: rank 3 did not reach this collective call within 600s", "the same collective calls", "raise Config::wait_deadline"];
        hardware_queues_names_the_variable: Error::HardwareQueues { device: 0, ranks: 9, queues: 8, variable: "CUDA_DEVICE_MAX_CONNECTIONS" }
            => ["device 0: 9 ranks", "8 hardware queues", "set CUDA_DEVICE_MAX_CONNECTIONS to at least 9", "run the ranks as processes"];
        no_device_names_the_cpu_backend: Error::NoDevice { backend: "cuda" }
            => ["cuda: no device", "use the CPU backend (backend::cpu::Cpu)"];
        nvshmem_unavailable_names_the_library: Error::NvshmemUnavailable { library: "libnvshmem_host.so.3".into(), why: "not found".into() }
            => ["libnvshmem_host.so.3", "not found", "LD_LIBRARY_PATH", "SYMMEM_NVSHMEM_LIB"];
        nvshmem_failed_names_the_call: Error::NvshmemFailed { call: "nvshmemx_hostlib_init_attr", status: 7 }
            => ["nvshmemx_hostlib_init_attr", "status 7", "NVSHMEM_DEBUG=INFO"];
        one_node_kernel_names_the_way: Error::OneNodeKernel { rank: 1 }
            => ["rank 1 launched a one-node collective kernel", "through Collectives"];
        nvshmem_granularity_names_both_ways_out: Error::NvshmemHeapGranularity { heap: 64 << 20, granularity: 512 << 20 }
            => ["67108864 bytes", "536870912 bytes", "Config::heap_bytes", "NVSHMEM_CUMEM_GRANULARITY"];
        off_node_mismatch_names_the_rank: Error::OffNodeMismatch { rank: 2, expected: "bootstrap", found: "nvshmem" }
            => ["rank 2 chose off-node transport nvshmem", "rank 0 chose bootstrap", "SYMMEM_OFF_NODE"];
        library_missing_names_the_library_path: Error::LibraryMissing { library: "libcuda.so" }
            => ["libcuda.so", "LD_LIBRARY_PATH"];
        missing_symbol_names_the_runtime: Error::MissingSymbol { library: "libamdhip64", symbol: "hipMemcpy" }
            => ["libamdhip64 has no hipMemcpy", "install a runtime that provides it"];
        device_lacks_names_the_capability: Error::DeviceLacks { device: 1, feature: "VMM" }
            => ["device 1 has no VMM", "use a GPU and driver that provide it"];
        foreign_stream_names_the_primary_context: Error::ForeignStream {
            device: 1,
            why: "it is a default stream (legacy or per-thread)",
        } => ["device 1", "default stream", "CudaContext::new(1)?.new_stream()?"];
        peer_unreachable_names_p2p: Error::PeerUnreachable { device: 0, peer_device: 1 }
            => ["device 0", "device 1", "nvidia-smi topo -p2p p"];
        no_code_object_names_the_targets: Error::NoCodeObject {
            module: "my_kernels",
            device: "AMD Instinct MI210".into(),
            arch: "gfx90a".into(),
            built: vec!["sm_90"],
        } => [
            "my_kernels",
            "AMD Instinct MI210 (gfx90a)",
            "built with the targets sm_90",
            "SYMMEM_GPU_TARGETS=gfx90a",
            "SYMMEM_GPU_TARGETS=default",
            "symmem_build::KernelCrate::targets",
        ];
        no_code_object_built_on_a_cpu_machine: Error::NoCodeObject {
            module: "symmem_kernels",
            device: "NVIDIA H100".into(),
            arch: "sm_90".into(),
            built: vec![],
        } => ["no GPU target (built on a machine without a GPU)", "SYMMEM_GPU_TARGETS=sm_90"];
        bad_code_object_names_the_rebuild: Error::BadCodeObject {
            module: "my_kernels",
            target: "sm_90".into(),
            why: "it is unreadable".into(),
        } => ["sm_90 code object of my_kernels", "it is unreadable", "cargo clean"];
        kernel_not_found_names_the_rebuild: Error::KernelNotFound { module: "k", kernel: "f" }
            => ["no kernel f", "rebuild it"];
        wrong_module_names_the_load: Error::WrongModule { kernel: "f", kernel_crate: "a", module: "b" }
            => ["declared by a", "world.load() of a's code objects"];
        wait_timed_out_names_the_deadline: Error::WaitTimedOut {
            peer: Some(2),
            waited: Duration::from_secs(600),
            signal: 0x80,
            value: 1,
            seen: 0,
        } => ["waiting for rank 2", "the world is poisoned", "raise Config::wait_deadline"];
        kernel_arity_names_the_checked_launch: Error::KernelArity { kernel: "f", args: 17, params: 17, max: 16 }
            => ["17 argument(s)", "at most 16", "through Module::launch"];
        empty_grid_names_the_minimum: Error::EmptyGrid { blocks: 0, threads: 32 }
            => ["0 block(s)", "at least one block of one thread"];
        too_many_blocks_names_the_limit: Error::TooManyBlocks { rank: 1, blocks: 2000, max: 1024 }
            => ["rank 1: ", "2000 blocks", "collectives::MAX_BLOCKS", "at most 1024 blocks to Collectives::with_grid"];
        too_many_threads_names_the_limit: Error::TooManyThreads { threads: 4096, max: 1024 }
            => ["4096 threads", "MAX_THREADS (1024)", "grid_for_bytes"];
        overlapping_buffers_names_a_second_buffer: Error::OverlappingBuffers {
            rank: 1,
            dst: 0x100,
            src: 0x110,
            bytes: 64,
        } => ["rank 1: ", "64 bytes", "reduce into a second buffer", "all_reduce_in_place"];
        lamport_without_a_kernel_names_auto: Error::LamportUnavailable {
            rank: 0,
            element: "i32",
            op: ReduceOp::Max,
            bytes: 16,
            why: LamportRefusal::NoKernel,
        } => ["(Max) of 16 bytes of i32", "use Algorithm::Auto"];
        lamport_over_capacity_names_the_capacity: Error::LamportUnavailable {
            rank: 0,
            element: "f32",
            op: ReduceOp::Sum,
            bytes: 1 << 20,
            why: LamportRefusal::OverCapacity { capacity: 4096 },
        } => ["holds 4096 bytes per rank", "Collectives::with_lamport_capacity"];
        lamport_across_nodes_names_auto: Error::LamportUnavailable {
            rank: 0,
            element: "f32",
            op: ReduceOp::Sum,
            bytes: 16,
            why: LamportRefusal::SeveralNodes { nodes: 2 },
        } => ["spans 2 nodes", "use Algorithm::Auto"];
        length_mismatch_names_the_slices: Error::LengthMismatch { dst: 4, src: 5 }
            => ["4 elements", "source 5", "slice both to the same length"];
        foreign_handle_names_the_own_handles: Error::ForeignHandle
            => ["use each rank's own handles in its own world"];
        table_dropped_names_the_lifetime: Error::TableDropped => ["keep it alive"];
        not_exportable_names_the_owner: Error::NotExportable { what: "a mapping of a peer's heap" }
            => ["a mapping of a peer's heap", "on the rank that owns it"];
        bad_message_names_the_build: Error::BadMessage { from: Some(3), what: "agreement" }
            => ["rank 3 sent a malformed agreement", "from the same build of symmem"];
        bad_env_unset_names_spawn: Error::BadEnv {
            name: "SYMMEM_RANK",
            value: None,
            expected: "set by bootstrap::unix::spawn",
        } => ["SYMMEM_RANK is not set", "bootstrap::unix::spawn"];
        bad_env_value_names_the_value: Error::BadEnv {
            name: "SYMMEM_MAX_FRAME_BYTES",
            value: Some("64M".into()),
            expected: "a number of bytes",
        } => ["SYMMEM_MAX_FRAME_BYTES is \"64M\"", "a number of bytes"];
        bad_config_names_the_field: Error::BadConfig { field: "ranks_per_node", why: "use None" }
            => ["Config::ranks_per_node", "use None"];
        capturing_names_the_capture: Error::Capturing { call: "a barrier" }
            => ["a barrier while a graph is being captured", "before or after World::capture"];
        not_capturing_names_begin_capture: Error::NotCapturing { call: "ending a capture" }
            => ["ending a capture", "Backend::begin_capture"];
        lock_poisoned_names_a_new_world: Error::LockPoisoned { what: "the CUDA staging ring" }
            => ["the CUDA staging ring", "drop this world and make a new one"];
        stranger_refused_names_the_process: Error::StrangerRefused {
            what: "the process at the hub's socket",
            pid: Some(77),
            uid: Some(65534),
            why: "it runs as another user",
        } => ["the process at the hub's socket is no member", "pid 77 uid 65534", "another user", "no descriptor", "ss -xlp"];
        world_in_use_names_the_handles: Error::WorldInUse { rank: 1, others: 2 }
            => ["rank 1: ", "2 other handle(s)", "drop them first"];
        driver_too_old_names_both_versions: Error::DriverTooOld {
            found: 11020,
            needed: 11040,
            what: "symmem's CUDA backend",
        } => ["version 11.2 (11020)", "needs 11.4 (11040)", "update the NVIDIA driver"];
        never_joined_names_the_launch_and_timeout: Error::NeverJoined {
            ranks: vec![2],
            waited: Duration::from_secs(10),
        } => ["ranks [2]", "the same mpirun -np", "raise Config::timeout"];
        frame_too_large_names_the_variable: Error::FrameTooLarge { rank: Some(1), bytes: 100, limit: 10 }
            => ["rank 1 sent", "100 bytes", "limit of 10", "SYMMEM_MAX_FRAME_BYTES"];
        mpi_already_initialised_names_from_communicator: Error::MpiAlreadyInitialised
            => ["MpiBootstrap::from_communicator"];
        mpi_not_initialised_names_new: Error::MpiNotInitialised => ["MpiBootstrap::new"];
        mpi_thread_level_names_thread_support: Error::MpiThreadLevel {
            required: "MPI_THREAD_MULTIPLE",
            provided: "MPI_THREAD_SINGLE",
        } => ["provides MPI_THREAD_SINGLE", "an MPI built with thread support"];
        not_shareable_says_why: Error::NotShareable {
            addr: 0x1000,
            bytes: 64,
            why: "plain host memory of another process".into(),
        } => ["64 bytes at 0x1000", "plain host memory of another process"];
        bad_peer_memory_names_the_build: Error::BadPeerMemory { needed: 8, size: 4, why: "smaller" }
            => ["4 bytes", "8 bytes", "start every rank from the same build"];
        fd_limit_names_the_rlimit: Error::FdLimit { what: "memfd", limit: 1024 }
            => ["RLIMIT_NOFILE is 1024", "ulimit -Hn"];
    }

    #[test]
    fn errors_cross_threads_and_keep_the_os_source() {
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<Error>();
        let e = Error::Os {
            what: "mmap",
            source: std::io::ErrorKind::OutOfMemory.into(),
        };
        assert!(std::error::Error::source(&e).is_some());
        assert!(std::error::Error::source(&Error::ZeroSize).is_none());
    }
}
