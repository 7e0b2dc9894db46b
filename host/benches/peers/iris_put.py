"""Peer baseline for host/benches/cuda.rs: an Iris-style Triton translated put, timed like
the Rust bench (same sizes, samples, batches, rotation; bytes read + written), and
PyTorch symmetric memory's empty + rendezvous latency.

Translation is Iris's `__translate`: a device-resident int64 heap_bases table,
`offset = ptr - heap_bases[cur]; remote = heap_bases[to] + offset`, cast back to the
element pointer type. Two lines: `triton_iris_put` (exactly that, no hints, as Iris's
reference put) and `triton_iris_put_hint` (with the multiple_of/max_contiguous hint newer
Iris allows on the translated pointer). The "heaps" are two 2 GiB torch allocations in one
process: heap_bases = [heap0, heap1], rank 0 puts src into its heap0 address translated
to heap1. Each variant's block size and warps are picked once at 256 MiB from a small
sweep and used for every size. Batches (sizes < 64 MiB) are replayed from a CUDA graph
of `batch` launches (Python launch overhead would otherwise dominate), as the Rust bench
and copy.cu replay theirs: the graph's slots repeat across samples, alike for every tool.

Usage: python3 iris_put.py OUT.csv
"""
import os
import sys
import time

import torch
import triton
import triton.language as tl

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SIZES = [4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB, 2 * GIB]
MAX = 2 * GIB
SAMPLES, WARMUP, MAX_BATCH, BATCH_BYTES = 30, 5, 100, 64 * MIB


@triton.jit
def __translate(ptr, from_rank, to_rank, heap_bases):
    from_base = tl.load(heap_bases + from_rank)
    to_base = tl.load(heap_bases + to_rank)
    ptr_int = tl.cast(ptr, tl.uint64)
    offset = ptr_int - from_base
    to_base_byte = tl.cast(to_base, tl.pointer_type(tl.int8))
    translated_ptr_byte = to_base_byte + offset
    translated_ptr = tl.cast(translated_ptr_byte, ptr.dtype)
    return translated_ptr


@triton.jit
def iris_put_kernel(src, dst, n, cur, to, heap_bases, BLOCK: tl.constexpr, HINT: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    remote = __translate(dst + offs, cur, to, heap_bases)
    if HINT:
        remote = tl.max_contiguous(tl.multiple_of(remote, 16), 16)
    data = tl.load(src + offs, mask=mask)
    tl.store(remote, data, mask=mask)


def batch_for(size):
    return max(1, min(BATCH_BYTES // size, MAX_BATCH))


def median(v):
    s = sorted(v)
    return s[len(s) // 2]


def pct(v, p):
    s = sorted(v)
    return s[int(round((len(s) - 1) * p))]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "triton.csv"
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name(0)}")
    g = torch.Generator(device=dev).manual_seed(1)
    src = torch.randint(1, 255, (MAX,), dtype=torch.uint8, device=dev, generator=g)
    heap0 = torch.empty(MAX + 4096, dtype=torch.uint8, device=dev)
    heap1 = torch.empty(MAX + 4096, dtype=torch.uint8, device=dev)
    heap_bases = torch.tensor([heap0.data_ptr(), heap1.data_ptr()], dtype=torch.int64, device=dev)
    src32, heap0_32 = src.view(torch.int32), heap0.view(torch.int32)
    rows = []
    stream = torch.cuda.Stream()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def launch(hint, cfg, off, size):
        block, warps = cfg
        n = size // 4
        o = off // 4
        grid = (triton.cdiv(n, block),)
        iris_put_kernel[grid](src32[o:], heap0_32[o:], n, 0, 1, heap_bases, BLOCK=block, HINT=hint,
                              num_warps=warps)

    def time_line(hint, cfg, size, samples=SAMPLES, warmup=WARMUP):
        batch = batch_for(size)
        slots = max(1, MAX // size)
        state = {"next": 0}

        def enqueue():
            for _ in range(batch):
                off = (state["next"] % slots) * size
                state["next"] += 1
                launch(hint, cfg, off, size)

        graph = None
        with torch.cuda.stream(stream):
            enqueue()  # compile + warm
            torch.cuda.synchronize()
            if batch > 1:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    enqueue()
            ms = []
            for sample in range(warmup + samples):
                e0.record(stream)
                if graph is not None:
                    graph.replay()
                else:
                    enqueue()
                e1.record(stream)
                e1.synchronize()
                if sample >= warmup:
                    ms.append(e0.elapsed_time(e1))
        gbps = [2 * size * batch / (t * 1e-3) / 1e9 for t in ms]
        med = median(gbps)
        return batch, median(ms) * 1e3 / batch, med, (pct(gbps, 0.9) - pct(gbps, 0.1)) / med * 100

    def verify(hint, cfg, size):
        heap1[: size + 4096].fill_(0xEE)
        with torch.cuda.stream(stream):
            launch(hint, cfg, 0, size)
        torch.cuda.synchronize()
        ok = torch.equal(heap1[:size], src[:size]) and bool((heap1[size : size + 4096] == 0xEE).all())
        if not ok:
            raise SystemExit(f"triton put (hint={hint}) of {size} bytes is wrong")

    configs = [(b, w) for b in (1024, 4096, 16384) for w in (4, 8)]
    best = {}
    for hint in (False, True):
        tried = []
        for cfg in configs:
            verify(hint, cfg, 4 * MIB + 4096)
            _, _, gb, _ = time_line(hint, cfg, 256 * MIB, samples=10, warmup=2)
            tried.append((gb, cfg))
        tried.sort(reverse=True)
        best[hint] = tried[0][1]
        print(f"hint={hint}: configs at 256 MiB (GB/s, (BLOCK int32s, warps)): "
              + ", ".join(f"{gb:.0f} {c}" for gb, c in tried))
    for size in SIZES:
        line = []
        for hint, name in ((False, "triton_iris_put"), (True, "triton_iris_put_hint")):
            batch, us, gb, spread = time_line(hint, best[hint], size)
            rows.append(("triton", name, size, batch, SAMPLES, us, gb, spread))
            line.append(gb)
        # torch's copy_ (cudaMemcpyAsync D2D) as this process's own reference
        batch = batch_for(size)
        slots, nxt, ms = max(1, MAX // size), 0, []
        with torch.cuda.stream(stream):
            for sample in range(WARMUP + SAMPLES):
                e0.record(stream)
                for _ in range(batch):
                    off = (nxt % slots) * size
                    nxt += 1
                    heap1[off : off + size].copy_(src[off : off + size])
                e1.record(stream)
                e1.synchronize()
                if sample >= WARMUP:
                    ms.append(e0.elapsed_time(e1))
        gbps = [2 * size * batch / (t * 1e-3) / 1e9 for t in ms]
        med = median(gbps)
        rows.append(("triton", "torch_copy", size, batch, SAMPLES, median(ms) * 1e3 / batch, med,
                     (pct(gbps, 0.9) - pct(gbps, 0.1)) / med * 100))
        print(f"{size:>10} B  iris_put {line[0]:8.1f}  iris_put_hint {line[1]:8.1f}  torch_copy {med:8.1f} GB/s"
              f"  (batch {batch})")
    for hint in (False, True):
        verify(hint, best[hint], 64 * MIB)
    print(f"verified both Triton puts at 4 MiB + 4 KiB and 64 MiB; configs {best}")
    del src, heap0, heap1
    torch.cuda.empty_cache()
    rows.extend(symm_mem_latency(dev))
    with open(out, "w") as f:
        f.write("tool,line,bytes,batch,samples,median_us,gbps,spread_pct\n")
        for r in rows:
            f.write("%s,%s,%d,%d,%d,%.3f,%.2f,%.2f\n" % r)
    print(f"wrote {out}")


def symm_mem_latency(dev, iters=100, warmup=10):
    """Median of torch symmetric memory's empty + rendezvous of 1 MiB (single-rank world)."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    try:
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        if not dist.is_initialized():
            try:
                dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
            except Exception as e:
                print(f"nccl process group failed ({e}); trying gloo")
                dist.init_process_group("gloo", rank=0, world_size=1)
        group = dist.group.WORLD.group_name
        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            try:
                symm_mem.enable_symm_mem_for_group(group)
            except Exception as e:  # deprecated / no-op in newer torch
                print(f"enable_symm_mem_for_group: {e}")
        keep, us = [], []
        for i in range(warmup + iters):
            t0 = time.perf_counter()
            t = symm_mem.empty(MIB, dtype=torch.uint8, device=dev)
            h = symm_mem.rendezvous(t, group)
            t1 = time.perf_counter()
            keep.append((t, h))
            if i >= warmup:
                us.append((t1 - t0) * 1e6)
        med = median(us)
        print(f"torch symmetric memory empty+rendezvous of 1 MiB: median {med:.1f} us over {iters}")
        del keep
        dist.destroy_process_group()
        return [("torch", "torch_symm_empty_rendezvous_us", MIB, 1, iters, med, float("nan"),
                 (pct(us, 0.9) - pct(us, 0.1)) / med * 100)]
    except Exception as e:
        print(f"torch symmetric memory line skipped: {type(e).__name__}: {e}")
        return []


if __name__ == "__main__":
    main()
