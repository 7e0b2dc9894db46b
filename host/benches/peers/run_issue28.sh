#!/usr/bin/env bash
# Issue 28 on the device machine, in one command: where the ranks-as-threads CUDA variant
# of the local transport's off-node checks stalls (host stacks of every thread, taken
# with cuda-gdb 8 s into the 2-rank run, inside its 20 s wait deadline), then the old
# build (30a34bc, before the restructure) against the new one with run_old_new.sh:
# launch enqueue time and small messages (old and new alternating), the put table and
# the collectives table.
# Usage (repo root, device machine): bash host/benches/peers/run_issue28.sh   (writes to $OUT)
# Build first (here), then copy into .carry/: off-node-local (`cargo test --release -p
# symmem-tests --test off_node_local --no-run`) and what run_old_new.sh names for the
# parts launch, small, put and collectives.
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CARRY=$ROOT/.carry
OUT=${OUT:-$ROOT/target/issue28}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; date -u
  "$CARRY/off-node-local" --ignored --exact cuda_two_ranks_every_peer_on_another_node \
    --nocapture >"$OUT/stall_run.txt" 2>&1 &
  pid=$!
  sleep 8
  timeout 60 cuda-gdb -p "$pid" -batch -ex "info cuda kernels" -ex "thread apply all bt 14" 2>&1 \
    | grep -vE "^\[New|^Reading|^warning" >"$OUT/stall_stacks.txt"
  wait "$pid"; echo "stall run rc=$?"
  tail -5 "$OUT/stall_run.txt"
} 2>&1 | tee "$OUT/stall.txt"
RUNS=4 bash "$ROOT/host/benches/peers/run_old_new.sh" launch
RUNS=3 bash "$ROOT/host/benches/peers/run_old_new.sh" small
bash "$ROOT/host/benches/peers/run_old_new.sh" put collectives
