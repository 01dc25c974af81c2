#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# SSD admission through a real kvtierd: for each rule, a fresh daemon (LRU in
# DRAM and SSD, empty SSD tier) replays the trace through its socket
# (kvtier-bench trace --socket), and one line per rule gives the block hit
# rate, the SSD bytes written and the bytes the rule refused, from the
# daemon's own STATS, with the blocks its DRAM and SSD tiers hold at the end.
#
#   bench/trace/daemon_admission.sh BUILD_DIR TRACE DRAM SSD [RULES] [BLOCK_BYTES] [FLAGS]
#   e.g. bench/trace/daemon_admission.sh build/release tests/data/synthetic_trace.jsonl 16M 80M
#
# DRAM and SSD are kvtierd sizes; RULES defaults to "always reused useful",
# BLOCK_BYTES to 16K; FLAGS are more options of the replay (e.g.
# --no-reuse-class). Exit status: 0, or 1 when a run failed.
set -eu

build=$1
trace=$2
dram=$3
ssd=$4
rules=${5:-always reused useful}
bb=${6:-16K}
flags=${7:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-admission.XXXXXX")
pid=

cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

printf '%-8s %-8s %-8s %9s %9s %15s %15s %8s %11s\n' rule dram ssd hit_rate ssd_hits \
	ssd_bytes_in refused_bytes refused blocks_d+s
for rule in $rules; do
	rm -rf "$work/data"
	"$build/app/kvtierd" --socket "$work/s.sock" --data-dir "$work/data" --dram "$dram" \
		--ssd "$ssd" --policy lru --ssd-admission "$rule" --metrics off \
		--no-huge-pages --no-prefault >"$work/kvtierd.log" 2>&1 &
	pid=$!
	i=0
	while [ ! -S "$work/s.sock" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	"$build/bench/kvtier-bench" trace --trace "$trace" --socket "$work/s.sock" \
		--payload-block-bytes "$bb" $flags --quiet --json >"$work/out.json"
	kill "$pid"
	wait "$pid" || true
	pid=
	python3 - "$work/out.json" "$rule" "$dram" "$ssd" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
t = j['tiers']
print('%-8s %-8s %-8s %9.4f %9d %15d %15d %8d %11s' % (
    sys.argv[2], sys.argv[3], sys.argv[4], j['block_hit_rate'], j['hits'].get('ssd', 0),
    j['ssd_bytes_in'], j['ssd_admission_refused_bytes'], j['ssd_admission_refused'],
    '%d+%d' % (t['dram']['blocks'], t['ssd']['blocks'])))
EOF
done
