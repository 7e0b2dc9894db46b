//! Bounded device waits: every wait of this crate (`Team::signal_wait_until`, and through
//! it every barrier and collective) also watches this rank's [`Control`] block, so a lost,
//! departed or absent peer never hangs a kernel.
//!
//! The block is shared by the host and the device: the host sets `abort` (a peer is lost,
//! the world is going down), `deadline_ns`, and a bit per peer that has left the world
//! (`departed`); a wait that has spun longer than the deadline, sees `abort`, or waits on
//! a named peer that has left, records once what it was waiting for (`reason`, `peer`,
//! `signal`, `value`, `seen`, `waited_ns`) and returns.
//!
//! A departure is not a loss: a rank leaves only once its device work is complete, so
//! its last writes are already visible. A wait on it gives up only when it has seen the
//! departure at two looks in a row, having read its word again in between (the peer's
//! writes, made before its departure, are then visible to it), so a departure never ends
//! a wait that the peer's last signal satisfies. A wait that names no peer
//! ([`NO_PEER`]: `Team::signal_wait_until`) cannot tell who would have written its word,
//! so a departure does not end it; only `abort` and the deadline do. Every later wait of the rank sees
//! `reason` set and returns at once, so every block of the kernel finishes promptly (its
//! results are then meaningless; the host turns the record into an error and poisons the
//! world).
//!
//! A healthy wait pays nothing for this: the block is looked at only every
//! [`POLL_EVERY`] spins (on the host, also each time the wait yields or sleeps, which
//! costs far more than a look), and the clock is read only from the first look on.
//!
//! Where the block is: on GPUs, the module global `SYMMEM_CONTROL` (defined for GPU targets only), which the host
//! sets when it loads a module (`cuModuleGetGlobal`, `hipModuleGetGlobal`), so a user's
//! kernel gets the bound without a parameter; on the host (feature `std`), a thread-local
//! that the CPU backend sets on each kernel thread ([`set_thread_control`]). Where none
//! is set, waits are unbounded, as before.

use crate::atomic::AtomicInt;
use crate::{Order, Scope};

/// This rank's control block. Host and device access every word with single atomic
/// loads and stores at system scope, never a read-modify-write: on a GPU the block is
/// mapped host memory, where a device's atomics are not atomic for the host.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Control {
    /// Non-zero: every wait gives up at once ([`REASON_ABORT`]). Set by the host when a
    /// peer is lost: that rank plus one, or `u64::MAX` when no rank is named.
    pub abort: u64,
    /// How long one wait may spin before it gives up ([`REASON_TIMEOUT`]), in
    /// nanoseconds; 0 for no deadline. Set by the host before any launch.
    pub deadline_ns: u64,
    /// 0 while no wait has given up; else one [`status`] word: why, which peer, how long.
    /// Several waits may give up at once: each writes a whole word, so it is always one
    /// wait's record.
    pub status: u64,
    /// The address of the signal word a wait that gave up waited on.
    pub signal: u64,
    /// The value it waited for.
    pub value: u64,
    /// The value it last saw.
    pub seen: u64,
    /// Address of this rank's off-node request ring ([`crate::engine::Ring`]); 0 when
    /// the world runs no engine (every peer is on this node). Kernels on GPUs read the
    /// module's copy of the ring instead ([`crate::engine::SYMMEM_ENGINE`]).
    pub ring: u64,
    /// Address of the departed-peer bitmask: `ranks.div_ceil(64)` words, bit `r % 64` of
    /// word `r / 64` set once rank `r` has left the world (its device work complete).
    /// Written by the host only; 0 when there is none.
    pub departed: u64,
    /// Bits in the `departed` bitmask (the world's size); a wait on a peer outside it
    /// ignores departures.
    pub ranks: u64,
}

/// Why a wait gave up: it outlived the deadline.
pub const REASON_TIMEOUT: u64 = 1;
/// Why a wait gave up: it saw the host's abort, or the peer it waited on had left.
pub const REASON_ABORT: u64 = 2;
/// Why a wait gave up: a request named a peer this rank cannot reach (its table entry
/// is 0 and there is no engine, or the address is outside the symmetric heap).
pub const REASON_UNREACHABLE: u64 = 3;
/// Why a wait gave up: the peer it waited on had itself given up (its barrier arrival word
/// carries [`POISON`]), so what that peer sent after is not to be trusted.
pub const REASON_PEER_GAVE_UP: u64 = 4;
/// Why a kernel gave up: it is one of the one-node collectives, launched from a build
/// that leaves them out ([`crate::ONE_NODE_KERNELS`]): a world across nodes.
pub const REASON_ONE_NODE_KERNEL: u64 = 5;
/// The bit a rank whose barrier wait gave up sets in its arrival word on every peer
/// (`Team::barrier_block`), after which it arrives no more: a peer's wait for a later
/// arrival gives up ([`REASON_PEER_GAVE_UP`]), so no peer goes on with data that rank did
/// not finish, while a wait for one it made before it gave up is satisfied. Arrival counts
/// never reach it.
pub const POISON: u64 = 1 << 63;
/// A waiting thread looks at the control block once per this many spins.
pub const POLL_EVERY: u32 = 1 << 16;
/// The peer of a wait that did not name one.
pub const NO_PEER: u64 = u64::MAX;

/// The packing of [`Control::status`]: bits 0-2 the reason, bits 3-22 the peer plus one
/// (0: unknown), bits 23-63 how long the wait had waited, in microseconds.
pub mod status {
    /// Packs a status word.
    pub const fn pack(reason: u64, peer: u64, waited_ns: u64) -> u64 {
        let peer = if peer < (1 << 20) - 1 { peer + 1 } else { 0 };
        (reason & 7) | (peer << 3) | ((waited_ns / 1000) << 23)
    }
    /// The reason of a status word.
    pub const fn reason(status: u64) -> u64 {
        status & 7
    }
    /// The peer of a status word, if the wait named one.
    pub const fn peer(status: u64) -> Option<u64> {
        match (status >> 3) & ((1 << 20) - 1) {
            0 => None,
            p => Some(p - 1),
        }
    }
    /// How long the wait had waited, in nanoseconds (microsecond resolution).
    pub const fn waited_ns(status: u64) -> u64 {
        (status >> 23) * 1000
    }
}

/// The control block of this rank, set by the host when it loads a module.
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
#[unsafe(no_mangle)]
pub static mut SYMMEM_CONTROL: *mut Control = core::ptr::null_mut();

#[cfg(feature = "std")]
std::thread_local! {
    static THREAD_CONTROL: core::cell::Cell<*mut Control> =
        const { core::cell::Cell::new(core::ptr::null_mut()) };
}

/// Makes `control` the control block of the waits this host thread makes (the CPU
/// backend calls it on every kernel thread); null for none.
#[cfg(feature = "std")]
pub fn set_thread_control(control: *mut Control) {
    THREAD_CONTROL.with(|c| c.set(control));
}

/// This rank's control block, or null.
#[inline(always)]
pub(crate) fn control() -> *mut Control {
    #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
    {
        // SAFETY: the host writes the global once, before any launch of the module.
        unsafe { (&raw const SYMMEM_CONTROL).read_volatile() }
    }
    #[cfg(all(
        not(any(target_arch = "amdgpu", target_arch = "nvptx64")),
        feature = "std"
    ))]
    {
        THREAD_CONTROL.with(core::cell::Cell::get)
    }
    #[cfg(all(
        not(any(target_arch = "amdgpu", target_arch = "nvptx64")),
        not(feature = "std")
    ))]
    {
        core::ptr::null_mut()
    }
}

/// A clock in nanoseconds, monotonic within a wait: `globaltimer` on nvptx,
/// `s_memrealtime` (100 MHz) on amdgcn, the OS's monotonic clock on the host (0 without
/// `std`: no deadline there).
#[inline(always)]
pub fn now_ns() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let t: u64;
        // SAFETY: reads a special register; no memory is touched.
        unsafe {
            core::arch::asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack))
        };
        t
    }
    #[cfg(target_arch = "amdgpu")]
    {
        unsafe extern "C" {
            fn symmem_amdgpu_realtime() -> u64;
        }
        // SAFETY: the IR library's function reads the real-time counter.
        unsafe { symmem_amdgpu_realtime() * 10 }
    }
    #[cfg(all(
        not(any(target_arch = "amdgpu", target_arch = "nvptx64")),
        feature = "std"
    ))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
    #[cfg(all(
        not(any(target_arch = "amdgpu", target_arch = "nvptx64")),
        not(feature = "std")
    ))]
    {
        0
    }
}

/// One wait's watch over the control block: when its first look was (0: none yet), and
/// whether that look saw the awaited peer departed ([`DEPARTED_SEEN`]).
pub(crate) struct Watch {
    start: u64,
}

/// What [`look`] returns when the wait must give up (any other value is the wait's start).
const GIVE_UP: u64 = u64::MAX;
/// The bit of a wait's start that says its last look saw the awaited peer departed. The
/// clocks stay below it (nanoseconds: centuries).
const DEPARTED_SEEN: u64 = 1 << 63;

impl Watch {
    #[inline(always)]
    pub(crate) const fn new() -> Self {
        Self { start: 0 }
    }

    /// Called by a wait on `signal` for `value` from `peer` (having seen `seen`) after
    /// its `spins`-th spin: true when the wait must give up (see the module
    /// documentation). Looks at the control block only every [`POLL_EVERY`] spins, and
    /// on the host also whenever the spin gave the OS thread up.
    #[inline(always)]
    pub(crate) fn give_up(
        &mut self,
        spins: u32,
        signal: *const u64,
        value: u64,
        seen: u64,
        peer: u64,
    ) -> bool {
        if !spins.is_multiple_of(POLL_EVERY) && !crate::gave_thread_up(spins) {
            return false;
        }
        // Only plain values cross into the out-of-line look: no pointer into this wait's
        // state or to its signal escapes, so the hot loop keeps its registers and its
        // global address space.
        self.start = look(self.start, signal.addr() as u64, value, seen, peer);
        self.start == GIVE_UP
    }
}

/// The out-of-line part of [`Watch::give_up`]: returns the wait's start (the clock at
/// its first look, with [`DEPARTED_SEEN`] if this look saw the peer departed) or
/// [`GIVE_UP`].
#[inline(never)]
#[cold]
fn look(start: u64, signal: u64, value: u64, seen: u64, peer: u64) -> u64 {
    let c = control();
    if c.is_null() {
        return start;
    }
    let load = |p: *const u64| {
        // SAFETY: `c` is this rank's live control block (set by the host), and `p` one of
        // its words or a word of the departed bitmask it points to.
        unsafe { u64::load(p, Order::Acquire, Scope::System) }
    };
    // SAFETY: field addresses of the live block.
    let (status, abort, deadline, departed, ranks) = unsafe {
        (
            load(&raw const (*c).status),
            load(&raw const (*c).abort),
            load(&raw const (*c).deadline_ns),
            load(&raw const (*c).departed),
            load(&raw const (*c).ranks),
        )
    };
    if status != 0 {
        return GIVE_UP;
    }
    // The peer's departure, read with acquire: every word it wrote before it left is
    // visible to this wait's next reads.
    let gone = departed != 0
        && peer < ranks
        && load((departed + (peer / 64) * 8) as *const u64) & (1 << (peer % 64)) != 0;
    let mark = if gone { DEPARTED_SEEN } else { 0 };
    let now = now_ns().clamp(1, DEPARTED_SEEN - 1);
    // The clock starts at the first look; an abort ends the wait at any look.
    let first = match start & !DEPARTED_SEEN {
        0 => now,
        first => first,
    };
    let waited = now.wrapping_sub(first);
    let why = if abort != 0 || (gone && start & DEPARTED_SEEN != 0) {
        REASON_ABORT
    } else if deadline != 0 && waited > deadline {
        REASON_TIMEOUT
    } else {
        return first | mark;
    };
    write_record(c, why, peer, waited, signal, value, seen);
    GIVE_UP
}

/// Records in the live control block `c` that a wait or request gave up.
#[inline(never)]
#[cold]
fn write_record(
    c: *mut Control,
    why: u64,
    peer: u64,
    waited: u64,
    signal: u64,
    value: u64,
    seen: u64,
) {
    // SAFETY: `c` is this rank's live control block. The details first, then the status
    // word that says they are there (release).
    unsafe {
        let store = |p: *mut u64, v: u64, order| u64::store(p, v, order, Scope::System);
        store(&raw mut (*c).signal, signal, Order::Relaxed);
        store(&raw mut (*c).value, value, Order::Relaxed);
        store(&raw mut (*c).seen, seen, Order::Relaxed);
        store(
            &raw mut (*c).status,
            status::pack(why, peer, waited),
            Order::Release,
        );
    }
}

/// Records that a request for `peer` at `address` could not be made (`why`, with two
/// words of detail), unless a record is there already; without a control block (a host
/// test) there is nowhere to record it and the request is dropped all the same.
#[inline(never)]
#[cold]
pub(crate) fn record(why: u64, peer: u64, address: u64, value: u64, seen: u64) {
    let c = control();
    if c.is_null() {
        return;
    }
    // SAFETY: the live control block's status word.
    if unsafe { u64::load(&raw const (*c).status, Order::Acquire, Scope::System) } == 0 {
        write_record(c, why, peer, 0, address, value, seen);
    }
}

/// What a one-node collective does in a build that leaves it out
/// ([`crate::ONE_NODE_KERNELS`] false): records [`REASON_ONE_NODE_KERNEL`], so the host
/// reports the launch as an error rather than a result nobody computed, and the rank's
/// later waits end at once.
#[inline(never)]
#[cold]
pub(crate) fn one_node_kernel_launched() {
    record(REASON_ONE_NODE_KERNEL, NO_PEER, 0, 0, 0);
}

#[cfg(test)]
mod tests {
    use super::status;

    #[test]
    fn status_words_round_trip() {
        let s = status::pack(super::REASON_TIMEOUT, 5, 2_500_000_000);
        assert_eq!(status::reason(s), super::REASON_TIMEOUT);
        assert_eq!(status::peer(s), Some(5));
        assert_eq!(status::waited_ns(s), 2_500_000_000);
        let s = status::pack(super::REASON_ABORT, super::NO_PEER, 0);
        assert_eq!(
            (status::reason(s), status::peer(s)),
            (super::REASON_ABORT, None)
        );
        assert_ne!(s, 0);
        let s = status::pack(super::REASON_PEER_GAVE_UP, (1 << 20) - 2, 1 << 40);
        assert_eq!(status::reason(s), super::REASON_PEER_GAVE_UP);
        assert_eq!(status::peer(s), Some((1 << 20) - 2));
        assert_eq!(status::waited_ns(s), (1 << 40) / 1000 * 1000);
    }

    /// Found by the soak on a loaded machine: a host wait looked at its control block
    /// only every `POLL_EVERY` spins, and took an abort only at its second look; with
    /// threads sleeping between spins, that was seconds after a peer was lost.
    #[cfg(feature = "std")]
    #[test]
    fn an_abort_ends_a_host_wait_at_its_first_yield() {
        use super::{Control, NO_PEER, POLL_EVERY, REASON_ABORT, Watch, set_thread_control};
        let mut control = Control {
            abort: 3,
            ..Control::default()
        };
        set_thread_control(&raw mut control);
        let (word, mut watch) = (0u64, Watch::new());
        let gave_up =
            (1..=2 * POLL_EVERY).find(|&spins| watch.give_up(spins, &word, 1, 0, NO_PEER));
        set_thread_control(core::ptr::null_mut());
        assert_eq!(gave_up, Some(64));
        assert_eq!(status::reason(control.status), REASON_ABORT);
    }
}
