#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The Debian package, installed for real: builds it with CPack, checks its
# metadata, installs it with dpkg -i, then uses only the installed files:
# kvtierd --version, the kvtier user and the config readable by it,
# systemd-analyze verify of the installed units, man, pkg-config without a
# path, kvtierd run as the kvtier user serving the example engine compiled
# against /usr (every byte verified), and the Python binding finding
# /usr/lib's library by its SONAME. Then dpkg -r
# (the conffile stays) and dpkg --purge (it goes).
#
# It changes the machine, so it is registered only with KVT_TEST_DPKG=ON and
# runs only as root; it refuses to touch a machine where kvtier is installed
# or /etc/kvtier/kvtierd.ini exists, and removes what it installed (and the
# kvtier user and group, if it created them) even when a step fails. One run
# at a time per machine (a lock under /tmp).
#
# Environment: as test_install_staged.sh.
# pipefail: a producer killed by SIGPIPE fails its pipeline, so no grep -q
# ends one early
set -euo pipefail

. "$(dirname "$0")/daemon.sh"

[ "$(id -u)" = 0 ] || fail "installs a package with dpkg: run as root (or configure with -DKVT_TEST_DPKG=OFF)"
exec 9>/tmp/kvtier-test-dpkg.lock
flock -w 900 9 || fail "another package test holds /tmp/kvtier-test-dpkg.lock"
if dpkg-query -W -f='${Status}' kvtier 2>/dev/null | grep 'installed\|config-files' >/dev/null; then
	fail "a kvtier package is already on this machine; the test will not replace it (dpkg --purge kvtier)"
fi
[ ! -e /etc/kvtier/kvtierd.ini ] || fail "/etc/kvtier/kvtierd.ini exists and no package owns it; the test will not replace it"

mkdir -p "$KVT_TEST_TMPDIR"
W=$(mktemp -d "$KVT_TEST_TMPDIR/deb.XXXXXX")
# sockets in a short directory: a Unix socket's path must fit 108 bytes
SD=$(mktemp -d /tmp/kvt-deb.XXXXXX)
had_user=$(getent passwd kvtier >/dev/null && echo yes || echo no)
had_group=$(getent group kvtier >/dev/null && echo yes || echo no)
DPID=
cleanup() {
	set +e
	if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
		kill -KILL "$DPID"
		wait "$DPID" 2>/dev/null
	fi
	if dpkg-query -W -f='${Status}' kvtier 2>/dev/null | grep 'installed\|config-files\|half' >/dev/null; then
		dpkg_retry --purge kvtier >/dev/null
	fi
	[ "$had_user" = yes ] || ! getent passwd kvtier >/dev/null || userdel kvtier
	[ "$had_group" = yes ] || ! getent group kvtier >/dev/null || groupdel kvtier
	rm -rf "$W" "$SD"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# dpkg refuses at once when apt or another dpkg holds its lock: wait for it
dpkg_retry() {
	local out
	for _ in $(seq 120); do
		if out=$(dpkg "$@" 2>&1); then
			echo "$out"
			return 0
		fi
		echo "$out" | grep -i 'lock' >/dev/null || { echo "$out" >&2; return 1; }
		sleep 1
	done
	echo "$out" >&2
	return 1
}

step "make package (cpack)"
cpack --config "$KVT_BUILD_DIR/CPackConfig.cmake" -B "$W/pkg" >"$W/cpack.log" 2>&1 ||
	{ cat "$W/cpack.log"; fail "cpack"; }
DEB=$W/pkg/kvtier_${KVT_VERSION}-1_amd64.deb
[ -f "$DEB" ] || { ls "$W/pkg"; fail "no $DEB"; }
[ "$(dpkg-deb -f "$DEB" Package)" = kvtier ] || fail "package name"
[ "$(dpkg-deb -f "$DEB" Version)" = "$KVT_VERSION-1" ] || fail "package version"
case "$(dpkg-deb -f "$DEB" Maintainer)" in *.invalid*) fail "the Maintainer field names an .invalid address" ;; esac
depends=$(dpkg-deb -f "$DEB" Depends)
echo "Depends: $depends"
for d in adduser libc6 liburing2 libssl3 libinih1; do
	echo "$depends" | grep "\b$d\b" >/dev/null || fail "Depends lacks $d (from dpkg-shlibdeps)"
done
dpkg-deb -c "$DEB" | awk '{print $6}' >"$W/contents"
for f in ./usr/bin/kvtierd ./usr/bin/kvtier ./usr/bin/kvtier-bench ./usr/lib/libkvtier-client.so.0 \
	./usr/lib/libkvtier.a ./usr/include/kvtier/client.h ./usr/lib/pkgconfig/kvtier-client.pc \
	./lib/systemd/system/kvtierd.service ./lib/systemd/system/kvtierd.socket \
	./usr/share/man/man8/kvtierd.8.gz ./usr/share/man/man1/kvtier.1.gz ./etc/kvtier/kvtierd.ini \
	./usr/share/doc/kvtier/copyright; do
	grep -qx "$f" "$W/contents" || fail "the package lacks ${f#.}"
done
! grep -q '^\./usr/local\|^\./usr/etc' "$W/contents" || fail "files outside the FHS places"
dpkg-deb --ctrl-tarfile "$DEB" | tar -xO ./conffiles | grep -x /etc/kvtier/kvtierd.ini >/dev/null ||
	fail "kvtierd.ini is not a conffile"

step "dpkg -i"
dpkg_retry -i "$DEB" || fail "dpkg -i"
out=$(/usr/bin/kvtierd --version)
echo "$out"
case "$out" in "kvtierd $KVT_VERSION "*) ;; *) fail "kvtierd --version: $out" ;; esac
IFS=: read -r _ _ _ gid _ home shell <<<"$(getent passwd kvtier)" || fail "no kvtier user"
[ "$gid" = "$(getent group kvtier | cut -d: -f3)" ] || fail "kvtier's primary group is not kvtier"
[ "$home" = /var/lib/kvtier ] || fail "kvtier's home is $home"
[ "$shell" = /usr/sbin/nologin ] || fail "kvtier's shell is $shell"
[ "$(stat -c %G:%a /etc/kvtier/kvtierd.ini)" = kvtier:640 ] || fail "kvtierd.ini is $(stat -c %U:%G:%a /etc/kvtier/kvtierd.ini)"
systemd-analyze verify /lib/systemd/system/kvtierd.service /lib/systemd/system/kvtierd.socket ||
	fail "systemd-analyze verify of the installed units"
[ "$(man -w kvtierd)" = /usr/share/man/man8/kvtierd.8.gz ] || fail "man kvtierd"
[ "$(env -u PKG_CONFIG_PATH pkg-config --modversion kvtier-client)" = "$KVT_VERSION" ] ||
	fail "pkg-config kvtier-client"

step "kvtierd as the kvtier user, the example engine built against /usr"
chmod 0755 "$W" "$SD"   # mktemp made them 0700: let the kvtier user through
install -d -o kvtier -g kvtier -m 0750 "$SD/run" "$W/data"
S=$SD/run/kvtierd.sock
# setpriv execs kvtierd itself, so $! is the daemon
setpriv --reuid kvtier --regid kvtier --init-groups -- /usr/bin/kvtierd --config /etc/kvtier/kvtierd.ini --socket "$S" \
	--data-dir "$W/data" --dram 64M --ssd 32M --metrics off >"$W/kvtierd.log" 2>&1 &
DPID=$!
kvtd_wait_answering /usr/bin/kvtier "$S" "$W/kvtierd.log"
# shellcheck disable=SC2046
"$KVT_CC" -std=c11 -Wall -Werror -o "$W/engine" /usr/share/doc/kvtier/examples/engine.c \
	$(env -u PKG_CONFIG_PATH pkg-config --cflags --libs kvtier-client)
# /lib is /usr/lib on Debian 12 (merged /usr), and the loader looks there first
lib=$(env -u LD_LIBRARY_PATH ldd "$W/engine" | awk '$1 == "libkvtier-client.so.0" {print $3}')
[ "$(readlink -f "$lib")" = "/usr/lib/libkvtier-client.so.$KVT_VERSION" ] ||
	fail "the engine loads '$lib', not /usr/lib's libkvtier-client"
env -u LD_LIBRARY_PATH "$W/engine" --socket "$S" --sequences 4 --blocks 8 ||
	{ cat "$W/kvtierd.log"; fail "the example engine against the installed kvtierd"; }
ls "$W/data/ssd" >/dev/null || fail "the SSD tier was not created by the kvtier user"

# the binding outside any checkout and not pip-installed: the loader's path
mkdir "$W/py" && cp -r "$KVT_SOURCE_DIR/python/kvtier" "$W/py/"
lib=$(cd "$W" && env -u KVTIER_CLIENT_LIB -u LD_LIBRARY_PATH PYTHONPATH="$W/py" /usr/bin/python3 -c '
import kvtier
print([l.split()[-1] for l in open("/proc/self/maps") if "libkvtier-client" in l][0])')
[ "$lib" = "/usr/lib/libkvtier-client.so.$KVT_VERSION" ] || fail "the binding loaded $lib"

kvtd_stop "$W/kvtierd.log"

step "dpkg -r, then dpkg --purge"
dpkg_retry -r kvtier >/dev/null || fail "dpkg -r"
[ ! -e /usr/bin/kvtierd ] || fail "dpkg -r left /usr/bin/kvtierd"
[ -e /etc/kvtier/kvtierd.ini ] || fail "dpkg -r removed the conffile"
[ ! -e /usr/lib/libkvtier-client.so.0 ] || fail "dpkg -r left libkvtier-client"
dpkg_retry --purge kvtier >/dev/null || fail "dpkg --purge"
[ ! -e /etc/kvtier ] || fail "dpkg --purge left /etc/kvtier"
! dpkg-query -W kvtier >/dev/null 2>&1 || fail "dpkg still knows kvtier"
echo "PASS"
