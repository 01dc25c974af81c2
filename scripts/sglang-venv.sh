#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A virtual environment with the pinned SGLang for kvtier's HiCache storage
# backend (python/kvtier/sglang.py) and its tests: build/venv-sglang (or $1).
#
#   sh scripts/sglang-venv.sh [VENV]   exit 0: ready; 77: cannot be made here
#
# SGLang's own requirements pull a CUDA torch 2.14 and its kernels (GBs). Its
# HiCache modules need far less: the venv is layered over build/venv-vllm
# (scripts/vllm-venv.sh, made first), whose torch 2.13.0 and libraries it
# sees through a .pth file after its own, and holds only sglang, installed
# without its requirements, and the few modules its memory pool and storage
# modules import beyond those (scripts/sglang-requirements.txt): seconds of
# download, no second copy of torch. Idempotent: a venv whose stamp names
# these pins is left as it is. No registry, no vLLM venv: exit 77.
set -eu

SGLANG=0.5.23

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
venv=${1:-$root/build/venv-sglang}
base=${KVT_VLLM_VENV:-$root/build/venv-vllm}
reqs=$here/sglang-requirements.txt
want="sglang==$SGLANG over $base $(cksum <"$reqs")"

if [ -f "$venv/.kvtier-sglang" ] && [ "$(cat "$venv/.kvtier-sglang")" = "$want" ] &&
   sh "$here/vllm-venv.sh" "$base" 2>/dev/null; then
	exit 0
fi

rc=0
sh "$here/vllm-venv.sh" "$base" || rc=$?
if [ "$rc" -ne 0 ]; then
	echo "sglang-venv: no vLLM venv to layer over ($base); SGLang is not installed" >&2
	exit 77
fi
if ! timeout 60 "$base/bin/python" -m pip index versions sglang >/dev/null 2>&1; then
	echo "sglang-venv: PyPI unreachable; SGLang is not installed (its tests skip)" >&2
	exit 77
fi

echo "sglang-venv: installing sglang $SGLANG (without its requirements) into $venv" >&2
rm -f "$venv/.kvtier-sglang"
[ -x "$venv/bin/python" ] || "$base/bin/python" -m venv "$venv"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
	>"$site/kvtier-venv-vllm.pth"
pip="$venv/bin/python -m pip --disable-pip-version-check -q"
if ! $pip install --no-deps "sglang==$SGLANG" || ! $pip install --no-deps -r "$reqs"; then
	echo "sglang-venv: pip failed (above); SGLang is not installed" >&2
	exit 77
fi
if ! (cd / && "$venv/bin/python" -c '
import sglang.srt.mem_cache.hicache_storage, sglang.srt.mem_cache.memory_pool_host
import sglang.srt.mem_cache.storage.backend_factory, sglang.srt.managers.cache_controller
' >/dev/null 2>&1); then
	(cd / && "$venv/bin/python" -c 'import sglang.srt.managers.cache_controller') >&2 || true
	echo "sglang-venv: the installed SGLang does not import (above)" >&2
	exit 1
fi
echo "$want" >"$venv/.kvtier-sglang"
echo "sglang-venv: ready: $venv" >&2
