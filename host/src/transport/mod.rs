//! Off-node transports: how what a kernel does to a peer on another node reaches it.
//!
//! Within a node a peer's memory is mapped and kernels reach it with loads and stores.
//! A peer on another node has entry 0 in every peer table, and the RMA layer
//! (`symmem_rma::engine`) hands each put, get, atomic and signal to such a peer to the
//! rank's off-node transport instead. A world that spans nodes asks its bootstrap for
//! one ([`crate::bootstrap::Bootstrap::transport`]), attaches it to its heap when it
//! forms, and stops it when it leaves; it knows nothing else of it.
//!
//! Two shapes of transport fit this contract:
//!
//! * **Proxied** (today's, NVSHMEM's IBRC/UCX, rocSHMEM's reverse offload): kernels post
//!   requests to a ring in host memory the device reaches, and a proxy thread of the rank
//!   drains it over a [`Wire`] ([`start_proxy`]). Two wires exist: `mpi` (MPI one-sided
//!   operations and messages, ranks started by `mpirun`; cargo feature `mpi`) and
//!   [`local`] (between emulated nodes of one process, over the ranks' shared memory: the
//!   whole off-node path in plain `cargo test`).
//! * **Device-initiated** (NVSHMEM's IBGDA, NCCL's GIN): kernels drive the network
//!   themselves and no proxy runs. Such a transport attaches the same way; what its
//!   device code needs reaches each module as a global
//!   ([`ModuleTransport::nvshmem_heap`]), and each module is set up for it once loaded
//!   ([`ModuleTransport::init_cuda_module`]). One exists:
//!   [`nvshmem`] (NVSHMEM's device library, linked into kernels built with it).
//!
//! Which one a world uses: [`OffNode`] ([`crate::Config::off_node`], or
//! [`ENV_OFF_NODE`]), the same on every rank.

pub mod local;
#[cfg(feature = "mpi")]
#[cfg_attr(docsrs, doc(cfg(feature = "mpi")))]
pub mod mpi;
pub mod nvshmem;
mod proxy;

// The `fuzzing` module's door to the engine wire's checks.
#[cfg(fuzzing)]
pub(crate) use proxy::check_wire;

pub use crate::backend::ModuleTransport;
use crate::backend::{BackendKind, DeviceBinding, DeviceRegion, HeapAccess, SharedRegion};
use crate::error::{Error, Result};
use std::time::Duration;

pub use crate::control::AbortWord;
pub use proxy::{Wire, start_proxy};

/// Environment variable: `1` makes a proxied transport stage put and get data through
/// the ring and apply it at the target, as it must for a GPU heap its wire cannot reach,
/// even where the wire could reach the heap (the CPU backend): so a CPU run exercises the
/// device's staging code and the target's side as a GPU uses them.
pub const ENV_ENGINE_STAGING: &str = "SYMMEM_ENGINE_STAGING";

/// Environment variable: the off-node transport, where [`crate::Config::off_node`] is
/// `None`: `nvshmem` ([`OffNode::Nvshmem`]) or `bootstrap` ([`OffNode::Bootstrap`], also
/// what an unset variable means).
pub const ENV_OFF_NODE: &str = "SYMMEM_OFF_NODE";

/// Which transport carries a world's off-node requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OffNode {
    /// The one the bootstrap offers ([`crate::bootstrap::Bootstrap::transport`]): MPI for
    /// ranks `mpirun` started, the local wire for ranks as threads.
    #[default]
    Bootstrap,
    /// NVSHMEM's device library ([`nvshmem`]): kernels call it for off-node peers, with
    /// no proxy. CUDA ranks as processes; symmem built with its `nvshmem` feature.
    Nvshmem,
}

impl OffNode {
    /// Every transport, each at the index its discriminant (`as u8`) names.
    pub const ALL: [OffNode; 2] = [OffNode::Bootstrap, OffNode::Nvshmem];

    /// Its name, as [`ENV_OFF_NODE`] spells it.
    pub fn name(self) -> &'static str {
        match self {
            OffNode::Bootstrap => "bootstrap",
            OffNode::Nvshmem => "nvshmem",
        }
    }

    /// `choice`, else [`ENV_OFF_NODE`]'s, else [`OffNode::Bootstrap`].
    ///
    /// # Errors
    /// [`Error::BadEnv`] for a value that names no transport.
    pub fn resolve(choice: Option<OffNode>) -> Result<OffNode> {
        match choice {
            Some(choice) => Ok(choice),
            None => Self::from_env_value(std::env::var(ENV_OFF_NODE).ok()),
        }
    }

    /// The transport [`ENV_OFF_NODE`]'s value `value` names ([`OffNode::Bootstrap`] when
    /// unset).
    ///
    /// # Errors
    /// [`Error::BadEnv`] for a value that names no transport.
    fn from_env_value(value: Option<String>) -> Result<OffNode> {
        match value {
            None => Ok(OffNode::Bootstrap),
            Some(v) => Self::ALL
                .into_iter()
                .find(|o| o.name() == v)
                .ok_or(Error::BadEnv {
                    name: ENV_OFF_NODE,
                    value: Some(v),
                    expected: "nvshmem, or bootstrap (the bootstrap's own transport, also \
                               when unset); Config::off_node overrides it",
                }),
        }
    }
}

/// How a rank's transport moves put and get data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnginePath {
    /// One-sided, from and to the kernels' own memory (an MPI window over the heap; the
    /// peer's shared-memory heap for the local wire).
    Window,
    /// Staged through host memory and applied by the target's side through its
    /// [`HeapAccess`] (a GPU heap the wire cannot reach, or [`ENV_ENGINE_STAGING`]).
    Staged,
}

/// Memory a transport allocates for its device side, from the rank's backend.
pub trait TransportMemory {
    /// Zeroed host memory of `bytes` that this rank's kernels reach too.
    fn alloc_shared(&self, bytes: usize) -> Result<Box<dyn SharedRegion>>;
    /// Zeroed device memory of `bytes`, zeroed before any later launch of this rank runs.
    fn alloc_device_zeroed(&self, bytes: usize) -> Result<Box<dyn DeviceRegion>>;
}

impl<B: crate::backend::Backend> TransportMemory for B {
    fn alloc_shared(&self, bytes: usize) -> Result<Box<dyn SharedRegion>> {
        Ok(Box::new(crate::backend::Backend::alloc_shared(
            self, bytes,
        )?))
    }
    fn alloc_device_zeroed(&self, bytes: usize) -> Result<Box<dyn DeviceRegion>> {
        let memory = self.alloc_device(bytes)?;
        // SAFETY: the fresh allocation of `bytes`; kernels launched later on this rank's
        // stream see the zeroes.
        unsafe { self.memset(memory.base(), 0, bytes)? };
        Ok(Box::new(memory))
    }
}

/// The target's side of staged data and atomics, made when a transport asks for it
/// ([`crate::backend::Backend::heap_access`]; on a GPU it loads symmem's kernels, which a
/// transport whose kernels do everything, NVSHMEM's, never needs).
pub type MakeHeapAccess<'a> = Box<dyn FnOnce() -> Result<Box<dyn HeapAccess>> + 'a>;

/// This rank's heap, as a transport attaches to it.
pub struct Heap<'a> {
    /// Where kernels see the heap (the base of every offset a request names).
    pub device_base: u64,
    /// Bytes of heap.
    pub len: usize,
    /// Where the transport's host side reaches the heap at the kernels' addresses (host
    /// memory on the CPU backend; device memory for a wire that moves it itself); `None`
    /// when data must be staged (also when [`ENV_ENGINE_STAGING`] forces it).
    pub direct: Option<*mut u8>,
    /// Makes the target's side of staged data and atomics.
    pub access: MakeHeapAccess<'a>,
}

/// What a world gives the transport it attaches.
pub struct Attach<'a> {
    /// This rank's heap.
    pub heap: Heap<'a>,
    /// Where the transport allocates its device side's memory.
    pub memory: &'a dyn TransportMemory,
    /// Kernels run on this process's threads: their waits may do the transport's work
    /// (`symmem_rma::engine::Ring::help`).
    pub kernels_on_host: bool,
    /// The rank's abort word: a transport that fails sets it, so every waiting kernel ends.
    pub abort: AbortWord,
    /// The rank's backend.
    pub kind: BackendKind,
    /// Makes the rank's device current (GPU backends).
    pub device: Option<std::sync::Arc<dyn DeviceBinding>>,
}

/// An off-node transport before it is attached: what a bootstrap offers.
pub trait Transport: Send {
    /// Its name ("mpi", "local"), for messages.
    fn name(&self) -> &'static str;
    /// Whether it moves data in and out of `kind`'s device memory itself (a CUDA-aware
    /// MPI does for CUDA); where it does not, a GPU heap's data is staged.
    fn reaches_device_memory(&self, kind: BackendKind) -> bool;
    /// Attaches this rank's heap and starts the transport. Collective: every rank of the
    /// world calls it, in the same order relative to the bootstrap's other collectives.
    ///
    /// # Errors
    /// The transport's own (an MPI that cannot make a window, a thread that
    /// cannot start).
    fn attach(self: Box<Self>, attach: Attach<'_>) -> Result<Box<dyn Link>>;
}

/// A running off-node transport of one rank.
///
/// Ordering and completion, as kernels see them through the RMA layer: requests from one
/// rank to one peer take effect at the peer in the order the rank's kernels posted them;
/// a request that returns a value (a get, a fetching atomic) is complete at the target
/// when the kernel has its value; every other request is complete at the target when
/// [`Link::quiet`] returns (what a barrier, a signal's release and a quiet build on).
pub trait Link: ModuleTransport + Send + Sync {
    /// What kernels find the transport by (the control block's `ring` word): a proxied
    /// transport's ring; a device-initiated one's device state.
    fn device_handle(&self) -> u64;
    /// How put and get data moves.
    fn path(&self) -> EnginePath;
    /// Waits until every request this rank's kernels posted so far is complete at its
    /// target (call it once the device is idle); bounded by `deadline`.
    ///
    /// # Errors
    /// The transport's failure ([`Link::failure`]), [`Error::PeerLost`] once a
    /// peer is lost (what is in flight to it is never answered), [`Error::WaitTimedOut`].
    fn quiet(&self, deadline: Duration) -> Result<()>;
    /// The error the transport met, if it met one (it then serves nothing more, and has
    /// set the rank's abort word).
    fn failure(&self) -> Option<Error>;
    /// Stops starting this rank's requests, for good: once it returns, the transport
    /// reads and writes no memory this rank's kernels named (a put's source, a get's
    /// destination) again, and [`Link::quiet`] no longer waits for them. Requests already
    /// on the wire still take their replies, and peers' requests are still served.
    ///
    /// What a poisoned world calls before its buffers may be freed: a kernel whose wait
    /// gave up returned without waiting for its request, which may still be in the ring.
    fn disown(&self);
    /// Stops the transport and frees what it shares with peers (collectively: every rank
    /// stops it after the world's last barrier). `clean` says every rank was quiet and
    /// no peer was lost; without it the transport records that it stopped after a loss,
    /// and [`Link::failure`] says so from then on.
    fn stop(&mut self, clean: bool);
}

/// The C handle of an MPI communicator (`MPI_Comm`: a pointer in Open MPI, an integer in
/// MPICH), copied as it is, for a C library that takes the address of one
/// (`MPI_Comm *`). Valid while the bootstrap that gave it lives.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(8))]
pub struct RawMpiComm([u8; 8]);

impl RawMpiComm {
    /// The handle's bytes (at most 8: every MPI's `MPI_Comm` is a pointer or an `int`).
    #[cfg(feature = "mpi")]
    pub(crate) fn of<C: Copy>(handle: C) -> Self {
        const { assert!(size_of::<C>() <= 8) };
        let mut bytes = [0u8; 8];
        // SAFETY: `C` is plain data (an MPI handle) of at most 8 bytes, copied whole.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&raw const handle).cast::<u8>(),
                bytes.as_mut_ptr(),
                size_of::<C>(),
            )
        };
        Self(bytes)
    }

    /// The address of the handle, as an `MPI_Comm *` (aligned for either kind).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut std::ffi::c_void {
        self.0.as_mut_ptr().cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A C library reads the handle back through the address, as the type it is: a
    /// pointer (Open MPI) or an `int` (MPICH).
    #[cfg(feature = "mpi")]
    #[test]
    fn raw_communicator_reads_back_as_its_handle() {
        let mut pointer = RawMpiComm::of(0x7f12_3456_789a_bcd0_usize as *mut u8);
        let at = pointer.as_mut_ptr();
        assert_eq!(at.addr() % 8, 0);
        // SAFETY: 8 aligned bytes holding a pointer's.
        assert_eq!(unsafe { at.cast::<usize>().read() }, 0x7f12_3456_789a_bcd0);
        let mut int = RawMpiComm::of(0x4400_0000_i32);
        // SAFETY: 8 aligned bytes whose first 4 hold an `int`'s.
        let read = unsafe { int.as_mut_ptr().cast::<i32>().read() };
        assert_eq!(read, 0x4400_0000);
    }

    #[test]
    fn the_environment_names_a_transport_or_is_refused() {
        assert_eq!(OffNode::from_env_value(None).unwrap(), OffNode::Bootstrap);
        for o in [OffNode::Bootstrap, OffNode::Nvshmem] {
            assert_eq!(OffNode::from_env_value(Some(o.name().into())).unwrap(), o);
        }
        match OffNode::from_env_value(Some("ibgda".into())) {
            Err(
                e @ Error::BadEnv {
                    name: ENV_OFF_NODE, ..
                },
            ) => {
                assert!(e.to_string().contains("nvshmem, or bootstrap"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }
}
