#!/usr/bin/env bash
# The H200 run of issue 19 (off-node engine, staging path), one device command from the
# repository root. Binaries built here beforehand and copied into .carry/:
#   cargo build --release -p symmem-tests --features mpi --bin engine-ranks  -> engine-ranks
#   cargo bench -p symmem --features mpi --bench engine --no-run            -> engine-bench
#   cargo bench -p symmem --bench cuda_collectives --no-run                 -> collectives-new
#   the same at aefeb13 (before the engine)                                 -> collectives-old
# Writes $OUT/*.txt. (The recorded run was this script's steps over three device commands
# of 2026-12-04, the budget in between; raw in results-2026-12-04-issue19/.)
set -u
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
C=.carry
R="mpirun --allow-run-as-root --oversubscribe"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/env.txt"
mpirun --version | head -1 >> "$OUT/env.txt"
ompi_info --parsable --all 2>/dev/null | grep "built_with_cuda_support:value" >> "$OUT/env.txt"
for np in 2 4; do
  echo "== engine-ranks --cuda, -np $np, 1 rank per node"
  ( time timeout 80 $R -np "$np" -x SYMMEM_RANKS_PER_NODE=1 $C/engine-ranks --cuda ) \
    > "$OUT/engine-ranks-np$np.txt" 2>&1
  grep "rank 0:\|: ok$\|real\|rror" "$OUT/engine-ranks-np$np.txt" | grep -v "^$" | tail -12
done
echo "== engine bench --cuda, -np 2 (1 per node): put, latency"
timeout 70 $R -np 2 -x SYMMEM_RANKS_PER_NODE=1 $C/engine-bench --cuda --max-all-reduce 0 \
  > "$OUT/engine-bench-np2.txt" 2>&1; tail -6 "$OUT/engine-bench-np2.txt"
echo "== engine bench --cuda, -np 4 (2 per node): put, latency, all-reduce to 4 MiB"
timeout 90 $R -np 4 -x SYMMEM_RANKS_PER_NODE=2 $C/engine-bench --cuda --max-all-reduce 4194304 \
  > "$OUT/engine-bench-np4.txt" 2>&1; tail -10 "$OUT/engine-bench-np4.txt"
for b in old new; do
  echo "== on-node collectives, $b build"
  timeout 75 $C/collectives-$b > "$OUT/collectives-$b.txt" 2>&1; echo "rc=$?"
done
