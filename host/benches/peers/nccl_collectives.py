"""Peers of host/benches/multi_gpu.rs's collectives: NCCL (through torch.distributed) and
PyTorch symmetric memory's one-shot and two-shot all-reduce, timed the way the Rust bench
times its own, on N GPUs of one host, one process per rank (rank r on cuda:r).

Lines (tool, op), f32 data, sum where it reduces:
  nccl, all_gather          dist.all_gather_into_tensor
  nccl, all_reduce          dist.all_reduce (SUM, in place)
  nccl, reduce_scatter      dist.reduce_scatter_tensor (SUM)
  torch_symm, all_reduce_1shot   torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group)
  torch_symm, all_reduce_2shot   torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group)
where buf is a slice of one torch.distributed._symmetric_memory.empty buffer (backend
"CUDA": peers' allocations imported through IPC handles; multicast off), rendezvoused
once on the world group. A symmetric-memory op that raises at some size gives a NaN row
and its error on stdout; the other lines go on.

Sizes follow nccl-tests: all_gather: the OUTPUT bytes (each rank contributes size/N);
all_reduce: the buffer bytes; reduce_scatter: the INPUT bytes (each rank receives size/N).
A size that does not split into whole f32 elements per rank is skipped.

Timing, as the Rust side: for each (line, size) a barrier, 3 warm-up samples, then 20
samples; a sample is a pair of CUDA events on the current stream around `batch`
back-to-back ops, batch = clamp(64 MiB // size, 1, 20); time per op = elapsed / batch.
Every rank runs the same loop at once; the row is rank 0's median (the upper median,
sorted[len // 2], as the Rust benches take it). NCCL ops run on ProcessGroupNCCL's own
stream, ordered after and before the current stream by events, so the current stream's
events include them (that is how torch users see NCCL). algbw_gbs = bytes / time
(1 GB = 1e9 bytes); busbw_gbs = algbw * (N-1)/N (all_gather, reduce_scatter) or
algbw * 2(N-1)/N (all_reduce), nccl-tests' bus bandwidth; at N = 1 the factor is 1 (not
0), so a one-GPU smoke run still shows a rate.

Correctness: after timing each (line, size), every rank fills its input with
(rank+1)*4096 + (i % 1021) (integers, exact in f32, and every partial sum stays below
2^24) and checks the whole result exactly; a mismatch on any rank makes the exit code 1
(the CSV is still written). Any rank failing, or any wait running past its bound (120 s
for process-group operations, --timeout for the whole run), also exits non-zero.

NVLink multicast is never used: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1 are forced before torch loads, and no multimem op is called.

Writes (rank 0) the CSV header `tool,op,world,bytes,batch,median_us,algbw_gbs,busbw_gbs`
and prints a table. Needs N <= the visible GPU count (NCCL refuses two ranks on one GPU):
otherwise prints `skipped: ...` and exits 0. N = 1 works (a smoke test on one GPU).

Small messages (--small), the peers of host/benches/small_messages.rs, timed its way:
  nccl            dist.all_reduce (SUM, in place, a plain tensor)
  torch_one_shot  torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group), buf as above
for f32 buffers of 8 B to 1 MiB (--sizes; default 8,64,512,4K,16K,64K,128K,256K,1M).
Each (line, size) is first called once eagerly on every rank and checked exactly (the
pattern above); then every rank captures a CUDA graph of CALLS = 50 back-to-back calls
(after 3 warm-up calls on a side stream, as torch asks before a capture), replays it once,
and, per trial, after a barrier times REPLAYS = 20 replays by the host's wall clock up to a
device synchronize: a rank's time per call = elapsed / (CALLS * REPLAYS). The row is the
slowest rank's time in each trial, median of TRIALS = 5 trials (upper median). The one-shot
graph's last output is checked once more after the timing (NCCL's in-place calls compound,
so its graph has nothing exact to compare; its buffer is zero while timed). A line that
raises (eagerly, or while being captured: some torch versions cannot capture an op) on any
rank gets a NaN row and the reason on stdout; the other lines go on. Writes (rank 0) the
header `world,line,bytes,us,floor_ratio` (the Rust bench's; floor_ratio left empty: the
floors are measured there) and prints a table.

Usage: python3 nccl_collectives.py --world N --out nccl.csv [--sizes 4K,1M,...] [--timeout S]
       python3 nccl_collectives.py --small --world N --out small_nccl.csv [--sizes 8,1M,...]
"""
import os

# NVLink multicast must never be used (it can take the host's shared GPUs out of service).
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import ranks  # noqa: E402  (this folder)
from units import MIB, human, parse_size  # noqa: E402  (this folder)

DEFAULT_SIZES = "4K,16K,64K,256K,1M,4M,16M,64M,256M,1G"
WARMUP, SAMPLES, MAX_BATCH, BATCH_BYTES = 3, 20, 20, 64 * MIB
PG_TIMEOUT = datetime.timedelta(seconds=120)
CSV_HEADER = "tool,op,world,bytes,batch,median_us,algbw_gbs,busbw_gbs"
# (tool, op) in the order they run and print.
LINES = [
    ("nccl", "all_gather"),
    ("nccl", "all_reduce"),
    ("nccl", "reduce_scatter"),
    ("torch_symm", "all_reduce_1shot"),
    ("torch_symm", "all_reduce_2shot"),
]
# The check pattern: value(rank, i) = (rank + 1) * STEP + (i % PERIOD).
STEP, PERIOD = 4096, 1021
# Small messages (--small): the sizes, lines and graph timing of host/benches/small_messages.rs.
SMALL_SIZES = "8,64,512,4K,16K,64K,128K,256K,1M"
SMALL_LINES = ["nccl", "torch_one_shot"]
SMALL_HEADER = "world,line,bytes,us,floor_ratio"
CALLS, REPLAYS, TRIALS, GRAPH_WARMUP = 50, 20, 5, 3


def batch_for(size):
    return max(1, min(BATCH_BYTES // size, MAX_BATCH))


def bus_factor(op, n):
    if n == 1:
        return 1.0
    return 2.0 * (n - 1) / n if op.startswith("all_reduce") else (n - 1) / n


def divides(op, size, n):
    """Whether `size` (nccl-tests' convention for `op`) gives whole f32 elements per rank."""
    if op in ("all_gather", "reduce_scatter"):
        return size % (4 * n) == 0
    return size % 4 == 0


def median(v):
    s = sorted(v)
    return s[len(s) // 2]


class Rank:
    """One rank's state: device, group, timing events, the symmetric buffer."""

    def __init__(self, rank, world):
        self.rank, self.world = rank, world
        self.dev = torch.device("cuda", rank)
        self.group = dist.group.WORLD.group_name
        self.e0 = torch.cuda.Event(enable_timing=True)
        self.e1 = torch.cuda.Event(enable_timing=True)
        self.symm_buf, self.symm_hdl, self.symm_err = None, None, None

    def any_rank(self, flag):
        """True when `flag` is true on any rank (a MAX all-reduce of 0/1)."""
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def pattern(self, n, start=0):
        return (torch.arange(start, start + n, dtype=torch.int64, device=self.dev) % PERIOD).to(torch.float32)

    def value(self, rank, n, start=0):
        return self.pattern(n, start) + float((rank + 1) * STEP)

    def reduced(self, n, start=0):
        """The sum over all ranks of value(rank, n, start)."""
        total = float(STEP * self.world * (self.world + 1) // 2)
        return self.pattern(n, start) * float(self.world) + total

    def time_us(self, op, batch):
        """Median microseconds per op: CUDA events on the current stream around `batch` ops."""
        stream = torch.cuda.current_stream()
        ms = []
        for sample in range(WARMUP + SAMPLES):
            self.e0.record(stream)
            for _ in range(batch):
                op()
            self.e1.record(stream)
            self.e1.synchronize()
            if sample >= WARMUP:
                ms.append(self.e0.elapsed_time(self.e1))
        return median(ms) * 1e3 / batch

    def setup_symm(self, max_bytes):
        try:
            import torch.distributed._symmetric_memory as symm_mem

            ranks.maybe_enable_symm_mem(symm_mem, self.group)
            self.symm_buf = symm_mem.empty(max_bytes // 4, dtype=torch.float32, device=self.dev)
            self.symm_hdl = symm_mem.rendezvous(self.symm_buf, self.group)
            self.symm_buf.zero_()
            torch.cuda.synchronize()
            if self.rank == 0:
                get_backend = getattr(symm_mem, "get_backend", None)
                backend = get_backend(self.dev) if get_backend else "?"
                print(f"torch symmetric memory: {human(max_bytes)} buffer, backend {backend}, "
                      f"world {self.symm_hdl.world_size}")
        except Exception as e:
            self.symm_err = f"{type(e).__name__}: {e}"
        if self.any_rank(self.symm_err is not None):
            self.symm_err = self.symm_err or "failed on another rank"
            print(f"rank {self.rank}: torch symmetric memory unavailable ({self.symm_err}); "
                  "its lines are NaN")
            self.symm_buf, self.symm_hdl = None, None


def nccl_case(r, op, size):
    """(timed op, check) for an NCCL line; the check returns None or the mismatch."""
    n = r.world
    if op == "all_gather":
        per = size // 4 // n
        inp = torch.zeros(per, dtype=torch.float32, device=r.dev)
        out = torch.empty(per * n, dtype=torch.float32, device=r.dev)

        def run():
            dist.all_gather_into_tensor(out, inp)

        def check():
            inp.copy_(r.value(r.rank, per))
            out.fill_(-1.0)
            run()
            ranks = torch.arange(1, n + 1, dtype=torch.float32, device=r.dev).view(n, 1) * STEP
            want = r.pattern(per).view(1, per) + ranks
            return None if torch.equal(out.view(n, per), want) else "gathered values differ"

    elif op == "all_reduce":
        count = size // 4
        buf = torch.zeros(count, dtype=torch.float32, device=r.dev)

        def run():
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)

        def check():
            buf.copy_(r.value(r.rank, count))
            run()
            return None if torch.equal(buf, r.reduced(count)) else "reduced values differ"

    else:  # reduce_scatter
        count = size // 4
        per = count // n
        inp = torch.zeros(count, dtype=torch.float32, device=r.dev)
        out = torch.empty(per, dtype=torch.float32, device=r.dev)

        def run():
            dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.SUM)

        def check():
            inp.copy_(r.value(r.rank, count))
            out.fill_(-1.0)
            run()
            want = r.reduced(per, start=r.rank * per)
            return None if torch.equal(out, want) else "reduced shard differs"

    return run, check


def symm_case(r, op, size):
    count = size // 4
    buf = r.symm_buf[:count]  # a slice: the ops take its storage offset
    if op == "all_reduce_1shot":

        def run():
            return torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", r.group)

        def check():
            buf.copy_(r.value(r.rank, count))
            out = run()
            return None if torch.equal(out, r.reduced(count)) else "one-shot result differs"

    else:

        def run():
            return torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", r.group)

        def check():
            buf.copy_(r.value(r.rank, count))
            run()
            return None if torch.equal(buf, r.reduced(count)) else "two-shot result differs"

    return run, check


def measure(r, tool, op, size):
    """One (line, size) on every rank: (row or None, check failure or None)."""
    n = r.world
    batch = batch_for(size)
    nan_row = (tool, op, n, size, batch, float("nan"), float("nan"), float("nan"))
    if tool == "torch_symm":
        if r.symm_buf is None:
            return nan_row, None
        run, check = symm_case(r, op, size)
        # A probe call first: every rank agrees whether the op works at this size.
        err = None
        try:
            run()
            torch.cuda.synchronize()
        except Exception as e:
            err = f"{type(e).__name__}: {e}"
        if r.any_rank(err is not None):
            if r.rank == 0 or err is not None:
                print(f"rank {r.rank}: torch_symm {op} at {human(size)} raised: "
                      f"{err or 'on another rank'}; row is NaN")
            return nan_row, None
    else:
        run, check = nccl_case(r, op, size)
    torch.cuda.synchronize()
    dist.barrier()
    us = r.time_us(run, batch)
    torch.cuda.synchronize()
    dist.barrier()
    failure = check()
    torch.cuda.synchronize()
    failed_anywhere = r.any_rank(failure is not None)
    if failure is not None:
        print(f"rank {r.rank}: WRONG RESULT: {tool} {op} at {human(size)}: {failure}")
    algbw = size / (us * 1e-6) / 1e9
    row = (tool, op, n, size, batch, us, algbw, algbw * bus_factor(op, n))
    return row, ("wrong result" if failed_anywhere else None)


def start(rank, world, port):
    """This rank's device, with the NCCL process group started on it."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, timeout=PG_TIMEOUT, device_id=dev)
    return dev


def print_versions(dev, world):
    v = torch.cuda.nccl.version()
    v = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    print(f"torch {torch.__version__}, NCCL {v}, world {world}, {torch.cuda.get_device_name(dev)}")


def run_rank(rank, world, port, rows_of, out, header, row_format, print_rows):
    """One rank of a run: starts its process group, measures with `rows_of(r, failures)`
    (the rows, kept on rank 0; a line whose check failed goes into `failures`), and on
    rank 0 writes the rows to `out` as CSV (`header`, then `row_format % row` each) and
    prints them with `print_rows(rows, world)`. Ends at once on an exception (tearing
    down a process group that may be wedged could hang), with status 1 when a check
    failed."""
    dev = start(rank, world, port)
    failures = []
    try:
        r = Rank(rank, world)
        if rank == 0:
            print_versions(dev, world)
        rows = rows_of(r, failures)
        if rank == 0:
            with open(out, "w") as f:
                f.write(header + "\n")
                for row in rows:
                    f.write(row_format % row)
            print_rows(rows, world)
            print(f"wrote {out}")
        dist.barrier()
    except Exception:
        print(f"rank {rank}: FAILED:\n{traceback.format_exc()}", flush=True)
        os._exit(1)
    dist.destroy_process_group()
    if failures:  # the same list on every rank (agreed per check)
        print(f"rank {rank}: FAILED: wrong results in: {', '.join(failures)}", flush=True)
        sys.exit(1)


def collective_rows(r, sizes, failures):
    """Every (tool, op) line of LINES at every size (one that does not split into f32
    elements over the ranks is skipped): the rows of rank 0."""
    ar_sizes = [s for s in sizes if divides("all_reduce", s, r.world)]
    if ar_sizes:
        r.setup_symm(max(ar_sizes))
    rows = []
    for tool, op in LINES:
        for size in sizes:
            base_op = "all_reduce" if op.startswith("all_reduce") else op
            if not divides(base_op, size, r.world):
                if r.rank == 0:
                    print(f"{tool} {op}: {size} bytes do not split into f32 elements "
                          f"over {r.world} ranks; skipped")
                continue
            row, failure = measure(r, tool, op, size)
            if failure:
                failures.append(f"{tool} {op} {human(size)}")
            if r.rank == 0:
                rows.append(row)
                print(f"{tool:>10} {op:<17} {human(size):>5}  batch {row[4]:>2}  "
                      f"{row[5]:10.2f} us  algbw {row[6]:8.2f}  busbw {row[7]:8.2f} GB/s"
                      + ("  WRONG" if failure else ""))
    return rows


def worker(rank, world, port, sizes, out):
    run_rank(rank, world, port, lambda r, failures: collective_rows(r, sizes, failures), out,
             CSV_HEADER, "%s,%s,%d,%d,%d,%.3f,%.2f,%.2f\n", print_table)


def small_case(r, line, size):
    """(call, eager check, check of the graph's last result) for a small-message line; the
    checks return None or the mismatch."""
    count = size // 4
    if line == "nccl":
        buf = torch.zeros(count, dtype=torch.float32, device=r.dev)

        def run():
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)

        def check():
            buf.copy_(r.value(r.rank, count))
            run()
            ok = torch.equal(buf, r.reduced(count))
            buf.zero_()  # zeros stay zeros through the timed in-place calls
            return None if ok else "reduced values differ"

        def check_graph(last):
            return None  # in place: the replayed calls compound, nothing exact to compare

    else:  # torch_one_shot
        buf = r.symm_buf[:count]  # a slice: the op takes its storage offset

        def run():
            return torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", r.group)

        def check():
            buf.copy_(r.value(r.rank, count))  # stays: the one-shot only reads its input
            out = run()
            return None if torch.equal(out, r.reduced(count)) else "one-shot result differs"

        def check_graph(last):
            return None if torch.equal(last, r.reduced(count)) else "graph-replayed one-shot result differs"

    return run, check, check_graph


def capture(run):
    """A CUDA graph of CALLS back-to-back calls of `run` and the last call's result. Warm-up
    calls on a side stream first, as torch asks; thread-local capture, so that another
    thread's CUDA calls (ProcessGroupNCCL's watchdog) cannot invalidate it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP):
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph, last = torch.cuda.CUDAGraph(), None
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(CALLS):
            last = run()
    return graph, last


def replayed_us(r, graph):
    """Microseconds per call of `graph`'s CALLS calls, the slowest rank's per trial, median
    over TRIALS trials (the same on every rank)."""
    graph.replay()
    torch.cuda.synchronize()
    trials = []
    for _ in range(TRIALS):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(REPLAYS):
            graph.replay()
        torch.cuda.synchronize()
        trials.append((time.perf_counter() - t0) * 1e6 / (CALLS * REPLAYS))
    slowest = torch.tensor(trials, dtype=torch.float64, device=r.dev)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return median(slowest.tolist())


def small_measure(r, line, size):
    """One small-message (line, size) on every rank: (us per call or NaN, check failure or None)."""
    if line == "torch_one_shot" and r.symm_buf is None:
        return float("nan"), None

    def missing(stage, err):
        if r.rank == 0 or err is not None:
            print(f"rank {r.rank}: {line} at {human(size)} {stage}: {err or 'on another rank'}; "
                  "row is NaN")
        return float("nan"), None

    # The eager call, checked: it is also the probe whether the op works at this size.
    err, failure = None, None
    try:
        run, check, check_graph = small_case(r, line, size)
        failure = check()
        torch.cuda.synchronize()
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    if r.any_rank(err is not None):
        return missing("raised", err)
    failed_anywhere = r.any_rank(failure is not None)
    if failure is not None:
        print(f"rank {r.rank}: WRONG RESULT: {line} at {human(size)} (eager): {failure}")
    graph, last = None, None
    try:
        graph, last = capture(run)
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    if r.any_rank(err is not None):  # no rank replays a graph that another could not capture
        graph, last = None, None
        torch.cuda.synchronize()
        return missing("cannot be graph-captured", err)
    dist.barrier()
    us = replayed_us(r, graph)
    torch.cuda.synchronize()
    failure = check_graph(last)
    if failure is not None:
        print(f"rank {r.rank}: WRONG RESULT: {line} at {human(size)} (graph): {failure}")
    failed_anywhere = r.any_rank(failure is not None) or failed_anywhere
    del graph, last
    torch.cuda.synchronize()
    dist.barrier()
    return us, ("wrong result" if failed_anywhere else None)


def small_rows(r, sizes, failures):
    """Every line of SMALL_LINES at every size, graph-replayed: the rows of rank 0."""
    if r.rank == 0:
        print(f"small messages: {CALLS} calls per CUDA graph, {REPLAYS} replays per trial, "
              f"median of {TRIALS} trials of the slowest rank")
    r.setup_symm(max(sizes))
    rows = []
    for line in SMALL_LINES:
        for size in sizes:
            us, failure = small_measure(r, line, size)
            if failure:
                failures.append(f"{line} {human(size)}")
            if r.rank == 0:
                rows.append((r.world, line, size, us))
                print(f"{line:>14} {human(size):>5}  {us:8.2f} us per call"
                      + ("  WRONG" if failure else ""))
    return rows


def small_worker(rank, world, port, sizes, out):
    run_rank(rank, world, port, lambda r, failures: small_rows(r, sizes, failures), out,
             SMALL_HEADER, "%d,%s,%d,%.3f,\n", print_small_table)


def print_small_table(rows, world):
    print(f"\n== world {world}, small messages: us per call, graph-replayed (slowest rank, "
          f"median of {TRIALS} trials)")
    by = {(line, size): us for _, line, size, us in rows}
    print(f"{'size':>6}" + "".join(f" {line:>15}" for line in SMALL_LINES))
    for s in sorted({size for _, _, size, _ in rows}):
        cells = []
        for line in SMALL_LINES:
            us = by.get((line, s))
            cells.append("-" if us is None or math.isnan(us) else f"{us:.2f}")
        print(f"{human(s):>6}" + "".join(f" {c:>15}" for c in cells))


def print_table(rows, world):
    print(f"\n== world {world}: median us per op / bus GB/s (rank 0)")
    sizes = sorted({r[3] for r in rows})
    lines = [(t, o) for t, o in LINES if any(r[0] == t and r[1] == o for r in rows)]
    by = {(r[0], r[1], r[3]): r for r in rows}
    head = f"{'size':>6}" + "".join(f" {t + ':' + o:>36}" for t, o in lines)
    print(head)
    for s in sizes:
        cells = []
        for t, o in lines:
            r = by.get((t, o, s))
            cells.append("-" if r is None or math.isnan(r[5]) else f"{r[5]:.2f} us {r[7]:.1f} GB/s")
        print(f"{human(s):>6}" + "".join(f" {c:>36}" for c in cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--out", help="default nccl.csv; with --small small_nccl.csv")
    ap.add_argument("--sizes", help=f"default {DEFAULT_SIZES}; with --small {SMALL_SIZES}")
    ap.add_argument("--small", action="store_true",
                    help="small messages, graph-replayed: nccl and torch_one_shot all-reduce")
    ap.add_argument("--timeout", type=float, default=360,
                    help="seconds for the whole run (default 360: inside run_multi_gpu.sh's 400)")
    a = ap.parse_args()
    a.out = a.out or ("small_nccl.csv" if a.small else "nccl.csv")
    text = a.sizes or (SMALL_SIZES if a.small else DEFAULT_SIZES)
    sizes = [parse_size(s) for s in text.split(",") if s.strip()]
    if a.world < 1 or not sizes or min(sizes) <= 0:
        print("FAILED: --world must be >= 1 and --sizes positive")
        return 2
    if a.small:
        odd = [s for s in sizes if not divides("all_reduce", s, a.world)]
        if odd:
            print(f"small messages: {', '.join(map(human, odd))} not whole f32 elements; skipped")
        sizes = [s for s in sizes if s not in odd]
        if not sizes:
            print("FAILED: no --sizes of whole f32 elements")
            return 2
    count = torch.cuda.device_count()
    if a.world > count:
        print(f"skipped: world {a.world} needs {a.world} GPUs (NCCL refuses two ranks on one GPU); "
              f"{count} visible")
        return 0
    if os.path.dirname(a.out):
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
    run = small_worker if a.small else worker
    return ranks.run_ranks(run, a.world, (a.world, ranks.free_port(), sizes, a.out), a.timeout)


if __name__ == "__main__":
    sys.exit(main())
