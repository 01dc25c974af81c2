#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs the peers the peers bench compares kvtier with (bench/peers/)
# into a virtual environment under the build tree, at pinned versions:
#   Mooncake Store  mooncake-transfer-engine-non-cuda (its CPU/TCP wheel)
#   LMCache         lmcache, its Python dependencies for the CPU server,
#                   and torch (PyPI's wheel: with its CUDA libraries, about
#                   5.5 GB, the bulk of the environment; it runs on CPU)
# LMCache itself is installed without its dependency list, which also asks
# for GPU-only and cloud packages (cupy, cuda-python, cufile, Bigtable,
# transformers, ...) that its CPU server does not import.
#
# usage: scripts/peers-venv.sh [VENV]     (default build/venv-peers)
# Idempotent: a venv holding these pins is left alone. Exits 77 (skip)
# when the package registry cannot be reached, 1 on other failures.
set -eu

VENV=${1:-build/venv-peers}
PY=${PEERS_PYTHON:-/usr/bin/python3}
MOONCAKE="mooncake-transfer-engine-non-cuda==0.3.13.post1"
TORCH="torch==2.15.0"
LMCACHE="lmcache==0.5.6"
# what lmcache's server and its bench client import (versions as pip
# resolved them for lmcache 0.5.6)
LMCACHE_DEPS="numpy==2.2.6 numba==0.68.1 prometheus_client==0.24.1 PyYAML==6.0.4
  msgspec==0.23.0 psutil==7.2.2 pyzmq==27.3.0 sortedcontainers==2.4.0 blake3==1.0.11
  aiofile==3.12.3 aiofiles==25.1.0 py-cpuinfo==9.0.0 fastapi==0.141.1 uvicorn==0.55.0
  httptools==0.9.0 httpx==0.29.0 cachetools==8.0.3 redis==8.2.0 safetensors==0.8.0
  nvtx==0.2.17 opentelemetry-api==1.40.0 opentelemetry-sdk==1.40.0
  opentelemetry-exporter-prometheus==0.61b0 cryptography==51.0.1 setuptools==80.10.2"
STAMP="$VENV/.peers-pins"
WANT="$MOONCAKE $TORCH $LMCACHE $LMCACHE_DEPS"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  exit 0
fi

# Mooncake's binaries load these from the system (Debian: libibverbs1,
# libnuma1, libcurl4), even for TCP
for lib in libibverbs.so.1 libnuma.so.1 libcurl.so.4; do
  if ! ldconfig -p | grep -q "$lib"; then
    echo "peers-venv: $lib missing: run scripts/install-deps.sh" >&2
    exit 1
  fi
done

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
if ! timeout 120 $PIP index versions lmcache >/dev/null 2>&1; then
  echo "peers-venv: the package registry is unreachable: peers not installed (skip)" >&2
  exit 77
fi

echo "peers-venv: installing $MOONCAKE, $TORCH, $LMCACHE into $VENV (several GB, minutes)"
$PIP install -q "$MOONCAKE"
$PIP install -q "$TORCH"
$PIP install -q --no-deps "$LMCACHE"
# shellcheck disable=SC2086
$PIP install -q $LMCACHE_DEPS
"$VENV/bin/python" -c "import mooncake.store, lmcache.cli.commands.bench.server_bench.client"
echo "$WANT" > "$STAMP"
echo "peers-venv: ready: $VENV"
