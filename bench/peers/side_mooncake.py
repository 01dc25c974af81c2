# SPDX-License-Identifier: Apache-2.0
"""Mooncake Store's side of the peers bench, as its wheel
(mooncake-transfer-engine-non-cuda) runs on a machine without GPU or RDMA:
mooncake_master (with its HTTP metadata server) and one standalone
mooncake_client holding the store's memory (the global segment), both
started by the bench on loopback ports of their own, TCP protocol. Each
engine process is a "dummy" client of that sidecar (setup_dummy): its
buffers come from the shared memory pool the sidecar maps
(alloc_from_mem_pool, then register_buffer), and it moves blocks with
batch_put_from / batch_get_into and looks them up with batch_is_exist: the
zero-copy path, the same shape as kvtier's registered engine memory.

Mooncake keeps a block as one contiguous object: each put is one 2 MiB (or
256 KiB) buffer, where kvtier gathers the block from 64 pages (32 layers x
K, V) of the engine's paged memory. That favours Mooncake; it is its
documented zero-copy path.

The two-node row: one master, two mooncake_client processes (node A with
the segment, node B with none of its own, so every object lives in A's);
an engine of A puts, an engine of B gets: B's transfer engine reads A's
segment over TCP.

The SSD row: master and client with --enable_offload, the client's offload
directory (MOONCAKE_OFFLOAD_FILE_STORAGE_PATH) under the bench's directory.
The offload writes objects in buckets, a bucket once it is full, and
offloads an object when its put ends (on a 1 s heartbeat); memory is freed
by eviction, which drops objects whether or not they reached the disk. So
the buckets are set to a quarter of the segment (with the default limits a
trial's 64 MiB of objects was never written; with buckets as large as the
segment, objects were evicted before their bucket was written, and lost),
and a put that finds the segment full (-200) is retried until eviction has
made room. No restart keeps Mooncake's objects: "cold" is after every put,
the offload files' page cache dropped; blocks still in the segment are read
from memory (a dummy client cannot tell where a block is:
batch_get_replica_desc answers nothing through it), so the row is an upper
bound for Mooncake."""

import ctypes
import importlib.metadata
import os
import shutil
import signal
import subprocess
import time

import common

MB = 1 << 20


class Client:
    def __init__(self, store, index, nblocks, node=0):
        from mooncake.store import MooncakeDistributedStore
        self.bs = store.block_bytes
        self.s = MooncakeDistributedStore()
        pool = 2 * common.BATCH * self.bs
        rc = self.s.setup_dummy(pool + 16 * MB, 16 * MB, "127.0.0.1:%d" % store.client_ports[node])
        if rc != 0:
            raise RuntimeError("setup_dummy: %d" % rc)
        self.base = self.s.alloc_from_mem_pool(pool)
        if not self.base:
            raise RuntimeError("alloc_from_mem_pool failed")
        rc = self.s.register_buffer(self.base, pool)
        if rc != 0:
            raise RuntimeError("register_buffer: %d" % rc)
        ctypes.memmove(self.base, common.pattern(pool, index), pool)
        self.prefix = "peers-g%d-c%d-b" % (store.generation, index)
        self.retry_full = store.ssd

    def _keys(self, first, count):
        return [self.prefix + str(i) for i in range(first, first + count)]

    def put(self, first, count):
        keys = self._keys(first, count)
        todo = list(range(count))
        end = time.monotonic() + (120 if self.retry_full else 0)
        while True:
            res = self.s.batch_put_from([keys[i] for i in todo],
                                        [self.base + i * self.bs for i in todo],
                                        [self.bs] * len(todo))
            bad = [(i, r) for i, r in zip(todo, res) if r != 0]
            # -200: no room in the segment; with offload on, eviction makes some
            if not bad or not all(r == -200 for _, r in bad) or time.monotonic() > end:
                break
            todo = [i for i, _ in bad]
            time.sleep(0.02)
        if bad:
            raise RuntimeError("batch_put_from: %d of %d failed (%d)" % (len(bad), count,
                                                                        bad[0][1]))

    def get(self, first, count):
        dst = self.base + common.BATCH * self.bs
        res = self.s.batch_get_into(self._keys(first, count),
                                    [dst + i * self.bs for i in range(count)], [self.bs] * count)
        return sum(1 for r in res if r == self.bs)

    def verify(self):
        """The buffers the last get filled hold what the puts came from."""
        n = common.BATCH * self.bs
        if ctypes.string_at(self.base, n) != ctypes.string_at(self.base + n, n):
            raise RuntimeError("wrong bytes after get")

    def tiers(self, count):
        return []

    def lookup(self, count):
        # the longest stored prefix, as kvtier's LOOKUP answers
        res = self.s.batch_is_exist(self._keys(0, count))
        n = 0
        while n < len(res) and res[n] == 1:
            n += 1
        return n

    def close(self):
        self.s.close()


class Store:
    name = "mooncake"

    def __init__(self):
        self.procs = []
        self.generation = 0
        self.ssd = False

    def version(self):
        return "mooncake-transfer-engine-non-cuda " + \
            importlib.metadata.version("mooncake-transfer-engine-non-cuda")

    def _bin(self, name):
        import mooncake
        return os.path.join(os.path.dirname(mooncake.__file__), name)

    def start(self, workdir, block_bytes, capacity, ssd=0):
        self.block_bytes = block_bytes
        self.ssd = bool(ssd)
        self.segment = capacity
        self.dir = os.path.abspath(os.path.join(workdir, "mooncake"))
        os.makedirs(self.dir, exist_ok=True)
        self._start_master()
        self.client_ports = [self._start_client("client", capacity)]

    def start_pair(self, workdir, block_bytes, capacity):
        """Node A holding the segment, node B a client with none."""
        self.block_bytes = block_bytes
        self.ssd = False
        self.dir = os.path.abspath(os.path.join(workdir, "mooncake"))
        os.makedirs(self.dir, exist_ok=True)
        self._start_master()
        self.client_ports = [self._start_client("client-a", capacity),
                             self._start_client("client-b", 0)]

    def _offload(self):
        """The offload flag and environment of the SSD row (none without)."""
        if not self.ssd:
            return [], None
        off = os.path.join(self.dir, "offload")
        os.makedirs(off, exist_ok=True)
        bucket = max(self.segment // 4, self.block_bytes)
        return ["--enable_offload=true"], dict(
            os.environ, MOONCAKE_OFFLOAD_FILE_STORAGE_PATH=off,
            MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT=str(bucket // self.block_bytes),
            MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES=str(bucket),
            MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS="1")

    def _start_master(self):
        self.rpc, self.meta, metrics = common.free_port(), common.free_port(), common.free_port()
        log = open(os.path.join(self.dir, "master.log"), "w")
        master = subprocess.Popen(
            [self._bin("mooncake_master"), "--rpc_port=%d" % self.rpc,
             "--rpc_address=127.0.0.1", "--enable_http_metadata_server=true",
             "--http_metadata_server_host=127.0.0.1",
             "--http_metadata_server_port=%d" % self.meta, "--metrics_host=127.0.0.1",
             "--metrics_port=%d" % metrics] + self._offload()[0],
            stdout=log, stderr=log, cwd=self.dir, env=self._offload()[1])
        self.procs.append(master)
        common.wait_port(self.rpc, master, "mooncake_master")
        common.wait_port(self.meta, master, "mooncake_master's metadata server")

    def _start_client(self, name, segment):
        port = common.free_port()
        log = open(os.path.join(self.dir, name + ".log"), "w")
        client = subprocess.Popen(
            [self._bin("mooncake_client"), "--host=127.0.0.1", "--port=%d" % port,
             "--global_segment_size=%d MB" % (segment // MB),
             "--master_server_address=127.0.0.1:%d" % self.rpc,
             "--metadata_server=http://127.0.0.1:%d/metadata" % self.meta, "--protocol=tcp"]
            + self._offload()[0], stdout=log, stderr=log, cwd=self.dir, env=self._offload()[1])
        self.procs.append(client)
        common.wait_port(port, client, "mooncake_client " + name)
        return port

    def restart_cold(self):
        """No restart keeps Mooncake's objects: wait until its offload files
        stop growing (3 s), then drop their page cache."""
        off = os.path.join(self.dir, "offload")
        last, still = None, 0
        for _ in range(1200):
            try:
                now = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(off)
                          for f in fs)
            except OSError:  # a file renamed under the walk
                now = None
            still = still + 1 if now == last and now else 0
            if still >= 30:
                break
            last = now
            time.sleep(0.1)
        common.fadvise_dontneed(off)

    def open_client(self, index, nblocks, node=0):
        return Client(self, index, nblocks, node)

    def store_pids(self):
        return [p.pid for p in self.procs]

    def engine_maps(self):
        # the engines' shared memory pools, mapped by the sidecar to copy from
        return ["mooncake_shm", "/dev/shm/", "memfd:"]

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)
