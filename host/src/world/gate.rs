//! The launch gate of ranks that share a device context (issue 52).
//!
//! Ranks that are threads of one process on one GPU share its primary context, and the
//! driver's synchronising calls wait for every kernel of a context: `cuCtxSynchronize`
//! (cudarc's first `new_stream` of a `CudaContext` makes one), `cuMemFree`, a module
//! load, and, where the driver loads kernels lazily (`CUDA_MODULE_LOADING=LAZY`, its
//! default since CUDA 12.2), the first launch of any kernel not loaded yet, cuBLAS's
//! included ("loading kernels might require context synchronization", the CUDA
//! programming guide's section on lazy loading). A collective's kernel waits on the
//! device for its peers' kernels. So one rank's thread inside such a call, before it
//! has launched its part of a collective, while a peer's kernel of that collective
//! already waits for it, waits for that kernel, which waits for it: both stall until the
//! kernel's wait deadline gives up (ten minutes by default), and the collective's output
//! is then wrong.
//!
//! The gate makes that impossible for symmem's collectives and for every step a program
//! runs through [`World::collectively`]: no rank launches before every rank has reached
//! the call (so every rank has finished whatever it enqueued before, loads and all), and
//! no rank returns before every rank has launched (so whatever a rank does next, every
//! kernel of the call is enqueued and completes). Two host rendezvous per call among
//! threads of this process; not used where ranks are processes, or for the CPU backend,
//! whose kernels are host threads.

use super::World;
use crate::backend::Backend;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// One rank's count of passes, alone on its cache line (ranks spin on each other's).
#[repr(align(64))]
#[derive(Default)]
struct Count(AtomicU64);

/// What the ranks of one world in this process share: each rank's passes.
struct Passes {
    counts: Box<[Count]>,
}

/// The gates of this process's worlds, by key (a world's rank 0's serial, unique in this
/// process): the ranks of a world find the same one. A map because the ranks come from
/// separate `World::new` calls on their own threads; entries of gates no rank holds any
/// more are dropped as new ones come.
static GATES: Mutex<Vec<(u64, Weak<Passes>)>> = Mutex::new(Vec::new());

/// One rank's side of its world's gate.
pub(crate) struct LaunchGate {
    passes: Arc<Passes>,
    rank: usize,
    /// How long a pass waits for a peer before giving up (`Config::wait_deadline`;
    /// zero: without end, though a peer that leaves or is lost still ends it).
    patience: Duration,
}

impl LaunchGate {
    /// The gate of the world `key` names, for `rank` of `world` ranks.
    pub(crate) fn join(key: u64, rank: usize, world: usize, patience: Duration) -> Self {
        let mut gates = GATES.lock().unwrap_or_else(|p| p.into_inner());
        gates.retain(|(_, gate)| gate.strong_count() > 0);
        let passes = match gates
            .iter()
            .find_map(|(k, gate)| (*k == key).then(|| gate.upgrade()))
        {
            Some(Some(passes)) => passes,
            _ => {
                let passes = Arc::new(Passes {
                    counts: (0..world).map(|_| Count::default()).collect(),
                });
                gates.push((key, Arc::downgrade(&passes)));
                passes
            }
        };
        Self {
            passes,
            rank,
            patience,
        }
    }

    /// Counts this rank through the gate, then waits until every rank has passed as often:
    /// spinning for a few microseconds, then yielding, then sleeping briefly. `gone(peer)`,
    /// asked about the first rank that has not passed, says whether the world lost a rank
    /// (`Some`, with the rank where known: that one, or another), which ends the wait.
    ///
    /// # Errors
    /// [`Error::PeerLost`] naming the rank `gone` named; [`Error::NotReached`]
    /// naming the first rank that had not passed once the patience ran out.
    pub(crate) fn pass(&self, gone: impl Fn(usize) -> Option<Option<usize>>) -> Result<()> {
        let counts = &self.passes.counts;
        let mine = counts[self.rank].0.fetch_add(1, Ordering::AcqRel) + 1;
        let behind = || (0..counts.len()).find(|&r| counts[r].0.load(Ordering::Acquire) < mine);
        let start = Instant::now();
        let mut looks: u32 = 0;
        while let Some(peer) = behind() {
            looks = looks.saturating_add(1);
            if looks < 1 << 12 {
                std::hint::spin_loop();
                continue;
            }
            if looks.is_multiple_of(64) {
                let waited = start.elapsed();
                if let Some(rank) = gone(peer) {
                    return Err(Error::PeerLost { rank, waited });
                }
                if !self.patience.is_zero() && waited > self.patience {
                    return Err(Error::NotReached {
                        rank: self.rank,
                        peer,
                        waited,
                    });
                }
            }
            if looks < 1 << 14 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        Ok(())
    }
}

impl<B: Backend> World<B> {
    /// Runs `launches`, one collective step of this rank (kernels that wait on the device
    /// for the same step's kernels on other ranks), so that it cannot stall where ranks
    /// share a device context: where they do (threads of this process on one GPU), no
    /// rank starts `launches` before every rank has reached this call, and none returns
    /// before every rank has finished `launches` (see the module documentation); elsewhere
    /// it just runs `launches`. symmem's collectives run this way; run a step of your own
    /// kernels that wait for each other (a barrier, a signal wait on a peer's kernel of
    /// the same step) this way too. Collective: every rank calls it, in the same order as
    /// its other collective calls. Inside [`World::capture`] it records `launches` and
    /// the graph's [`Graph::replay`](crate::Graph::replay) passes the gate instead.
    ///
    /// ```
    /// use symmem::{Config, backend::cpu::Cpu};
    /// symmem::spawn_ranks(2, &Config::default(), |_| Ok(Cpu::new()), |world| {
    ///     let step = world.collectively(|| {
    ///         // A kernel of yours that waits for its peers' kernels, launched here.
    ///         Ok(world.rank())
    ///     })?;
    ///     assert_eq!(step, world.rank());
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// What `launches` returns; [`Error::PeerLost`] if a peer left or was lost while this
    /// rank waited for it at the gate, [`Error::NotReached`] if a peer did not reach the
    /// call within [`Config::wait_deadline`](crate::Config::wait_deadline) (`launches`
    /// did not run if that was before it). The first rank to give up on a peer poisons the
    /// world naming it, so a rank still waiting for the same peer then gets `PeerLost`
    /// naming that rank.
    pub fn collectively<R>(&self, launches: impl FnOnce() -> Result<R>) -> Result<R> {
        let Some(gate) = self.shared.gate.as_ref() else {
            return launches();
        };
        if self.shared.capturing.load(Ordering::Acquire) {
            self.shared
                .captured_collective
                .store(true, Ordering::Release);
            return launches();
        }
        let gone = |peer: usize| {
            let departed = self.shared.departures.all.is_set(peer);
            departed.then_some(Some(peer)).or(self.shared.abort.read())
        };
        self.gate_passed(gate.pass(gone))?;
        let launched = launches();
        // Passed whatever `launches` returned: peers wait here for this rank too.
        let passed = self.gate_passed(gate.pass(gone));
        let value = launched?;
        passed.map(|()| value)
    }

    /// `passed`, after poisoning the world where a peer never reached the call: the
    /// ranks are out of step, so this rank's waits end (the abort word names the peer)
    /// and every later call reports it ([`World::check_waits`]).
    fn gate_passed(&self, passed: Result<()>) -> Result<()> {
        if let Err(Error::NotReached { peer, .. }) = &passed {
            self.shared.abort.abort(Some(*peer));
        }
        passed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A key no other test's gate has.
    fn key() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1 << 40);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// No rank leaves pass `k` before every rank has arrived at it: each counts its
    /// arrivals before passing and checks, after, that all `world` of pass `k` arrived.
    #[test]
    fn no_rank_passes_before_every_rank_arrived() {
        let (world, passes, key) = (4, 200, key());
        let arrived: Vec<AtomicUsize> = (0..passes).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            for rank in 0..world {
                let arrived = &arrived;
                s.spawn(move || {
                    let gate = LaunchGate::join(key, rank, world, Duration::from_secs(60));
                    for (k, count) in arrived.iter().enumerate() {
                        count.fetch_add(1, Ordering::SeqCst);
                        gate.pass(|_| None).expect("every rank comes");
                        assert_eq!(count.load(Ordering::SeqCst), world, "pass {k}, rank {rank}");
                    }
                });
            }
        });
    }

    /// A rank that never comes and is known gone ends the wait with `PeerLost` naming it;
    /// one that is not known gone, at the patience, with `NotReached` naming it.
    #[test]
    fn a_missing_rank_is_named() {
        let world = key();
        let gates: Vec<LaunchGate> = (0..3)
            .map(|r| LaunchGate::join(world, r, 3, Duration::from_millis(50)))
            .collect();
        // Ranks 0 and 1 pass once; rank 2 never does.
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let waits: Vec<_> = gates[..2]
                .iter()
                .map(|gate| s.spawn(move || gate.pass(|_| None)))
                .collect();
            waits
                .into_iter()
                .map(|w| w.join().expect("no panic"))
                .collect()
        });
        for (rank, result) in results.into_iter().enumerate() {
            match result {
                Err(Error::NotReached {
                    rank: r,
                    peer: 2,
                    waited,
                }) => {
                    assert_eq!(r, rank);
                    assert!(
                        waited >= Duration::from_millis(50) && waited < Duration::from_secs(10)
                    );
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
        let patient = LaunchGate::join(key(), 0, 2, Duration::ZERO);
        let gone = patient.pass(|peer| (peer == 1).then_some(Some(1)));
        assert!(
            matches!(gone, Err(Error::PeerLost { rank: Some(1), .. })),
            "{gone:?}"
        );
    }

    /// Worlds with other keys have gates of their own, and a key's gate is shared only
    /// while some rank holds it.
    #[test]
    fn one_gate_per_world() {
        let (a, b) = (key(), key());
        let a0 = LaunchGate::join(a, 0, 2, Duration::ZERO);
        let a1 = LaunchGate::join(a, 1, 2, Duration::ZERO);
        let b0 = LaunchGate::join(b, 0, 2, Duration::ZERO);
        assert!(Arc::ptr_eq(&a0.passes, &a1.passes));
        assert!(!Arc::ptr_eq(&a0.passes, &b0.passes));
        let weak = Arc::downgrade(&b0.passes);
        drop(b0);
        assert!(
            weak.upgrade().is_none(),
            "nothing keeps a gate no rank holds"
        );
    }
}
