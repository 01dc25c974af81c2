# SPDX-License-Identifier: Apache-2.0
"""LMCache's side of the peers bench: `lmcache server` (its multiprocess
cache server: CPU L1 memory, an optional file-system L2) started by the
bench, and engine processes that drive it through the client the package
ships for its own `lmcache bench server` (ServerBenchClient, imported from
the installed package, in its "cpu" mode with the lmcache_driven transfer:
the engine's paged KV tensors in POSIX shared memory registered with the
server once, STORE/RETRIEVE by block ids, LOOKUP of a token prefix).

The engine's KV cache has the paged layout kvtier gathers from (pages of 16
tokens: 2 MiB = 32 layers x K, V x 16 tokens x 8 heads x 128 x bf16), and
both stores gather and scatter 64 pieces per block. LMCache keeps its
default chunk of 256 tokens: one stored object is 16 such blocks, and a
32-block put or get is two chunks. (With --chunk-size 16 its server
acknowledged every STORE but no LOOKUP found a chunk afterwards, in its own
`lmcache bench server --mode cpu` as well.)

Each engine process registers as its own instance (the package's client
numbers instances from a module constant, set here per process)."""

import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import time

import common

GIB = 1 << 30
# its client library logs every SHM segment it maps at INFO
os.environ.setdefault("LMCACHE_LOG_LEVEL", "WARNING")


def _quiet(_msg):
    pass


class Client:
    def __init__(self, store, index, nblocks):
        import dataclasses
        from lmcache.cli.commands.bench.server_bench import client as sbc
        from lmcache.cli.commands.bench.server_bench import helpers
        from lmcache.cli.commands.bench.server_bench.config import BenchConfig
        helpers._INSTANCE_ID_BASE = 1000 + 16 * index
        kv_heads, head_dim = common.SHAPES[store.block_bytes]
        nb = 2 * common.BATCH
        cfg = BenchConfig(
            rpc_url="tcp://127.0.0.1:%d" % store.rpc_port,
            http_url="http://127.0.0.1:%d" % store.http_port, mode="cpu",
            transfer_mode="lmcache_driven", tp_size=1, use_mla=False,
            num_tokens=nblocks * common.BLOCK_TOKENS,
            kvcache_shape_spec="(2,%d,%d,%d,%d):bfloat16:%d" % (
                nb, common.BLOCK_TOKENS, kv_heads, head_dim, common.LAYERS),
            num_blocks=nb, block_size=common.BLOCK_TOKENS)
        self.c = sbc.ServerBenchClient(cfg, _quiet)
        self.c.start()
        seq = store.generation * 64 + index
        self.req = self.c.create_request(seq, "peers-%d-%d" % (store.generation, index), "bench")
        self.replace = dataclasses.replace
        self.cold = store.cold
        kv = self.c._workers[0].kv_caches
        for i, t in enumerate(kv.values()):
            t.view(-1)[:] = (i * 7 + index) % 100
            t[:, :common.BATCH, :, 0, 0] = 3  # not a constant block
        self.kv = kv

    def _at(self, first, page0):
        """The request with its blocks first.. mapped to pages page0.. of the
        engine's KV cache (the client places block b of a request at
        request.block_offset + b)."""
        return self.replace(self.req, block_offset=page0 - first)

    def put(self, first, count):
        t = common.BLOCK_TOKENS
        r = self.c.store(self._at(first, 0), first * t, count * t)
        if not r.succeeded:
            raise RuntimeError("STORE failed")

    def get(self, first, count):
        t = common.BLOCK_TOKENS
        req = self._at(first, common.BATCH)
        # RETRIEVE serves what a LOOKUP of the request's prefix found and
        # locked (prefetching from the L2 into L1 what is only there): a get
        # is LOOKUP + RETRIEVE in LMCache's protocol
        self._lookup(first + count)
        r = self.c.retrieve(req, first * t, count * t)
        return count if r.succeeded else 0

    def _lookup(self, count):
        t = common.BLOCK_TOKENS
        req = self.replace(self.req, token_ids=self.req.token_ids[:count * t],
                           num_full_tokens=count * t, total_chunks=count)
        r = self.c.lookup(req)
        return r.hit_chunks * (self.c._chunk_size // t)

    def lookup(self, count):
        return self._lookup(count)

    def tiers(self, count):
        # after a restart L1 is empty: what a LOOKUP finds is in the L2 files
        found = self._lookup(count) if self.cold else 0
        return ["ssd"] * found + ["none"] * (count - found)

    def verify(self):
        for t in self.kv.values():
            if not bool((t[:, common.BATCH:] == t[:, :common.BATCH]).all()):
                raise RuntimeError("wrong bytes after RETRIEVE")

    def close(self):
        self.c.end_session(self.req)
        self.c.close()


class Store:
    name = "lmcache"

    def __init__(self):
        self.procs = []
        self.generation = 0
        self.cold = False
        import lmcache.cli.commands.bench.server_bench.client  # noqa: F401 (fails early)

    def version(self):
        return "lmcache " + importlib.metadata.version("lmcache")

    def start(self, workdir, block_bytes, capacity, ssd=0):
        if ssd:
            # L1 must hold what one get prefetches from the files (two
            # 256-token chunks per 32-block get, and its eviction watermark)
            capacity = max(capacity, 256 << 20)
        self.block_bytes = block_bytes
        self.dir = os.path.abspath(os.path.join(workdir, "lmcache"))
        os.makedirs(self.dir, exist_ok=True)
        self.ssd = ssd
        self.rpc_port, self.http_port = common.free_port(), common.free_port()
        self.args = [os.path.join(os.path.dirname(sys.executable), "lmcache"), "server",
                     "--host", "127.0.0.1", "--port", str(self.rpc_port),
                     "--l1-size-gb", "%.4f" % (capacity / GIB), "--eviction-policy", "LRU",
                     "--http-host", "127.0.0.1", "--http-port", str(self.http_port),
                     "--disable-observability", "--prometheus-port", str(common.free_port())]
        if ssd:
            os.makedirs(os.path.join(self.dir, "l2"), exist_ok=True)
            self.args += ["--l2-adapter",
                          '{"type":"fs","base_path":"%s"}' % os.path.join(self.dir, "l2")]
        self._spawn()

    def _spawn(self):
        env = dict(os.environ, LMCACHE_DISABLE_BANNER="1")
        log = open(os.path.join(self.dir, "server.log"), "a")
        p = subprocess.Popen(self.args, stdout=log, stderr=log, cwd=self.dir, env=env)
        self.procs.append(p)
        # the HTTP frontend comes up after the request server is running
        common.wait_port(self.http_port, p, "lmcache server", timeout=300)
        common.wait_port(self.rpc_port, p, "lmcache server", timeout=60)

    def _kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []

    def start_pair(self, workdir, block_bytes, capacity):
        raise common.Unsupported(
            "not measured: LMCache shares KV between instances through its P2P "
            "backend and controller, which this bench does not set up; its "
            "`lmcache server` serves the engines of one machine")

    def restart_cold(self):
        """Restart the server on the same L2 directory, its page cache
        dropped: what comes back comes from the files."""
        if not self.ssd:
            raise common.Unsupported("no L2 configured")
        # L2 writes are asynchronous: wait until the files stop changing
        l2 = os.path.join(self.dir, "l2")
        last, still = None, 0
        for _ in range(240):
            now = sorted((f, os.path.getsize(os.path.join(r, f)))
                         for r, _, fs in os.walk(l2) for f in fs)
            still = still + 1 if now == last else 0
            if still >= 4:
                break
            last = now
            time.sleep(0.5)
        self._kill()
        common.fadvise_dontneed(os.path.join(self.dir, "l2"))
        self.cold = True
        self._spawn()

    def open_client(self, index, nblocks):
        return Client(self, index, nblocks)

    def store_pids(self):
        return [p.pid for p in self.procs]

    def engine_maps(self):
        # the engines' KV tensors in POSIX shared memory, mapped by the server
        return ["/dev/shm/"]

    def stop(self):
        self._kill()
        self.cold = False
        shutil.rmtree(self.dir, ignore_errors=True)
