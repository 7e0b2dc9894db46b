"""What the multi-GPU peer scripts (nccl_collectives.py, torch_provider.py) share: a free
loopback port for the process group, torch symmetric memory's group registration where the
installed torch still wants it, and spawning the ranks with a bound on the whole run.

Imports torch: import it after forcing the NVLink-multicast variables off.
"""
import signal
import socket
import time
import warnings

import torch
import torch.multiprocessing as mp


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def maybe_enable_symm_mem(symm_mem, group_name):
    """torch < 2.11 wants enable_symm_mem_for_group; 2.11 deprecates it (the group's store
    is resolved in C++)."""
    try:
        major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    except ValueError:
        major, minor = 2, 11
    if (major, minor) >= (2, 11) or not hasattr(symm_mem, "enable_symm_mem_for_group"):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        try:
            symm_mem.enable_symm_mem_for_group(group_name)
        except Exception as e:
            print(f"enable_symm_mem_for_group({group_name!r}): {type(e).__name__}: {e}")


def run_ranks(worker, world, args, timeout_s):
    """Spawns `world` ranks of `worker(rank, *args)`; 0 when every rank exited 0, else 1 (with the reason printed).
    Past `timeout_s`, or on SIGTERM/SIGINT (an outer `timeout`), kills the ranks it
    started (by their handles) so that none outlives the run."""
    ctx = mp.spawn(worker, args=args, nprocs=world, join=False)
    deadline = time.monotonic() + timeout_s

    def kill_ranks():
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
        for p in ctx.processes:
            p.join(10)

    def on_signal(signum, _frame):
        raise SystemExit(f"FAILED: signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                print(f"FAILED: ranks still running after {timeout_s:.0f} s; killing them")
                kill_ranks()
                return 1
    except SystemExit as e:
        print(f"{e}; killing the ranks")
        kill_ranks()
        return 1
    except KeyboardInterrupt:
        print("FAILED: interrupted; killing the ranks")
        kill_ranks()
        return 1
    except Exception as e:  # ProcessRaisedException / ProcessExitedException
        print(f"FAILED: {type(e).__name__}: {e}")
        kill_ranks()
        return 1
    return 0
