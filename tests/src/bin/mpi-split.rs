//! An application that initialises MPI itself (an rsmpi `Universe`) and forms symmem
//! worlds from a split of its communicator: run under `mpirun -np 4` by
//! `tests/tests/host_mpi.rs`.
//!
//! The even and the odd ranks of `MPI_COMM_WORLD` form one world each
//! (`MpiBootstrap::from_communicator`, CPU backend). In each, every rank all-reduces its
//! application rank and puts it into the next world rank's copy of a buffer; both results
//! are checked against what the split says. After the world is dropped, the application
//! uses MPI again over its own communicator (symmem neither finalised MPI nor took its
//! messages), then finalises it by dropping its `Universe`. Each rank prints
//! `mpi-split: rank R of N: world C rank r of n: ok` and exits 0.
//!
//! `--leave`: then, in each world, world rank 1 leaves (drops its world) while world
//! rank 0 waits for it in a device barrier, with the default 10-minute device-wait
//! deadline; rank 0 must get `PeerLost` naming rank 1 within 2 s of the leave (its
//! line ends `left: ok` or `PeerLost from world rank 1 after N ms: ok`).
//!
//! `--threading funneled` initialises MPI with `MPI_THREAD_FUNNELED` instead: forming the
//! world must then fail with `Error::MpiThreadLevel`, which each rank prints
//! (`mpi-split: rank R: refused: ...`) before it exits 0.

use clap::{Parser, ValueEnum};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use symmem::backend::cpu::Cpu;
use symmem::bootstrap::mpi::{MpiBootstrap, rsmpi};
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, Error, World};

use rsmpi::collective::SystemOperation;
use rsmpi::topology::Color;
use rsmpi::traits::*;

/// An application that owns MPI, forming two symmem worlds from a split communicator.
#[derive(Parser)]
struct Options {
    /// The thread level the application initialises MPI with.
    #[arg(long, value_enum, default_value_t = Level::Multiple)]
    threading: Level,
    /// After the checks, world rank 1 leaves while world rank 0 waits for it.
    #[arg(long)]
    leave: bool,
}

/// How long the leaving rank lets its peer wait.
const LEAVE_DELAY: Duration = Duration::from_millis(300);
/// The bound from the leave to the survivor's error.
const LEAVE_BOUND: Duration = Duration::from_secs(2);

/// `--threading`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Level {
    /// `MPI_THREAD_MULTIPLE`: what symmem asks for.
    Multiple,
    /// `MPI_THREAD_FUNNELED`: less than symmem needs.
    Funneled,
}

fn main() -> ExitCode {
    let options = Options::parse();
    let level = match options.threading {
        Level::Multiple => rsmpi::Threading::Multiple,
        Level::Funneled => rsmpi::Threading::Funneled,
    };
    let Some((universe, _)) = rsmpi::initialize_with_threading(level) else {
        eprintln!("mpi-split: MPI was initialised already");
        return ExitCode::FAILURE;
    };
    let app = universe.world();
    let (rank, size) = (app.rank() as usize, app.size() as usize);
    let color = rank % 2;
    let Some(half) = app.split_by_color(Color::with_value(color as i32)) else {
        eprintln!("mpi-split: rank {rank}: no communicator from the split");
        return ExitCode::FAILURE;
    };
    let line = match MpiBootstrap::from_communicator(&half) {
        Err(e @ Error::MpiThreadLevel { .. }) if options.threading == Level::Funneled => {
            format!("mpi-split: rank {rank}: refused: {e}")
        }
        Err(e) => {
            eprintln!("mpi-split: rank {rank}: forming the world: {e}");
            return ExitCode::FAILURE;
        }
        Ok(_) if options.threading == Level::Funneled => {
            eprintln!("mpi-split: rank {rank}: a world formed over MPI_THREAD_FUNNELED");
            return ExitCode::FAILURE;
        }
        Ok(bootstrap) => match in_the_world(bootstrap, rank, color, size, options.leave) {
            Ok(line) => line,
            Err(e) => {
                eprintln!("mpi-split: rank {rank}: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    // The application's MPI after symmem's world has gone: still initialised, and its
    // own communicator still carries its own messages.
    let mut ranks = 0usize;
    app.all_reduce_into(&1usize, &mut ranks, SystemOperation::sum());
    if ranks != size {
        eprintln!("mpi-split: rank {rank}: MPI after the world counted {ranks} ranks, not {size}");
        return ExitCode::FAILURE;
    }
    println!("{line}");
    ExitCode::SUCCESS
}

/// Forms the world of `color` over `bootstrap`, checks an all-reduce and a put in it, and
/// drops it; the line to print, or what went wrong.
fn in_the_world(
    bootstrap: MpiBootstrap,
    rank: usize,
    color: usize,
    size: usize,
    leave: bool,
) -> Result<String, String> {
    checks(bootstrap, rank, color, size, leave).map_err(|e| e.to_string())?
}

/// [`in_the_world`]: symmem's errors outside, the checks' own inside.
fn checks(
    bootstrap: MpiBootstrap,
    rank: usize,
    color: usize,
    size: usize,
    leave: bool,
) -> symmem::Result<Result<String, String>> {
    let world = World::new(Box::new(bootstrap), Cpu::new(), &Config::default())?;
    let (me, n) = (world.rank(), world.world_size());
    // The application ranks of this world, in world order: the split keeps their order.
    let members: Vec<usize> = (0..size).filter(|r| r % 2 == color).collect();
    if n != members.len() || members[me] != rank {
        return Ok(Err(format!(
            "world rank {me} of {n} is not the split's {members:?}"
        )));
    }
    // The buffers and the collectives borrow the world: they go before it is finalised.
    {
        let collectives = Collectives::new(&world)?;
        let src = world.from_slice(&[rank as i32; 8])?;
        let dst = world.zeros::<i32>(8)?;
        let inbox = world.zeros::<u64>(1)?;
        world.barrier()?;
        collectives.all_reduce(&dst, &src, 8, ReduceOp::Sum, Algorithm::Auto)?;
        let sum: i32 = members.iter().map(|&r| r as i32).sum();
        let reduced = world.read(&dst)?;
        if reduced != [sum; 8] {
            return Ok(Err(format!("all-reduce gave {reduced:?}, not {sum} x 8")));
        }
        let mine = world.device_from_slice(&[rank as u64])?;
        world.put(&inbox, &mine, (me + 1) % n)?;
        world.barrier()?;
        let from = members[(me + n - 1) % n] as u64;
        let got = world.read(&inbox)?;
        if got != [from] {
            return Ok(Err(format!("the previous rank put {got:?}, not {from}")));
        }
    }
    let line = format!("mpi-split: rank {rank} of {size}: world {color} rank {me} of {n}");
    if leave {
        return Ok(leave_or_wait(world, line));
    }
    world.finalize()?;
    Ok(Ok(format!("{line}: ok")))
}

/// `--leave`: world rank 1 drops `world` after [`LEAVE_DELAY`], while world rank 0 waits
/// for it in a device barrier and must get `PeerLost` naming it within [`LEAVE_BOUND`]
/// of the leave.
fn leave_or_wait(world: World<Cpu>, line: String) -> Result<String, String> {
    let me = world.rank();
    let collectives = Collectives::new(&world).map_err(|e| e.to_string())?;
    let probe = world.zeros::<u8>(1).map_err(|e| e.to_string())?;
    world.barrier().map_err(|e| e.to_string())?;
    if me == 1 {
        std::thread::sleep(LEAVE_DELAY);
        // Returning drops the world: its watchdog tells rank 0.
        return Ok(format!("{line}: left: ok"));
    }
    let start = Instant::now();
    let waited = collectives
        .barrier()
        .and_then(|()| world.read(&probe).map(drop));
    let elapsed = start.elapsed();
    match waited {
        Err(Error::PeerLost { rank: Some(1), .. }) if elapsed < LEAVE_DELAY + LEAVE_BOUND => {
            Ok(format!(
                "{line}: PeerLost from world rank 1 after {} ms: ok",
                elapsed.as_millis()
            ))
        }
        other => Err(format!(
            "waiting for world rank 1, which left: {other:?} after {elapsed:?}, not PeerLost \
             naming it within {:?}",
            LEAVE_DELAY + LEAVE_BOUND
        )),
    }
}
