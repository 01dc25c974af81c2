#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages kvtier builds and tests with. As root it runs
# apt-get; otherwise it prints the command to run. Idempotent and quiet when
# everything is already there.
set -eu

# build: compiler, cmake, pkg-config and the libraries of DESIGN.md;
# cluster: hiredis (the directory's client), redis-server (started by its
# tests; its binary is Sentinel too, `redis-server FILE --sentinel`, which
# test_kvtierd_sentinel runs: Debian's redis-sentinel package only adds a
# link to it and a system service, which the tests do not want), iperf3 and perftest (ib_read_bw): the remote bench's references;
# packaging and its tests: dpkg-shlibdeps (dpkg-dev), systemd-analyze
# (systemd, not booted), lexgrog and groff for the man pages, adduser for the
# package's postinst, setuptools/wheel/pip/venv for `pip install ./python`;
# python3-torch for the engine connector's tests and the reference engine;
# the documentation: mkdocs (the site, strict) and graphviz (its diagrams);
# libnuma1 and libcurl4: Mooncake Store's wheel loads them (with libibverbs1)
# in the peers bench (make bench-peers); dmsetup: the failed-drive test swaps
# a device-mapper table to dm-error (it shuts the file system down instead
# where the kernel has no device-mapper)
PKGS="build-essential cmake ninja-build pkg-config
      liburing-dev liblz4-dev libblosc-dev libzstd-dev libssl-dev libxxhash-dev libjansson-dev libinih-dev
      libibverbs-dev librdmacm-dev libopenblas-dev
      libcmocka-dev fio iproute2 python3 python3-torch e2fsprogs util-linux dmsetup
      clang libclang-rt-14-dev
      libhiredis-dev redis-server iperf3 perftest
      dpkg-dev systemd man-db groff-base adduser
      python3-setuptools python3-wheel python3-pip python3-venv
      mkdocs graphviz
      libnuma1 libcurl4"

missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "kvtier needs these Debian packages:$missing" >&2
  echo "install them with: sudo apt-get install -y$missing" >&2
  exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
