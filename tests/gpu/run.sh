#!/bin/sh
# The GPU check of the device layer, in one go on any machine with a GPU:
# builds kvtier for sm_90 (plus PTX, so later GPUs JIT it), runs the tests
# labelled gpu and `kvtier-bench copy --json`, and prints a summary with the
# figures against the targets of the device issue. Finishes within 5 minutes.
# Where no GPU is usable it still builds, and reports the skips clearly.
#
#   tests/gpu/run.sh [BUILD_DIR]      (default build/gpu)
#   KVT_GPU_ARCHS="80-real;90-real;90-virtual" tests/gpu/run.sh   other targets
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build/gpu}
ARCHS=${KVT_GPU_ARCHS:-90-real;90-virtual}
JOBS=$(nproc 2>/dev/null || echo 2)
REPORT=$BUILD/gpu-report.txt
PATH=$PATH:/usr/local/cuda/bin
export PATH

say() { printf '%s\n' "$*" | tee -a "$REPORT"; }

mkdir -p "$BUILD"
: >"$REPORT"
say "== kvtier GPU check: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

gpu=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu=$(nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max \
        --format=csv,noheader 2>/dev/null | head -1)
fi
if [ -n "$gpu" ]; then
  say "GPU: $gpu"
  # a GPU is here: a test that skips for want of one is a failure
  KVT_TEST_REQUIRE_GPU=1
  export KVT_TEST_REQUIRE_GPU
else
  say "GPU: none found (nvidia-smi lists none); the gpu tests will skip"
fi
if ! command -v nvcc >/dev/null 2>&1; then
  say "FAIL: nvcc not found (install the CUDA toolkit or put it on PATH)"
  exit 1
fi
say "nvcc: $(nvcc --version | tail -1)"

say "-- build ($ARCHS) into $BUILD"
if ! timeout 200 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKVT_WERROR=ON \
     -DKVT_WITH_CUDA=ON "-DKVT_CUDA_ARCHITECTURES=$ARCHS" >"$BUILD/configure.log" 2>&1; then
  tail -20 "$BUILD/configure.log" | tee -a "$REPORT"
  say "FAIL: configure"
  exit 1
fi
grep -E "CUDA kernels" "$BUILD/configure.log" | sed 's/^ *//' | tee -a "$REPORT"
if ! timeout 240 cmake --build "$BUILD" -j "$JOBS" >"$BUILD/build.log" 2>&1; then
  grep -E "error|Error" "$BUILD/build.log" | head -20 | tee -a "$REPORT"
  say "FAIL: build"
  exit 1
fi

say "-- tests (label gpu)"
timeout 150 ctest --test-dir "$BUILD" -L gpu --output-on-failure >"$BUILD/ctest-gpu.log" 2>&1
tests_rc=$?
grep -E "Test +#|tests passed|SKIP|FAIL" "$BUILD/ctest-gpu.log" | tee -a "$REPORT"
if grep -q "Skipped" "$BUILD/ctest-gpu.log"; then
  # ctest hides a skipped test's output: ask one test for its reason
  "$BUILD/tests/gpu/test_gpu_api" 2>&1 | grep "SKIP" | tee -a "$REPORT"
fi

say "-- kvtier-bench copy"
bench_rc=0
if [ -n "$gpu" ]; then
  timeout 120 "$BUILD/bench/kvtier-bench" copy --json --backend cuda >"$BUILD/copy.json" \
    2>"$BUILD/copy.err"
  bench_rc=$?
else
  timeout 60 "$BUILD/bench/kvtier-bench" copy --json --backend host --max-size 16M \
    >"$BUILD/copy.json" 2>"$BUILD/copy.err"
  bench_rc=$?
  say "(no GPU: the host backend's figures, for the shape only)"
fi
[ $bench_rc -ne 0 ] && { cat "$BUILD/copy.err" | tee -a "$REPORT"; say "FAIL: bench rc=$bench_rc"; }

if [ $bench_rc -eq 0 ] && command -v python3 >/dev/null 2>&1; then
  python3 - "$BUILD/copy.json" <<'PY' | tee -a "$REPORT"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"backend {r['backend']} ({r.get('device', '?')}), medians of {r.get('reps', '?')}")
print(f"{'path':28} {'bytes':>10} {'GB/s':>8} {'ref':>8} {'ratio':>6}")
for c in r["cases"]:
    print(f"{c['path']:28} {c['block_bytes']:>10} {c['gbps']:8.2f} {c['reference_gbps']:8.2f} {c['ratio']:6.2f}")
if r["backend"] == "cuda":
    def ratios(p, min_bytes=0):
        return [c["ratio"] for c in r["cases"] if c["path"] == p and c["block_bytes"] >= min_bytes]
    checks = [
        ("pinned h2d >= 0.90 of best (>= 4 MiB)", min(ratios("h2d_pinned", 4 << 20) or [0]), 0.90),
        ("pinned d2h >= 0.90 of best (>= 4 MiB)", min(ratios("d2h_pinned", 4 << 20) or [0]), 0.90),
        ("gather direct >= 0.85 of contiguous", min(ratios("gather_direct") or [0]), 0.85),
        ("scatter direct >= 0.85 of contiguous", min(ratios("scatter_direct") or [0]), 0.85),
        ("gather direct >= 5x per-layer", min(ratios("gather_direct_vs_per_layer") or [0]), 5.0),
        ("scatter direct >= 5x per-layer", min(ratios("scatter_direct_vs_per_layer") or [0]), 5.0),
    ]
    for name, got, want in checks:
        print(f"target {name}: {got:.2f} {'MET' if got >= want else 'MISSED'}")
PY
elif [ $bench_rc -eq 0 ]; then
  cat "$BUILD/copy.json" | tee -a "$REPORT"
fi

say "-- summary"
if [ $tests_rc -eq 0 ] && [ -n "$gpu" ]; then
  say "gpu tests: PASS on $gpu"
elif [ $tests_rc -eq 0 ]; then
  say "gpu tests: SKIPPED (no GPU on this machine): kernels untested on hardware"
else
  say "gpu tests: FAIL (see $BUILD/ctest-gpu.log)"
fi
say "report: $REPORT"
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
