//! The NVSHMEM transport: kernels reach off-node peers through NVSHMEM's device library
//! (IBGDA across machines, its P2P path between emulated nodes of one machine), with no
//! proxy thread.
//!
//! What it does, in order, when a world across nodes forms with
//! [`OffNode::Nvshmem`](crate::transport::OffNode::Nvshmem):
//!
//! 1. **Loads the host library** at run time (`libnvshmem_host.so.3`, or the path in
//!    [`ENV_NVSHMEM_LIB`]): a missing library or entry point is
//!    [`Error::NvshmemUnavailable`] naming it, on every rank (each says whether it could
//!    load it in the unique id's exchange, so no rank waits for one that could not).
//! 2. **Initialises NVSHMEM** with symmem's ranks as its PEs
//!    (`nvshmemx_hostlib_init_attr`), over the world's own channel where it has one: a
//!    world over MPI hands NVSHMEM its communicator (`NVSHMEMX_INIT_WITH_MPI_COMM`, NVSHMEM's
//!    MPI bootstrap plugin), so NVSHMEM opens no socket of its own. Elsewhere (the UNIX
//!    socket bootstrap: ranks on one machine) from a unique id that rank 0 makes
//!    (`nvshmemx_get_uniqueid`) and symmem's bootstrap carries to every rank
//!    (`nvshmemx_set_attr_uniqueid_args`): NVSHMEM's unique-id bootstrap then listens on a
//!    TCP port of rank 0 whose only secret is a random 64-bit magic sent in clear, and a
//!    stranger's connection that closes early stops the world from forming, one that
//!    stays silent stalls it (NVSHMEM 3.4.5; see docs/off-node.md, "Who can join").
//! 3. **Registers symmem's heap with NVSHMEM** (`nvshmemx_buffer_register_symmetric`):
//!    symmem keeps owning the heap (its VMM allocation, the descriptors it exports to the
//!    ranks of its node, its ledger and collective frees stay as they are), and NVSHMEM
//!    maps the same memory at an alias of its symmetric space. Letting NVSHMEM own the
//!    heap instead (`nvshmem_malloc`) would give two allocators one heap and make the
//!    world's heap depend on which transport it runs. Kernels find the alias in the
//!    module global `SYMMEM_NVSHMEM` ([`NvshmemHeap`]).
//! 4. **Initialises each loaded module** built with NVSHMEM (those with NVSHMEM's
//!    device state, `nvshmemi_device_state_d`) with `nvshmemx_cumodule_init`.
//! 5. **Tears down** in reverse when the world leaves cleanly (after its last barrier):
//!    `nvshmemx_cumodule_finalize` per module, `nvshmemx_buffer_unregister_symmetric`,
//!    `nvshmemx_hostlib_finalize`. These are collective in NVSHMEM and would wait for a
//!    lost peer, so after a loss they are skipped (and logged): the process is ending.
//!
//! Waits stay symmem's: a signal or barrier to an off-node peer waits on local memory
//! with the world's deadline and abort word, so a lost peer is `PeerLost` or
//! `WaitTimedOut`, never a hang inside NVSHMEM.
//!
//! One NVSHMEM per process: the transport serves worlds whose ranks are processes (the
//! MPI or UNIX-socket bootstrap); a second world across nodes in one process is refused.
//! CUDA only.

use crate::backend::{BackendKind, DeviceBinding, ModuleTransport};
use crate::error::{Error, Result};
use crate::transport::RawMpiComm;
use crate::transport::{Attach, EnginePath, Link, Transport};
use libloading::Library;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use symmem_rma::engine::NvshmemHeap;

/// Environment variable: the path of NVSHMEM's host library to load instead of
/// `libnvshmem_host.so.3` from the loader's search path.
pub const ENV_NVSHMEM_LIB: &str = "SYMMEM_NVSHMEM_LIB";

/// The host library's name on the loader's search path.
const LIBRARY: &str = "libnvshmem_host.so.3";

/// NVSHMEM's environment variable for its heap granularity, and its default (512 MiB:
/// NVSHMEM 3.x's `NVSHMEM_CUMEM_GRANULARITY`).
const GRANULARITY_ENV: &str = "NVSHMEM_CUMEM_GRANULARITY";

/// NVSHMEM's environment variable naming the interface of its unique-id bootstrap's
/// socket, which [`crate::bootstrap::unix::spawn`] sets to `lo` for the ranks it starts
/// (they share one machine) unless the caller chose one.
pub const ENV_UID_IFNAME: &str = "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME";
const DEFAULT_GRANULARITY: usize = 512 << 20;

/// NVSHMEM's heap granularity as `value` (its environment variable's value) sets it: a
/// number of bytes, optionally with a K, M or G suffix (NVSHMEM's size syntax); the
/// default where unset or empty, `None` where unreadable (NVSHMEM then decides).
fn granularity(value: Option<&str>) -> Option<usize> {
    let v = value.map_or("", str::trim);
    if v.is_empty() {
        return Some(DEFAULT_GRANULARITY);
    }
    let (digits, shift) = match v.char_indices().last()? {
        (i, 'k' | 'K') => (&v[..i], 10),
        (i, 'm' | 'M') => (&v[..i], 20),
        (i, 'g' | 'G') => (&v[..i], 30),
        _ => (v, 0),
    };
    digits.parse::<usize>().ok()?.checked_mul(1 << shift)
}

/// NVSHMEM's heap granularity in this process's environment (`None`: unreadable, NVSHMEM
/// decides): a world whose off-node transport is NVSHMEM rounds its heap up to it.
pub(crate) fn heap_granularity() -> Option<usize> {
    granularity(std::env::var(GRANULARITY_ENV).ok().as_deref())
}

/// `NVSHMEMX_INIT_WITH_MPI_COMM`.
const INIT_WITH_MPI_COMM: c_uint = 1 << 1;
/// `NVSHMEMX_INIT_WITH_UNIQUEID`.
const INIT_WITH_UNIQUEID: c_uint = 1 << 3;

/// How NVSHMEM's PEs find each other.
enum Start {
    /// Over the world's MPI communicator (NVSHMEM's MPI bootstrap plugin dups it).
    Mpi(RawMpiComm),
    /// Over NVSHMEM's unique-id bootstrap: a TCP socket of rank 0 named by the id.
    UniqueId(UniqueId),
}

/// NVSHMEM's unique id (`nvshmemx_uniqueid_v1`): a version word, then opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId {
    version: c_int,
    internal: [u8; 124],
}

impl UniqueId {
    /// `NVSHMEMX_UNIQUEID_INITIALIZER`.
    const fn new() -> Self {
        Self {
            version: (1 << 16) + size_of::<UniqueId>() as c_int,
            internal: [0; 124],
        }
    }
}

/// `nvshmemx_uniqueid_args_v1`.
#[repr(C)]
struct UniqueIdArgs {
    version: c_int,
    id: *mut UniqueId,
    myrank: c_int,
    nranks: c_int,
}

/// `nvshmemx_init_args_v1`.
#[repr(C)]
struct InitArgs {
    version: c_int,
    uid_args: UniqueIdArgs,
    content: [u8; 96],
}

/// `nvshmemx_init_attr_v1` (144 bytes: NVSHMEM 3.x accepts the v1 identifier).
#[repr(C)]
struct InitAttr {
    version: c_int,
    mpi_comm: *mut c_void,
    args: InitArgs,
}

const _: () = {
    assert!(size_of::<UniqueId>() == 128);
    assert!(size_of::<UniqueIdArgs>() == 24);
    assert!(size_of::<InitArgs>() == 128);
    assert!(size_of::<InitAttr>() == 144);
};

impl InitAttr {
    /// `NVSHMEMX_INIT_ATTR_INITIALIZER`.
    fn new() -> Self {
        Self {
            version: (1 << 16) + size_of::<InitAttr>() as c_int,
            mpi_comm: std::ptr::null_mut(),
            args: InitArgs {
                version: (1 << 16) + size_of::<InitArgs>() as c_int,
                uid_args: UniqueIdArgs {
                    version: (1 << 16) + size_of::<UniqueIdArgs>() as c_int,
                    id: std::ptr::null_mut(),
                    myrank: -1,
                    nranks: -1,
                },
                content: [0; 96],
            },
        }
    }
}

/// The entry points of NVSHMEM's host library that symmem calls, looked up once.
struct Api {
    get_uniqueid: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    set_attr_uniqueid_args:
        unsafe extern "C" fn(c_int, c_int, *const UniqueId, *mut InitAttr) -> c_int,
    hostlib_init_attr: unsafe extern "C" fn(c_uint, *mut InitAttr) -> c_int,
    hostlib_finalize: unsafe extern "C" fn(),
    my_pe: unsafe extern "C" fn() -> c_int,
    n_pes: unsafe extern "C" fn() -> c_int,
    vendor_version: unsafe extern "C" fn(*mut c_int, *mut c_int, *mut c_int),
    register_symmetric: unsafe extern "C" fn(*mut c_void, usize, c_int) -> *mut c_void,
    unregister_symmetric: unsafe extern "C" fn(*mut c_void, usize) -> c_int,
    cumodule_init: unsafe extern "C" fn(*mut c_void) -> c_int,
    cumodule_finalize: unsafe extern "C" fn(*mut c_void) -> c_int,
    /// Keeps the entry points above valid.
    _library: Library,
}

impl Api {
    /// Loads the host library at `path` and its entry points.
    ///
    /// # Errors
    /// [`Error::NvshmemUnavailable`] naming the library and what was missing.
    fn load(path: &str) -> Result<Self> {
        let unavailable = |why: String| Error::NvshmemUnavailable {
            library: path.to_owned(),
            why,
        };
        // SAFETY: NVSHMEM's host library runs no initialiser with requirements of ours
        // (its constructors register its own state).
        let library = unsafe { Library::new(path) }.map_err(|e| unavailable(e.to_string()))?;
        /// The entry point `name` of `library` as a function pointer of the field's type.
        macro_rules! symbol {
            ($name:literal) => {
                // SAFETY: the declared type is the one NVSHMEM's headers give the entry
                // point (`host/nvshmemx_api.h`, `host/nvshmem_api.h`, 3.x).
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| unavailable(format!("no {}: {e}", $name)))?
            };
        }
        Ok(Self {
            get_uniqueid: symbol!("nvshmemx_get_uniqueid"),
            set_attr_uniqueid_args: symbol!("nvshmemx_set_attr_uniqueid_args"),
            hostlib_init_attr: symbol!("nvshmemx_hostlib_init_attr"),
            hostlib_finalize: symbol!("nvshmemx_hostlib_finalize"),
            my_pe: symbol!("nvshmem_my_pe"),
            n_pes: symbol!("nvshmem_n_pes"),
            vendor_version: symbol!("nvshmemx_vendor_get_version_info"),
            register_symmetric: symbol!("nvshmemx_buffer_register_symmetric"),
            unregister_symmetric: symbol!("nvshmemx_buffer_unregister_symmetric"),
            cumodule_init: symbol!("nvshmemx_cumodule_init"),
            cumodule_finalize: symbol!("nvshmemx_cumodule_finalize"),
            _library: library,
        })
    }
}

/// [`Error::NvshmemFailed`] unless `status` is 0.
fn check(call: &'static str, status: c_int) -> Result<()> {
    if status == 0 {
        Ok(())
    } else {
        Err(Error::NvshmemFailed { call, status })
    }
}

/// Set while this process initialises or runs NVSHMEM (one PE per process).
static IN_USE: AtomicBool = AtomicBool::new(false);

/// This process's claim on NVSHMEM: released on drop unless NVSHMEM was initialised
/// (then the link releases it once NVSHMEM is finalised).
struct Claim;

impl Claim {
    /// The claim, or [`Error::NoEngine`] where this process already has it.
    fn take() -> Result<Self> {
        if IN_USE.swap(true, Ordering::AcqRel) {
            return Err(Error::NoEngine(
                "NVSHMEM runs one PE per process and this process already runs a world \
                 through it: start each rank as its own process (mpirun, or the UNIX-socket \
                 bootstrap)",
            ));
        }
        Ok(Self)
    }

    /// Keeps the claim past this value (NVSHMEM is initialised).
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        IN_USE.store(false, Ordering::Release);
    }
}

/// The world's all-gather: every rank contributes its bytes, and gets every rank's, by
/// rank.
pub type AllGather<'a> = &'a mut dyn FnMut(&[u8]) -> Result<Vec<Vec<u8>>>;

/// The NVSHMEM transport of one rank, before it is attached: the library loaded on every
/// rank, and the world's MPI communicator kept or the unique id exchanged.
pub struct NvshmemTransport {
    api: Api,
    start: Start,
    rank: usize,
    world_size: usize,
    claim: Claim,
}

impl NvshmemTransport {
    /// Loads NVSHMEM's host library, as rank `rank` of `world_size`, to start over the
    /// world's MPI communicator `mpi` where it has one, else over a unique id that rank 0
    /// makes and `all_gather` (the world's bootstrap's: every rank's bytes, by rank)
    /// carries. Collective: every rank of the world calls it.
    ///
    /// # Errors
    /// [`Error::NvshmemUnavailable`] on every rank if any rank cannot load the
    /// library (naming that rank's library and why); [`Error::NvshmemFailed`] if rank 0
    /// cannot make the id; [`Error::NoEngine`] where this process already runs a world
    /// through NVSHMEM; the bootstrap's errors.
    pub fn new(
        rank: usize,
        world_size: usize,
        all_gather: AllGather<'_>,
        mpi: Option<RawMpiComm>,
    ) -> Result<Self> {
        let path = std::env::var(ENV_NVSHMEM_LIB).unwrap_or_else(|_| LIBRARY.to_owned());
        Self::with_library(rank, world_size, all_gather, mpi, &path)
    }

    /// [`NvshmemTransport::new`] with the host library at `path`.
    fn with_library(
        rank: usize,
        world_size: usize,
        all_gather: AllGather<'_>,
        mpi: Option<RawMpiComm>,
        path: &str,
    ) -> Result<Self> {
        let mine = Api::load(path).and_then(|api| {
            let mut id = UniqueId::new();
            if rank == 0 && mpi.is_none() {
                // SAFETY: `id` is an initialised `nvshmemx_uniqueid_t`.
                check("nvshmemx_get_uniqueid", unsafe {
                    (api.get_uniqueid)(&mut id)
                })?;
            }
            Ok((api, id))
        });
        // Every rank says whether it has the library (and rank 0 sends the id), so a rank
        // that has none fails every rank instead of leaving them waiting.
        let message = match &mine {
            Ok((_, id)) => {
                // SAFETY: `UniqueId` is `repr(C)` plain data of 128 bytes.
                let bytes: [u8; 128] = unsafe { std::mem::transmute(*id) };
                [&[1u8][..], &bytes[..]].concat()
            }
            Err(e) => [&[0u8][..], e.to_string().as_bytes()].concat(),
        };
        let all = all_gather(&message)?;
        let (api, _) = mine?;
        for (peer, got) in all.iter().enumerate() {
            if got.first() != Some(&1) {
                return Err(Error::NvshmemUnavailable {
                    library: format!("rank {peer}'s NVSHMEM"),
                    why: String::from_utf8_lossy(got.get(1..).unwrap_or_default()).into_owned(),
                });
            }
        }
        let claim = Claim::take()?;
        if let Some(comm) = mpi {
            tracing::info!(
                rank,
                "NVSHMEM starts over the world's MPI communicator (its MPI bootstrap \
                 plugin): it opens no socket of its own"
            );
            return Ok(Self {
                api,
                start: Start::Mpi(comm),
                rank,
                world_size,
                claim,
            });
        }
        match std::env::var(ENV_UID_IFNAME) {
            Ok(interface) => tracing::info!(
                rank,
                interface,
                "NVSHMEM starts over its unique-id bootstrap: rank 0 listens on a TCP port of \
                 this interface (NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME; bootstrap::unix::spawn \
                 sets lo for its ranks), whose only secret travels in clear: a process that \
                 reaches it can stop this world from forming (docs/off-node.md, \"Who can \
                 join\"); mpirun avoids it"
            ),
            Err(_) => tracing::warn!(
                rank,
                "NVSHMEM starts over its unique-id bootstrap on NVSHMEM's default interface, \
                 which other hosts may reach: rank 0 listens on a TCP port whose only secret \
                 travels in clear, and a stranger who connects there can stop this world from \
                 forming or stall it; set NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo for ranks of \
                 one machine (bootstrap::unix::spawn does), or start the ranks with mpirun"
            ),
        }
        let id_bytes: [u8; 128] =
            all[0]
                .get(1..129)
                .and_then(|b| b.try_into().ok())
                .ok_or(Error::BadMessage {
                    from: Some(0),
                    what: "NVSHMEM unique id (not 128 bytes)",
                })?;
        // SAFETY: 128 bytes rank 0 copied from a `UniqueId`; every bit pattern is one.
        let id: UniqueId = unsafe { std::mem::transmute(id_bytes) };
        Ok(Self {
            api,
            start: Start::UniqueId(id),
            rank,
            world_size,
            claim,
        })
    }
}

impl Transport for NvshmemTransport {
    fn name(&self) -> &'static str {
        "nvshmem"
    }

    fn reaches_device_memory(&self, kind: BackendKind) -> bool {
        kind == BackendKind::Cuda
    }

    fn attach(self: Box<Self>, attach: Attach<'_>) -> Result<Box<dyn Link>> {
        if attach.kind != BackendKind::Cuda {
            return Err(Error::NoEngine(
                "the NVSHMEM transport serves CUDA heaps only: use the MPI transport \
                 (OffNode::Bootstrap) for this backend",
            ));
        }
        let device = attach.device.ok_or(Error::NoEngine(
            "the NVSHMEM transport needs the rank's CUDA device",
        ))?;
        // NVSHMEM maps a registered buffer in whole units of its granularity: a heap that
        // is not a multiple would be mapped past its end, which NVSHMEM reports only as a
        // failed cuMemMap and then a crash. `World::new` rounds the heap up to it; this
        // refuses a heap made otherwise (or an environment changed since), on every rank
        // alike, before NVSHMEM starts.
        if let Some(g) = heap_granularity()
            && g > 0
            && !attach.heap.len.is_multiple_of(g)
        {
            return Err(Error::NvshmemHeapGranularity {
                heap: attach.heap.len,
                granularity: g,
            });
        }
        device.make_current()?;
        let Self {
            api,
            mut start,
            rank,
            world_size,
            claim,
        } = *self;
        let mut attr = InitAttr::new();
        // SAFETY: `start`'s id or communicator and `attr` are initialised v1 structures
        // that outlive the calls (NVSHMEM's MPI plugin dups the communicator during
        // init); the rank's context is current.
        unsafe {
            let flags = match &mut start {
                Start::Mpi(comm) => {
                    attr.mpi_comm = comm.as_mut_ptr();
                    INIT_WITH_MPI_COMM
                }
                Start::UniqueId(id) => {
                    check(
                        "nvshmemx_set_attr_uniqueid_args",
                        (api.set_attr_uniqueid_args)(
                            rank as c_int,
                            world_size as c_int,
                            id,
                            &mut attr,
                        ),
                    )?;
                    INIT_WITH_UNIQUEID
                }
            };
            check(
                "nvshmemx_hostlib_init_attr",
                (api.hostlib_init_attr)(flags, &mut attr),
            )?;
        }
        claim.keep();
        // SAFETY: NVSHMEM is initialised.
        let (pe, pes) = unsafe { ((api.my_pe)(), (api.n_pes)()) };
        if pe as usize != rank || pes as usize != world_size {
            return Err(Error::NvshmemFailed {
                call: "nvshmem_my_pe/nvshmem_n_pes (not symmem's rank and world size)",
                status: pe,
            });
        }
        let (mut major, mut minor, mut patch) = (0, 0, 0);
        // SAFETY: three writable ints.
        unsafe { (api.vendor_version)(&mut major, &mut minor, &mut patch) };
        let heap = attach.heap;
        // SAFETY: the rank's heap, VMM memory of `len` bytes that outlives the link (the
        // world unregisters it in `stop`, before freeing it); collective, every rank
        // registers its heap of the same length.
        let alias = unsafe {
            (api.register_symmetric)(
                std::ptr::with_exposed_provenance_mut(heap.device_base as usize),
                heap.len,
                0,
            )
        };
        if alias.is_null() {
            return Err(Error::NvshmemFailed {
                call: "nvshmemx_buffer_register_symmetric",
                status: -1,
            });
        }
        let nvshmem = NvshmemHeap {
            heap_base: heap.device_base,
            heap_len: heap.len as u64,
            alias: alias.expose_provenance() as u64,
        };
        tracing::info!(
            rank,
            version = format!("{major}.{minor}.{patch}"),
            heap = format!("{:#x}+{:#x}", heap.device_base, heap.len),
            alias = format!("{:#x}", nvshmem.alias),
            "off-node transport: NVSHMEM (kernels call its device library; its heap alias \
             registered)"
        );
        Ok(Box::new(NvshmemLink {
            api,
            device,
            heap: nvshmem,
            modules: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        }))
    }
}

/// A running NVSHMEM transport of one rank.
struct NvshmemLink {
    api: Api,
    device: Arc<dyn DeviceBinding>,
    heap: NvshmemHeap,
    /// The CUDA modules initialised for NVSHMEM, finalised in `stop`.
    modules: Mutex<Vec<u64>>,
    stopped: AtomicBool,
}

impl ModuleTransport for NvshmemLink {
    fn nvshmem_heap(&self) -> Option<NvshmemHeap> {
        Some(self.heap)
    }

    unsafe fn init_cuda_module(&self, module: u64) -> Result<()> {
        // SAFETY: the caller's: a loaded module with NVSHMEM's device state, its context
        // current.
        check("nvshmemx_cumodule_init", unsafe {
            (self.api.cumodule_init)(std::ptr::with_exposed_provenance_mut(module as usize))
        })?;
        self.modules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(module);
        Ok(())
    }
}

impl Link for NvshmemLink {
    fn device_handle(&self) -> u64 {
        // Kernels find NVSHMEM through their module's `SYMMEM_NVSHMEM`, not the control
        // block (no ring).
        0
    }

    fn path(&self) -> EnginePath {
        EnginePath::Window
    }

    fn quiet(&self, _deadline: Duration) -> Result<()> {
        // Kernels complete their own requests: every RMA quiet, signal and barrier calls
        // `nvshmem_quiet` on each thread before it returns, and nothing is posted
        // anywhere for the host to wait on.
        Ok(())
    }

    fn failure(&self) -> Option<Error> {
        None
    }

    fn disown(&self) {
        // No request outlives the kernel thread that issued it in a place the host would
        // later serve: nothing to stop.
    }

    fn stop(&mut self, clean: bool) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        if !clean {
            tracing::warn!(
                "NVSHMEM is not finalised: a peer was lost or the world was not quiet, and \
                 NVSHMEM's teardown waits for every PE"
            );
            return;
        }
        if let Err(error) = self.device.make_current() {
            tracing::warn!(%error, "NVSHMEM is not finalised: the device could not be made current");
            return;
        }
        let api = &self.api;
        let modules = std::mem::take(&mut *self.modules.lock().unwrap_or_else(|p| p.into_inner()));
        for module in modules {
            // SAFETY: a module initialised in `init_cuda_module`, still loaded (the world
            // unloads its modules after its transport stops).
            let status = unsafe {
                (api.cumodule_finalize)(std::ptr::with_exposed_provenance_mut(module as usize))
            };
            if status != 0 {
                tracing::warn!(status, "nvshmemx_cumodule_finalize failed");
            }
        }
        // SAFETY: the alias `register_symmetric` returned for the heap's length; every
        // rank unregisters after the world's last barrier.
        let status = unsafe {
            (api.unregister_symmetric)(
                std::ptr::with_exposed_provenance_mut(self.heap.alias as usize),
                self.heap.heap_len as usize,
            )
        };
        if status != 0 {
            tracing::warn!(status, "nvshmemx_buffer_unregister_symmetric failed");
        }
        // SAFETY: initialised in `attach`, finalised once.
        unsafe { (api.hostlib_finalize)() };
        IN_USE.store(false, Ordering::Release);
        tracing::debug!("NVSHMEM finalised");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    /// An all-gather between threads: each writes its bytes, waits for the others, reads.
    fn exchange(world: usize) -> Arc<(Barrier, Mutex<Vec<Vec<u8>>>)> {
        Arc::new((Barrier::new(world), Mutex::new(vec![Vec::new(); world])))
    }

    /// A rank without the library fails with an error naming it, and so does every other
    /// rank: none waits for the id a rank without NVSHMEM cannot send.
    #[test]
    fn a_missing_library_is_named_on_every_rank() {
        let shared = exchange(2);
        let ranks: Vec<_> = (0..2)
            .map(|rank| {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let mut all_gather = |mine: &[u8]| {
                        shared.1.lock().unwrap()[rank] = mine.to_vec();
                        shared.0.wait();
                        Ok(shared.1.lock().unwrap().clone())
                    };
                    let path = format!("/nonexistent/rank{rank}/libnvshmem_host.so.3");
                    NvshmemTransport::with_library(rank, 2, &mut all_gather, None, &path).map(drop)
                })
            })
            .collect();
        for (rank, r) in ranks.into_iter().enumerate() {
            match r.join().expect("rank") {
                Err(e @ Error::NvshmemUnavailable { .. }) => {
                    let text = e.to_string();
                    assert!(
                        text.contains(&format!("/nonexistent/rank{rank}/")),
                        "{text}"
                    );
                    assert!(text.contains("LD_LIBRARY_PATH"), "{text}");
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }

    #[test]
    fn nvshmem_granularity_is_read_as_nvshmem_reads_it() {
        assert_eq!(granularity(None), Some(512 << 20));
        assert_eq!(granularity(Some("")), Some(512 << 20));
        assert_eq!(granularity(Some("2097152")), Some(2 << 20));
        assert_eq!(granularity(Some("2M")), Some(2 << 20));
        assert_eq!(granularity(Some("1g")), Some(1 << 30));
        assert_eq!(granularity(Some("lots")), None);
    }

    #[test]
    fn structures_have_nvshmem_layouts() {
        let mut attr = InitAttr::new();
        assert_eq!(attr.version, (1 << 16) + 144);
        assert_eq!(attr.args.version, (1 << 16) + 128);
        assert_eq!(attr.args.uid_args.version, (1 << 16) + 24);
        let base = (&raw mut attr).addr();
        assert_eq!((&raw mut attr.args).addr() - base, 16);
        assert_eq!((&raw mut attr.args.uid_args.id).addr() - base, 32);
        assert_eq!((&raw mut attr.args.uid_args.nranks).addr() - base, 44);
        assert_eq!(UniqueId::new().version, (1 << 16) + 128);
    }
}
