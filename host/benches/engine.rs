//! The off-node engine against MPI on the same bytes, in one run (`--features mpi`, under
//! `mpirun` with the machine split into emulated nodes by `SYMMEM_RANKS_PER_NODE`).
//!
//! Rank 0 measures against the first rank on another node (`far`); every other rank
//! serves (its proxy) and waits at the world's barriers. Lines (median of `SAMPLES`,
//! host wall clock; a put line's samples alternate ours and the reference's):
//! - `put`: a kernel (`symmem_rma_put_delivered`, one block) puts `n` bytes from a device
//!   buffer to `far`'s copy of a symmetric buffer and waits until they are delivered (the
//!   engine's quiet), `repeats` times in one launch; the time per put. Reference
//!   `mpi_put`: `MPI_Put` of the same `n` bytes (on the CPU backend from the very kernel
//!   buffer; on a GPU, whose memory this MPI cannot read, from a host copy) into `far`'s
//!   window plus `MPI_Win_flush`, the same number of times. `ratio` = reference time /
//!   ours (bandwidth ours / MPI's).
//! - `latency_8b`: the same with `n = 8` and one thread: from the device's put to the
//!   value visible on `far`, per put. Reference: 8-byte `MPI_Put` + flush.
//! - `all_reduce` (every rank): `Collectives::all_reduce` of f32 sums over the world,
//!   `Algorithm::Auto`; reference `MPI_Allreduce` of the same count of host f32s. The
//!   slowest rank's time (an `MPI_Allreduce` of the times).
//!
//! The CPU backend moves kernel memory through the window directly; `--cuda` puts every
//! rank on GPU `rank % count`, whose heap data is staged through host memory and applied
//! by the target's proxy when MPI is not CUDA-aware: the staging path, named as such in
//! the output. `SYMMEM_OFF_NODE=nvshmem` runs the same rows over the NVSHMEM transport
//! (build with `--features mpi,nvshmem`). `--max-put BYTES` and `--max-all-reduce BYTES` cap the put and all-reduce
//! sizes, `--min-all-reduce BYTES` skips the smaller all-reduces, and `--each-sample`
//! prints every all-reduce sample's time as it ends.
//!
//! Run: `SYMMEM_RANKS_PER_NODE=2 mpirun -np 4 target/release/deps/engine-<hash> [--cuda]`
//! (build with `cargo bench -p symmem --features mpi --bench engine --no-run`).

mod cli;

use clap::Parser;
use mpi::ffi;
use std::ffi::{c_int, c_void};
use std::process::ExitCode;
use std::time::Instant;
use symmem::backend::cpu::Cpu;
use symmem::backend::cuda::Cuda;
use symmem::backend::{Backend, BackendKind, Grid};
use symmem::bootstrap::Bootstrap;
use symmem::bootstrap::mpi::MpiBootstrap;
use symmem::collectives::{Algorithm, Collectives, ReduceOp};
use symmem::{Config, Result, World};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
/// Puts from the smallest staged one (above the 16 bytes that travel inside a request)
/// through one staging slot's 256 KiB to pieces of many slots.
const PUT_SIZES: [usize; 7] = [256, KIB, 4 * KIB, 16 * KIB, 64 * KIB, MIB, 64 * MIB];
const ALL_REDUCE_SIZES: [usize; 8] = [8, 256, 4 * KIB, 64 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB];
const SAMPLES: usize = 9;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds of `ours` and of `reference` over `SAMPLES` runs each after one
/// warm-up, the two alternating (so drift on a shared machine reaches both alike).
fn paired_seconds(
    ours: &mut dyn FnMut() -> Result<()>,
    reference: &mut dyn FnMut() -> Result<()>,
) -> Result<(f64, f64)> {
    ours()?;
    reference()?;
    let (mut a, mut b) = (Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES));
    for _ in 0..SAMPLES {
        let t = Instant::now();
        ours()?;
        a.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        reference()?;
        b.push(t.elapsed().as_secs_f64());
    }
    Ok((median(a), median(b)))
}

fn check(code: c_int, what: &str) {
    assert_eq!(code, ffi::MPI_SUCCESS as c_int, "{what} failed");
}

/// The reference: a window of `len` host bytes on a duplicate of `MPI_COMM_WORLD`,
/// locked for every target (collective).
struct Reference {
    comm: ffi::MPI_Comm,
    win: Option<ffi::MPI_Win>,
    /// How the window was made (printed with the results).
    kind: &'static str,
    /// The window's memory where the reference allocated it (kept alive with it).
    _memory: Vec<u8>,
}

impl Reference {
    fn new(len: usize) -> Self {
        let mut memory = vec![0u8; len];
        // SAFETY: plain MPI calls on live handles and the live buffer.
        unsafe {
            let mut comm = std::mem::MaybeUninit::uninit();
            check(
                ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, comm.as_mut_ptr()),
                "MPI_Comm_dup",
            );
            let comm = comm.assume_init();
            check(
                ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN),
                "MPI_Comm_set_errhandler",
            );
            let mut win = std::mem::MaybeUninit::uninit();
            let mut kind = "MPI_Win_create";
            let mut code = ffi::MPI_Win_create(
                memory.as_mut_ptr().cast(),
                len as ffi::MPI_Aint,
                1,
                ffi::RSMPI_INFO_NULL,
                comm,
                win.as_mut_ptr(),
            );
            // Some MPI builds create no window over memory they did not allocate (seen:
            // Open MPI 4.1.6 on the H200 image, MPI_ERR_WIN with every one-sided
            // component): the reference then puts into memory MPI allocates.
            if code != ffi::MPI_SUCCESS as c_int {
                memory = Vec::new();
                kind = "MPI_Win_allocate (MPI_Win_create failed)";
                let mut base: *mut c_void = std::ptr::null_mut();
                code = ffi::MPI_Win_allocate(
                    len as ffi::MPI_Aint,
                    1,
                    ffi::RSMPI_INFO_NULL,
                    comm,
                    (&raw mut base).cast(),
                    win.as_mut_ptr(),
                );
            }
            let win = (code == ffi::MPI_SUCCESS as c_int).then(|| win.assume_init());
            match win {
                Some(win) => check(
                    ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, win),
                    "MPI_Win_lock_all",
                ),
                None => {
                    kind = "none";
                    eprintln!("engine bench: no MPI window ({code}): no MPI_Put reference")
                }
            }
            Self {
                comm,
                win,
                kind,
                _memory: memory,
            }
        }
    }

    /// `MPI_Put` of the `n` bytes at `origin` to `to` plus `MPI_Win_flush`, `repeats`
    /// times.
    ///
    /// # Safety
    /// `origin..origin + n` is readable host memory.
    unsafe fn put(&self, origin: *const u8, n: usize, to: usize, repeats: u32) {
        let Some(win) = self.win else { return };
        for _ in 0..repeats {
            // SAFETY: `n` readable bytes (the caller) into `to`'s window of the same size.
            unsafe {
                check(
                    ffi::MPI_Put(
                        origin.cast::<c_void>(),
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        to as c_int,
                        0,
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        win,
                    ),
                    "MPI_Put",
                );
                check(ffi::MPI_Win_flush(to as c_int, win), "MPI_Win_flush");
            }
        }
    }

    /// `MPI_Allreduce` (sum) of `count` f32s.
    fn all_reduce(&self, src: &[f32], dst: &mut [f32], count: usize) {
        // SAFETY: `count` f32s in both live buffers.
        unsafe {
            check(
                ffi::MPI_Allreduce(
                    src.as_ptr().cast(),
                    dst.as_mut_ptr().cast(),
                    count as c_int,
                    ffi::RSMPI_FLOAT,
                    ffi::RSMPI_SUM,
                    self.comm,
                ),
                "MPI_Allreduce",
            );
        }
    }

    /// The largest of every rank's `v`.
    fn max(&self, v: f64) -> f64 {
        let mut out = 0f64;
        // SAFETY: one double in and out.
        unsafe {
            check(
                ffi::MPI_Allreduce(
                    (&raw const v).cast(),
                    (&raw mut out).cast(),
                    1,
                    ffi::RSMPI_DOUBLE,
                    ffi::RSMPI_MAX,
                    self.comm,
                ),
                "MPI_Allreduce(max)",
            );
        }
        out
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        // SAFETY: the window and communicator made in `new`; every rank drops it after
        // the same last call (collective frees).
        unsafe {
            if let Some(mut win) = self.win {
                ffi::MPI_Win_unlock_all(win);
                ffi::MPI_Win_free(&mut win);
            }
            ffi::MPI_Comm_free(&mut self.comm);
        }
    }
}

fn row(line: &str, path: &str, bytes: usize, ours: f64, reference: f64) {
    let gbs = |s: f64| bytes as f64 / s / 1e9;
    println!(
        "{line:<12} {path:<8} {bytes:>10} B  ours {:>10.2} us {:>8.3} GB/s  mpi {:>10.2} us {:>8.3} GB/s  ratio {:.2}",
        ours * 1e6,
        gbs(ours),
        reference * 1e6,
        gbs(reference),
        reference / ours
    );
}

fn run<B: Backend>(w: World<B>, max_put: usize, all_reduces: AllReduces) -> Result<()> {
    rows(&w, max_put, all_reduces)?;
    w.finalize()
}

/// Every row; rank 0 prints them.
fn rows<B: Backend>(w: &World<B>, max_put: usize, all_reduces: AllReduces) -> Result<()> {
    let (me, n) = (w.rank(), w.world_size());
    let t = w.topology();
    let far = (0..n)
        .find(|&r| !t.reaches(r))
        .expect("a rank on another node");
    let gpu = w.backend().kind() != BackendKind::Cpu;
    let path = match w.engine_path() {
        Some(symmem::transport::EnginePath::Window) => "window",
        Some(symmem::transport::EnginePath::Staged) => "staged",
        None => "no engine",
    };
    let reference = Reference::new(64 * MIB);
    let dst = w.zeros::<u8>(64 * MIB)?;
    let src = w.device_from_slice(&vec![7u8; 64 * MIB])?;
    // The reference puts the same bytes from memory outside its window, as ours come
    // from a kernel buffer outside the heap: on the CPU backend that very buffer, on a
    // GPU (whose memory this MPI cannot read) a host copy.
    let host_copy = vec![7u8; 64 * MIB];
    let origin: *const u8 = if gpu {
        host_copy.as_ptr()
    } else {
        std::ptr::with_exposed_provenance(src.ptr() as usize)
    };
    w.barrier()?;
    if me == 0 {
        println!(
            "engine bench: {n} ranks, {} nodes, {} backend, rank 0 -> rank {far} ({path}, \
             transport {}); reference window: {}",
            t.nodes(),
            if gpu { "cuda" } else { "cpu" },
            symmem::transport::OffNode::resolve(None).map_or("?", |o| o.name()),
            reference.kind
        );
    }
    // One block: 256 threads on a GPU stage in parallel; on the CPU backend, where a
    // block's threads are OS threads and a direct put is one request, one thread.
    let threads = if gpu { 256 } else { 1 };
    for (size, repeats, grid) in PUT_SIZES
        .iter()
        .filter(|&&s| s <= max_put)
        .map(|&s| (s, (64 * MIB / s).clamp(1, 64) as u32, Grid::new(1, threads)))
        .chain([(8, if gpu { 200 } else { 2000 }, Grid::new(1, 1))])
    {
        if me == 0 {
            let kernels = w.kernels();
            let (ours, mpi) = paired_seconds(
                &mut || {
                    // SAFETY: `dst` and `src` hold 64 MiB >= `size` bytes on every rank
                    // (agreed), `far` is a rank of the world.
                    unsafe {
                        kernels.launch_unchecked(
                            symmem_kernels::symmem_rma_put_delivered,
                            grid,
                            (
                                &dst,
                                &src,
                                dst.peer_bases(),
                                n as u32,
                                me as u32,
                                size as u64,
                                far as u32,
                                repeats,
                            ),
                        )
                    }?;
                    w.backend().synchronize()
                },
                &mut || {
                    // SAFETY: `origin` holds 64 MiB >= `size` readable host bytes.
                    unsafe { reference.put(origin, size, far, repeats) };
                    Ok(())
                },
            )?;
            let mpi = if reference.win.is_some() {
                mpi
            } else {
                f64::NAN
            };
            let line = if size == 8 { "latency_8b" } else { "put" };
            let per = f64::from(repeats);
            row(line, path, size, ours / per, mpi / per);
        }
        w.barrier()?;
    }
    let c = Collectives::new(w)?;
    let rsrc = w.full::<f32>(16 * MIB, me as f32 + 0.5)?;
    let rdst = w.zeros::<f32>(16 * MIB)?;
    let hsrc = vec![me as f32 + 0.5; 16 * MIB];
    let mut hdst = vec![0f32; 16 * MIB];
    w.barrier()?;
    let sizes = ALL_REDUCE_SIZES
        .iter()
        .filter(|&&b| (all_reduces.min..=all_reduces.max).contains(&b));
    for &bytes in sizes {
        let count = bytes / 4;
        // Each sample: every rank starts after a barrier; the slowest rank's time counts.
        let slowest = |op: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
            let mut v = Vec::with_capacity(SAMPLES + 1);
            for sample in 0..=SAMPLES {
                w.barrier()?;
                let t = Instant::now();
                op()?;
                v.push(reference.max(t.elapsed().as_secs_f64()));
                if all_reduces.each_sample && me == 0 {
                    eprintln!("all_reduce {bytes} B sample {sample}: {:.6} s", v[sample]);
                }
            }
            Ok(median(v.split_off(1)))
        };
        let ours = slowest(&mut || {
            c.all_reduce(&rdst, &rsrc, count, ReduceOp::Sum, Algorithm::Auto)?;
            w.backend().synchronize()
        })?;
        let mpi = slowest(&mut || {
            reference.all_reduce(&hsrc, &mut hdst, count);
            Ok(())
        })?;
        let want = (0..n).map(|r| r as f32 + 0.5).sum::<f32>();
        let got = w.read(&rdst.slice(0..count.min(4))?)?;
        assert!(
            got.iter().all(|&v| v == want),
            "all_reduce {got:?} != {want}"
        );
        if me == 0 {
            row("all_reduce", path, bytes, ours, mpi);
        }
    }
    drop(reference);
    w.barrier()
}

/// The off-node engine against MPI on the same bytes (under `mpirun`, with
/// `SYMMEM_RANKS_PER_NODE` splitting the machine into emulated nodes).
#[derive(Parser, Debug)]
#[command(name = "engine")]
struct Options {
    /// Every rank on GPU `rank % count` (the staging path where MPI is not CUDA-aware);
    /// the CPU backend otherwise.
    #[arg(long)]
    cuda: bool,
    /// The largest put, in bytes: a number, optionally with K, M or G.
    #[arg(long, default_value = "64M", value_parser = cli::bytes)]
    max_put: usize,
    /// The largest all-reduce, in bytes (0: none): a number, optionally with K, M or G.
    #[arg(long, default_value = "64M", value_parser = cli::bytes)]
    max_all_reduce: usize,
    /// The smallest all-reduce, in bytes: a number, optionally with K, M or G.
    #[arg(long, default_value = "0", value_parser = cli::bytes)]
    min_all_reduce: usize,
    /// Rank 0 prints every all-reduce sample's time on stderr as it ends (where a size is
    /// slow, how slow, before the bench's limit ends it).
    #[arg(long)]
    each_sample: bool,
    #[command(flatten)]
    cargo: cli::CargoBench,
}

/// Which all-reduces [`rows`] runs and how it reports them.
#[derive(Clone, Copy)]
struct AllReduces {
    min: usize,
    max: usize,
    each_sample: bool,
}

fn main() -> ExitCode {
    let options = Options::parse();
    cli::log();
    let max_put = options.max_put;
    let all_reduces = AllReduces {
        min: options.min_all_reduce,
        max: options.max_all_reduce,
        each_sample: options.each_sample,
    };
    let result = (|| {
        let config = Config {
            heap_bytes: 512 * MIB,
            ..Config::default()
        };
        let bootstrap = Box::new(MpiBootstrap::new()?);
        if options.cuda {
            let backend = Cuda::for_rank(bootstrap.rank())?;
            run(
                World::new(bootstrap, backend, &config)?,
                max_put,
                all_reduces,
            )
        } else {
            run(
                World::new(bootstrap, Cpu::new(), &config)?,
                max_put,
                all_reduces,
            )
        }
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engine bench: {e}");
            ExitCode::FAILURE
        }
    }
}
