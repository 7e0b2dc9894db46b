#!/usr/bin/env bash
# Issue 14 on the device machine, in one command: the examples at world sizes 2 and 4, the
# README's user crate (built here from a scratch directory by .ci/user-crate), the demo with
# no flags, the GPU tests (tests/run_gpu.sh), and the put/copy/memcpy table with the
# launch-enqueue line for the old and the new build, twice (run_old_new.sh put put).
# Usage (repo root, device machine): bash host/benches/peers/run_issue14.sh   (writes to $OUT)
# Carried in .carry/: peer-put, fused-allreduce-rmsnorm, symmem-demo (release builds), my-app,
# and what tests/run_gpu.sh and run_old_new.sh name (old-bench-cuda: the old commit's
# benches/cuda.rs with the same launch_enqueue measurement written against its API).
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
C=$ROOT/.carry
export OUT=${OUT:-$ROOT/target/issue14}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; date -u
  for ex in peer-put fused-allreduce-rmsnorm; do
    for n in 2 4; do
      echo "== $ex --ranks $n"; timeout 60 "$C/$ex" --ranks "$n"; echo "$ex $n rc=$?"
    done
  done
  echo "== my-app (the README's user crate)"; timeout 60 "$C/my-app"; echo "my-app rc=$?"
  echo "== symmem-demo (no flags)"; timeout 60 "$C/symmem-demo"; echo "demo rc=$?"
} 2>&1 | tee "$OUT/examples.txt"
bash "$ROOT/tests/run_gpu.sh"
bash "$ROOT/host/benches/peers/run_old_new.sh" put put
