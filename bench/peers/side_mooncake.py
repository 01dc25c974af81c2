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
segment over TCP."""

import ctypes
import importlib.metadata
import os
import shutil
import signal
import socket
import subprocess
import time

import common

MB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=60):
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

    def _keys(self, first, count):
        return [self.prefix + str(i) for i in range(first, first + count)]

    def put(self, first, count):
        res = self.s.batch_put_from(self._keys(first, count),
                                    [self.base + i * self.bs for i in range(count)],
                                    [self.bs] * count)
        bad = [r for r in res if r != 0]
        if bad:
            raise RuntimeError("batch_put_from: %d of %d failed (%d)" % (len(bad), count, bad[0]))

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

    def version(self):
        return "mooncake-transfer-engine-non-cuda " + \
            importlib.metadata.version("mooncake-transfer-engine-non-cuda")

    def _bin(self, name):
        import mooncake
        return os.path.join(os.path.dirname(mooncake.__file__), name)

    def start(self, workdir, block_bytes, capacity, ssd=0):
        if ssd:
            # what trials of this wheel's offload did (docs/peers-bench.md)
            raise common.Unsupported(
                "not measured: this wheel's offload (--enable_offload, "
                "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH) writes only once a bucket fills "
                "(nothing from 64 MiB of objects with its default bucket limits); with "
                "small buckets it offloads at put end on a 1 s heartbeat, and puts past a "
                "full segment evicted 24 of 32 objects before they reached the disk (gone); "
                "with --offload_on_evict=true puts past a full segment kept failing (-200)")
        self.block_bytes = block_bytes
        self.dir = os.path.abspath(os.path.join(workdir, "mooncake"))
        os.makedirs(self.dir, exist_ok=True)
        self._start_master()
        self.client_ports = [self._start_client("client", capacity)]

    def start_pair(self, workdir, block_bytes, capacity):
        """Node A holding the segment, node B a client with none."""
        self.block_bytes = block_bytes
        self.dir = os.path.abspath(os.path.join(workdir, "mooncake"))
        os.makedirs(self.dir, exist_ok=True)
        self._start_master()
        self.client_ports = [self._start_client("client-a", capacity),
                             self._start_client("client-b", 0)]

    def _start_master(self):
        self.rpc, self.meta, metrics = free_port(), free_port(), free_port()
        log = open(os.path.join(self.dir, "master.log"), "w")
        master = subprocess.Popen(
            [self._bin("mooncake_master"), "--rpc_port=%d" % self.rpc,
             "--rpc_address=127.0.0.1", "--enable_http_metadata_server=true",
             "--http_metadata_server_host=127.0.0.1",
             "--http_metadata_server_port=%d" % self.meta, "--metrics_host=127.0.0.1",
             "--metrics_port=%d" % metrics],
            stdout=log, stderr=log, cwd=self.dir)
        self.procs.append(master)
        wait_port(self.rpc, master, "mooncake_master")
        wait_port(self.meta, master, "mooncake_master's metadata server")

    def _start_client(self, name, segment):
        port = free_port()
        log = open(os.path.join(self.dir, name + ".log"), "w")
        client = subprocess.Popen(
            [self._bin("mooncake_client"), "--host=127.0.0.1", "--port=%d" % port,
             "--global_segment_size=%d MB" % (segment // MB),
             "--master_server_address=127.0.0.1:%d" % self.rpc,
             "--metadata_server=http://127.0.0.1:%d/metadata" % self.meta, "--protocol=tcp"],
            stdout=log, stderr=log, cwd=self.dir)
        self.procs.append(client)
        wait_port(port, client, "mooncake_client " + name)
        return port

    def restart_cold(self):
        raise common.Unsupported("no SSD tier measured")

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
