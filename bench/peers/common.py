# SPDX-License-Identifier: Apache-2.0
"""What every store's side of the peers bench shares: the block shapes, the
workload of one client, statistics, the memory a set of processes holds, and
running N clients as N processes that start together.

A side (side_kvtier.py, side_mooncake.py, side_lmcache.py) provides a class
with this shape:

    class Store:
        name = "kvtier"
        def version(self) -> str
        def start(self, workdir, block_bytes, capacity, ssd=0)  # returns when ready
        def open_client(self, index, nblocks, node=0) -> client  # in the client's process
        def store_pids(self) -> [pid]        # processes whose memory the store is
        def engine_maps(self) -> [str]       # mappings that are engine memory, not the store's
        def start_pair(self, workdir, block_bytes, capacity)  # two nodes (or raise Unsupported)
        def restart_cold(self)               # SSD row: blocks on SSD only (or raise Unsupported)
        def stop(self)

    client.put(first, count)   # blocks first..first+count-1 of this client, one batch
    client.get(first, count)   # returns how many came back whole
    client.lookup(count)       # the first count blocks of the chain: how many are there
    client.verify()            # the last get's buffers hold what was put
    client.tiers(count)        # where the first count blocks are ([] if unknown)
    client.close()
"""

import multiprocessing
import os
import socket
import statistics
import time

BATCH = 32          # blocks per put/get request: the 32-block get of the latency row
LOOKUP_BLOCKS = 64  # the prefix the lookup row asks about
LAYERS = 32

# block bytes -> (kv_heads, head_dim) so that 32 layers x (K + V) x 16 tokens x
# kv_heads x head_dim x 2 bytes (bf16) is the block: 2 MiB = 32 x 64 KiB
SHAPES = {
    2 << 20: (8, 128),
    256 << 10: (1, 128),
}
BLOCK_TOKENS = 16


class Unsupported(Exception):
    """The store cannot do this row here; the message says why."""


def free_port():
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=60):
    """Wait until proc (a server the bench started) listens on port."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError("%s exited %d" % (what, proc.returncode))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.005)
    raise RuntimeError("%s did not listen on %d" % (what, port))


def shape_name(block_bytes):
    return "%dKiB" % (block_bytes >> 10) if block_bytes < (1 << 20) else "%dMiB" % (block_bytes >> 20)


def median(values):
    return statistics.median(values) if values else None


def percentile(values, p):
    """The p-th percentile (nearest rank) of values."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def pattern(nbytes, seed):
    """Bytes that are not zero and differ per seed (zero pages are cheap to
    move and would flatter every store alike)."""
    base = bytes((i * 131 + seed * 17 + 1) & 0xFF for i in range(4096))
    return (base * (nbytes // 4096 + 1))[:nbytes]


def memory_of(pids, exclude=()):
    """Bytes resident in the processes pids: RSS plus huge pages of hugetlbfs,
    leaving out the mappings whose name holds any string of exclude (the
    engine's own buffers the store maps to copy from). A mapping of the same
    file in several of the processes counts once."""
    seen = set()
    total = 0
    for pid in pids:
        try:
            f = open("/proc/%d/smaps" % pid)
        except OSError:
            continue
        with f:
            name = ""
            key = None
            skip = False
            for line in f:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):
                    parts = line.split(None, 5)
                    name = parts[5].strip() if len(parts) > 5 else ""
                    inode = parts[4]
                    key = (parts[3], inode) if inode != "0" else None
                    skip = any(x in name for x in exclude) or (key is not None and key in seen)
                    if key is not None:
                        seen.add(key)
                    continue
                if skip:
                    continue
                if head in ("Rss:", "Private_Hugetlb:", "Shared_Hugetlb:"):
                    total += int(line.split()[1]) * 1024
    return total


def _client_proc(store, index, nblocks, op, first_block, count, barrier, out):
    try:
        c = store.open_client(index, nblocks)
        try:
            barrier.wait(60)
            t0 = time.monotonic()
            done = 0
            for b in range(first_block, first_block + count, BATCH):
                n = min(BATCH, first_block + count - b)
                if op == "put":
                    c.put(b, n)
                    done += n
                else:
                    done += c.get(b, n)
            t1 = time.monotonic()
            out.put((index, t0, t1, done, None))
        finally:
            c.close()
    except Exception as e:  # reported to the parent, which fails the row
        try:
            barrier.abort()
        except Exception:
            pass
        out.put((index, 0.0, 0.0, 0, "%s: %s" % (type(e).__name__, e)))


def run_clients(store, clients, nblocks, op):
    """op ('put' or 'get') of blocks 0..nblocks-1 in each of `clients`
    processes, all started together; returns (seconds from the first start
    to the last end, blocks done in all)."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(clients)
    out = ctx.Queue()
    procs = [ctx.Process(target=_client_proc,
                         args=(store, i, nblocks, op, 0, nblocks, barrier, out))
             for i in range(clients)]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [r[4] for r in results if r[4]]
    if errors:
        raise RuntimeError("client failed: " + errors[0])
    t0 = min(r[1] for r in results)
    t1 = max(r[2] for r in results)
    return t1 - t0, sum(r[3] for r in results)


def fadvise_dontneed(path):
    """Drop the page cache of every file under path, so a read after it comes
    from the device (for stores that write through the page cache)."""
    for root, _, files in os.walk(path):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            finally:
                os.close(fd)
