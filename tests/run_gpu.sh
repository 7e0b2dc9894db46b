#!/usr/bin/env bash
# The GPU test run on the device machine (issue 8, "GPU tests"): every carried test binary
# whole, one test at a time; where a binary fails or outlives its limit, its tests that did
# not pass run again one per process under a watchdog, and a hung one's host and CUDA
# stacks are logged (cuda-gdb) before it is killed.
# Usage (repo root, device machine): bash tests/run_gpu.sh   (writes to $OUT/tests.txt)
# Build first (here), then copy into .carry/, or the folder $CARRY names (names as used below):
#   cargo test --release -p symmem-tests --test suite_cuda --test rma_processes \
#     --test waits_processes --test waits_leave --test waits_poison --test off_node_local \
#     --test cuda_backend --no-run
#          -> suite-cuda, rma-processes, waits-processes, waits-leave, waits-poison,
#             off-node-local, cuda-backend
#   cargo test --release -p symmem --lib --no-run  -> symmem-lib (run with filter backend::cuda)
#   cargo build --release -p cudarc-interop        -> cudarc-interop
# CUDA_DEVICE_MAX_CONNECTIONS is left unset on purpose: symmem sets it (issue 31), and the
# suite's 8 ranks on one GPU must pass without it.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARRY=${CARRY:-$ROOT/.carry}
OUT=${OUT:-$ROOT/target/gpu-tests}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
unset CUDA_DEVICE_MAX_CONNECTIONS

# run NAME LIMIT_S WATCHDOG_S BINARY [FILTER]
run() {
  local name=$1 limit=$2 watchdog=$3 bin=$4 filter=${5:-}
  local log=/tmp/$name.log
  echo "== $name: $bin $filter --test-threads=1 (limit ${limit}s)"
  local start=$SECONDS
  timeout "$limit" "$bin" $filter --test-threads=1 >"$log" 2>&1
  local rc=$?
  grep -E "^test result|FAILED|panicked|^---- |skipped" "$log" | head -40
  # A binary that ran no test, or whose GPU tests skipped for want of a device on the
  # machine that has one, tested nothing: that is a failure, not a pass.
  if ! grep -qE "^test result: .* [1-9][0-9]* passed" "$log"; then
    echo "$name: ran no test (a filter that matches nothing, or a build without them): FAILED"
    rc=1
  fi
  if grep -qE "skipped: (CUDA|cuda|HIP|hip) backend unavailable|skipped: no CUDA device" "$log"; then
    echo "$name: GPU tests skipped on the GPU machine: FAILED"
    rc=1
  fi
  echo "$name rc=$rc in $((SECONDS - start))s"
  [ "$rc" -eq 0 ] && return
  echo "== $name: tests that did not pass, one per process (watchdog ${watchdog}s)"
  for t in $("$bin" $filter --list 2>/dev/null | sed -n 's/: test$//p'); do
    grep -q "^test $t \.\.\. ok" "$log" && continue
    "$bin" --exact "$t" --test-threads=1 >/tmp/one.log 2>&1 &
    local pid=$! waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$watchdog" ]; do sleep 1; waited=$((waited + 1)); done
    if kill -0 "$pid" 2>/dev/null; then
      echo "HUNG $t after ${watchdog}s; stacks:"
      timeout 40 cuda-gdb -p "$pid" -batch -ex "info cuda kernels" -ex "thread apply all bt 12" 2>&1 \
        | grep -vE "^\[New|^Reading|^warning" | head -200
      kill -9 "$pid"; wait "$pid" 2>/dev/null
    else
      wait "$pid"; echo "$t rc=$?"; grep -vE "^$|^running" /tmp/one.log | tail -25
    fi
  done
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; date -u
  run suite_cuda 240 40 "$CARRY/suite-cuda"
  # The off-node path on the GPU without MPI: ranks as threads on device 0 split into
  # emulated nodes, data staged through the local transport's ring.
  run off_node_local_cuda 300 240 "$CARRY/off-node-local" "cuda_ --nocapture"
  # A rank killed mid-wait, ranks as processes; then (rma_processes, below) new worlds in
  # new processes complete collectives on the same GPU.
  run waits_processes 300 150 "$CARRY/waits-processes" "cuda_ --nocapture"
  grep -E "after the (kill|leave)" /tmp/waits_processes.log
  # A rank that leaves while its peers wait for it (ranks as threads), and a forced timeout
  # on one rank that must fail every rank of the call.
  run waits_leave 120 60 "$CARRY/waits-leave" "cuda_ --nocapture"
  grep "after the leave" /tmp/waits_leave.log
  run waits_poison 120 60 "$CARRY/waits-poison" "cuda_ --nocapture"
  grep -E "rank [0-9]:" /tmp/waits_poison.log
  # A cudarc kernel on each rank's cudarc stream feeding a symmem all-reduce.
  for ranks in 2 4; do timeout 120 "$CARRY/cudarc-interop" --ranks "$ranks"; echo "cudarc-interop $ranks rc=$?"; done
  run rma_processes 200 130 "$CARRY/rma-processes" cuda_
  run cuda_backend 60 30 "$CARRY/cuda-backend"
  run symmem_lib_cuda 60 30 "$CARRY/symmem-lib" backend::cuda
} 2>&1 | tee "$OUT/tests.txt"
