//! The off-node transport of a world across nodes: which one (agreed before the heap
//! exists, since NVSHMEM's needs size it), and its start.

use super::nvshmem_kernels;
use crate::backend::{Backend, BackendKind, DeviceRegion};
use crate::bootstrap::Bootstrap;
use crate::control::AbortWord;
use crate::error::{Error, Result};
use crate::topology::Topology;
use crate::transport::{Attach, Heap, Link, OffNode};

/// Which transport carries this world's off-node traffic: `choice`, else the
/// environment's ([`OffNode::resolve`]), agreed by every rank before the heap exists
/// (the heap's size depends on it: [`heap_granule`]). [`Error::OffNodeMismatch`] names
/// the first rank whose choice differs from rank 0's.
pub(super) fn agree(bootstrap: &mut dyn Bootstrap, choice: Option<OffNode>) -> Result<OffNode> {
    let choice = OffNode::resolve(choice)?;
    let chosen = bootstrap
        .all_gather(&[choice as u8])?
        .iter()
        .enumerate()
        .map(|(rank, c)| {
            c.first()
                .and_then(|&code| OffNode::ALL.get(usize::from(code)).copied())
                .ok_or(Error::BadMessage {
                    from: Some(rank),
                    what: "off-node transport choice",
                })
        })
        .collect::<Result<Vec<_>>>()?;
    // As for the node split (`Topology::exchange`): every rank names the same first rank
    // whose choice is not rank 0's.
    if let Some(rank) = chosen.iter().position(|&c| c != chosen[0]) {
        return Err(Error::OffNodeMismatch {
            rank,
            expected: chosen[0].name(),
            found: chosen[rank].name(),
        });
    }
    Ok(choice)
}

/// The unit the heap's length is rounded up to: the backend's `granule`, and where the
/// NVSHMEM transport carries a CUDA heap's off-node traffic, a multiple of NVSHMEM's heap
/// granularity too (NVSHMEM registers memory in whole units of it: 512 MiB unless
/// `NVSHMEM_CUMEM_GRANULARITY` says otherwise), so that [`Config::default`]'s heap works
/// with NVSHMEM as well. (Other backends' heaps are refused by the transport: not grown.)
///
/// [`Config::default`]: super::Config
pub(super) fn heap_granule(granule: usize, transport: Option<OffNode>, kind: BackendKind) -> usize {
    match transport {
        Some(OffNode::Nvshmem) if kind == BackendKind::Cuda => {
            common_multiple(granule, crate::transport::nvshmem::heap_granularity())
        }
        _ => granule,
    }
}

/// The least common multiple of `granule` and `other` where `other` is a positive
/// number (granularities are powers of two in practice, but nothing checks that of an
/// environment variable); `granule` otherwise.
fn common_multiple(granule: usize, other: Option<usize>) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    match other {
        Some(g) if g > 0 => granule / gcd(granule, g) * g,
        _ => granule,
    }
}

/// Starts the off-node transport of a world that spans several nodes: `choice` (as
/// [`agree`] settled it), attached to `heap`.
///
/// The transport moves data between kernel memory and peers itself where it reaches
/// kernel memory: the backend's heap is host memory ([`Backend::heap_host_ptr`]), or the
/// transport moves the backend's device memory
/// ([`crate::transport::Transport::reaches_device_memory`]: a CUDA-aware MPI). Elsewhere
/// data is staged through host memory and applied by the target ([`Backend::heap_access`]),
/// as it is wherever `SYMMEM_ENGINE_STAGING=1` forces it.
pub(super) fn start<B: Backend>(
    bootstrap: &mut dyn Bootstrap,
    backend: &B,
    heap: &B::Heap,
    abort: AbortWord,
    choice: OffNode,
    topology: &Topology,
) -> Result<Box<dyn Link>> {
    let transport: Box<dyn crate::transport::Transport> = match choice {
        OffNode::Bootstrap => bootstrap.transport()?,
        OffNode::Nvshmem => {
            // Refused before NVSHMEM starts where no kernels could call it.
            nvshmem_kernels()?;
            let (rank, world_size) = (bootstrap.rank(), bootstrap.world_size());
            let mpi = bootstrap.mpi_communicator();
            let mut all_gather = |mine: &[u8]| bootstrap.all_gather(mine);
            Box::new(crate::transport::nvshmem::NvshmemTransport::new(
                rank,
                world_size,
                &mut all_gather,
                mpi,
            )?)
        }
    };
    let off_node: Vec<usize> = (0..bootstrap.world_size())
        .filter(|&r| !topology.reaches(r))
        .collect();
    tracing::info!(
        rank = bootstrap.rank(),
        transport = transport.name(),
        ?off_node,
        "peers on other nodes go through the off-node transport; the others by load and store"
    );
    let staging_forced = std::env::var(crate::transport::ENV_ENGINE_STAGING).as_deref() == Ok("1");
    let direct = backend
        .heap_host_ptr(heap)
        .or_else(|| {
            transport
                .reaches_device_memory(backend.kind())
                .then(|| std::ptr::with_exposed_provenance_mut(heap.base() as usize))
        })
        .filter(|_| !staging_forced);
    if direct.is_none() {
        tracing::warn!(
            rank = bootstrap.rank(),
            forced = staging_forced,
            "the off-node engine stages data through host memory: the transport cannot reach \
             this heap directly (set by SYMMEM_ENGINE_STAGING=1, or a GPU heap with an MPI \
             that is not GPU-aware)"
        );
    }
    transport.attach(Attach {
        heap: Heap {
            device_base: heap.base(),
            len: heap.len(),
            direct,
            access: Box::new(|| backend.heap_access(heap)),
        },
        memory: backend,
        kernels_on_host: backend.kernels_on_host(),
        abort,
        kind: backend.kind(),
        device: backend.device_binding(),
    })
}

#[cfg(test)]
mod tests {
    use super::common_multiple;

    #[test]
    fn the_heap_granule_grows_to_nvshmem_s_unit() {
        const MIB: usize = 1 << 20;
        // CUDA's 2 MiB granule and NVSHMEM's default 512 MiB: 64 MiB heaps become 512 MiB.
        assert_eq!(common_multiple(2 * MIB, Some(512 * MIB)), 512 * MIB);
        assert_eq!(common_multiple(512 * MIB, Some(2 * MIB)), 512 * MIB);
        // An odd setting still gives a multiple of both.
        assert_eq!(common_multiple(2 * MIB, Some(3 * MIB)), 6 * MIB);
        // Unreadable or zero: NVSHMEM decides, the backend's granule stands.
        assert_eq!(common_multiple(2 * MIB, None), 2 * MIB);
        assert_eq!(common_multiple(2 * MIB, Some(0)), 2 * MIB);
    }
}
