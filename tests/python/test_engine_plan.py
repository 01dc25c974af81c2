#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""LOOKUP's plan on a real kvtierd with the reference engine: with fast
tiers the engine loads its prefix (from DRAM, and from SSD); with the SSD
made slow by an I/O throttle on the daemon (a cgroup's read limit on the
data directory's disk), one load teaches the daemon what SSD delivers now,
after which the plan has the engine recompute: it loads nothing, computes
the same chunks as a pure recompute with the same tokens and logits, and
its only extra work before the first token is one LOOKUP and the
prompt's prefix hashes (the LOOKUP asserted from the connector's
counters, not from a clock: timings belong to the benches, and LOOKUP's
latency is `kvtier-bench sidecar`'s lookup_p50_us).
The TTFT of both, best of several interleaved runs, is printed for the
record. No configuration: the daemon measures each LOAD, and the connector
reports the engine's prefill speed.

Needs root and a cgroup I/O controller that throttles the disk under the
test's temporary directory (cgroup v1 blkio or v2 io); exits 77 saying why
when there is none. Run by ctest with the interpreter that has torch.
KVT_TEST_SEED replays the prompts."""

import os
import random
import sys
import time
import unittest

import torch

import kvtier
from kvtier.daemon import Daemon

from engine_env import DAEMON_ENV, ENGINE_DIR, SEED  # noqa: E402  (puts the engine on sys.path)
import engine as torch_engine  # noqa: E402
from model import Config, Weights  # noqa: E402

CONFIG = os.path.join(ENGINE_DIR, "configs", "tiny.json")
CHUNK = 64
BT = torch_engine.BLOCK_TOKENS
WEIGHT_SEED = 11
SHARED_BLOCKS = 24              # 384 tokens, 24 blocks of 16 KiB
QUESTION = 40
DRAM = 4 << 20
SLOW_BPS = 32 << 10             # a 16 KiB block in 0.5 s: recomputing it is far faster,
                                # even on a machine busy enough to slow the engine 30x
LEARN = 3                       # at most this many requests load a block from the slowed SSD
                                # and compute one chunk (a short chunk would report
                                # the engine slower than it is: chunks are padded)
RUNS = 5                        # requests each way, interleaved, after one of each


def skip(why):
    print("SKIP: " + why, file=sys.stderr)
    sys.exit(77)


def whole_disk(dev):
    """major:minor of the disk holding device dev (a partition's parent)."""
    mm = "%d:%d" % (os.major(dev), os.minor(dev))
    sysdir = os.path.realpath("/sys/dev/block/" + mm)
    if os.path.exists(os.path.join(sysdir, "partition")):
        with open(os.path.join(os.path.dirname(sysdir), "dev")) as f:
            mm = f.read().strip()
    return mm


class Throttle:
    """A cgroup whose members read at most rate bytes/s from one disk."""

    def __init__(self, disk):
        self.disk = disk
        name = "kvtier-test-%d" % os.getpid()
        if os.path.isdir("/sys/fs/cgroup/blkio"):
            self.v2 = False
            self.root = "/sys/fs/cgroup/blkio"
        elif os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            self.v2 = True
            self.root = "/sys/fs/cgroup"
            with open(os.path.join(self.root, "cgroup.controllers")) as f:
                if "io" not in f.read().split():
                    raise OSError("cgroup v2 without the io controller")
            with open(os.path.join(self.root, "cgroup.subtree_control"), "w") as f:
                f.write("+io")
        else:
            raise OSError("no cgroup I/O controller mounted")
        self.dir = os.path.join(self.root, name)
        os.mkdir(self.dir)
        self.members = []

    def _write(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text)

    def limit(self, rate):
        if self.v2:
            self._write("io.max", "%s rbps=%s" % (self.disk, rate or "max"))
        else:
            self._write("blkio.throttle.read_bps_device", "%s %d" % (self.disk, rate))

    def add(self, pid):
        self._write("cgroup.procs", str(pid))
        self.members.append(pid)

    def close(self):
        for pid in self.members:
            try:
                with open(os.path.join(self.root, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
            except OSError:
                pass            # it has exited
        try:
            os.rmdir(self.dir)
        except OSError:
            pass


def throttle_applies(t, directory):
    """Whether reads under t's limit are slowed for a file in directory: a
    child in the cgroup reads 256 KiB with O_DIRECT at 1 MiB/s."""
    path = os.path.join(directory, "probe")
    size = 256 << 10
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        os.fsync(f.fileno())
    t.limit(1 << 20)
    pid = os.fork()
    if pid == 0:
        import mmap
        code = 1
        try:
            t.add(os.getpid())
            buf = mmap.mmap(-1, size)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            t0 = time.monotonic()
            os.preadv(fd, [buf], 0)
            code = 0 if time.monotonic() - t0 > 0.1 else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    os.unlink(path)
    t.limit(0)
    return os.waitstatus_to_exitcode(status) == 0


class Filler:
    """Pushes a prefix from DRAM to SSD: saves blocks of the same size in a
    namespace of their own (so they take the same kind of DRAM slot) until
    the demoter has moved the prefix down, then removes them, so DRAM has
    room for the loads' promotions. No LOOKUP of the prefix meanwhile: a
    lookup is a use, and keeps it warm."""

    def __init__(self, client, cfg):
        self.c = client
        self.ns = client.hello("test/filler", layers=cfg.layers, kv_heads=cfg.kv_heads,
                               head_dim=cfg.head_dim, block_tokens=BT, dtype="bf16")
        self.mem = kvtier.EngineMemory.paged(self.ns, pages=64)
        self.region = client.register(self.ns, self.mem)
        self.n = 0

    def push(self, ns, keys):
        saved = []
        for _ in range(4):
            for _ in range(DRAM // (64 * self.ns.block_bytes) + 1):
                fk = self.ns.prefix_keys([self.n * 4096 + i for i in range(64 * BT)])
                self.n += 1
                self.c.save(self.ns, self.region, fk, range(64)).wait()
                saved += fk
            hit, tiers = self.c.lookup(ns, keys)
            if hit == len(keys) and set(tiers) == {"ssd"}:
                break
        self.c.remove(self.ns, saved[::-1])

    def close(self):
        self.mem.close()


class EnginePlanTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            skip("needs root to throttle the daemon's disk reads with a cgroup")
        torch.set_num_threads(1)
        cls.cfg = Config.load(CONFIG)
        cls.weights = Weights(cls.cfg, WEIGHT_SEED)
        cls.rng = random.Random(SEED)
        cls.system = [cls.rng.randrange(cls.cfg.vocab) for _ in range(SHARED_BLOCKS * BT)]
        # --plan-retry: the slow SSD is not tried again while the test runs
        cls.d = Daemon(["--policy", "lru", "--plan-retry", "600"], dram="%dM" % (DRAM >> 20),
                       ssd="256M", env=DAEMON_ENV)
        try:
            cls.throttle = Throttle(whole_disk(os.stat(cls.d.dir).st_dev))
        except OSError as e:
            cls.d.remove()
            skip("no cgroup I/O throttle here (%s)" % e)
        if not throttle_applies(cls.throttle, cls.d.dir):
            cls.throttle.close()
            cls.d.remove()
            skip("the cgroup read limit does not slow O_DIRECT reads under %s" % cls.d.dir)
        cls.client = kvtier.Client(socket=cls.d.socket)
        cls.ns = cls.client.hello(torch_engine.model_id(cls.cfg, WEIGHT_SEED),
                                  layers=cls.cfg.layers, kv_heads=cls.cfg.kv_heads,
                                  head_dim=cls.cfg.head_dim, block_tokens=BT, dtype="bf16")
        cls.keys = cls.ns.prefix_keys(cls.system)
        cls.filler = Filler(cls.client, cls.cfg)
        # torch's first pass is slow: not what the engine reports afterwards
        cls.engine(None).generate(torch_engine.Request("warm", cls.system[:CHUNK + 1], 1))

    @classmethod
    def tearDownClass(cls):
        cls.filler.close()
        cls.client.close()
        cls.throttle.close()
        rc = cls.d.stop()
        cls.d.remove()
        assert rc == 0, "kvtierd exited %d" % rc

    @classmethod
    def engine(cls, conn):
        pages = 2 * ((len(cls.system) + QUESTION + 1) // BT + 1)
        return torch_engine.Engine(cls.cfg, cls.weights, pages, conn, chunk_tokens=CHUNK)

    def prompt(self):
        return self.system + [self.rng.randrange(self.cfg.vocab) for _ in range(QUESTION)]

    def run_engine(self, prompt, eng=None):
        """One request through eng (default: a fresh engine and connector);
        the blocks it saved past the shared ones are removed again."""
        conn = None
        if eng is None:
            conn = torch_engine.make_connector(self.cfg, WEIGHT_SEED, self.d.socket, None)
            eng = self.engine(conn)
        res = eng.generate(torch_engine.Request("r", prompt, 1), boundaries=[len(self.system)])
        eng.release(res)
        if conn is not None:
            conn.close()
        if eng.conn is not None:
            self.client.remove(self.ns, self.ns.prefix_keys(prompt)[SHARED_BLOCKS:][::-1])
        return res

    def where(self):
        hit, load, tiers = self.client.lookup_plan(self.ns, self.keys)
        return hit, load, sorted(set(tiers[:hit]))

    def ssd_rate(self):
        return self.client.stats()["plan"]["tiers"]["ssd"]

    def interleaved(self, with_kvtier, without):
        """RUNS + 1 requests through each engine, alternating; the best
        (wall, CPU) TTFT of each, (planned, pure), leaving out the first
        (it touches the engine's memory). Both compute the same chunks
        and tokens, and the planned one loads nothing."""
        wall, cpu = ([], []), ([], [])
        for i in range(RUNS + 1):
            prompt = self.prompt()
            p = self.run_engine(prompt, with_kvtier)
            r = self.run_engine(prompt, without)
            self.assertEqual((p.matched_tokens, p.loaded_tokens, p.fallback), (0, 0, False))
            self.assertEqual(p.chunks, r.chunks)
            self.assertEqual(p.tokens, r.tokens)
            self.assertTrue(torch.equal(p.logits[0], r.logits[0]))
            if i == 0:
                continue
            for k, res in enumerate((p, r)):
                wall[k].append(res.ttft_s)
                cpu[k].append(res.ttft_cpu_s)
        return (min(wall[0]), min(wall[1])), (min(cpu[0]), min(cpu[1]))

    def test_plan(self):
        # engine A computes the shared prompt and saves it (and reports its speed)
        first = self.run_engine(self.prompt())
        self.assertEqual(first.loaded_tokens, 0)
        self.assertEqual(self.where(), (SHARED_BLOCKS, SHARED_BLOCKS, ["dram"]))

        # fast tiers: the engine loads, from DRAM and from SSD
        res = self.run_engine(self.prompt())
        self.assertEqual((res.loaded_tokens, res.fallback), (SHARED_BLOCKS * BT, False))
        self.filler.push(self.ns, self.keys)
        self.assertEqual(self.where(), (SHARED_BLOCKS, SHARED_BLOCKS, ["ssd"]))
        res = self.run_engine(self.prompt())
        self.assertEqual((res.loaded_tokens, res.fallback), (SHARED_BLOCKS * BT, False))
        fast = self.ssd_rate()
        self.assertGreaterEqual(fast["samples"], 1)
        stats = self.client.stats()["plan"]
        self.assertGreaterEqual(stats["prefill_reports"], 3)
        tok_s = stats["engines"][0]["prefill_tokens_per_s"]
        block_bytes = self.ns.block_bytes
        # loading a block from this SSD beats recomputing it
        self.assertGreater(fast["bytes_per_s"] / block_bytes, tok_s / BT)

        # the SSD slows down: the next loads from it pay, and teach the daemon
        # (short requests: a block each), until the plan stops loading from it
        self.throttle.add(self.d.proc.pid)
        self.throttle.limit(SLOW_BPS)
        learned = 0
        for _ in range(LEARN):
            self.filler.push(self.ns, self.keys)
            if self.where() == (SHARED_BLOCKS, 0, ["ssd"]):
                break
            self.assertEqual(self.where(), (SHARED_BLOCKS, SHARED_BLOCKS, ["ssd"]))
            res = self.run_engine(self.system[:BT] + self.prompt()[-(CHUNK - BT):])
            self.assertEqual(res.loaded_tokens, BT)
            learned += 1
        self.assertGreaterEqual(learned, 1)
        stats = self.client.stats()["plan"]
        slow = stats["tiers"]["ssd"]
        tok_s = stats["engines"][0]["prefill_tokens_per_s"]
        self.assertLess(slow["bytes_per_s"] / block_bytes, tok_s / BT,
                        "the throttled SSD still measured faster than recomputing: %s, engine "
                        "%.0f tokens/s" % (slow, tok_s))

        # from now on the plan recomputes, each request on an engine that
        # serves request after request (its KV memory in use already, as a
        # serving engine's is): the same work as a pure recompute, plus one
        # LOOKUP per request that finds the prefix and plans no load
        self.filler.push(self.ns, self.keys)
        self.assertEqual(self.where(), (SHARED_BLOCKS, 0, ["ssd"]))
        conn = torch_engine.make_connector(self.cfg, WEIGHT_SEED, self.d.socket, None)
        with_kvtier, without = self.engine(conn), self.engine(None)
        before = dict(conn.stats)
        wall, cpu = self.interleaved(with_kvtier, without)
        spent = {k: conn.stats[k] - before[k] for k in before}
        conn.close()
        n = RUNS + 1
        self.assertEqual((spent["lookups"], spent["hit_blocks"], spent["plan_blocks"]),
                         (n, n * SHARED_BLOCKS, 0))
        self.assertEqual((spent["loads"], spent["loaded_blocks"], spent["load_failures"]),
                         (0, 0, 0))
        print("TTFT planned / pure recompute (for the record, not checked): best wall "
              "%.4f / %.4f s, best CPU %.4f / %.4f s; SSD measured %.0f B/s, engine %.0f "
              "tokens/s" % (wall[0], wall[1], cpu[0], cpu[1], slow["bytes_per_s"], tok_s),
              file=sys.stderr)
        # the blocks stayed where they were: nothing was loaded from the slow SSD
        self.assertEqual(self.where(), (SHARED_BLOCKS, 0, ["ssd"]))
        self.assertEqual(self.ssd_rate()["samples"], slow["samples"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
