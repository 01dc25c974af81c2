#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The GPU check of the device layer, in one command on a machine with a GPU:
# builds the gpu tests and kvtier-bench for the GPU's own architecture (and
# nothing else), runs the tests labelled gpu and `kvtier-bench copy`, and
# prints one summary: the GPU, each test, and every figure against its target
# (pinned copies >= 0.90 of the best pinned copy of the run, gather/scatter into
# pinned host >= 0.85 of one contiguous copy, >= 5x the per-layer baseline for
# 16-token blocks of a 32-layer model), PASS or FAIL per line.
#
#   tests/gpu/run.sh [--out DIR] [--build DIR] [--deps auto|system|bundle]
#                    [--bundle DIR]
#
#   --out DIR     where the summary (summary.txt, summary.json), the raw bench
#                 JSON (copy.json), the tests' JUnit XML and the logs go
#                 (default $OUT if set, else build/gpu-check)
#   --build DIR   the build folder (default build/gpu; kept, so a rerun is quick)
#   --deps MODE   auto (default): the system's libraries when pkg-config finds
#                 them all, else the bundle; system; bundle
#   --bundle DIR  the folder tests/gpu/bundle.sh made (default build/gpu-bundle)
#
# Environment: KVT_GPU_ARCHS (CMake CUDA architectures; default the GPU's own,
# from nvidia-smi, else 90-real for H100/H200), KVT_TEST_REQUIRE_GPU=1 (a
# missing GPU is a failure; set by itself when nvidia-smi lists a GPU), CUDACXX,
# KVT_GPU_DEADLINE (seconds for the whole check, default 480: each step gets
# at most what is left, so the summary comes before a 10-minute limit).
# Exit status: 0 every line passed on a GPU; 1 a line failed; 77 no GPU, so the
# kernels did not run (the build and the skips are reported).
set -u
cd "$(dirname "$0")/../.." || exit 1
SRC=$(pwd)

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; }
OUTDIR=${OUT:-build/gpu-check}
BUILD=build/gpu
DEPS=auto
BUNDLE=build/gpu-bundle
while [ $# -gt 0 ]; do
	case "$1" in
	--out) OUTDIR=${2:?--out needs a folder}; shift 2 ;;
	--build) BUILD=${2:?--build needs a folder}; shift 2 ;;
	--deps) DEPS=${2:?--deps needs auto, system or bundle}; shift 2 ;;
	--bundle) BUNDLE=${2:?--bundle needs a folder}; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
case "$DEPS" in auto | system | bundle) ;; *) usage >&2; exit 2 ;; esac
mkdir -p "$OUTDIR" "$BUILD" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
BUILD=$(cd "$BUILD" && pwd)
rm -f "$OUTDIR/summary.txt" "$OUTDIR/summary.json" "$OUTDIR/copy.json" "$OUTDIR/ctest-gpu.xml"
RUNLOG=$OUTDIR/run.log
: >"$RUNLOG"
JOBS=$(nproc 2>/dev/null || echo 4)
T0=$(date +%s)
DEADLINE=${KVT_GPU_DEADLINE:-480}
PATH=$PATH:/usr/local/cuda/bin
export PATH

say() { printf '%s\n' "$*" | tee -a "$RUNLOG"; }
# step NAME: seconds since the last step, recorded for the summary
LAST=$T0
TIMES=""
step() {
	now=$(date +%s)
	TIMES="$TIMES $1=$((now - LAST))"
	LAST=$now
}
# budget CAP: seconds for the next step, at most CAP and what the deadline leaves
budget() {
	left=$((DEADLINE - ($(date +%s) - T0)))
	[ "$left" -lt 1 ] && left=1 # timeout 0 would mean no limit
	[ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
# the summary, even when a step fails: every line known so far is in it
finish() {
	step "$1"
	set -- --out "$OUTDIR" --src "$SRC" --gpu "$GPU_NAME" --gpu-reason "$GPU_REASON" \
		--require "$REQUIRE" --deps "$DEPS_USED" --archs "${ARCHS:-}" \
		--nvcc "${NVCC_VERSION:-}" --jobs "$JOBS" --times "$TIMES" --failed "$FAILED"
	if command -v python3 >/dev/null 2>&1; then
		python3 "$SRC/tests/gpu/summary.py" "$@"
		exit $?
	fi
	say "FAIL: python3 is needed to read the results; raw files in $OUTDIR"
	exit 1
}
FAILED=""
DEPS_USED="-"

# -- the GPU
GPU_NAME=""
GPU_REASON=""
CC=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
	if [ -e /dev/nvidia0 ]; then
		GPU_NAME="unnamed (nvidia-smi missing, /dev/nvidia0 present)"
	else
		GPU_REASON="nvidia-smi not found, no /dev/nvidia0"
	fi
elif ! smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max \
		--format=csv,noheader 2>&1); then
	GPU_REASON="nvidia-smi: $(printf '%s' "$smi" | head -1)"
elif [ -z "$smi" ]; then
	GPU_REASON="nvidia-smi lists no GPU"
else
	n=$(printf '%s\n' "$smi" | wc -l)
	IFS=, read -r name drv mem gen width <<EOF
$(printf '%s\n' "$smi" | head -1)
EOF
	GPU_NAME="$name (driver${drv}, ${mem# }, PCIe gen${gen} x${width# }$([ "$n" -gt 1 ] && echo ", 1st of $n"))"
	CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
fi
REQUIRE=${KVT_TEST_REQUIRE_GPU:-0}
# a GPU is here: a test that skips for want of one is a failure
[ -n "$GPU_NAME" ] && REQUIRE=1
say "GPU: ${GPU_NAME:-none ($GPU_REASON)}"

# -- the compiler and the architecture
case "$CC" in
[0-9][0-9] | [0-9][0-9][0-9]) ARCHS=${KVT_GPU_ARCHS:-$CC-real} ;;
*) ARCHS=${KVT_GPU_ARCHS:-90-real} ;; # H100/H200 when nvidia-smi cannot tell
esac
if [ -n "${CUDACXX:-}" ]; then
	NVCC=$CUDACXX
else
	NVCC=$(command -v nvcc || true)
fi
if [ -z "$NVCC" ] || ! "$NVCC" --version >/dev/null 2>&1; then
	say "nvcc not found (install the CUDA toolkit, put it on PATH or set CUDACXX)"
	FAILED="$FAILED nvcc-missing"
	finish configure
fi
NVCC_VERSION=$("$NVCC" --version | sed -n 's/.*release \([^,]*\), \(V[^ ]*\).*/\1 (\2)/p')
say "nvcc: $NVCC $NVCC_VERSION; architectures $ARCHS; $JOBS jobs"

# -- the libraries: the system's, else the bundle
MODS="liburing liblz4 libxxhash jansson libcrypto inih cmocka"
# shellcheck disable=SC2086 # MODS is a list
have_system() { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists $MODS 2>/dev/null; }
if [ "$DEPS" = auto ]; then
	if have_system; then DEPS=system; else DEPS=bundle; fi
fi
set --
if [ "$DEPS" = bundle ]; then
	if [ ! -f "$BUNDLE/lib/pkgconfig/liburing.pc" ]; then
		say "no libraries: pkg-config lacks some of: $MODS, and $BUNDLE holds no bundle"
		say "(make it with tests/gpu/bundle.sh on a Debian 12 machine and bring $BUNDLE along)"
		FAILED="$FAILED libraries"
		finish configure
	fi
	BUNDLE=$(cd "$BUNDLE" && pwd)
	chmod +x "$BUNDLE/bin/"* 2>/dev/null # in case the copy lost the modes
	PKG_CONFIG_PATH=$BUNDLE/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
	LD_LIBRARY_PATH=$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export PKG_CONFIG_PATH LD_LIBRARY_PATH
	command -v pkg-config >/dev/null 2>&1 || PATH=$BUNDLE/bin:$PATH
	# libcrypto comes from the bundle too, and statically, as the others
	set -- "-DCMAKE_PREFIX_PATH=$BUNDLE" "-DOPENSSL_ROOT_DIR=$BUNDLE" -DOPENSSL_USE_STATIC_LIBS=TRUE
	DEPS_USED="bundle $BUNDLE ($(sed 1d "$BUNDLE/MANIFEST" | tr '\n' ',' | sed 's/,$//; s/,/, /g'))"
elif have_system; then
	DEPS_USED="system (pkg-config: $MODS)"
else
	say "the system lacks some of: $MODS (pkg-config)"
	FAILED="$FAILED libraries"
	finish configure
fi
say "libraries: $DEPS_USED"

# -- configure: a build folder made with other libraries starts afresh
GEN=""
command -v ninja >/dev/null 2>&1 && GEN="-GNinja"
stamp="$DEPS $BUNDLE $ARCHS $GEN"
if [ -f "$BUILD/CMakeCache.txt" ] && [ "$(cat "$BUILD/kvt-gpu-check.stamp" 2>/dev/null)" != "$stamp" ]; then
	rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
fi
printf '%s\n' "$stamp" >"$BUILD/kvt-gpu-check.stamp"
say "-- configure into $BUILD"
# no -Werror: another compiler's new warnings must not waste the GPU time
timeout "$(budget 150)" cmake -S . -B "$BUILD" $GEN -DCMAKE_BUILD_TYPE=Release -DKVT_WERROR=OFF \
	-DKVT_WITH_CUDA=ON "-DCMAKE_CUDA_COMPILER=$NVCC" "-DKVT_CUDA_ARCHITECTURES=$ARCHS" \
	-DKVT_WITH_OPENBLAS=OFF -DKVT_WITH_RDMA=OFF -DKVT_BUILD_TESTS=ON "$@" \
	>"$OUTDIR/configure.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
	tail -25 "$OUTDIR/configure.log" | tee -a "$RUNLOG"
	[ $rc -eq 124 ] && FAILED="$FAILED configure-timeout" || FAILED="$FAILED configure"
	finish configure
fi
grep -q "CUDA kernels (nvcc): ON" "$OUTDIR/configure.log" || FAILED="$FAILED cuda-off"
step configure

say "-- build the target gpu-check (the gpu tests and kvtier-bench)"
timeout "$(budget 270)" cmake --build "$BUILD" --target gpu-check -j "$JOBS" >"$OUTDIR/build.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
	grep -E -B2 -A8 "error|Error" "$OUTDIR/build.log" | head -60 | tee -a "$RUNLOG"
	[ $rc -eq 124 ] && FAILED="$FAILED build-timeout" || FAILED="$FAILED build"
	finish build
fi
step build

say "-- tests (label gpu)"
# --stop-time cuts each test's own timeout short so that ctest still writes
# its results; the outer timeout is for ctest itself
t=$(budget 180)
stop=$(date -d "@$(($(date +%s) + t))" +%H:%M:%S 2>/dev/null)
KVT_TEST_REQUIRE_GPU=$REQUIRE timeout $((t + 15)) ctest --test-dir "$BUILD" -L '^gpu$' \
	--output-on-failure ${stop:+--stop-time "$stop"} --output-junit "$OUTDIR/ctest-gpu.xml" \
	>"$OUTDIR/ctest-gpu.log" 2>&1
rc=$?
# ctest: 0 all passed or skipped, 8 a test failed; anything else is ctest's own trouble
[ $rc -eq 0 ] || [ $rc -eq 8 ] || FAILED="$FAILED ctest-rc-$rc"
step tests

say "-- kvtier-bench copy"
if [ -n "$GPU_NAME" ]; then
	timeout "$(budget 150)" "$BUILD/bench/kvtier-bench" copy --json --backend cuda \
		>"$OUTDIR/copy.json" 2>"$OUTDIR/copy.err"
else
	# no GPU: the host backend at small sizes proves the binary runs; its
	# figures are no measure of the targets
	timeout "$(budget 60)" "$BUILD/bench/kvtier-bench" copy --json --backend host --max-size 1M \
		--reps 1 --blocks 4 >"$OUTDIR/copy.json" 2>"$OUTDIR/copy.err"
fi
rc=$?
[ $rc -eq 0 ] || FAILED="$FAILED bench-rc-$rc"
finish bench
