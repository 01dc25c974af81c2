#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The SSD path's end-to-end table in one command (run as root): kvtierd's
# LOAD and SAVE through `kvtier-bench sidecar --tier ssd` beside fio, on the
# machine's disk with explicit huge pages and with 4 KiB pages, and on a
# RAM-backed device (ext4 on a loop device over a file in /dev/shm) with
# huge pages; optionally the tier's own bench (`kvtier-bench ssd`) on both.
#
# What it sets up it undoes, also when interrupted: the loop device, its
# mount point and its file (all named ssd-*), and the huge pages it reserved
# when too few were free (it adds only what is missing and gives those back).
#
# With --devices, the SSD tier over several drives: N RAM-backed devices
# (ext4 on loop devices over files in /dev/shm), each throttled to
# --dev-rate with the block cgroup (v1 blkio.throttle.*_bps_device, or v2
# io.max in a cgroup of this script's own), so that the devices, not the
# cores, are the limit; the daemon's tier spans them (--ssd-dir each) and
# fio runs on each in turn, its rates summed: LOAD and SAVE against the
# summed fio, for each N, with a row per device in the JSON.
#
# usage: scripts/ssd-bench.sh [--reps N] [--rows LIST] [--tier] [--engines N]
#                             [--bench PATH] [--kvtierd PATH] [--disk DIR] [--out DIR]
#                             [--devices LIST] [--dev-rate BPS] [--dev-size SIZE]
#                             [--dev-ws SIZE]
#   --rows   comma list of disk-huge, disk-4k, ram-huge, devs (default: the
#            first three; devs: one row per N of --devices)
#   --devices  comma list of device counts for the devs rows (default 1,2,4)
#   --dev-rate bytes per second each device reads and writes at most
#            (default 500000000: 0.5 GB/s)
#   --dev-size each device's size (default 4G; sparse files in /dev/shm: what
#            is written takes RAM). It must hold the working set's share and
#            fio's file beside it: at 2G one device held too little and the
#            tier evicted blocks the bench then missed
#   --dev-ws   the working set the engines save in a devs row (default 1G;
#            the DRAM tier a quarter of it)
#   --tier   also `kvtier-bench ssd` (1 and 8 MiB blocks, queue depth 16 and
#            32, 512 MiB a case, huge pages) on the disk and on the RAM-backed
#            device
#   --engines N  engines loading at once in the sidecar rows (default 1)
#   --kvtierd PATH  the daemon the sidecar rows run (another build's, to
#            compare two daemons with the same bench)
#   --disk   the machine's disk: a directory on it (default build/bench-tmp)
#   --out    where each run's JSON goes (default build/ssd-bench)
set -eu

reps=3
rows="disk-huge,disk-4k,ram-huge"
tier=0
engines=1
bench=build/release/bench/kvtier-bench
disk=build/bench-tmp
out=build/ssd-bench
kvtierd=""
devices="1,2,4"
dev_rate=500000000
dev_size=4G
dev_ws=1G
while [ $# -gt 0 ]; do
  case "$1" in
    --devices) devices=$2; shift 2 ;;
    --dev-rate) dev_rate=$2; shift 2 ;;
    --dev-size) dev_size=$2; shift 2 ;;
    --dev-ws) dev_ws=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --tier) tier=1; shift ;;
    --engines) engines=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --kvtierd) kvtierd=$2; shift 2 ;;
    --disk) disk=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "ssd-bench: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "ssd-bench: run as root (losetup, mount, huge pages)" >&2
  exit 2
fi
[ -x "$bench" ] || { echo "ssd-bench: $bench not built (cmake --build --preset release)" >&2; exit 2; }
command -v fio >/dev/null || { echo "ssd-bench: fio is the reference; install it" >&2; exit 2; }

tag="ssd-bench.$$"
img="/dev/shm/$tag.img"
mnt="/tmp/$tag.mnt"
loop=""
huge_added=0

# Huge pages: reserve what is missing for `need` bytes, give back only those.
huge_free_pages() { awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo; }
huge_reserve() {
  need=$(( ($1 + 2097151) / 2097152 ))
  free=$(huge_free_pages)
  [ "$free" -ge "$need" ] && return 0
  add=$(( need - free ))
  total=$(cat /proc/sys/vm/nr_hugepages)
  echo $(( total + add )) > /proc/sys/vm/nr_hugepages
  got=$(( $(cat /proc/sys/vm/nr_hugepages) - total ))
  huge_added=$(( huge_added + got ))
  echo "ssd-bench: reserved $got huge pages of 2 MiB (wanted $add)" >&2
  if [ "$got" -lt "$add" ]; then
    echo "ssd-bench: too few huge pages for a like-for-like run (memory fragmented or taken)" >&2
    exit 1
  fi
}
huge_give_back() {
  [ "$huge_added" -gt 0 ] || return 0
  total=$(cat /proc/sys/vm/nr_hugepages)
  echo $(( total > huge_added ? total - huge_added : 0 )) > /proc/sys/vm/nr_hugepages
  echo "ssd-bench: gave back $huge_added huge pages" >&2
  huge_added=0
}

# The RAM-backed device: ext4 on a loop device over a file in /dev/shm.
ram_up() {
  truncate -s "$1" "$img"
  loop=$(losetup -f --show "$img")
  mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$loop"
  mkdir -p "$mnt"
  mount "$loop" "$mnt"
}
ram_down() {
  # a daemon that just exited may hold the mount for a moment
  tries=0
  while mountpoint -q "$mnt" 2>/dev/null && ! umount "$mnt" 2>/dev/null && [ $tries -lt 50 ]; do
    tries=$((tries + 1)); sleep 0.2
  done
  if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt"; fi
  [ -d "$mnt" ] && rmdir "$mnt"
  [ -n "$loop" ] && losetup -d "$loop"
  loop=""
  rm -f "$img"
}
# The devices of a devs row: N loop devices, each ext4, mounted, throttled.
devs_loops=""
devs_cg=""
throttle() { # MAJ:MIN, bytes per second (0: none)
  v1=/sys/fs/cgroup/blkio
  if [ -w "$v1/blkio.throttle.read_bps_device" ]; then
    echo "$1 $2" > "$v1/blkio.throttle.read_bps_device"
    echo "$1 $2" > "$v1/blkio.throttle.write_bps_device"
  elif grep -qw io /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    if [ -z "$devs_cg" ]; then
      devs_cg=/sys/fs/cgroup/$tag
      echo +io > /sys/fs/cgroup/cgroup.subtree_control
      mkdir -p "$devs_cg"
      echo $$ > "$devs_cg/cgroup.procs"
    fi
    if [ "$2" = 0 ]; then echo "$1 rbps=max wbps=max" > "$devs_cg/io.max"
    else echo "$1 rbps=$2 wbps=$2" > "$devs_cg/io.max"; fi
  else
    echo "ssd-bench: no block throttling here (cgroup v1 blkio or v2 io)" >&2
    exit 1
  fi
}
devs_up() { # N: sets first (the first device's directory) and more (--dir of the others)
  first=""
  more=""
  for k in $(seq 0 $(( $1 - 1 ))); do
    truncate -s "$dev_size" "/dev/shm/$tag.dev$k.img"
    l=$(losetup -f --show "/dev/shm/$tag.dev$k.img")
    devs_loops="$devs_loops $l"
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$l"
    mkdir -p "/tmp/$tag.dev$k.mnt"
    mount "$l" "/tmp/$tag.dev$k.mnt"
    throttle "$(printf '%d:%d' 0x$(stat -c %t "$l") 0x$(stat -c %T "$l"))" "$dev_rate"
    if [ -z "$first" ]; then first="/tmp/$tag.dev$k.mnt"; else more="$more --dir /tmp/$tag.dev$k.mnt"; fi
  done
}
devs_down() {
  k=0
  for l in $devs_loops; do
    throttle "$(printf '%d:%d' 0x$(stat -c %t "$l") 0x$(stat -c %T "$l"))" 0
    m="/tmp/$tag.dev$k.mnt"
    tries=0
    while mountpoint -q "$m" 2>/dev/null && ! umount "$m" 2>/dev/null && [ $tries -lt 50 ]; do
      tries=$((tries + 1)); sleep 0.2
    done
    [ -d "$m" ] && rmdir "$m"
    losetup -d "$l"
    rm -f "/dev/shm/$tag.dev$k.img"
    k=$((k + 1))
  done
  devs_loops=""
  if [ -n "$devs_cg" ]; then
    echo $$ > /sys/fs/cgroup/cgroup.procs
    rmdir "$devs_cg"
    devs_cg=""
  fi
}
cleanup() {
  set +e
  ram_down
  devs_down
  huge_give_back
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$out" "$disk"
stamp=$(date -u +%Y%m%dT%H%M%SZ)

# One sidecar row: name, dir, pages, extra options.
sidecar() {
  name=$1; dir=$2; pages=$3; shift 3
  [ -n "$kvtierd" ] && set -- "$@" --kvtierd "$kvtierd"
  json="$out/$stamp-sidecar-$name.json"
  echo "ssd-bench: $name: $bench sidecar --tier ssd --dir $dir --pages $pages --reps $reps --engines $engines $*" >&2
  "$bench" sidecar --tier ssd --dir "$dir" --pages "$pages" --reps "$reps" \
    --engines "$engines" --json "$@" > "$json"
  echo "$name $json" >> "$out/$stamp.rows"
}
tierbench() {
  name=$1; dir=$2
  json="$out/$stamp-ssd-$name.json"
  mkdir -p "$dir/ssd-tier"
  set -- ssd --dir "$dir/ssd-tier" --blocks 1M,8M --qd 16,32 --bytes 512M --pages huge \
    --reps "$reps" --no-comp --json
  echo "ssd-bench: tier $name: $bench $*" >&2
  "$bench" "$@" > "$json"
  echo "tier-$name $json" >> "$out/$stamp.rows"
}

# huge pages for the daemon's DRAM tier (512 MiB by default), fio's buffers
# and each engine's memory (128 MiB), and the tier bench's region; given
# back at the end
case "$rows" in *huge*) huge_reserve $(( (1024 + 128 * engines) << 20 )) ;; esac
[ "$tier" = 1 ] && huge_reserve $(( 1280 << 20 ))

for r in $(echo "$rows" | tr ',' ' '); do
  case "$r" in
    disk-huge) sidecar disk-huge "$disk" huge ;;
    disk-4k) sidecar disk-4k "$disk" 4k ;;
    ram-huge)
      ram_up 4G
      sidecar ram-huge "$mnt" huge --dram 256M --working-set 1G
      [ "$tier" = 1 ] && tierbench ram "$mnt"
      ram_down ;;
    devs)
      for n in $(echo "$devices" | tr ',' ' '); do
        devs_up "$n"
        ws_mib=$(( $(numfmt --from=iec "$dev_ws") >> 20 ))
        # shellcheck disable=SC2086
        sidecar "devs-$n" "$first" 4k $more --dram "$(( ws_mib / 4 ))M" --working-set "${ws_mib}M"
        devs_down
      done ;;
    *) echo "ssd-bench: unknown row $r" >&2; exit 2 ;;
  esac
done
[ "$tier" = 1 ] && tierbench disk "$disk"

python3 - "$out/$stamp.rows" <<'EOF'
import json, sys
rows = [l.split() for l in open(sys.argv[1])]
print("| run | fio read / write GB/s | kvtierd LOAD / SAVE GB/s | load_vs_fio / save_vs_fio | load_rest_vs_fio |")
print("|---|---|---|---|---|")
tiers = []
for name, path in rows:
    j = json.load(open(path))
    if j.get("bench") != "sidecar-ssd":
        tiers.append((name, j)); continue
    rr = j["runs"]
    span = lambda k: "%.2f-%.2f" % (min(r[k] for r in rr), max(r[k] for r in rr))
    print("| %s (%s pages, %d engine%s%s) | %s / %s | %s / %s | **%.2f** / **%.2f** | %.2f |" % (
        name, j["pages"], j.get("engines", 1), "s" if j.get("engines", 1) > 1 else "",
        ", %d devices, fio summed" % j["devices"] if j.get("devices", 1) > 1 else "",
        span("fio_read_gbps"), span("fio_write_gbps"), span("load_gbps"), span("save_gbps"),
        j["load_vs_fio"], j["save_vs_fio"], j["load_rest_vs_fio"]))
for name, j in tiers:
    print()
    print("%s: kvtier-bench ssd, medians of the same-run ratios" % name)
    print("| op | block | qd | tier MB/s | fio MB/s | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in j.get("cases", []):
        print("| %s | %d KiB | %d | %.0f | %.0f | **%.2f** |" % (c["op"], c["block_bytes"] >> 10,
              c["qd"], c["kvtier_mbps"], c["fio_mbps"], c["ratio"]))
EOF
