//! The error messages' tests: each names what happened, with its values, and the fix.

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
