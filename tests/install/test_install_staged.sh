#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Installs the build into a staging prefix and uses only what was installed:
# the file layout, the client library's SONAME and exported symbols (those of
# transport/client.map), the man pages, the example config, the systemd units
# (systemd-analyze verify), examples/engine.c and an embedded-store program
# compiled with pkg-config against the prefix, the staged kvtierd serving the
# example engines (C, and Python from a venv the binding was pip-installed
# into, with no PYTHONPATH), every byte verified; and a DESTDIR install for
# the prefix /usr.
#
# Environment (set by tests/install/CMakeLists.txt): KVT_BUILD_DIR,
# KVT_SOURCE_DIR, KVT_TEST_TMPDIR, KVT_VERSION, KVT_CC, KVT_SAN_FLAGS (the
# build's -fsanitize flags, for programs linked against it), KVT_PYTHON (the
# suite's interpreter), KVT_PY_PRELOAD (the sanitizer runtime Python must
# preload, or "none"; "skip" where it cannot be loaded at all).
# pipefail: a producer killed by SIGPIPE fails its pipeline, so no grep -q
# ends one early
set -euo pipefail
KVT_SAN_FLAGS=${KVT_SAN_FLAGS:-}

. "$(dirname "$0")/daemon.sh"

mkdir -p "$KVT_TEST_TMPDIR"
W=$(mktemp -d "$KVT_TEST_TMPDIR/staged.XXXXXX")
# sockets in a short directory: a Unix socket's path must fit 108 bytes
SD=$(mktemp -d /tmp/kvt-staged.XXXXXX)
P=$W/prefix
DPID=
cleanup() {
	if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
		kill -KILL "$DPID" 2>/dev/null || true
	fi
	rm -rf "$W" "$SD"
}
trap cleanup EXIT

step "cmake --install --prefix $P"
cmake --install "$KVT_BUILD_DIR" --prefix "$P" >"$W/install.log" || { cat "$W/install.log"; fail "install"; }
for f in bin/kvtierd bin/kvtier bin/kvtier-bench \
	lib/libkvtier-client.so.$KVT_VERSION lib/libkvtier.a \
	lib/pkgconfig/kvtier-client.pc lib/pkgconfig/kvtier.pc \
	include/kvtier/client.h include/kvtier/store.h include/kvtier/types.h include/kvtier/version.h \
	share/man/man8/kvtierd.8.gz share/man/man1/kvtier.1.gz share/man/man1/kvtier-bench.1.gz \
	share/doc/kvtier/examples/engine.c share/doc/kvtier/examples/engine.py \
	share/doc/kvtier/copyright share/doc/kvtier/LICENSE \
	share/kvtier/grafana/kvtier-dashboard.json \
	etc/kvtier/kvtierd.ini lib/systemd/system/kvtierd.service lib/systemd/system/kvtierd.socket; do
	[ -f "$P/$f" ] || fail "$f not installed"
done
for h in "$KVT_SOURCE_DIR"/include/kvtier/*.h; do
	cmp -s "$h" "$P/include/kvtier/${h##*/}" || fail "public header ${h##*/} not installed as is"
done

step "libkvtier-client: SONAME, links, exported symbols"
soname=$(readelf -d "$P/lib/libkvtier-client.so.$KVT_VERSION" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libkvtier-client.so.0 ] || fail "SONAME is '$soname', not libkvtier-client.so.0"
[ "$(readlink "$P/lib/libkvtier-client.so.0")" = "libkvtier-client.so.$KVT_VERSION" ] || fail "libkvtier-client.so.0 link"
[ "$(readlink "$P/lib/libkvtier-client.so")" = libkvtier-client.so.0 ] || fail "libkvtier-client.so link"
# exactly the symbols of the version script, each with its node's version
python3 "$KVT_SOURCE_DIR/scripts/symbols_check.py" "$KVT_SOURCE_DIR/transport/client.map" \
	"$P/lib/libkvtier-client.so" || fail "the installed library's exports differ from client.map"

step "man pages"
for m in man8/kvtierd.8 man1/kvtier.1 man1/kvtier-bench.1; do
	warn=$(zcat "$P/share/man/$m.gz" | groff -man -ww -z -Tutf8 2>&1)
	[ -z "$warn" ] || fail "$m: $warn"
	lexgrog "$P/share/man/$m.gz" >/dev/null || fail "$m: no NAME line that man-db can read"
done
zcat "$P/share/man/man8/kvtierd.8.gz" | grep -F -- '\-\-socket PATH' >/dev/null || fail "kvtierd(8) lacks the options"
zcat "$P/share/man/man1/kvtier.1.gz" | grep '^\.SH "KVTIER CALC"' >/dev/null || fail "kvtier(1) lacks kvtier calc"

step "example config, systemd units"
"$P/bin/kvtierd" --config "$P/etc/kvtier/kvtierd.ini" --print-config >/dev/null ||
	fail "kvtierd rejects the example kvtierd.ini"
grep -qx "ExecStart=$P/bin/kvtierd --config $P/etc/kvtier/kvtierd.ini" \
	"$P/lib/systemd/system/kvtierd.service" || fail "ExecStart does not name the staged paths"
MANPATH=$P/share/man: systemd-analyze verify "$P/lib/systemd/system/kvtierd.service" \
	"$P/lib/systemd/system/kvtierd.socket" || fail "systemd-analyze verify"

step "pkg-config: engine.c and an embedded store against the prefix"
export PKG_CONFIG_PATH=$P/lib/pkgconfig
[ "$(pkg-config --modversion kvtier-client)" = "$KVT_VERSION" ] || fail "kvtier-client.pc version"
[ "$(pkg-config --modversion kvtier)" = "$KVT_VERSION" ] || fail "kvtier.pc version"
# shellcheck disable=SC2046,SC2086
"$KVT_CC" -std=c11 -Wall -Werror $KVT_SAN_FLAGS -o "$W/engine" \
	"$P/share/doc/kvtier/examples/engine.c" $(pkg-config --cflags --libs kvtier-client)
# shellcheck disable=SC2046,SC2086
"$KVT_CC" -std=c11 -Wall -Werror $KVT_SAN_FLAGS -o "$W/store_embed" \
	"$KVT_SOURCE_DIR/tests/install/store_embed.c" $(pkg-config --static --cflags --libs kvtier)
LD_LIBRARY_PATH=$P/lib ldd "$W/engine" | grep "libkvtier-client.so.0 => $P/lib/" >/dev/null ||
	fail "the engine does not load the staged libkvtier-client"
mkdir "$W/embed-ssd"
"$W/store_embed" "$W/embed-ssd" || fail "the embedded store program"

step "the staged kvtierd and the example engines"
S=$SD/kvtierd.sock
"$P/bin/kvtierd" --config "$P/etc/kvtier/kvtierd.ini" --socket "$S" --data-dir "$W/data" \
	--dram 64M --ssd 32M --metrics off >"$W/kvtierd.log" 2>&1 &
DPID=$!
kvtd_wait_answering "$P/bin/kvtier" "$S" "$W/kvtierd.log"
LD_LIBRARY_PATH=$P/lib "$W/engine" --socket "$S" --sequences 4 --blocks 8 ||
	fail "the C example engine against the staged kvtierd"

if [ "$KVT_PY_PRELOAD" = skip ]; then
	echo "the Python binding is not loadable in this build (sanitizer runtime): not tried"
else
	step "pip install ./python into a venv, then the Python example engine"
	# pip builds offline with the interpreter's own setuptools and wheel: the
	# suite's Python when it has them, else Debian's (python3-setuptools,
	# python3-wheel, python3-pip)
	PY=
	for py in "$KVT_PYTHON" /usr/bin/python3; do
		if "$py" -c "import setuptools, wheel, pip" 2>/dev/null; then
			PY=$py
			break
		fi
	done
	[ -n "$PY" ] || fail "no Python with setuptools, wheel and pip (apt-get install python3-setuptools python3-wheel python3-pip)"
	echo "interpreter: $PY ($("$PY" --version 2>&1))"
	"$PY" -m venv --without-pip --system-site-packages "$W/venv"
	cp -r "$KVT_SOURCE_DIR/python" "$W/python-src"   # the build writes beside its sources
	(cd "$W" && env -u PYTHONPATH "$W/venv/bin/python" -m pip install --quiet --no-index \
		--no-build-isolation --disable-pip-version-check ./python-src >"$W/pip.log" 2>&1) ||
		{ cat "$W/pip.log"; fail "pip install ./python"; }
	unset PKG_CONFIG_PATH
	pyenv=(env -u PYTHONPATH -u KVTIER_CLIENT_LIB -u LD_LIBRARY_PATH)
	if [ "$KVT_PY_PRELOAD" != none ]; then
		pyenv+=(LD_PRELOAD="$KVT_PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)
	fi
	got=$(cd "$W" && "${pyenv[@]}" "$W/venv/bin/python" -c '
import importlib.metadata, kvtier
lib = [l.split()[-1] for l in open("/proc/self/maps") if "libkvtier-client" in l][0]
print(kvtier.__file__, lib, importlib.metadata.version("kvtier"))')
	read -r pkg lib ver <<<"$got"
	case "$pkg" in "$W/venv/"*) ;; *) fail "kvtier imported from $pkg, not the venv" ;; esac
	[ "$lib" = "$P/lib/libkvtier-client.so.$KVT_VERSION" ] || fail "the binding loaded $lib"
	[ "$ver" = "$KVT_VERSION" ] || fail "python/pyproject.toml says $ver, CMake $KVT_VERSION"
	(cd "$W" && "${pyenv[@]}" "$W/venv/bin/python" "$P/share/doc/kvtier/examples/engine.py" \
		--socket "$S" --sequences 4 --blocks 8) || fail "the Python example engine"
fi

step "SIGTERM"
kvtd_stop "$W/kvtierd.log"

step "socket activation by systemd's own tool (systemd-socket-activate)"
# it listens, and execs the staged kvtierd with the socket on the first
# connection, as a socket unit does
systemd-socket-activate -l "$SD/activated.sock" --fdname=sidecar "$P/bin/kvtierd" \
	--config "$P/etc/kvtier/kvtierd.ini" --socket "$SD/own.sock" --data-dir "$W/data" \
	--dram 64M --ssd 0 --metrics off >"$W/activated.log" 2>&1 &
DPID=$!
for _ in $(seq 200); do
	[ -S "$SD/activated.sock" ] && break
	sleep 0.05
done
"$P/bin/kvtier" stats --socket "$SD/activated.sock" >/dev/null ||
	{ cat "$W/activated.log"; fail "kvtierd does not serve the socket systemd-socket-activate passed"; }
[ ! -e "$SD/own.sock" ] || fail "kvtierd bound --socket although a socket was passed"
kvtd_stop "$W/activated.log"

step "DESTDIR install for the prefix /usr"
D=$W/destdir
DESTDIR=$D cmake --install "$KVT_BUILD_DIR" --prefix /usr >/dev/null
for f in usr/bin/kvtierd usr/lib/libkvtier-client.so.0 usr/include/kvtier/client.h \
	etc/kvtier/kvtierd.ini lib/systemd/system/kvtierd.service usr/share/man/man8/kvtierd.8.gz; do
	[ -e "$D/$f" ] || fail "DESTDIR install lacks /$f"
done
grep -qx 'prefix=/usr' "$D/usr/lib/pkgconfig/kvtier-client.pc" || fail "kvtier-client.pc names $D"
grep -qx 'ExecStart=/usr/bin/kvtierd --config /etc/kvtier/kvtierd.ini' \
	"$D/lib/systemd/system/kvtierd.service" || fail "kvtierd.service names the wrong paths"
! grep -rq "$D" "$D/usr/lib/pkgconfig" "$D/lib/systemd" || fail "an installed file names DESTDIR"
echo "PASS"
