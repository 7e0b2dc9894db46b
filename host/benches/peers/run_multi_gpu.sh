#!/usr/bin/env bash
# The multi-GPU run (issue 7), on however many GPUs the machine has, in parts that each
# fit one device command (10 minutes):
#   checks      machine and topology; the backend-parameterized GPU tests with one rank per
#               GPU (tests/run_gpu.sh: worlds 1, 2, 3, 4, 8, rank r on GPU r % count); the
#               demo across GPUs; the provider test (a peer-base table from PyTorch
#               symmetric memory's buffer pointers, CUDA and NVSHMEM backends, drives the
#               project's unchanged put kernel from its PTX)
#   bench W...  for each world W (default: 2, 4, 8 as far as the GPUs go):
#               host/benches/multi_gpu.rs (cross-GPU put/get vs cuMemcpyPeerAsync,
#               collectives one process per GPU) and peers/nccl_collectives.py (NCCL through
#               torch.distributed, torch symmetric memory's one-/two-shot all-reduce);
#               then the small messages, every call graph-replayed, 8 B to 1 MiB:
#               host/benches/small_messages.rs (floors, one-/two-shot, all-gather,
#               barrier-free all-reduce; ranks as threads, rank r on GPU r % count) and
#               nccl_collectives.py --small (NCCL all_reduce, torch symmetric memory's
#               one-shot all-reduce); plot_multi_gpu.py joins their CSVs into summary.txt
#               and multi_gpu.png
#   all         checks, then bench (what fits in one command on 2 GPUs; on 8, run
#               `checks`, `bench 2 4` and `bench 8` as three commands)
# On a machine with ONE GPU it is a smoke test of the same code paths: the bench runs 2
# ranks sharing the GPU as threads (processes sharing a GPU are time-sliced, ~4.5 ms per
# collective), the Python peers run at world 1.
# Usage (repo root, device machine): bash host/benches/peers/run_multi_gpu.sh [PART [W...]]
# Writes log.txt (as it goes), and summary.txt and multi_gpu.png (bench) to $OUT, and every
# log and CSV of the part (tests.txt, demo.txt, provider.txt, bench-w*.txt,
# w*/{p2p,collectives,nccl,small,small_nccl}.csv) in $OUT/all.tgz.
# Build first (here), then copy into .carry/ (names as used below):
#   cargo bench -p symmem --bench multi_gpu --no-run                      -> bench-multi-gpu
#   cargo bench -p symmem --bench small_messages --no-run                 -> bench-small
#   cargo test --release -p symmem-tests --test suite_cuda --test rma_processes --no-run
#                                                      -> suite-cuda, rma-processes
#   cargo test --release -p symmem --lib --no-run                         -> symmem-lib
#   cargo build --release -p symmem-demo                                    -> symmem-demo
#   target/code-objects/symmem_device-sm_90.ptx                           -> symmem_device-sm_90.ptx
set -u
PART=${1:-all}
[ $# -gt 0 ] && shift
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CARRY=$ROOT/.carry
P=$ROOT/host/benches/peers
FINAL=${OUT:-$ROOT/target/multi-gpu-out}
OUT=$(mktemp -d /tmp/multi-gpu.XXXX)
mkdir -p "$FINAL"
# NVLink multicast stays off everywhere (KINDS.md); nothing here calls cuMulticastCreate.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
GPUS=$(nvidia-smi --list-gpus | wc -l)
# log: appends stdin to this part's log.txt, kept in the work folder and in $OUT.
log() { tee -a "$OUT/log.txt" >>"$FINAL/log.txt"; }

{
  echo "== machine: $GPUS GPU(s), part $PART $*"; date -u; uname -r
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  nvidia-smi topo -m
  python3 -c 'import torch; print("torch", torch.__version__, "cuda devices", torch.cuda.device_count())'
} 2>&1 | log

checks() {
  OUT=$OUT bash "$ROOT/tests/run_gpu.sh" >/dev/null 2>&1
  echo "== GPU tests (tests.txt)" | log
  grep -E "^== |^test result|FAILED|HUNG|rc=" "$OUT/tests.txt" | log
  {
    DW=$([ "$GPUS" -ge 2 ] && echo "$GPUS" || echo 4)
    echo "== symmem-demo --backend cuda --ranks $DW --bytes 64M (rank r on GPU r % $GPUS)"
    timeout 60 "$CARRY/symmem-demo" --backend cuda --ranks "$DW" --bytes 64M; echo "demo threads rc=$?"
    echo "== symmem-demo --backend cuda --launcher processes --ranks $DW --bytes 64M"
    timeout 60 "$CARRY/symmem-demo" --backend cuda --launcher processes --ranks "$DW" --bytes 64M
    echo "demo processes rc=$?"
  } 2>&1 | tee "$OUT/demo.txt" | log
  {
    PW=$([ "$GPUS" -ge 2 ] && echo "$GPUS" || echo 1)
    for backend in cuda nvshmem; do
      echo "== provider: torch symmetric memory ($backend) table -> symmem_put, world $PW"
      timeout 180 python3 "$P/torch_provider.py" --ptx "$CARRY/symmem_device-sm_90.ptx" \
        --world "$PW" --backend "$backend"; echo "provider $backend rc=$?"
    done
    if [ "$GPUS" -lt 2 ]; then
      # Torch's NVSHMEM backend refuses a world of 1, and NVSHMEM two PEs on one GPU.
      for backend in cuda nvshmem; do
        echo "== provider: torch symmetric memory ($backend), 2 ranks sharing GPU 0 (best effort)"
        timeout 120 python3 "$P/torch_provider.py" --ptx "$CARRY/symmem_device-sm_90.ptx" \
          --world 2 --backend "$backend" --shared-gpu; echo "provider $backend shared-gpu rc=$?"
      done
    fi
  } 2>&1 | tee "$OUT/provider.txt" | log
}

# small W: host/benches/small_messages.rs at world W (ranks as threads, rank r on GPU
# r % count; on one GPU they share it) -> w$W/small.csv (its stdout: the CSV rows).
small() {
  local W=$1 rc
  if [ ! -x "$CARRY/bench-small" ]; then
    echo "no $CARRY/bench-small (cargo bench -p symmem --bench small_messages --no-run):" \
      "symmem's small-message lines skipped, world $W"
    return
  fi
  mkdir -p "$OUT/w$W"
  timeout 180 "$CARRY/bench-small" --worlds "$W" >"$OUT/w$W/small.csv"
  rc=$?
  cat "$OUT/w$W/small.csv"
  echo "small w$W rc=$rc"
}

bench() {
  local worlds=("$@") csvs=()
  if [ ${#worlds[@]} -eq 0 ]; then
    for W in 2 4 8; do [ "$W" -le "$GPUS" ] && worlds+=("$W"); done
    [ "$GPUS" -lt 2 ] && worlds=(2)
  fi
  for W in "${worlds[@]}"; do
    {
      if [ "$GPUS" -ge 2 ]; then
        echo "== multi_gpu bench, world $W"
        timeout 400 "$CARRY/bench-multi-gpu" --world "$W" --out "$OUT/w$W"; echo "bench w$W rc=$?"
        echo "== nccl + torch symmetric memory, world $W"
        timeout 400 python3 "$P/nccl_collectives.py" --world "$W" --out "$OUT/w$W/nccl.csv"
        echo "nccl w$W rc=$?"
        echo "== small messages: symmem (bench-small), world $W"
        small "$W"
        echo "== small messages: nccl + torch symmetric memory one-shot, graph-replayed, world $W"
        timeout 240 python3 "$P/nccl_collectives.py" --small --world "$W" --timeout 220 \
          --out "$OUT/w$W/small_nccl.csv"
        echo "small nccl w$W rc=$?"
      else
        echo "== multi_gpu bench, $W ranks sharing GPU 0 as threads (smoke test)"
        timeout 300 "$CARRY/bench-multi-gpu" --world "$W" --blocks 32,128 --launcher threads \
          --out "$OUT/w$W"; echo "bench w$W rc=$?"
        echo "== nccl + torch symmetric memory, world 1 (smoke test)"
        timeout 300 python3 "$P/nccl_collectives.py" --world 1 --out "$OUT/w$W/nccl.csv"
        echo "nccl w1 rc=$?"
        echo "== small messages: symmem (bench-small), $W ranks sharing GPU 0 as threads (smoke test)"
        small "$W"
        echo "== small messages: nccl + torch symmetric memory one-shot, world 1 (smoke test)"
        timeout 240 python3 "$P/nccl_collectives.py" --small --world 1 --timeout 220 \
          --out "$OUT/w$W/small_nccl.csv"
        echo "small nccl w1 rc=$?"
      fi
    } 2>&1 | tee "$OUT/bench-w$W.txt" | log
    csvs+=("$OUT/w$W/p2p.csv" "$OUT/w$W/collectives.csv" "$OUT/w$W/nccl.csv")
    for f in small small_nccl; do [ -f "$OUT/w$W/$f.csv" ] && csvs+=("$OUT/w$W/$f.csv"); done
  done
  echo "== summary" | log
  python3 "$P/plot_multi_gpu.py" --summary "$OUT/summary.txt" --png "$OUT/multi_gpu.png" \
    "${csvs[@]}" 2>&1 | log
  cp "$OUT/summary.txt" "$FINAL/" 2>/dev/null
  [ -f "$OUT/multi_gpu.png" ] && cp "$OUT/multi_gpu.png" "$FINAL/"
}

case $PART in
checks) checks ;;
bench) bench "$@" ;;
all) checks; bench "$@" ;;
*) echo "unknown part $PART (checks, bench, all)" | log; exit 2 ;;
esac
tar czf "$FINAL/all.tgz" -C "$OUT" .
