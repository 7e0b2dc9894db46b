#!/usr/bin/env bash
# Everything symmem measures on ONE H200 (the `nvidia-h200` device machine), in parts that
# each fit one device command (10 minutes). Several GPUs: run_multi_gpu.sh.
# Usage (repo root, device machine): bash host/benches/peers/run_h200.sh [PART...]
#   (default part: bench; writes to $OUT, default target/h200-out)
# Parts:
#   bench         put/copy/cuMemcpyDtoD against the CUDA C++ copy (copy.cu) and the
#                 Iris-style Triton put (iris_put.py, which also times torch symmetric
#                 memory's allocation), allocate_symmetric, the demo (threads and processes),
#                 the collectives on one GPU; plot.py -> summary.txt, h200.png,
#                 collectives.png (log.txt, demo.txt, collectives.txt, *.csv)
#   tests         tests/run_gpu.sh: every GPU test binary (tests.txt)
#   examples      peer-put and fused-allreduce-rmsnorm at 2 and 4 ranks, the README's
#                 "Write your own kernel" crate (my-app), the demo with no flags (examples.txt)
#   small         the small-message bench three times, graph-replayed, worlds 2, 4, 8;
#                 plot_small.py -> small_messages.svg (small_messages_{1,2,3}.csv)
#   engine        the off-node engine on CUDA (staging path) under MPS (MPS=0: without), processes as
#                 emulated nodes, against MPI in the same run: -np 2 (1 rank per node: puts
#                 to 64 MiB, latency) and -np 4 (2 per node: puts to 1 MiB, all-reduces to
#                 16 MiB) (engine-bench-np{2,4}.txt, env.txt)
#   engine-ab     the staged path under MPS of an old build (old-engine-bench; more builds:
#                 ENGINE_BUILDS="a b ..." names in .carry) and of this one, alternating,
#                 ${RUNS:-2} times each: -np 2 puts of 256 B to 64 MiB and latency
#                 (engine-ab.txt); this build's -np 4 all-reduces to 16 MiB
#                 (engine-bench-np4.txt); a proxy trace of this build's 4 KiB and 8-byte puts
#                 (SYMMEM_LOG=symmem::transport::proxy=trace, engine-trace.txt.xz), and
#                 one of its puts to 64 MiB (engine-trace-64m.txt.xz; TRACE_64M=0 skips it)
#   engine-eager  this build's -np 2 puts to 4 KiB under MPS, Open MPI's shared-memory eager
#                 limit as it is and raised to 16 KiB, alternating (engine-eager.txt)
#   engine-hang   the staged all-reduce of 1 MiB at 2 nodes x 2 under MPS alone, every
#                 sample's time as it ends, SYMMEM_LOG=debug; if it runs past ${HANG_S:-60} s,
#                 every rank's host stacks (cuda-gdb) before it is killed
#                 (engine-hang.txt, engine-hang-stacks.txt)
#   mpi-floor     mpi_floor.c at -np 2: a small request's round trip as the proxies make it
#                 (data in the header or a message of its own, polled replies); 64 MiB as the
#                 proxies send it (header, piece, reply; 16 in flight) in 4 KiB-1 MiB
#                 pieces, against MPI_Put into an allocated window, whole and in pieces
#                 (mpi-floor.txt)
#   small-floor   small_put_floor.cu: what each piece of a staged small put costs alone (the
#                 target's copy and event, a resident applier kernel, a GPU-host round trip,
#                 staging into host memory), without and with MPS (small-put-floor.txt)
#   engine-ranks  engine-ranks --cuda (tables, host put/get, the RMA bodies, every
#                 collective, peer-put, against host references) at -np 2 and -np 4,
#                 1 rank per node, without MPS (engine-ranks-np{2,4}.txt)
#   nvshmem       the NVSHMEM transport (SYMMEM_OFF_NODE=nvshmem) under MPS, 2 processes as 2
#                 emulated nodes (NVSHMEM's P2P path: no NIC), with the image's NVSHMEM:
#                 NVSHMEM's own C bench (nvshmem_bench.cu: put, 8-byte put + quiet,
#                 all-reduce), engine-ranks --cuda (every off-node check), engine-kill --cuda
#                 (the peer killed mid-wait: a typed error, and how soon), and the engine
#                 bench over NVSHMEM and over the MPI proxy, one after the other
#                 (nvshmem-{c-bench,ranks,kill,bench,mpi-bench}.txt, nvshmem-env.txt)
#   nvshmem-ab    the engine bench over NVSHMEM (puts and latency, -np 2, MPS as in
#                 `nvshmem`) of several builds, alternating, ${RUNS:-2} times each
#                 (NV_BUILDS="a b ...", names in .carry; default nv-engine-bench-old
#                 nv-engine-bench), then engine-ranks --cuda over NVSHMEM (nvshmem-ab.txt,
#                 nvshmem-ranks.txt)
#   nvshmem-hang  each of NV_BUILDS over NVSHMEM with SYMMEM_LOG=debug; past ${HANG_S:-30} s,
#                 every rank's host stacks and kernels (cuda-gdb), then killed (nvshmem-hang.txt)
#   first-load    a world's first load with the driver's PTX cache off (CUDA_CACHE_DISABLE=1):
#                 engine-ranks --cuda at -np 2 across 2 emulated nodes, each BUILD:TRANSPORT
#                 of FIRST_LOADS (default nv-engine-ranks-old and nv-engine-ranks over
#                 nvshmem, nv-engine-ranks over bootstrap), timed whole (first-load.txt)
#   cost          issue 30's cost of tracing: host enqueue per launch (launch_enqueue_us) and
#                 host time per collective call (host_call_us, world 2) of the old build, of
#                 this one with no subscriber, and of this one with a subscriber at
#                 ${LOG:-info} (SYMMEM_LOG=${LOG:-info}, formatted to stderr, which goes to
#                 /dev/null), the three alternating, ${RUNS:-5} runs each (cost.txt)
#   old-new P...  the same benches of an old commit and of this build, one after the other
#                 on the same GPU (old_new.txt); every argument after it is one of:
#                   lifetimes    World::barrier and allocate_symmetric (benches/lifetimes.rs)
#                   put          the put/copy/memcpy table at 4K, 1M, 64M, 2G (benches/cuda.rs)
#                   collectives  the collectives at world 2 and 4 (benches/cuda_collectives.rs)
#                   launch       host enqueue time of one launch (launch_enqueue_us), old and
#                                new alternating, ${RUNS:-10} runs each
#                   small        small messages at world 2 and host time per collective call
#                                (host_call_us), old and new alternating, ${RUNS:-10} runs each
# Example: bash host/benches/peers/run_h200.sh tests examples old-new put collectives
#
# Build first (here, release), then copy into .carry/ under these names:
#   cargo bench -p symmem --bench cuda --bench cuda_collectives --bench small_messages \
#     --bench lifetimes --no-run        -> bench-cuda, bench-collectives, bench-small, bench-lifetimes
#   cargo bench -p symmem --features mpi --bench engine --no-run             -> engine-bench
#   cargo build --release -p symmem-tests --features mpi --bin engine-ranks  -> engine-ranks
#   nvshmem: SYMMEM_NVSHMEM_HOME=<NVSHMEM of the image's version> and --features mpi,nvshmem for
#     engine-bench, engine-ranks and engine-kill, as nv-engine-bench, nv-engine-ranks, nv-engine-kill
#   cargo build --release -p symmem-demo                                       -> symmem-demo
#   cargo build --release -p peer-put -p fused-allreduce-rmsnorm             -> peer-put, fused-allreduce-rmsnorm
#   the binary .ci/user-crate builds (the README's crate)                     -> my-app
#   tests/run_gpu.sh's header lists its binaries
#   old-new: the same benches of the old commit, as old-bench-cuda, old-bench-collectives,
#     old-bench-small, old-bench-lifetimes (a worktree of it, its own target directory and
#     pinned toolchain; benches/lifetimes.rs copied in where it lacks one)
# Only the parts asked for need their binaries.
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CARRY=$ROOT/.carry
P=$ROOT/host/benches/peers
OUT=${OUT:-$ROOT/target/h200-out}
export OUT
mkdir -p "$OUT"
# NVLink multicast stays off everywhere (KINDS.md); nothing here calls cuMulticastCreate.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# Several ranks share the GPU, each on a stream of its own, and their kernels wait on each
# other: give every stream a hardware queue, and load every kernel up front.
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
MPIRUN="mpirun --allow-run-as-root --oversubscribe"

machine() {
  echo "== machine"; date -u; uname -r; nproc
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv
}

bench() {
  {
    machine
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
}

examples() {
  {
    machine
    for ex in peer-put fused-allreduce-rmsnorm; do
      for n in 2 4; do
        echo "== $ex --ranks $n"; timeout 60 "$CARRY/$ex" --ranks "$n"; echo "$ex $n rc=$?"
      done
    done
    echo "== my-app (the README's user crate)"; timeout 60 "$CARRY/my-app"; echo "my-app rc=$?"
    echo "== symmem-demo (no flags)"; timeout 60 "$CARRY/symmem-demo"; echo "demo rc=$?"
  } 2>&1 | tee "$OUT/examples.txt"
}

small() {
  for i in 1 2 3; do
    echo "== small messages, run $i"
    timeout 180 "$CARRY/bench-small" >"$OUT/small_messages_$i.csv"; echo "small $i rc=$?"
  done
  python3 "$P/plot_small.py" "$OUT/small_messages.svg" "$OUT"/small_messages_[123].csv
}

# Starts an MPS daemon for the part that calls it. MPS clients share one pool of hardware
# queues: the 32 per client this script exports ran it dry (cuDevicePrimaryCtxRetain:
# CUDA_ERROR_OUT_OF_MEMORY), so an MPS part leaves the driver's default, as symmem does in
# an MPS client.
mps_start() {
  unset CUDA_DEVICE_MAX_CONNECTIONS
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
}

# The image's Open MPI is not CUDA-aware and creates no window over memory it did not
# allocate (results/2026-12-04-issue19-h200-mps/probe-*.txt), so the engine stages and the
# bench's MPI reference puts into an MPI_Win_allocate window. Processes emulating nodes
# share the one GPU: without MPS their contexts time-slice it and every staged request
# waits for the origin's spinning kernel to be switched out, 2.4 ms each
# (results/2026-12-04-issue19-h200-tuning/). Open MPI binds a rank to one core by default
# from 2 ranks down, where the proxy shares it with the thread spinning in
# cuStreamSynchronize; PE=2 gives each rank a core for its proxy.
engine() {
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
    mpirun --version | head -1
    ompi_info --parsable --all 2>/dev/null | grep "built_with_cuda_support:value"; } > "$OUT/env.txt" 2>&1
  cat "$OUT/env.txt"
  local pe="--map-by slot:PE=2 --bind-to core"
  # MPS=0: the same runs with the contexts time-slicing the GPU (no MPS daemon).
  local mps="-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY" how=MPS tag=""
  if [ "${MPS:-1}" = 0 ]; then
    mps="" how="no MPS" tag="-no-mps"
  else
    mps_start || { echo "MPS did not start"; return 1; }
  fi
  echo "== $how, engine bench --cuda (staging), -np 2, 1 rank per node: put, latency"
  timeout -k 5 60 $MPIRUN $pe $mps -np 2 -x SYMMEM_RANKS_PER_NODE=1 "$CARRY/engine-bench" --cuda \
    --max-all-reduce 0 > "$OUT/engine-bench-np2$tag.txt" 2>&1
  echo "rc=$?"; grep -E "bench|put|latency|rror" "$OUT/engine-bench-np2$tag.txt" | head -8
  echo "== $how, engine bench --cuda (staging), -np 4, 2 per node: put, latency, all-reduce"
  engine_np4 "$pe $mps" "$tag"
  [ "${MPS:-1}" = 0 ] || echo quit | nvidia-cuda-mps-control
}

# engine_np4 MPIRUN_FLAGS TAG: this build's engine bench at -np 4 as 2 nodes of 2, puts to
# 1 MiB and all-reduces to 16 MiB (engine-bench-np4TAG.txt).
engine_np4() {
  # shellcheck disable=SC2086
  timeout -k 5 150 $MPIRUN $1 -np 4 -x SYMMEM_RANKS_PER_NODE=2 "$CARRY/engine-bench" --cuda \
    --max-put 1M --max-all-reduce 16M > "$OUT/engine-bench-np4$2.txt" 2>&1
  echo "rc=$?"; grep -E "bench|put|latency|all_reduce|rror" "$OUT/engine-bench-np4$2.txt" | head -14
}


engine_ab() {
  local pe="--map-by slot:PE=2 --bind-to core"
  local mps="-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY"
  mps_start || { echo "MPS did not start"; return 1; }
  for run in $(seq "${RUNS:-2}"); do
    for b in ${ENGINE_BUILDS:-old-engine-bench engine-bench}; do
      echo "== run $run: $b --cuda (staging), -np 2, 1 rank per node"
      timeout -k 5 60 $MPIRUN $pe $mps -np 2 -x SYMMEM_RANKS_PER_NODE=1 "$CARRY/$b" --cuda \
        --max-all-reduce 0 2>&1 | grep -E "bench|put|latency|rror"
      echo "rc=${PIPESTATUS[0]}"
    done
  done 2>&1 | tee "$OUT/engine-ab.txt"
  echo "== engine bench --cuda (staging), -np 4, 2 per node: put, latency, all-reduce"
  engine_np4 "$pe $mps" ""
  echo "== proxy trace: engine bench --cuda, -np 2, puts to 4 KiB"
  SYMMEM_LOG=symmem::transport::proxy=trace timeout -k 5 60 $MPIRUN $pe $mps -x SYMMEM_LOG -np 2 \
    -x SYMMEM_RANKS_PER_NODE=1 "$CARRY/engine-bench" --cuda --max-put 4K --max-all-reduce 0 \
    > "$OUT/engine-trace.txt" 2>&1
  echo "rc=$?"; grep -E "bench|put|latency|rror" "$OUT/engine-trace.txt" | head -4
  xz -T0 "$OUT/engine-trace.txt"
  if [ "${TRACE_64M:-1}" = 1 ]; then
    echo "== proxy trace: engine bench --cuda, -np 2, puts to 64 MiB"
    SYMMEM_LOG=symmem::transport::proxy=trace timeout -k 5 90 $MPIRUN $pe $mps -x SYMMEM_LOG -np 2 \
      -x SYMMEM_RANKS_PER_NODE=1 "$CARRY/engine-bench" --cuda --max-all-reduce 0 \
      > "$OUT/engine-trace-64m.txt" 2>&1
    echo "rc=$?"; grep -E "bench|put|latency|rror" "$OUT/engine-trace-64m.txt" | head -6
    xz -T0 "$OUT/engine-trace-64m.txt"
  fi
  echo quit | nvidia-cuda-mps-control
}

# A build's first world through NVSHMEM on a fresh machine waits for the driver to compile
# its kernels' PTX (about 25 s per code object under MPS on the H100; cached after it):
# the runs' limits leave room for that.
# nvshmem_env: finds the image's NVSHMEM (NV, its headers INC), sets what 2 PEs on one
# GPU need, starts MPS, and sets X0 (mpirun flags) and X (X0 and the granularity).
nvshmem_env() {
  NV=$(python3 -c "import importlib.util; print(list(importlib.util.find_spec('nvidia.nvshmem').submodule_search_locations)[0])" 2>/dev/null)
  [ -n "$NV" ] || { echo "no NVSHMEM (the nvidia.nvshmem package) here"; return 1; }
  INC=$NV/include
  [ -e "$INC/nvshmem.h" ] || INC=$CARRY/nvshmem-include
  export LD_LIBRARY_PATH=$NV/lib:${LD_LIBRARY_PATH:-}
  # Two PEs on one GPU: MPS with each client's share summing to 100 (else NVSHMEM reports
  # "limited MPG support"), the unique id's socket on loopback, no remote transport.
  export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo NVSHMEM_REMOTE_TRANSPORT=none \
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 SYMMEM_RANKS_PER_NODE=1
  # NVSHMEM registers a buffer in units of this (512 MiB by default); engine-ranks'
  # and engine-kill's heaps are 64 and 16 MiB.
  export NVSHMEM_CUMEM_GRANULARITY=2097152
  mps_start || { echo "MPS did not start"; return 1; }
  X0="-x LD_LIBRARY_PATH -x NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME -x NVSHMEM_REMOTE_TRANSPORT
    -x CUDA_MPS_ACTIVE_THREAD_PERCENTAGE -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY
    -x SYMMEM_RANKS_PER_NODE --map-by slot:PE=2 --bind-to core"
  X="$X0 -x NVSHMEM_CUMEM_GRANULARITY"
}

nvshmem_ab() {
  nvshmem_env || return 1
  for run in $(seq "${RUNS:-2}"); do
    for b in ${NV_BUILDS:-nv-engine-bench-old nv-engine-bench}; do
      echo "== run $run: $b --cuda over NVSHMEM, -np 2"
      # shellcheck disable=SC2086
      SYMMEM_OFF_NODE=nvshmem timeout -k 5 150 $MPIRUN $X -x SYMMEM_OFF_NODE -np 2 "$CARRY/$b" \
        --cuda --max-all-reduce 0 2>&1 | grep -E "bench|put|latency|rror"
      echo "rc=${PIPESTATUS[0]}"
    done
  done 2>&1 | tee "$OUT/nvshmem-ab.txt"
  echo "== engine-ranks --cuda over NVSHMEM, -np 2"
  # shellcheck disable=SC2086
  SYMMEM_OFF_NODE=nvshmem timeout -k 5 150 $MPIRUN $X -x SYMMEM_OFF_NODE -np 2 \
    "$CARRY/nv-engine-ranks" --cuda > "$OUT/nvshmem-ranks.txt" 2>&1
  echo "rc=$?"; tail -3 "$OUT/nvshmem-ranks.txt"
  echo quit | nvidia-cuda-mps-control
}

# nvshmem-hang: each build of NV_BUILDS in turn (the engine bench over NVSHMEM, puts
# only, SYMMEM_LOG=debug), and where one runs past ${HANG_S:-30} s, every rank's host stacks
# and running kernels (cuda-gdb) before it is killed; the processes left before each run
# (nvshmem-hang.txt).
nvshmem_hang() {
  nvshmem_env || return 1
  export SYMMEM_LOG=debug
  local i=0
  for b in ${NV_BUILDS:-nv-engine-bench-old nv-engine-bench nv-engine-bench-old}; do
    i=$((i + 1))
    { echo "== $i: $b; processes left before it:"; pgrep -af "engine-bench|mpirun" || true
      ( sleep "${HANG_S:-30}"
        for pid in $(pgrep -f "$b --cuda"); do
          echo "== $b rank process $pid: host stacks, kernels"
          timeout 25 cuda-gdb -p "$pid" -batch -ex "info cuda kernels" -ex "thread apply all bt 12" 2>&1 \
            | grep -vE "^\[New|^Reading|^warning|^$" | head -120
        done
        pkill -9 -f "$b --cuda" ) &
      local watchdog=$!
      # shellcheck disable=SC2086
      SYMMEM_OFF_NODE=nvshmem timeout -k 5 $((${HANG_S:-30} + 70)) $MPIRUN $X -x SYMMEM_OFF_NODE \
        -x SYMMEM_LOG -np 2 "$CARRY/$b" --cuda --max-all-reduce 0 > /tmp/nvshmem-hang-run.txt 2>&1
      echo "rc=$?"
      head -60 /tmp/nvshmem-hang-run.txt; echo "[...]"; tail -25 /tmp/nvshmem-hang-run.txt
      kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null; } >> "$OUT/nvshmem-hang.txt" 2>&1
    tail -3 "$OUT/nvshmem-hang.txt"
  done
  unset SYMMEM_LOG
  echo quit | nvidia-cuda-mps-control
}

first_load() {
  nvshmem_env || return 1
  export CUDA_CACHE_DISABLE=1
  for t in ${FIRST_LOADS:-nv-engine-ranks-old:nvshmem nv-engine-ranks:nvshmem nv-engine-ranks:bootstrap}; do
    local b=${t%%:*} via=${t##*:} start
    echo "== $b --cuda over $via, -np 2, no PTX cache"
    start=$(date +%s%N)
    # shellcheck disable=SC2086
    SYMMEM_OFF_NODE=$via timeout -k 5 150 $MPIRUN $X -x SYMMEM_OFF_NODE -x CUDA_CACHE_DISABLE -np 2 \
      "$CARRY/$b" --cuda 2>&1 | grep -E "tables done|: ok|rror" | head -4
    echo "rc=${PIPESTATUS[0]} wall=$(( ($(date +%s%N) - start) / 1000000 )) ms"
  done 2>&1 | tee "$OUT/first-load.txt"
  unset CUDA_CACHE_DISABLE
  echo quit | nvidia-cuda-mps-control
}

# The NVSHMEM transport under MPS, 2 PEs as 2 emulated nodes (see the header).
nvshmem() {
  nvshmem_env || return 1
  local nv=$NV inc=$INC x0=$X0 x=$X
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    echo "NVSHMEM $nv (headers: $inc)"
    grep -h 'define NVSHMEM_VENDOR_BASE_VERSION_STRING' "$inc"/non_abi/nvshmem_version.h
    ls "$nv" "$nv/lib"; } > "$OUT/nvshmem-env.txt" 2>&1
  cat "$OUT/nvshmem-env.txt"
  echo "== NVSHMEM's own bench (nvshmem_bench.cu), -np 2"
  # shellcheck disable=SC2046
  if nvcc -O2 -rdc=true -arch=sm_90 -I"$inc" "$P/nvshmem_bench.cu" -o /tmp/nvshmem-bench \
      $(mpicc --showme:compile) -L"$nv/lib" -l:libnvshmem_host.so.3 -lnvshmem_device \
      $(mpicc --showme:link) -lcuda > "$OUT/nvshmem-c-bench.txt" 2>&1; then
    # shellcheck disable=SC2086
    timeout -k 5 90 $MPIRUN $x -np 2 /tmp/nvshmem-bench >> "$OUT/nvshmem-c-bench.txt" 2>&1
    echo "rc=$?"
  fi
  tail -20 "$OUT/nvshmem-c-bench.txt"
  echo "== engine-ranks --cuda over NVSHMEM, -np 2, NVSHMEM's default granularity: refused"
  # shellcheck disable=SC2086
  SYMMEM_OFF_NODE=nvshmem env -u NVSHMEM_CUMEM_GRANULARITY timeout -k 5 60 $MPIRUN $x0 -x SYMMEM_OFF_NODE \
    -np 2 "$CARRY/nv-engine-ranks" --cuda > "$OUT/nvshmem-granularity.txt" 2>&1
  echo "rc=$?"; tail -4 "$OUT/nvshmem-granularity.txt"
  echo "== engine-ranks --cuda over NVSHMEM, -np 2"
  # shellcheck disable=SC2086
  SYMMEM_OFF_NODE=nvshmem timeout -k 5 150 $MPIRUN $x -x SYMMEM_OFF_NODE -np 2 \
    "$CARRY/nv-engine-ranks" --cuda > "$OUT/nvshmem-ranks.txt" 2>&1
  echo "rc=$?"; tail -30 "$OUT/nvshmem-ranks.txt"
  echo "== engine-kill --cuda over NVSHMEM, -np 2: rank 1 dies mid-wait (deadline 10 s)"
  # shellcheck disable=SC2086
  SYMMEM_OFF_NODE=nvshmem timeout -k 5 60 $MPIRUN $x -x SYMMEM_OFF_NODE --mca orte_enable_recovery 1 \
    -np 2 "$CARRY/nv-engine-kill" --cuda 10 > "$OUT/nvshmem-kill.txt" 2>&1
  echo "rc=$?"; tail -8 "$OUT/nvshmem-kill.txt"
  for t in nvshmem bootstrap; do
    local f=nvshmem-bench.txt
    [ $t = bootstrap ] && f=nvshmem-mpi-bench.txt
    echo "== engine bench --cuda, SYMMEM_OFF_NODE=$t, -np 2"
    # shellcheck disable=SC2086
    SYMMEM_LOG=symmem=info SYMMEM_OFF_NODE=$t timeout -k 5 110 $MPIRUN $x -x SYMMEM_OFF_NODE -x SYMMEM_LOG -np 2 \
      "$CARRY/nv-engine-bench" --cuda > "$OUT/$f" 2>&1
    echo "rc=$?"; grep -E "bench|put|latency|all_reduce|rror" "$OUT/$f" | head -20
  done
  echo quit | nvidia-cuda-mps-control
}

# mpi_floor.c: this MPI's ceiling for the staged path's wire (64 MiB in pieces as the
# proxies send them, against MPI_Put into an allocated window) at -np 2 (mpi-floor.txt).
mpi_floor() {
  mpicc -O2 -o /tmp/mpi_floor "$P/mpi_floor.c" || { echo "mpicc failed"; return 1; }
  timeout 120 $MPIRUN --map-by slot:PE=2 --bind-to core -np 2 /tmp/mpi_floor 2>&1 | tee "$OUT/mpi-floor.txt"
}

small_floor() {
  nvcc -O2 -arch=sm_90 -o /tmp/small_put_floor "$P/small_put_floor.cu" || { echo "nvcc failed"; return 1; }
  { echo "== without MPS"; timeout 120 /tmp/small_put_floor
    mps_start || { echo "MPS did not start"; return 1; }
    echo "== under MPS"; timeout 120 /tmp/small_put_floor
    echo quit | nvidia-cuda-mps-control; } 2>&1 | tee "$OUT/small-put-floor.txt"
}

# This build's small staged puts (-np 2, to 4 KiB) under MPS with Open MPI's shared-memory
# eager limit as it is and raised to 16 KiB, alternating, twice each: what the 4 KiB data
# message's rendezvous costs (engine-eager.txt).
engine_eager() {
  local pe="--map-by slot:PE=2 --bind-to core"
  local mps="-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY"
  mps_start || { echo "MPS did not start"; return 1; }
  for run in 1 2; do
    for eager in default 16384; do
      local knob=""
      [ "$eager" = default ] || knob="--mca btl_vader_eager_limit $eager"
      echo "== run $run: eager limit $eager, engine-bench --cuda, -np 2, puts to 4 KiB"
      # shellcheck disable=SC2086
      timeout -k 5 60 $MPIRUN $pe $mps $knob -np 2 -x SYMMEM_RANKS_PER_NODE=1 \
        "$CARRY/engine-bench" --cuda --max-put 4K --max-all-reduce 0 2>&1 | grep -E "put|latency|rror"
      echo "rc=${PIPESTATUS[0]}"
    done
  done 2>&1 | tee "$OUT/engine-eager.txt"
  echo quit | nvidia-cuda-mps-control
}

engine_hang() {
  mps_start || { echo "MPS did not start"; return 1; }
  local mps="-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -x SYMMEM_LOG"
  export SYMMEM_LOG=debug
  ( sleep "${HANG_S:-60}"
    for pid in $(pgrep -f "engine-bench --cuda"); do
      echo "== rank process $pid: host stacks"
      timeout 25 cuda-gdb -p "$pid" -batch -ex "info cuda kernels" -ex "thread apply all bt 14" 2>&1 \
        | grep -vE "^\[New|^Reading|^warning|^$" | head -150
    done > "$OUT/engine-hang-stacks.txt" 2>&1
    # The stacks are what was wanted: end the run now (mpirun may ignore SIGTERM).
    pkill -9 -f "engine-bench --cuda" ) &
  local watchdog=$!
  echo "== MPS, engine bench --cuda (staging), -np 4, 2 per node: all-reduce 1 MiB"
  timeout -k 5 $((${HANG_S:-60} + 120)) $MPIRUN --map-by slot:PE=2 --bind-to core $mps -np 4 \
    -x SYMMEM_RANKS_PER_NODE=2 "$CARRY/engine-bench" --cuda --max-put 4K \
    --min-all-reduce 1M --max-all-reduce 1M --each-sample > "$OUT/engine-hang.txt" 2>&1
  echo "rc=$?"
  kill "$watchdog" 2>/dev/null
  grep -E "sample|all_reduce|rror" "$OUT/engine-hang.txt" | head -30
  unset SYMMEM_LOG
  echo quit | nvidia-cuda-mps-control
}

engine_ranks() {
  for np in 2 4; do
    echo "== engine-ranks --cuda, -np $np, 1 rank per node"
    ( time timeout 80 $MPIRUN -np "$np" -x SYMMEM_RANKS_PER_NODE=1 "$CARRY/engine-ranks" --cuda ) \
      > "$OUT/engine-ranks-np$np.txt" 2>&1
    grep "rank 0:\|: ok$\|real\|rror" "$OUT/engine-ranks-np$np.txt" | tail -12
  done
}

# old_new PART...: the old commit's bench beside the new one's, so that a change's cost is
# read against a reference measured in the same run.
old_new() {
  for part in "$@"; do
    if [ "$part" = small ] || [ "$part" = launch ]; then
      # Old and new alternate, so drift of the machine hits both alike.
      mkdir -p "$OUT/launch"
      for i in $(seq "${RUNS:-10}"); do
        for build in old new; do
          local pre=""; [ "$build" = old ] && pre=old-
          if [ "$part" = small ]; then
            timeout 120 "$CARRY/${pre}bench-small" --worlds 2 | sed -n "s/^/small $build run $i: /p"
          else
            timeout 60 "$CARRY/${pre}bench-cuda" --sizes 16 --no-xproc --out "$OUT/launch" \
              | sed -n "s/^launch_enqueue_us,/launch $build run $i: /p"
          fi
        done
      done
      continue
    fi
    for build in old new; do
      local pre=""; [ "$build" = old ] && pre=old-
      echo "== $part ($build build)"
      case "$part" in
      lifetimes) timeout 120 "$CARRY/${pre}bench-lifetimes" ;;
      put) mkdir -p "$OUT/put-$build" && timeout 150 "$CARRY/${pre}bench-cuda" --sizes 4K,1M,64M,2G --no-xproc --out "$OUT/put-$build" ;;
      collectives) timeout 200 "$CARRY/${pre}bench-collectives" ;;
      *) echo "unknown old-new part $part (lifetimes, put, collectives, launch, small)" ;;
      esac
      echo "$part $build rc=$?"
    done
  done 2>&1 | tee -a "$OUT/old_new.txt"
}

# cost: what tracing costs a program on the host path, old build against new, without and
# with a subscriber, alternating so that drift of the machine hits all three alike.
cost() {
  for i in $(seq "${RUNS:-5}"); do
    for build in old new "new+${LOG:-info}"; do
      local pre="" log=""
      [ "$build" = old ] && pre=old-
      [ "$build" = "new+${LOG:-info}" ] && log=${LOG:-info}
      if [ -n "$log" ]; then export SYMMEM_LOG=$log; else unset SYMMEM_LOG; fi
      timeout 60 "$CARRY/${pre}bench-cuda" --sizes 16 --no-xproc --out "$OUT/launch" 2>/dev/null \
        | sed -n "s/^launch_enqueue_us,/launch $build run $i: /p"
      timeout 120 "$CARRY/${pre}bench-small" --worlds 2 2>/dev/null \
        | sed -n "s/^\([0-9]*\),host_call_us,8,/host_call world \1 $build run $i: /p"
    done
  done
  unset SYMMEM_LOG
}

[ $# -eq 0 ] && set -- bench
while [ $# -gt 0 ]; do
  part=$1
  shift
  case $part in
  bench) bench ;;
  tests) bash "$ROOT/tests/run_gpu.sh" ;;
  examples) examples ;;
  small) small ;;
  engine) engine ;;
  nvshmem) nvshmem ;;
  nvshmem-ab) nvshmem_ab ;;
  nvshmem-hang) nvshmem_hang ;;
  first-load) first_load ;;
  engine-ranks) engine_ranks ;;
  engine-ab) engine_ab ;;
  engine-eager) engine_eager ;;
  engine-hang) engine_hang ;;
  mpi-floor) mpi_floor ;;
  small-floor) small_floor ;;
  cost) mkdir -p "$OUT/launch"; cost 2>&1 | tee "$OUT/cost.txt" ;;
  old-new) old_new "$@"; break ;;
  *) echo "unknown part $part (bench, tests, examples, small, engine, engine-ab, engine-eager, engine-hang, engine-ranks, nvshmem, mpi-floor, small-floor, cost, old-new P...)"; exit 2 ;;
  esac
done
