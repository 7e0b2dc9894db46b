//! Point-to-point entry points over `symmem-rma`: grid-level put, get, copy between two
//! peers, put with signal, the cross-rank barrier, atomics under contention and a signal
//! wait. Every block of a put moves its share (`symmem_rma::copy::share`).

use symmem_device::{Arch, PeerTable, kernel};
use symmem_rma::{AtomicOp, Cmp, Order, Scope, collectives};

/// Put: `n` bytes from local `src` to symmetric `dst` on rank `to`.
///
/// # Safety
/// `bases` holds `world` entries, `rank, to < world`; see `symmem_rma::collectives::put`.
#[kernel]
pub unsafe fn symmem_rma_put(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    to: u32,
) {
    // SAFETY: the host passes a device-resident table of `world` entries and checked
    // ranks and ranges.
    unsafe {
        let team = bases.team(world, rank);
        collectives::put(arch, &team, dst, src, n as usize, to as usize)
    }
}

/// Get: `n` bytes from symmetric `src` on rank `from` into local `dst`.
///
/// # Safety
/// As `symmem_rma_put`; see `symmem_rma::collectives::get`.
#[kernel]
pub unsafe fn symmem_rma_get(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    from: u32,
) {
    // SAFETY: as in `symmem_rma_put`.
    unsafe {
        let team = bases.team(world, rank);
        collectives::get(arch, &team, dst, src, n as usize, from as usize)
    }
}

/// Copy between two peers: `n` bytes from symmetric `src` on rank `from` to symmetric
/// `dst` on rank `to` (this rank may be either or neither).
///
/// # Safety
/// As `symmem_rma_put`, with `from < world`; see `symmem_rma::collectives::copy`.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub unsafe fn symmem_rma_copy(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    from: u32,
    to: u32,
) {
    // SAFETY: as in `symmem_rma_put`.
    unsafe {
        let team = bases.team(world, rank);
        collectives::copy(
            arch,
            &team,
            dst,
            src,
            n as usize,
            from as usize,
            to as usize,
        )
    }
}

/// Put with signal: every block puts its share, then adds `value` to the symmetric
/// signal word `sig` on rank `to`; the data is complete once it grew by
/// `grid_dim * value`.
///
/// # Safety
/// As `symmem_rma_put`; `sig` symmetric and 8-aligned.
#[kernel]
pub unsafe fn symmem_rma_put_signal_add(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    sig: *mut u64,
    to: u32,
    value: u64,
) {
    // SAFETY: as in `symmem_rma_put`.
    unsafe {
        let team = bases.team(world, rank);
        collectives::put_signal_add(arch, &team, dst, src, n as usize, sig, value, to as usize)
    }
}

/// Barrier across all ranks over the symmetric signal array `sig`
/// (`symmem_rma::collectives::signal_words(world, grid_dim)` words, zeroed once).
///
/// # Safety
/// As `symmem_rma_put`; every rank launches it with the same grid.
#[kernel]
pub unsafe fn symmem_barrier_all(
    arch: &impl Arch,
    bases: PeerTable,
    world: u32,
    rank: u32,
    sig: *mut u64,
) {
    // SAFETY: as in `symmem_rma_put`.
    unsafe {
        let team = bases.team(world, rank);
        // Its outcome reaches the host through the rank's control block.
        let _ = collectives::barrier(arch, &team, sig);
    }
}

/// Atomics under contention: every thread of the grid adds 1 to the symmetric `u64`
/// counter on every rank (starting with its own, then `rank + 1`, ... modulo `world`),
/// `iters` times over, each add `AcqRel` at system scope (no-return form). With every
/// rank launching the same grid, each rank's counter grows by exactly
/// `world * grid_dim * block_dim * iters`.
///
/// # Safety
/// As `symmem_rma_put`; `counter` symmetric, 8-aligned and accessed only atomically
/// while this runs.
#[kernel]
pub unsafe fn symmem_rma_atomic_add_all(
    _arch: &impl Arch,
    counter: *mut u64,
    bases: PeerTable,
    world: u32,
    rank: u32,
    iters: u32,
) {
    // SAFETY: as in `symmem_rma_put`; `to < world` below.
    unsafe {
        let team = bases.team(world, rank);
        let (world, rank) = (world as usize, rank as usize);
        for _ in 0..iters {
            for k in 0..world {
                let to = (rank + k) % world;
                team.atomic(AtomicOp::Add, counter, 1, to, Order::AcqRel, Scope::System);
            }
        }
    }
}

/// Signal wait: thread 0 of block 0 waits until this rank's local signal word `sig`
/// satisfies `cmp` against `value` (acquire, system scope); every other thread returns
/// at once. Enqueued on a stream, it holds back the stream's later work until the signal
/// arrives. `from` is the rank expected to satisfy it (its departure ends the wait), or
/// `symmem_rma::watch::NO_PEER`.
///
/// # Safety
/// As `symmem_rma_put`; `sig` local (symmetric or not), 8-aligned, accessed only
/// atomically. The wait is bounded ([`symmem_rma::watch`]).
#[kernel]
pub unsafe fn symmem_rma_signal_wait_until(
    arch: &impl Arch,
    bases: PeerTable,
    world: u32,
    rank: u32,
    sig: *const u64,
    cmp: Cmp,
    value: u64,
    from: u64,
) {
    if arch.block_id() == 0 && arch.thread_id() == 0 {
        // SAFETY: as in `symmem_rma_put`.
        unsafe {
            let team = bases.team(world, rank);
            team.signal_wait_until_from(sig, cmp, value, from as usize);
        }
    }
}

/// The off-node engine's atomic on a GPU heap: the target's proxy launches it with one
/// thread to apply a peer's atomic request ([`symmem_rma::engine::apply_atomic`]) to
/// the element at `at`, and reads the old value's bits back from `old`.
///
/// # Safety
/// `at` is an element of this rank's heap, valid and aligned for the request's element
/// size; `old` is a writable 8-byte word.
#[kernel]
pub unsafe fn symmem_engine_atomic(
    arch: &impl Arch,
    at: *mut u8,
    request: u64,
    operand: u64,
    compare: u64,
    old: *mut u64,
) {
    if arch.global_id() == 0 {
        // SAFETY: forwarded from the proxy, which checked the element is in the heap.
        unsafe {
            old.write(symmem_rma::engine::apply_atomic(
                at, request, operand, compare,
            ))
        }
    }
}

/// Put until delivered, `repeats` times: block 0 puts `n` bytes from local `src` to
/// symmetric `dst` on rank `to` and waits until they are visible there (a put, then a
/// quiet), again and again. The device loop of the put latency and bandwidth
/// benchmarks; other blocks return at once.
///
/// # Safety
/// As `symmem_rma_put`.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub unsafe fn symmem_rma_put_delivered(
    arch: &impl Arch,
    dst: *mut u8,
    src: *const u8,
    bases: PeerTable,
    world: u32,
    rank: u32,
    n: u64,
    to: u32,
    repeats: u32,
) {
    if arch.block_id() != 0 {
        return;
    }
    // SAFETY: as in `symmem_rma_put`.
    unsafe {
        let team = bases.team(world, rank);
        for _ in 0..repeats {
            team.put_nbi_block(arch, dst, src, n as usize, to as usize);
            team.quiet_block(arch);
        }
    }
}
