#!/usr/bin/env bash
# The whole H200 benchmark in ONE device command (issue 8, "Benchmarks"):
#   machine info; nvcc builds copy.cu; the Rust bench (host/benches/cuda.rs, built here
#   beforehand and carried in .carry/); the CUDA C++ copy; the Iris-style Triton put and
#   torch symmetric memory; the demo on the GPU (threads and processes); the collectives
#   on one GPU; then plot.py joins the CSVs into summary.txt (ratios vs goals) and draws
#   h200.png. (The GPU tests are tests/run_gpu.sh.)
# Usage (repo root, device machine): bash host/benches/peers/run_h200.sh   (writes to $OUT)
# Build first (here), then copy into .carry/ (names as used below):
#   cargo bench -p symmem --bench cuda --bench cuda_collectives --no-run   -> bench-cuda, bench-collectives
#   cargo build --release -p symmem --bin symmem-demo                     -> symmem-demo
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CARRY=$ROOT/.carry
P=$ROOT/host/benches/peers
OUT=${OUT:-$ROOT/target/h200-out}
mkdir -p "$OUT"
# NVLink multicast stays off everywhere (KINDS.md); nothing here calls cuMulticastCreate.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# Several ranks share the GPU, each on a stream of its own, and their kernels wait on each
# other: give every stream a hardware queue, and load every kernel up front.
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
{
  echo "== machine"; date -u; uname -r
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv
  nvidia-smi | sed -n 3,4p
  nvcc --version | tail -2
  echo "== build copy.cu"; timeout 40 nvcc -O3 -arch=sm_90 "$P/copy.cu" -o /tmp/copy || echo "nvcc failed rc=$?"
  echo "== rust bench"; timeout 100 "$CARRY/bench-cuda" --out "$OUT"; echo "rust bench rc=$?"
  echo "== cuda c++ copy"; timeout 40 /tmp/copy "$OUT/cpp.csv"; echo "cpp rc=$?"
  echo "== triton iris put + torch symmetric memory"; timeout 90 python3 "$P/iris_put.py" "$OUT/triton.csv"; echo "triton rc=$?"
} 2>&1 | tee "$OUT/log.txt"
{
  echo "== symmem-demo --backend cuda --ranks 4 --bytes 64M"
  timeout 20 "$CARRY/symmem-demo" --backend cuda --ranks 4 --bytes 64M; echo "demo threads rc=$?"
  echo "== symmem-demo --backend cuda --launcher processes --ranks 4 --bytes 64M"
  timeout 40 "$CARRY/symmem-demo" --backend cuda --launcher processes --ranks 4 --bytes 64M; echo "demo processes rc=$?"
} 2>&1 | tee "$OUT/demo.txt"
{
  echo "== collectives on one GPU (world 2 and 4)"
  timeout 200 "$CARRY/bench-collectives"; echo "collectives rc=$?"
} 2>&1 | tee "$OUT/collectives.txt"
echo "== summary"
python3 "$P/plot.py" --png "$OUT/h200.png" --summary "$OUT/summary.txt" \
  --collectives "$OUT/collectives.txt" --collectives-png "$OUT/collectives.png" \
  "$OUT/rust.csv" "$OUT/cpp.csv" "$OUT/triton.csv" 2>&1 | tee -a "$OUT/log.txt"
