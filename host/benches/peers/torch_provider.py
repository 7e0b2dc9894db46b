"""The provider test: a peer-base table built from PyTorch symmetric memory drives symmem's
UNCHANGED put kernel (entry `symmem_put` of the project's sm_90 PTX), across processes
and GPUs.

symmem's kernels need only a device-resident u64 table whose entry r is the buffer's base
on rank r as mapped in the calling process (bases[cur] == the local base). Here the table
is torch's: `hdl.buffer_ptrs` of a torch.distributed._symmetric_memory buffer, with
  --backend cuda     torch's default CUDA backend (peers' allocations imported through
                     IPC handles; multicast off), or
  --backend nvshmem  torch's NVSHMEM backend, selected with
                     symm_mem.set_backend("NVSHMEM") before the first allocation (after
                     checking symm_mem.is_nvshmem_available()); its buffer pointers are
                     nvshmem_ptr(buffer, peer) (NVSHMEM bootstraps from the world group's
                     store at that first allocation).

Each rank r (one process, on cuda:r): for n in {4096+3 (a tail), 1 MiB, 64 MiB}:
  buf = symm_mem.empty(world*n + 4096, uint8); hdl = symm_mem.rendezvous(buf, group);
  table = torch.tensor(hdl.buffer_ptrs as int64) on the device, checked: table[r] ==
  buf.data_ptr(), no entry 0, every entry congruent to it mod 16 (the kernels' contract);
  printed. buf is poisoned with 0xA5; barrier; r launches symmem_put(dst = buf.data_ptr()
  + r*n, src = its pattern, n, table, world, cur = r, to = p) for every rank p, i.e. writes
  its pattern into slot r of every rank's copy (256 threads per block, ceil(n/4096) blocks;
  loaded with cupy.RawModule(path=PTX), launched on torch's current stream through
  cupy.cuda.ExternalStream, numpy u64/u32 scalars as the arguments); synchronize;
  dist.barrier (every rank's puts are complete before anyone reads) and, for the CUDA
  backend, hdl.barrier (torch's own device barrier, bounded at 30 s; NVSHMEM's is a
  no-op). Then every rank checks every slot q of its own copy against rank q's pattern
  (regenerated from q's seed: a non-zero integer hash of the byte index, never 0xA5) and
  that the 4 KiB guard after the last slot is still 0xA5.

Prints one summary line per rank and, from rank 0,
  provider <backend>: world N: verified X bytes on N ranks: every byte matched
(X: every slot byte checked, summed over ranks). Exits 1 on any mismatch or failure in
any rank, or when the run passes --timeout (default 100 s); every process-group wait is
bounded at 120 s. World 1 works on one GPU. With world > the GPU count: prints
`skipped: ...` and exits 0, unless --shared-gpu.

--shared-gpu (best effort): allows world > the GPU count by putting rank r on
cuda:(r % count) with a gloo process group (NCCL refuses two ranks on one GPU) and
TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1 (torch's CUDA backend otherwise refuses ranks
sharing a device). Torch's own handle exchange then runs between processes on one GPU;
where it fails, the run fails with torch's error. NVSHMEM does not support several PEs
per GPU in general: expect `--backend nvshmem --shared-gpu` to fail.

NVLink multicast is never used: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1 are forced before torch loads; nothing multimem is called.

Usage: python3 torch_provider.py --ptx target/code-objects/symmem_device-sm_90.ptx
       --world N --backend cuda|nvshmem [--shared-gpu] [--timeout S]
"""
import os

# NVLink multicast must never be used (it can take the host's shared GPUs out of service).
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import ranks  # noqa: E402  (this folder)

KIB, MIB = 1 << 10, 1 << 20
SIZES = [4 * KIB + 3, MIB, 64 * MIB]
GUARD = 4 * KIB
POISON = 0xA5
THREADS, BYTES_PER_THREAD = 256, 16
SEED = 0x2545F491
PG_TIMEOUT = datetime.timedelta(seconds=120)
HANDLE_BARRIER_MS = 30_000


class Failure(Exception):
    pass


def human(n):
    for unit, m in (("M", MIB), ("K", KIB)):
        if n >= m and n % m == 0:
            return f"{n // m} {unit}iB"
    return f"{n} B"


def pattern(q, n, dev):
    """Rank q's n bytes: a hash of the byte index and q's seed, in 1..254, never POISON.
    Integer ops only (products stay below 2^63), so every rank regenerates it exactly."""
    i = torch.arange(n, dtype=torch.int64, device=dev)
    x = (i * 2654435761 + SEED * (q + 1)) & 0x7FFFFFFF
    x = x ^ (x >> 15)
    x = (x * 2246822519) & 0x7FFFFFFF
    x = x ^ (x >> 13)
    b = x % 254 + 1
    b = torch.where(b == POISON, torch.full_like(b, 0x5A), b)
    return b.to(torch.uint8)


def to_i64(p):
    """An unsigned 64-bit address as the int64 with the same bits."""
    p = int(p)
    return p - (1 << 64) if p >= (1 << 63) else p


def worker(rank, world, port, ptx, backend, shared):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    code = 1
    try:
        code = run_rank(rank, world, ptx, backend, shared)
    except Exception:
        print(f"rank {rank}: FAILED:\n{traceback.format_exc()}", flush=True)
    sys.stdout.flush()
    # No interpreter teardown: NVSHMEM's and the process group's destructors may wait on
    # peers that have already gone. Every rank has passed the final barrier on success.
    os._exit(code)


def run_rank(rank, world, ptx, backend, shared):
    count = torch.cuda.device_count()
    ordinal = rank % count if shared else rank
    torch.cuda.set_device(ordinal)
    dev = torch.device("cuda", ordinal)
    pg = "gloo" if shared and world > count else "nccl"
    if pg == "nccl":
        dist.init_process_group("nccl", rank=rank, world_size=world, timeout=PG_TIMEOUT, device_id=dev)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=PG_TIMEOUT)
    group = dist.group.WORLD.group_name
    host_dev = dev if pg == "nccl" else torch.device("cpu")

    def total(v):
        t = torch.tensor([v], dtype=torch.int64, device=host_dev)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return int(t.item())

    import cupy
    import torch.distributed._symmetric_memory as symm_mem

    ranks.maybe_enable_symm_mem(symm_mem, group)
    if backend == "nvshmem":
        if not hasattr(symm_mem, "set_backend") or not hasattr(symm_mem, "is_nvshmem_available"):
            raise Failure(f"torch {torch.__version__} has no symm_mem.set_backend / is_nvshmem_available")
        if not symm_mem.is_nvshmem_available():
            raise Failure("NVSHMEM is not available to this torch (build or runtime): "
                          "symm_mem.is_nvshmem_available() is False")
        symm_mem.set_backend("NVSHMEM")  # before the first symmetric allocation
    get_backend = getattr(symm_mem, "get_backend", None)
    chosen = get_backend(dev) if get_backend else "CUDA (torch without get_backend)"
    if get_backend and (chosen or "").upper() != backend.upper():
        raise Failure(f"torch symmetric memory backend for {dev} is {chosen!r}, wanted {backend.upper()} "
                      "(is TORCH_SYMMMEM set?)")

    cupy.cuda.Device(ordinal).use()
    kernel = cupy.RawModule(path=ptx).get_function("symmem_put")
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(dev).cuda_stream, ordinal)
    if rank == 0:
        print(f"torch {torch.__version__}, cupy {cupy.__version__}, backend {chosen}, "
              f"{pg} process group, world {world}, {torch.cuda.get_device_name(dev)}; "
              f"kernel symmem_put from {ptx}", flush=True)

    verified, mismatches, notes = 0, 0, []
    keep = []  # NVSHMEM keeps its allocations for the process's life anyway
    for n in SIZES:
        buf = symm_mem.empty(world * n + GUARD, dtype=torch.uint8, device=dev)
        hdl = symm_mem.rendezvous(buf, group)
        keep.append((buf, hdl))
        if hdl.world_size != world or hdl.rank != rank:
            raise Failure(f"handle says rank {hdl.rank} of {hdl.world_size}, wanted {rank} of {world}")
        ptrs = [int(p) for p in hdl.buffer_ptrs]
        local = buf.data_ptr()
        print(f"rank {rank} n={n}: peer bases " + " ".join(f"{p:#x}" for p in ptrs)
              + f" (local buffer {local:#x})", flush=True)
        if len(ptrs) != world:
            raise Failure(f"buffer_ptrs has {len(ptrs)} entries for world {world}")
        if ptrs[rank] != local:
            raise Failure(f"table contract broken: bases[{rank}] = {ptrs[rank]:#x} != buf.data_ptr() {local:#x}")
        if any(p == 0 for p in ptrs):
            raise Failure(f"a peer's base is 0 (not mapped for load/store from this rank): {ptrs}")
        if any((p - local) % 16 for p in ptrs):
            raise Failure(f"peer bases not congruent mod 16 to the local one: {ptrs}")
        table = torch.tensor([to_i64(p) for p in ptrs], dtype=torch.int64, device=dev)
        src = pattern(rank, n, dev)
        if n == SIZES[0] and world > 1 and torch.equal(src, pattern((rank + 1) % world, n, dev)):
            raise Failure("two ranks' patterns are equal: the check could not see swapped slots")

        buf.fill_(POISON)
        torch.cuda.synchronize(dev)
        dist.barrier()  # every copy is poisoned before any rank writes
        blocks = max(1, -(-n // (THREADS * BYTES_PER_THREAD)))
        with stream:
            for p in range(world):
                kernel((blocks,), (THREADS,),
                       (np.uint64(local + rank * n), np.uint64(src.data_ptr()), np.uint64(n),
                        np.uint64(table.data_ptr()), np.uint32(world), np.uint32(rank), np.uint32(p)))
        torch.cuda.synchronize(dev)
        dist.barrier()  # every rank's puts are complete
        if backend == "cuda":
            hdl.barrier(channel=0, timeout_ms=HANDLE_BARRIER_MS)
            torch.cuda.synchronize(dev)

        bad = 0
        for q in range(world):
            slot = buf[q * n:(q + 1) * n]
            want = pattern(q, n, dev)
            if not torch.equal(slot, want):
                diff = (slot != want).nonzero()
                k = int(diff.numel())
                first = int(diff[0, 0]) if k else -1
                notes.append(f"n={n} slot {q} (from rank {q}): {k} bytes differ, first at {first}: "
                             f"{int(slot[first])} != {int(want[first])}")
                bad += k
            verified += n
        guard = buf[world * n:]
        if not bool((guard == POISON).all()):
            k = int((guard != POISON).sum())
            notes.append(f"n={n}: {k} guard bytes after the last slot were overwritten")
            bad += k
        mismatches += bad
        del src, table
        torch.cuda.synchronize(dev)
        dist.barrier()  # nobody poisons the next buffer while a peer still reads

    status = "every byte matched" if not mismatches else f"{mismatches} bytes WRONG"
    print(f"rank {rank} (cuda:{ordinal}, {backend}): slots of {', '.join(human(n) for n in SIZES)} "
          f"from {world} ranks + 4 KiB guards: {verified} bytes checked: {status}", flush=True)
    for note in notes:
        print(f"rank {rank}: MISMATCH: {note}", flush=True)
    all_bad, all_verified = total(mismatches), total(verified)
    dist.barrier()
    if rank == 0:
        if all_bad:
            print(f"provider {backend}: world {world}: FAILED: {all_bad} bytes wrong "
                  f"of {all_verified} checked on {world} ranks", flush=True)
        else:
            print(f"provider {backend}: world {world}: verified {all_verified} bytes on {world} ranks: "
                  "every byte matched", flush=True)
    return 1 if all_bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ptx", required=True, help="symmem_device-sm_90.ptx")
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--backend", choices=("cuda", "nvshmem"), default="cuda")
    ap.add_argument("--shared-gpu", action="store_true",
                    help="best effort: rank r on cuda:(r %% count), gloo process group")
    ap.add_argument("--timeout", type=float, default=100, help="seconds for the whole run")
    a = ap.parse_args()
    if a.world < 1:
        print("FAILED: --world must be >= 1")
        return 2
    ptx = os.path.abspath(a.ptx)
    try:
        with open(ptx) as f:
            if ".entry symmem_put" not in f.read():
                print(f"FAILED: {ptx} has no entry symmem_put")
                return 1
    except OSError as e:
        print(f"FAILED: {e}")
        return 1
    count = torch.cuda.device_count()
    if count == 0:
        print("skipped: no CUDA device")
        return 0
    if a.world > count and not a.shared_gpu:
        print(f"skipped: world {a.world} needs {a.world} GPUs, {count} visible (--shared-gpu: best effort)")
        return 0
    if a.shared_gpu and a.world > count:
        os.environ["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] = "1"
        print(f"--shared-gpu: {a.world} ranks on {count} GPU(s) (rank r on cuda:(r % {count})), gloo group; "
              "best effort")
    if a.backend == "nvshmem":
        # The three buffers of every size stay allocated (torch's NVSHMEM handles keep them).
        need = sum(a.world * n + GUARD for n in SIZES)
        os.environ.setdefault("NVSHMEM_SYMMETRIC_SIZE", str(max(1 << 30, 2 * need + (256 << 20))))
    return ranks.run_ranks(worker, a.world, (a.world, ranks.free_port(), ptx, a.backend, a.shared_gpu), a.timeout)


if __name__ == "__main__":
    sys.exit(main())
