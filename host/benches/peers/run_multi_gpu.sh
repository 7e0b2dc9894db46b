#!/usr/bin/env bash
# The multi-GPU run (issue 7) in ONE device command, on however many GPUs the machine has:
#   machine and topology; the backend-parameterized GPU tests with one rank per GPU
#   (tests/run_gpu.sh: worlds 1, 2, 3, 4, 8, rank r on GPU r % count); the provider test
#   (a peer-base table from PyTorch symmetric memory's buffer pointers, CUDA and NVSHMEM
#   backends, drives the project's unchanged put kernel from its PTX); then for each world
#   2, 4, 8 that the GPUs allow: host/benches/multi_gpu.rs (cross-GPU put/get vs
#   cuMemcpyPeerAsync, collectives) and peers/nccl_collectives.py (NCCL through
#   torch.distributed, torch symmetric memory's one-/two-shot all-reduce); plot_multi_gpu.py
#   joins the CSVs into summary.txt and multi_gpu.png.
# On a machine with ONE GPU it is a smoke test of the same code paths: the bench runs 2
# ranks sharing the GPU (labelled so), the Python peers run at world 1.
# Usage (repo root, device machine): bash host/benches/peers/run_multi_gpu.sh
# Writes log.txt (as it goes), summary.txt and multi_gpu.png to $OUT, and every log and CSV of the run
# (tests.txt, demo.txt, provider.txt, bench-w*.txt, w*/{p2p,collectives,nccl}.csv) in $OUT/all.tgz.
# Build first (here), then copy into .carry/ (names as used below):
#   cargo bench -p symmem --bench multi_gpu --no-run                      -> bench-multi-gpu
#   cargo test --release -p symmem-tests --test suite_cuda --test rma_processes --no-run
#                                                      -> suite-cuda, rma-processes
#   cargo test --release -p symmem --lib --no-run                         -> symmem-lib
#   cargo build --release -p symmem --bin symmem-demo                     -> symmem-demo
#   target/code-objects/symmem_device-sm_90.ptx                           -> symmem_device-sm_90.ptx
set -u
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
{
  echo "== machine: $GPUS GPU(s)"; date -u; uname -r
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  nvidia-smi topo -m
  python3 -c 'import torch; print("torch", torch.__version__, "cuda devices", torch.cuda.device_count())'
} 2>&1 | tee "$OUT/log.txt" >"$FINAL/log.txt"

OUT=$OUT bash "$ROOT/tests/run_gpu.sh" >/dev/null 2>&1
echo "== GPU tests (tests.txt)" | tee -a "$OUT/log.txt" >>"$FINAL/log.txt"
grep -E "^== |^test result|FAILED|HUNG|rc=" "$OUT/tests.txt" | tee -a "$OUT/log.txt" >>"$FINAL/log.txt"

{
  DW=$([ "$GPUS" -ge 2 ] && echo "$GPUS" || echo 4)
  echo "== symmem-demo --backend cuda --ranks $DW --bytes 64M (rank r on GPU r % $GPUS)"
  timeout 60 "$CARRY/symmem-demo" --backend cuda --ranks "$DW" --bytes 64M; echo "demo threads rc=$?"
  echo "== symmem-demo --backend cuda --launcher processes --ranks $DW --bytes 64M"
  timeout 60 "$CARRY/symmem-demo" --backend cuda --launcher processes --ranks "$DW" --bytes 64M
  echo "demo processes rc=$?"
} 2>&1 | tee "$OUT/demo.txt" >>"$FINAL/log.txt"

{
  PW=$([ "$GPUS" -ge 2 ] && echo "$GPUS" || echo 1)
  for backend in cuda nvshmem; do
    echo "== provider: torch symmetric memory ($backend) table -> symmem_put, world $PW"
    timeout 180 python3 "$P/torch_provider.py" --ptx "$CARRY/symmem_device-sm_90.ptx" \
      --world "$PW" --backend "$backend"; echo "provider $backend rc=$?"
  done
  if [ "$GPUS" -lt 2 ]; then
    # Torch's NVSHMEM backend refuses a world of 1; two PEs on one GPU may not run either.
    for backend in cuda nvshmem; do
      echo "== provider: torch symmetric memory ($backend), 2 ranks sharing GPU 0 (best effort)"
      timeout 120 python3 "$P/torch_provider.py" --ptx "$CARRY/symmem_device-sm_90.ptx" \
        --world 2 --backend "$backend" --shared-gpu; echo "provider $backend shared-gpu rc=$?"
    done
  fi
} 2>&1 | tee "$OUT/provider.txt" >>"$FINAL/log.txt"

CSVS=()
for W in 2 4 8; do
  if [ "$W" -gt "$GPUS" ] && { [ "$GPUS" -ge 2 ] || [ "$W" -gt 2 ]; }; then continue; fi
  {
    if [ "$GPUS" -ge 2 ]; then
      echo "== multi_gpu bench, world $W"
      timeout 400 "$CARRY/bench-multi-gpu" --world "$W" --out "$OUT/w$W"; echo "bench w$W rc=$?"
      echo "== nccl + torch symmetric memory, world $W"
      timeout 400 python3 "$P/nccl_collectives.py" --world "$W" --out "$OUT/w$W/nccl.csv"; echo "nccl w$W rc=$?"
    else
      # Processes sharing one GPU are time-sliced (a collective waits a slice, ~4.5 ms, for
      # its peer): the smoke run's collectives use threads, which share one context.
      echo "== multi_gpu bench, 2 ranks sharing GPU 0 (smoke test)"
      timeout 300 "$CARRY/bench-multi-gpu" --world 2 --blocks 32,128 --launcher threads \
        --out "$OUT/w$W"; echo "bench w$W rc=$?"
      echo "== nccl + torch symmetric memory, world 1 (smoke test)"
      timeout 300 python3 "$P/nccl_collectives.py" --world 1 --out "$OUT/w$W/nccl.csv"; echo "nccl w1 rc=$?"
    fi
  } 2>&1 | tee "$OUT/bench-w$W.txt" >>"$FINAL/log.txt"
  CSVS+=("$OUT/w$W/p2p.csv" "$OUT/w$W/collectives.csv" "$OUT/w$W/nccl.csv")
done
echo "== summary"
python3 "$P/plot_multi_gpu.py" --summary "$OUT/summary.txt" --png "$OUT/multi_gpu.png" "${CSVS[@]}" 2>&1 \
  | tee -a "$OUT/log.txt" >>"$FINAL/log.txt"
cp "$OUT/summary.txt" "$FINAL/" 2>/dev/null
[ -f "$OUT/multi_gpu.png" ] && cp "$OUT/multi_gpu.png" "$FINAL/"
tar czf "$FINAL/all.tgz" -C "$OUT" .
