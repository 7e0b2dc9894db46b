#!/usr/bin/env bash
# The new build beside the old one, in one device command: the same benches of two commits,
# run one after the other on the same GPU, so that a change's cost is read against a
# reference measured in the same run.
# Usage (repo root, device machine): bash host/benches/peers/run_old_new.sh PART...   (writes to $OUT)
#   lifetimes    World::barrier and allocate_symmetric (benches/lifetimes.rs, which builds
#                against older commits too)
#   put          the put/copy/memcpy table at 4K, 1M, 64M and 2G (benches/cuda.rs)
#   collectives  the collectives on one GPU at world 2 and 4 (benches/cuda_collectives.rs)
#   launch       the host's enqueue time of one small launch (benches/cuda.rs's
#                launch_enqueue_us line), old and new alternating, ${RUNS:-10} runs each
#   small        the small-message table at world 2 and the host's time per collective call
#                (benches/small_messages.rs --worlds 2, its host_call_us line), old and new
#                alternating, ${RUNS:-10} runs each
# Build first (here), then copy into .carry/: the new build's bench-lifetimes, bench-cuda,
# bench-collectives, bench-small (`cargo bench -p symmem --bench lifetimes --bench cuda --bench
# cuda_collectives --bench small_messages --no-run`), and the same of the old commit as
# old-bench-lifetimes, old-bench-cuda, old-bench-collectives, old-bench-small (a worktree
# of it, with benches/lifetimes.rs copied in where it lacks one, and its own target
# directory; it builds with its own pinned toolchain).
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CARRY=$ROOT/.carry
OUT=${OUT:-$ROOT/target/old-new}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
for part in "$@"; do
  if [ "$part" = small ]; then
    # Old and new alternate, so drift of the machine hits both alike.
    for i in $(seq "${RUNS:-10}"); do
      for build in old new; do
        bin=$CARRY/bench-small; [ "$build" = old ] && bin=$CARRY/old-bench-small
        timeout 120 "$bin" --worlds 2 | sed -n "s/^/small $build run $i: /p"
      done
    done
    continue
  fi
  if [ "$part" = launch ]; then
    # Old and new alternate, so drift of the machine hits both alike.
    mkdir -p "$OUT/launch"
    for i in $(seq "${RUNS:-10}"); do
      for build in old new; do
        bin=$CARRY/bench-cuda; [ "$build" = old ] && bin=$CARRY/old-bench-cuda
        timeout 60 "$bin" --sizes 16 --no-xproc --out "$OUT/launch" | sed -n "s/^launch_enqueue_us,/launch $build run $i: /p"
      done
    done
    continue
  fi
  for build in old new; do
    bin() { if [ "$build" = old ]; then echo "$CARRY/old-$1"; else echo "$CARRY/$1"; fi; }
    echo "== $part ($build build)"
    case "$part" in
    lifetimes) timeout 120 "$(bin bench-lifetimes)" ;;
    put) mkdir -p "$OUT/put-$build" && timeout 150 "$(bin bench-cuda)" --sizes 4K,1M,64M,2G --no-xproc --out "$OUT/put-$build" ;;
    collectives) timeout 200 "$(bin bench-collectives)" ;;
    *) echo "unknown part $part" ;;
    esac
    echo "$part $build rc=$?"
  done
done 2>&1 | tee -a "$OUT/old_new.txt"
