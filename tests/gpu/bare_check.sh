#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Proves that the GPU check builds on a bare machine: makes the bundle here
# (tests/gpu/bundle.sh), then, in a mount namespace where /usr is an overlay
# that hides every -dev package but the C/C++ toolchain's, pkg-config and the
# runtime libraries of kvtier's dependencies, runs tests/gpu/run.sh. Only the
# compiler, CMake, ninja, Python and the CUDA toolkit remain, as on a bare GPU
# machine. Without a GPU run.sh must build, report every gpu test and target
# as skipped with its reason, and exit 77; with KVT_TEST_REQUIRE_GPU=1 it
# must fail.
#
#   tests/gpu/bare_check.sh WORKDIR     (the bundle, build and reports go there)
#
# Exit status: 0 proven, 1 not, 77 this machine cannot make the namespace
# (not root, or no unshare or overlayfs), with the reason printed.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)

# packages a bare machine does not have (the toolchain's own -dev stay)
hidden_packages() {
	dpkg-query -W -f='${Package} ${Status}\n' | awk '$NF == "installed" { print $1 }' |
		grep -E -- '-dev(:[a-z0-9]+)?$' |
		grep -v -E '^(libc6-dev|linux-libc-dev|libcrypt-dev|libnsl-dev|libtirpc-dev|libgcc-[0-9]+-dev|libstdc\+\+-[0-9]+-dev)(:|$)'
	# libjansson4 stays: Debian's ld (binutils 2.40) links it
	for p in pkg-config pkgconf pkgconf-bin libpkgconf3 liburing2 libxxhash0 \
		libinih1 libcmocka0 libopenblas0 libopenblas0-pthread libibverbs1 librdmacm1; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "ok installed" && echo "$p"
	done
}

# inside the namespace: hide, check that it is hidden, run the check twice
inside() {
	work=$1
	mount --make-rprivate / || exit 1
	mkdir -p "$work/ns"
	mount -t tmpfs -o size=64m kvt-bare "$work/ns" || exit 1
	mkdir -p "$work/ns/upper" "$work/ns/work"
	# a whiteout (a 0/0 character device in the upper layer) hides a file
	# shellcheck disable=SC2046
	dpkg -L $(hidden_packages) 2>/dev/null | grep '^/usr/' | python3 -c '
import os, stat, sys
upper, n = sys.argv[1], 0
for p in sys.stdin.read().split("\n"):
    if p and not os.path.isdir(p) and os.path.lexists(p):
        w = upper + p[len("/usr"):]
        os.makedirs(os.path.dirname(w), exist_ok=True)
        if not os.path.lexists(w):
            os.mknod(w, stat.S_IFCHR | 0o600, 0)
            n += 1
print(n)' "$work/ns/upper" >"$work/ns/count" || exit 1
	mount -t overlay kvt-bare -o "lowerdir=/usr,upperdir=$work/ns/upper,workdir=$work/ns/work" /usr ||
		exit 1
	echo "bare: $(cat "$work/ns/count") files of $(hidden_packages | wc -l) packages hidden under /usr"

	bad=""
	for f in /usr/include/lz4.h /usr/include/liburing.h /usr/include/openssl/sha.h \
		/usr/include/jansson.h /usr/include/cmocka.h /usr/include/ini.h /usr/include/xxhash.h \
		/usr/lib/x86_64-linux-gnu/libcrypto.so /usr/lib/x86_64-linux-gnu/libcrypto.a \
		/usr/lib/x86_64-linux-gnu/libjansson.so /usr/lib/x86_64-linux-gnu/liburing.so.2 \
		/usr/lib/x86_64-linux-gnu/pkgconfig/liburing.pc; do
		[ -e "$f" ] && bad="$bad $f"
	done
	command -v pkg-config >/dev/null 2>&1 && bad="$bad pkg-config"
	if [ -n "$bad" ]; then
		echo "FAIL: still visible in the namespace:$bad"
		exit 1
	fi
	PATH=$PATH:/usr/local/cuda/bin
	echo "bare: visible: $(cc --version | head -1); $(cmake --version | head -1);" \
		"ninja $(ninja --version 2>/dev/null || echo none); $(python3 --version);" \
		"nvcc $(nvcc --version | sed -n 's/.*release \([^,]*\),.*/\1/p')"
	unset PKG_CONFIG_PATH PKG_CONFIG_LIBDIR LD_LIBRARY_PATH KVT_TEST_REQUIRE_GPU OUT
	out=$work/out

	echo "== run.sh (no GPU): must build and skip"
	# configure afresh, as on a new machine: a cache would remember libraries
	# an earlier bundle had (the objects stay; ninja redoes what changed)
	rm -f "$work/build/CMakeCache.txt"
	"$SRC/tests/gpu/run.sh" --out "$out" --build "$work/build" --bundle "$work/bundle"
	rc=$?
	fail=""
	[ $rc -eq 77 ] || fail="$fail exit=$rc(want 77)"
	grep -q "^  PASS  build (target gpu-check) *CUDA kernels for" "$out/summary.txt" || fail="$fail build"
	grep -q "^  info  libraries *bundle " "$out/summary.txt" || fail="$fail not-the-bundle"
	[ "$(grep -c "^  SKIP  test_gpu_[a-z]* .*no usable GPU" "$out/summary.txt")" -eq 5 ] ||
		fail="$fail skips"
	grep -q "^  PASS  kvtier-bench copy runs" "$out/summary.txt" || fail="$fail bench"
	[ "$(grep -c "^  SKIP  .*: no GPU$" "$out/summary.txt")" -eq 6 ] || fail="$fail targets"
	grep -q "^RESULT: SKIPPED: no GPU" "$out/summary.txt" || fail="$fail result"

	echo "== run.sh with KVT_TEST_REQUIRE_GPU=1: must fail"
	KVT_TEST_REQUIRE_GPU=1 "$SRC/tests/gpu/run.sh" --out "$out.require" --build "$work/build" \
		--bundle "$work/bundle" >"$work/require.log" 2>&1
	rc=$?
	[ $rc -eq 1 ] || fail="$fail require-exit=$rc(want 1)"
	grep -q "^  FAIL  GPU .*KVT_TEST_REQUIRE_GPU=1" "$out.require/summary.txt" || fail="$fail require-gpu"
	[ "$(grep -c "^  FAIL  test_gpu_" "$out.require/summary.txt")" -eq 5 ] || fail="$fail require-tests"
	grep -E "FAIL|RESULT" "$out.require/summary.txt"

	if [ -n "$fail" ]; then
		echo "FAIL: the GPU check on a bare machine:$fail (reports in $out*)"
		exit 1
	fi
	echo "PASS: bundle.sh here, then run.sh on a bare machine, builds and reports the skips"
	exit 0
}

if [ "${1:-}" = --inside ]; then
	inside "$2"
fi
if [ $# -ne 1 ]; then
	sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
mkdir -p "$1" || exit 1
WORK=$(cd "$1" && pwd)

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: the bare-machine proof needs root (a mount namespace with an overlay on /usr)"
	exit 77
fi
for t in unshare dpkg-query apt-get dpkg-deb python3; do
	command -v $t >/dev/null 2>&1 || { echo "SKIP: $t not found (the proof needs Debian)"; exit 77; }
done
if ! PATH=$PATH:/usr/local/cuda/bin command -v "${CUDACXX:-nvcc}" >/dev/null 2>&1; then
	echo "SKIP: no CUDA toolkit (nvcc) here: the GPU check cannot be built"
	exit 77
fi
# shellcheck disable=SC2016 # expanded by the inner shell
if ! err=$(unshare -m sh -c 'd=$(mktemp -d) && mkdir $d/l $d/u $d/w $d/m &&
		mount -t overlay o -o lowerdir=$d/l,upperdir=$d/u,workdir=$d/w $d/m; r=$?;
		umount $d/m 2>/dev/null; rm -rf $d; exit $r' 2>&1); then
	echo "SKIP: cannot make a mount namespace with an overlay here: $err"
	exit 77
fi

T0=$(date +%s)
echo "== bundle.sh"
"$SRC/tests/gpu/bundle.sh" "$WORK/bundle" || { echo "FAIL: bundle.sh"; exit 1; }
bytes=$(du -sb "$WORK/bundle" | cut -f1)
if [ "$bytes" -ge $((64 << 20)) ]; then
	echo "FAIL: the bundle is $bytes bytes, over the 64 MiB that can travel to a GPU machine"
	exit 1
fi
unshare -m sh "$0" --inside "$WORK"
rc=$?
echo "bare-machine proof: $(($(date +%s) - T0)) s"
exit $rc
