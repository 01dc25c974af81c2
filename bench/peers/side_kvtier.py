# SPDX-License-Identifier: Apache-2.0
"""kvtier's side of the peers bench: a real kvtierd started by the bench, the
engine's paged memory in a memfd registered once, SAVE/LOAD of 32-block
batches (the daemon gathers each block from 32 layers x K, V pages and
scatters it back), LOOKUP for the prefix row, all through the Python client
(python/kvtier). The two-node row: two kvtierd joined in a cluster through a
redis-server the bench starts, their peer TCP listeners on loopback; blocks
saved through one node are loaded through the other, which fetches them
from the first over TCP (its peer tier)."""

import os
import secrets
import shutil
import subprocess

import kvtier
from kvtier.daemon import Daemon

import common

MB = 1 << 20


class Client:
    """One engine process: a connection, its namespace and engine memory of
    2 x BATCH pages (put from pages 0..31, get into pages 32..63)."""

    def __init__(self, store, index, nblocks, node=0):
        kv_heads, head_dim = common.SHAPES[store.block_bytes]
        self.c = kvtier.Client(socket=store.daemons[node].socket)
        self.ns = self.c.hello("peers-bench", layers=common.LAYERS, kv_heads=kv_heads,
                               head_dim=head_dim, block_tokens=common.BLOCK_TOKENS, dtype="bf16")
        assert self.ns.block_bytes == store.block_bytes, self.ns.block_bytes
        self.mem = kvtier.EngineMemory.paged(self.ns, pages=2 * common.BATCH)
        self.mem.buf[:] = common.pattern(self.mem.nbytes, index)
        self.region = self.c.register(self.ns, self.mem)
        # one prefix chain per client and generation: distinct tokens, so
        # distinct keys
        seed = (store.generation * 64 + index) * 1000003
        tokens = [(seed + t) & 0x7FFFFFFF for t in range(nblocks * common.BLOCK_TOKENS)]
        self.keys = self.ns.prefix_keys(tokens)

    def put(self, first, count):
        parent = self.keys[first - 1] if first else None
        pages = list(range(count))
        got = self.c.save(self.ns, self.region, self.keys[first:first + count], pages,
                          parent=parent).wait()
        if got != count:
            raise RuntimeError("SAVE stored %d of %d" % (got, count))

    def get(self, first, count):
        pages = list(range(common.BATCH, common.BATCH + count))
        return self.c.load(self.ns, self.region, self.keys[first:first + count], pages).wait()

    def verify(self):
        """The pages the last get filled hold what the puts came from."""
        for layer in (0, common.LAYERS - 1):
            for kv in (0, 1):
                for p in (0, common.BATCH - 1):
                    if self.mem.read_page(common.BATCH + p, layer, kv) != \
                            self.mem.read_page(p, layer, kv):
                        raise RuntimeError("wrong bytes in page %d layer %d" % (p, layer))

    def lookup(self, count):
        hit, _ = self.c.lookup(self.ns, self.keys[:count])
        return hit

    def tiers(self, count):
        return self.c.lookup(self.ns, self.keys[:count])[1]

    def close(self):
        self.c.close()
        self.mem.close()


class Store:
    name = "kvtier"

    def __init__(self):
        self.daemons = []
        self.redis = None
        self.generation = 0

    @property
    def daemon(self):
        return self.daemons[0]

    def version(self):
        out = os.popen(kvtier.daemon.find_kvtierd() + " --version").read().strip()
        return out or "unknown"

    def start(self, workdir, block_bytes, capacity, ssd=0):
        """kvtierd with a DRAM tier of capacity bytes (ssd: an SSD tier of
        that many bytes under workdir too)."""
        self.block_bytes = block_bytes
        self.workdir = workdir
        # under ASan (the smoke test) the daemon checks leaks, the interpreter not
        env = None
        if os.environ.get("KVT_DAEMON_ASAN_OPTIONS"):
            env = dict(os.environ, ASAN_OPTIONS=os.environ["KVT_DAEMON_ASAN_OPTIONS"])
        self.args = dict(dram="%dM" % (capacity // MB), ssd=("%dM" % (ssd // MB)) if ssd else "0",
                         base=workdir, env=env)
        self.daemons = [Daemon(**self.args)]

    def start_pair(self, workdir, block_bytes, capacity):
        """Two nodes of one cluster: a redis-server on a free loopback port,
        two kvtierd with DRAM tiers of capacity bytes, a shared secret, and
        peer listeners on loopback."""
        if not shutil.which("redis-server"):
            raise common.Unsupported("no redis-server (Debian's redis-server package)")
        if "--cluster" not in subprocess.run([kvtier.daemon.find_kvtierd(), "--help"],
                                             capture_output=True, text=True).stdout:
            raise common.Unsupported("this kvtierd is built without the cluster (hiredis)")
        self.block_bytes = block_bytes
        self.workdir = workdir
        self.rdir = os.path.join(workdir, "kvtier-redis")
        os.makedirs(self.rdir, exist_ok=True)
        port = common.free_port()
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.rdir], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        common.wait_port(port, self.redis, "redis-server")
        secret = os.path.join(self.rdir, "cluster.secret")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, secrets.token_hex(32).encode())
        os.close(fd)
        for node in ("a", "b"):
            extra = ["--cluster", "redis://127.0.0.1:%d" % port, "--node-id", node,
                     "--peer-listen", "127.0.0.1:%d" % common.free_port(),
                     "--cluster-secret-file", secret]
            self.daemons.append(Daemon(extra=extra, dram="%dM" % (capacity // MB), ssd="0",
                                       base=workdir))

    def restart_cold(self):
        """Stop (a clean stop writes DRAM-only blocks to the SSD tier) and
        start again on the same data directory: every block is SSD-resident,
        read with O_DIRECT, so no page cache serves it."""
        rc = self.daemon.stop()
        if rc != 0:
            raise RuntimeError("kvtierd exited %d" % rc)
        self.daemon.start()

    def open_client(self, index, nblocks, node=0):
        return Client(self, index, nblocks, node)

    def store_pids(self):
        return [d.proc.pid for d in self.daemons]

    def engine_maps(self):
        return ["kvtier-engine"]

    def stop(self):
        for d in self.daemons:
            d.remove()
        self.daemons = []
        if self.redis is not None:
            self.redis.terminate()
            self.redis.wait(20)
            self.redis = None
            shutil.rmtree(self.rdir, ignore_errors=True)
