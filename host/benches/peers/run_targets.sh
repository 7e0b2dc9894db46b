#!/usr/bin/env bash
# sm_80 PTX against sm_90 PTX on one GPU (issue 29): the default NVIDIA target is sm_80,
# whose PTX the driver compiles for any newer GPU; this runs the same tests and benches
# built twice, once with only sm_80 PTX embedded (what an H200 loads now) and once with
# only sm_90 PTX (the old default), so the two are compared on the same GPU.
#
# Here (a machine with the pinned toolchain), from the repository root:
#   echo /.carry/ >> .git/info/exclude      # once: .carry travels only where `carry` names it
#   bash host/benches/peers/run_targets.sh build
# builds both into .carry/sm80/ and .carry/sm90/ (SYMMEM_GPU_TARGETS=sm_80, then sm_90,
# in the usual target directory; debug info stripped; about 32 MiB per build):
# tests/run_gpu.sh's binaries (its header lists them) and bench-cuda, bench-collectives. Each
# binary embeds the PTX of one target only, so the CUDA backend can load nothing else:
# that is how the target is forced.
#
# On the device machine, from the repository root (writes to $OUT), one call each (a
# call's working tree is at most 64 MiB, and a suite takes 4 to 8 minutes):
#   carry [".carry/sm80"]:  bash host/benches/peers/run_targets.sh check suite sm80
#   carry [".carry/sm90"]:  bash host/benches/peers/run_targets.sh check suite sm90
#   carry [".carry/sm80/bench-cuda", ".carry/sm80/bench-collectives",
#          ".carry/sm90/bench-cuda", ".carry/sm90/bench-collectives"]:
#                           bash host/benches/peers/run_targets.sh check put collectives
# Parts:
#   check        which PTX (`.target` lines) each carried binary embeds
#   suite BUILD  tests/run_gpu.sh with BUILD's binaries (sm80 or sm90), into $OUT/suite-BUILD
#   put          the put/copy/memcpy table at 4K, 1M, 64M, 2G (benches/cuda.rs)
#   collectives  the collectives on one GPU at world 2 and 4 (benches/cuda_collectives.rs)
# put and collectives run sm90 and sm80 alternating, ${RUNS:-2} runs each, so drift of
# the machine hits both alike; everything is also appended to $OUT/targets.txt.
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CARRY=$ROOT/.carry
OUT=${OUT:-$ROOT/target/targets}
BUILDS="sm90 sm80"

# build: both builds' binaries into .carry/<build>/ (here, not on the device machine).
build() {
  local build target dir json
  for build in $BUILDS; do
    target=sm_${build#sm}
    dir=$CARRY/$build
    json=$(mktemp)
    mkdir -p "$dir"
    echo "== building with SYMMEM_GPU_TARGETS=$target into $dir"
    (
      cd "$ROOT" || exit 1
      export SYMMEM_GPU_TARGETS=$target
      cargo test --release -p symmem-tests --test suite_cuda --test rma_processes \
        --test waits_processes --test waits_leave --test waits_poison --test off_node_local \
        --test cuda_backend --no-run --message-format=json-render-diagnostics &&
        cargo test --release -p symmem --lib --no-run --message-format=json-render-diagnostics &&
        cargo build --release -p cudarc-interop --message-format=json-render-diagnostics &&
        cargo bench -p symmem --bench cuda --bench cuda_collectives --no-run \
          --message-format=json-render-diagnostics
    ) >"$json" || { rm -f "$json"; return 1; }
    # Each test or bench target's executable, under the name run_gpu.sh and this script use.
    python3 - "$json" "$dir" <<'EOF' || { rm -f "$json"; return 1; }
import json, shutil, subprocess, sys
names = {
    ("test", "suite_cuda"): "suite-cuda",
    ("test", "rma_processes"): "rma-processes",
    ("test", "waits_processes"): "waits-processes",
    ("test", "waits_leave"): "waits-leave",
    ("test", "waits_poison"): "waits-poison",
    ("bin", "cudarc-interop"): "cudarc-interop",
    ("test", "off_node_local"): "off-node-local",
    ("test", "cuda_backend"): "cuda-backend",
    ("lib", "symmem"): "symmem-lib",
    ("bench", "cuda"): "bench-cuda",
    ("bench", "cuda_collectives"): "bench-collectives",
}
found = {}
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    key = (t["kind"][0], t["name"])
    if key in names and (key[0] != "lib" or m["profile"]["test"]):
        found[names[key]] = m["executable"]
missing = sorted(set(names.values()) - set(found))
if missing:
    sys.exit(f"no executable for {missing}")
for name, exe in sorted(found.items()):
    dst = f"{sys.argv[2]}/{name}"
    shutil.copyfile(exe, dst)
    subprocess.run(["strip", "--strip-debug", dst], check=True)
    shutil.copymode(exe, dst)
    print(name, exe)
EOF
    rm -f "$json"
  done
  du -sh "$CARRY"/sm80 "$CARRY"/sm90
}

# check: the `.target` lines of the PTX each carried binary embeds (one target each).
check() {
  local build bin
  for build in $BUILDS; do
    for bin in "$CARRY/$build"/*; do
      [ -f "$bin" ] || continue
      echo "$build $(basename "$bin"): $(grep -ao '^\.target sm_[0-9a-z]*$' "$bin" | sort | uniq -c | tr -s ' \n' ' ')"
    done
  done
}

if [ "${1:-}" = build ]; then
  build
  exit
fi
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
while [ $# -gt 0 ]; do
  part=$1
  shift
  case "$part" in
  check) check ;;
  suite)
    build=${1:?suite needs a build: sm80 or sm90}
    shift
    echo "== suite ($build build)"
    CARRY=$CARRY/$build OUT=$OUT/suite-$build bash "$ROOT/tests/run_gpu.sh"
    ;;
  put | collectives)
    for i in $(seq "${RUNS:-2}"); do
      for build in $BUILDS; do
        echo "== $part ($build build, run $i)"
        case "$part" in
        put)
          mkdir -p "$OUT/put-$build-$i"
          timeout 150 "$CARRY/$build/bench-cuda" --sizes 4K,1M,64M,2G --no-xproc --out "$OUT/put-$build-$i"
          ;;
        collectives) timeout 200 "$CARRY/$build/bench-collectives" ;;
        esac
        echo "$part $build run $i rc=$?"
      done
    done
    ;;
  *) echo "unknown part $part" ;;
  esac
done 2>&1 | tee -a "$OUT/targets.txt"
