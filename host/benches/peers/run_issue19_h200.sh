#!/usr/bin/env bash
# The H200 run of issue 19's engine on CUDA (staging path: the image's Open MPI 4.1.6 is
# not CUDA-aware), with an MPI reference. One device command from the repository root;
# the binary built here and copied into .carry/:
#   cargo bench -p symmem --features mpi --bench engine --no-run           -> engine-bench
# Writes $OUT/*.txt.
#
# That Open MPI creates no window over memory it did not allocate, with any one-sided
# component (probed: the default, osc ucx with and without UCX_TLS=self,sm, osc rdma over
# vader, osc rdma with vader's single copy off: MPI_ERR_WIN each time; raw in
# results-2026-12-04-issue19-h200-mps/probe-*.txt): the bench's reference puts into an
# MPI_Win_allocate window instead.
set -u
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
C=.carry
R="mpirun --allow-run-as-root --oversubscribe"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  mpirun --version | head -1; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
# Processes emulating nodes share the one GPU. Without MPS their contexts time-slice it:
# a request the target's proxy applies (a copy, an atomic kernel) waits for the origin's
# spinning kernel to be switched out, 2.4 ms each (measured, results-*-h200-tuning/).
# Under MPS they run side by side, as ranks on GPUs of their own would. Open MPI binds a
# rank to one core by default from 2 ranks down, where the proxy shares it with the thread
# spinning in cuStreamSynchronize; PE=2 gives each rank a core for its proxy.
P="--map-by slot:PE=2 --bind-to core"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
M="-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || exit 1
trap 'echo quit | nvidia-cuda-mps-control' EXIT
echo "== MPS, engine bench --cuda (staging), -np 2, 1 rank per node: put, latency"
timeout 60 $R $P $M -np 2 -x SYMMEM_RANKS_PER_NODE=1 $C/engine-bench --cuda --max-all-reduce 0 \
  > "$OUT/engine-bench-np2.txt" 2>&1
echo "rc=$?"; grep -E "bench|put|latency|rror" "$OUT/engine-bench-np2.txt" | head -8
echo "== MPS, engine bench --cuda (staging), -np 4, 2 per node: put, latency, all-reduce"
timeout 100 $R $P $M -np 4 -x SYMMEM_RANKS_PER_NODE=2 $C/engine-bench --cuda --max-put 1048576 \
  > "$OUT/engine-bench-np4.txt" 2>&1
echo "rc=$?"; grep -E "bench|put|latency|all_reduce|rror" "$OUT/engine-bench-np4.txt" | head -14
