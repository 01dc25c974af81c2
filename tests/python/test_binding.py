#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python binding against a real kvtierd: operations, Pythonic errors,
stats, and both example engines (C and Python) with every byte verified.

Run by ctest with KVTIERD, KVTIER_CLIENT_LIB, KVT_EXAMPLE_ENGINE and
PYTHONPATH set; KVT_TEST_TMPDIR holds the daemon's directory."""

import os
import random
import subprocess
import sys
import time
import unittest

import kvtier
from kvtier.daemon import Daemon

# under ASan the Python side runs without leak checks, the daemon with them
DAEMON_ENV = dict(os.environ, ASAN_OPTIONS=os.environ["KVT_DAEMON_ASAN_OPTIONS"]) \
    if os.environ.get("KVT_DAEMON_ASAN_OPTIONS") else None
SEED = int(os.environ.get("KVT_TEST_SEED") or time.time_ns() % (1 << 31))
print("seed: KVT_TEST_SEED=%d" % SEED, file=sys.stderr)


class BindingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(["--tenant", "alice:tok-a", "--tenant", "bob:tok-b"], env=DAEMON_ENV)

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0

    def client(self, token="tok-a"):
        return kvtier.Client(socket=self.d.socket, token=token)

    def hello(self, c):
        return c.hello("py/test", layers=4, kv_heads=2, head_dim=16, block_tokens=4)

    def test_save_lookup_load_every_byte(self):
        rng = random.Random(SEED)
        with self.client() as c:
            ns = self.hello(c)
            self.assertEqual(ns.block_bytes, 2 * 4 * 2 * 16 * 2 * 4)
            with kvtier.EngineMemory.paged(ns, pages=16) as mem:
                region = c.register(ns, mem)
                keys = ns.prefix_keys([rng.randrange(1 << 31) for _ in range(8 * 4 + 3)])
                self.assertEqual(len(keys), 8)
                self.assertEqual(c.lookup(ns, keys), (0, ["none"] * 8))
                want = {}
                for p in range(8):
                    for layer in range(4):
                        for kv in range(2):
                            data = rng.randbytes(ns.page_bytes)
                            mem.write_page(p, layer, kv, data)
                            want[p, layer, kv] = data
                self.assertEqual(c.save(ns, region, keys, range(8)).wait(), 8)
                hit, tiers = c.lookup(ns, keys)
                self.assertEqual((hit, tiers), (8, ["dram"] * 8))
                mem.buf[:] = bytes(mem.nbytes)
                t = c.load(ns, region, keys, [15 - i for i in range(8)])
                t.wait_layer(0)
                self.assertEqual(t.wait(), 8)
                for p in range(8):
                    for layer in range(4):
                        for kv in range(2):
                            self.assertEqual(mem.read_page(15 - p, layer, kv), want[p, layer, kv])
                with self.assertRaises(FileNotFoundError):
                    t.wait()
                self.assertEqual(c.pin(ns, keys[:3]), 3)
                self.assertEqual(c.unpin(ns, keys[:3]), 3)
                self.assertEqual(c.remove(ns, keys[4:]), 4)
                self.assertEqual(c.lookup(ns, keys)[0], 4)
                t = c.load(ns, region, keys, range(8))
                self.assertEqual(t.wait(), 4)

    def test_errors_are_pythonic(self):
        with self.client("wrong") as c:
            with self.assertRaises(PermissionError):
                self.hello(c)
        nope = os.path.join(self.d.sockdir, "nope.sock")
        with self.assertRaises((FileNotFoundError, ConnectionRefusedError)) as cm:
            kvtier.Client(socket=nope)
        # the error names the socket it tried: given, or from $KVTIER_SOCKET
        self.assertEqual(cm.exception.filename, nope)
        self.assertIn(nope, str(cm.exception))
        os.environ["KVTIER_SOCKET"] = nope
        try:
            with self.assertRaises(FileNotFoundError) as cm:
                kvtier.Client()
            self.assertIn(nope, str(cm.exception))
        finally:
            del os.environ["KVTIER_SOCKET"]
        engine = subprocess.run([os.environ["KVT_EXAMPLE_ENGINE"], "--socket", nope],
                                capture_output=True, text=True)
        self.assertEqual(engine.returncode, 1)
        self.assertIn("connect to kvtierd at " + nope, engine.stderr)
        with self.client() as c:
            # memory of another shape: refused, and both sides say why
            ns = self.hello(c)
            deep = c.hello("py/deeper", layers=8, kv_heads=2, head_dim=16, block_tokens=4)
            with kvtier.EngineMemory.paged(deep, pages=2) as mem:
                with self.assertRaises(OSError) as cm:
                    c.register(ns, mem)
            self.assertEqual(cm.exception.errno, 22)
            self.assertIn("not the namespace's shape", str(cm.exception))
            with open(self.d.log.name) as f:
                self.assertIn("the memory has 8 layers, the namespace 4",
                              [l for l in f if "event=register.refused" in l][-1])
        with self.client() as c:
            ns = self.hello(c)
            with kvtier.EngineMemory.paged(ns, pages=2) as mem:
                region = c.register(ns, mem)
                with self.assertRaises(OSError) as cm:
                    c.save(ns, region, [bytes(16)], [5])
                self.assertEqual(cm.exception.errno, 34)  # ERANGE: page outside the region
                # a SAVE into a namespace of another shape through this region:
                # the engine gets EINVAL, the daemon's log says why
                deep = c.hello("py/deeper", layers=8, kv_heads=2, head_dim=16, block_tokens=4)
                with self.assertRaises(OSError) as cm:
                    c.save(deep, region, [bytes(16)], [0])
                self.assertEqual(cm.exception.errno, 22)
            with open(self.d.log.name) as f:
                refused = [l for l in f if "event=xfer.refused" in l]
            self.assertIn("page 5 past the region's 2 pages", refused[-2])
            self.assertIn("registered for another namespace", refused[-1])

    def test_register_in_parts(self):
        """A layer per memfd, K and V interleaved per page, saved and loaded
        into EngineMemory.paged's one buffer byte for byte; a layer past its
        part refused with a reason naming it."""
        rng = random.Random(SEED ^ 0x5a5a)
        with self.client() as c:
            ns = self.hello(c)
            pg, pages = ns.page_bytes, 4
            mems = [kvtier.EngineMemory(4096 + 2 * pg * pages, 0, 0, 0, 0, 0, 0)
                    for _ in range(ns.layers)]
            at = [(l, 64 * (l + 1)) for l in range(ns.layers)]
            spec = kvtier.RegionParts([kvtier.Part(m.fd, m.nbytes) for m in mems], at, pages,
                                      kv_stride=pg, page_stride=2 * pg)
            region = c.register(ns, spec)
            keys = ns.prefix_keys([rng.randrange(1 << 31) for _ in range(2 * 4)])
            want = {}
            for p in range(2):
                for layer, (_, off) in enumerate(at):
                    for kv in range(2):
                        data = rng.randbytes(pg)
                        o = off + kv * pg + p * 2 * pg
                        mems[layer].buf[o:o + pg] = data
                        want[p, layer, kv] = data
            self.assertEqual(c.save(ns, region, keys, [0, 1]).wait(), 2)
            with kvtier.EngineMemory.paged(ns, pages=4) as mem:
                into = c.register(ns, mem)
                self.assertEqual(c.load(ns, into, keys, [3, 2]).wait(), 2)
                for (p, layer, kv), data in want.items():
                    self.assertEqual(bytes(mem.read_page(3 - p, layer, kv)), data)
            spec.layer_parts[2] = (2, 4200)
            with self.assertRaises(OSError) as cm:
                c.register(ns, spec)
            self.assertEqual(cm.exception.errno, 22)
            self.assertIn("layer 2: at offset 4200", str(cm.exception))
            self.assertIn("past part 2", str(cm.exception))
            for m in mems:
                m.close()

    def test_save_with_a_reuse_class(self):
        self.assertEqual([kvtier.reuse_class_of(n) for n in (0, 1, 3, 19, 400, 1 << 40)],
                         [0, 1, 2, 5, 9, kvtier.REUSE_CLASS_MAX])
        with self.client() as c:
            ns = self.hello(c)
            self.assertGreaterEqual(c.version, 3)  # the class is version 3's
            with kvtier.EngineMemory.paged(ns, pages=4) as mem:
                region = c.register(ns, mem)
                keys = ns.prefix_keys(list(range(500, 516)))
                self.assertEqual(c.save(ns, region, keys[:2], [0, 1],
                                        reuse_class=kvtier.reuse_class_of(12)).wait(), 2)
                self.assertEqual(c.save(ns, region, keys[2:], [2, 3], parent=keys[1],
                                        reuse_class=kvtier.REUSE_CLASS_MAX).wait(), 2)
                self.assertEqual(c.lookup(ns, keys)[0], 4)
                with self.assertRaises(OSError) as cm:
                    c.save(ns, region, keys[:1], [0], reuse_class=kvtier.REUSE_CLASS_MAX + 1)
                self.assertEqual(cm.exception.errno, 22)  # EINVAL

    def test_tenants_do_not_share(self):
        toks = list(range(100, 116))
        with self.client("tok-a") as a, self.client("tok-b") as b:
            na, nb = self.hello(a), self.hello(b)
            self.assertNotEqual(na.prefix_keys(toks), nb.prefix_keys(toks))
            with kvtier.EngineMemory.paged(na, pages=4) as mem:
                r = a.register(na, mem)
                ka = na.prefix_keys(toks)
                self.assertEqual(a.save(na, r, ka, range(4)).wait(), 4)
            self.assertEqual(b.lookup(nb, ka)[0], 0)
            self.assertEqual(b.lookup(nb, nb.prefix_keys(toks))[0], 0)

    def test_stats_and_ping(self):
        with self.client() as c:
            c.ping(b"hello")
            st = c.stats()
            self.assertIn("dram", st["tiers"])
            self.assertEqual(st["tiers"]["dram"]["capacity_bytes"], 64 << 20)
            self.assertGreaterEqual(st["ops"]["PING"]["count"], 1)
            # each tier's own named counters, the table STATS carries
            dram = c.tier_counters("dram")
            self.assertEqual(dram["slabs"] * dram["slab_bytes"], 64 << 20)
            self.assertEqual(dram, st["tiers"]["dram"]["counters"])
            self.assertEqual(c.tier_counters("hbm"), {})

    def test_example_engines(self):
        env = dict(os.environ)
        here = os.path.dirname(os.path.abspath(__file__))
        root = os.path.dirname(os.path.dirname(here))
        py = subprocess.run([sys.executable, os.path.join(root, "examples", "engine.py"),
                             "--socket", self.d.socket, "--token", "tok-b",
                             "--seed", str(SEED % 1000)], env=env, capture_output=True, text=True)
        self.assertEqual(py.returncode, 0, py.stderr)
        self.assertIn("bytes verified", py.stdout)
        engine = os.environ.get("KVT_EXAMPLE_ENGINE")
        if engine:
            cc = subprocess.run([engine, "--socket", self.d.socket, "--token", "tok-a",
                                 "--seed", str(SEED % 1000)], capture_output=True, text=True)
            self.assertEqual(cc.returncode, 0, cc.stderr)
            self.assertIn("bytes verified", cc.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
