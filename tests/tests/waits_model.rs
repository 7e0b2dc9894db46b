//! Bounded device waits against a model (issue 15): a random schedule of collectives in
//! which one random rank stops at a random point (it returns, dropping its world). The
//! model: if the rank stops after the whole schedule, every rank completes; otherwise
//! every other rank ends with exactly one error (a device wait that timed out, a peer
//! lost at a host barrier, or a peer's failure reported by the agreement) and none
//! hangs. CPU backend, ranks as threads, a short `wait_deadline`.

use proptest::prelude::*;
use std::time::{Duration, Instant};
use symmem::backend::cpu::Cpu;
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, Error, World};

const DEADLINE: Duration = Duration::from_millis(150);
const COUNT: usize = 64;

/// One step of the schedule, made by every rank that has not stopped.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// `Collectives::barrier`: a device barrier.
    DeviceBarrier,
    /// A one-shot all-reduce.
    AllReduce,
    /// `World::barrier`: a host barrier with the ledger agreement.
    HostBarrier,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::DeviceBarrier),
        Just(Step::AllReduce),
        Just(Step::HostBarrier)
    ]
}

/// Runs `schedule` on one rank, stopping (returning) before step `stop` if this rank is
/// the stopper; ends with a host barrier, where a failed device wait surfaces.
fn rank_body(
    world: World<Cpu>,
    schedule: &[Step],
    stopper: usize,
    stop: usize,
) -> symmem::Result<()> {
    let coll = Collectives::new(&world)?;
    let (dst, src) = (world.zeros::<f32>(COUNT)?, world.full::<f32>(COUNT, 1.0)?);
    world.barrier()?;
    for (i, step) in schedule.iter().enumerate() {
        if world.rank() == stopper && i == stop {
            return Ok(());
        }
        match step {
            Step::DeviceBarrier => coll.barrier()?,
            Step::AllReduce => {
                coll.all_reduce(&dst, &src, COUNT, ReduceOp::Sum, Algorithm::OneShot)?
            }
            Step::HostBarrier => world.barrier()?,
        }
    }
    world.barrier()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn one_stopping_rank_gives_every_other_rank_one_error(
        n in 2usize..=4,
        schedule in prop::collection::vec(step(), 1..5),
        stopper_seed in any::<usize>(),
        stop_seed in any::<usize>(),
    ) {
        let stopper = stopper_seed % n;
        // `schedule.len()` means: it never stops early.
        let stop = stop_seed % (schedule.len() + 1);
        let config = Config {
            heap_bytes: 4 << 20,
            wait_deadline: DEADLINE,
            timeout: Duration::from_secs(10),
            ..Config::default()
        };
        let start = Instant::now();
        let results = symmem::spawn_ranks(n, &config, |_| Ok(Cpu::new()), |world| {
            rank_body(world, &schedule, stopper, stop)
        })
        .expect("launch");
        prop_assert!(start.elapsed() < Duration::from_secs(9), "took {:?}", start.elapsed());
        if stop == schedule.len() {
            for (rank, r) in results.iter().enumerate() {
                prop_assert!(r.is_ok(), "rank {} of {}: {:?}", rank, n, r);
            }
        } else {
            for (rank, r) in results.iter().enumerate() {
                if rank == stopper {
                    prop_assert!(r.is_ok(), "the stopper: {:?}", r);
                    continue;
                }
                prop_assert!(
                    matches!(
                        r,
                        Err(Error::WaitTimedOut { .. }
                            | Error::PeerLost { .. }
                            | Error::PeerFailed { .. })
                    ),
                    "rank {} of {} (stopper {} at {} of {:?}): {:?}",
                    rank, n, stopper, stop, schedule, r
                );
            }
        }
    }
}
