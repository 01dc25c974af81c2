#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kvtier's vLLM connector (kvtier.vllm) in vLLM itself, against a real
kvtierd: vLLM skips computing the prefixes kvtier holds and answers exactly
as it does when it computes them.

A tiny Llama (tiny-llama/config.json: 4 layers, weights from a fixed seed,
token ids in and out, greedy, float32) in two vLLM processes, each started
once (an engine start costs tens of seconds on two cores):
  e1   the connector, started while kvtierd is absent: it serves by
       recomputing (one warning); kvtierd starts and e1 saves the prefixes.
       vLLM's own prefix cache is on in e1, and e1 never loads from kvtier
       (checked): its answers are vLLM's own computations, the reference.
       Each prompt set after the first finds its prefix in that cache, so
       e1 computes what a kvtier hit computes (the question over a cached
       prefix), and first-token logprobs can be compared bitwise.
  e2   a fresh process (empty caches; vLLM's prefix cache off, so every hit
       is kvtier's): loads from DRAM; after a kvtierd restart from SSD;
       with kvtierd SIGKILLed between two layers of a load (vLLM recomputes:
       kv_load_failure_policy "recompute"); with kvtierd gone; with it back
       (--host-copy device: through the device layer's host backend).
Every answer's tokens equal e1's; where both computed the same shapes the
first-token logprob is bitwise equal, elsewhere within 1e-4.

Needs the vLLM venv (scripts/vllm-venv.sh): exits 77 when it cannot be made.
KVT_TEST_SEED replays the random prompts."""

import os
import random
import signal
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

from vllm_env import BT, NAMESPACE, SEED, VOCAB, Engine, connector_config, ensure_venv, push_to_ssd  # noqa: E402,E501

import kvtier  # noqa: E402
from kvtier.daemon import Daemon  # noqa: E402

PREFIX_BLOCKS = 3
QUESTION = 20
GENERATE = 8
DRAM = 16 << 20


class VllmConnectorTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        print("seed: KVT_TEST_SEED=%d" % SEED, file=sys.stderr)
        rng = random.Random(SEED)
        cls.prefixes = [[rng.randrange(3, VOCAB) for _ in range(PREFIX_BLOCKS * BT)]
                        for _ in range(2)]
        # sets of prompts: each prefix with a question of its own per set
        cls.sets = {}
        for name in ("first", "dram", "ssd", "killed", "gone", "back"):
            cls.sets[name] = [p + [rng.randrange(3, VOCAB) for _ in range(QUESTION)]
                              for p in cls.prefixes]
        cls.daemon = Daemon(dram=str(DRAM), ssd="256M")
        cls.socket = cls.daemon.socket
        assert cls.daemon.stop() == 0   # e1 starts without it
        cls.ref = {}
        cls.e2 = None

    @classmethod
    def tearDownClass(cls):
        if cls.e2:
            cls.e2.close()
        cls.daemon.remove()

    def connector(self, **extra):
        return connector_config(self.socket, reconnect_s=0.5, **extra)

    def check(self, name, outs, hit):
        ref = self.ref[name]
        for o, r in zip(outs, ref):
            self.assertEqual(o["tokens"], r["tokens"], name)
            if (o["cached"] > 0) == (r["cached"] > 0):
                self.assertEqual(o["logprob0"], r["logprob0"], name)
            else:
                self.assertAlmostEqual(o["logprob0"], r["logprob0"], delta=1e-4, msg=name)
        self.assertEqual([o["cached"] for o in outs], [hit] * len(outs), name)
        self.assertEqual([o["loaded_blocks"] for o in outs], [hit // BT] * len(outs), name)

    def tiers(self):
        """Where kvtierd holds each prefix's blocks, in the connector's
        namespace (model, device, layout; the tiny model's shape)."""
        with kvtier.Client(socket=self.socket) as c:
            ns = c.hello(NAMESPACE, layers=4, kv_heads=2, head_dim=32, block_tokens=BT,
                         dtype="fp32")
            return [c.lookup(ns, ns.prefix_keys(p))[1] for p in self.prefixes]

    def test_1_absent_then_saves(self):
        e1 = Engine("e1", connector=self.connector(), prefix_caching=True)
        try:
            computed = e1.run(self.sets["first"], GENERATE)
            self.assertEqual([o["cached"] for o in computed], [0, 0])
            self.daemon.start()
            time.sleep(0.6)             # past reconnect_s
            # the prefixes come from e1's own cache; the connector saves them
            again = e1.run(self.sets["first"], GENERATE)
            self.ref["first"] = computed
            for name in ("dram", "ssd", "killed", "gone", "back"):
                self.ref[name] = e1.run(self.sets[name], GENERATE)
        finally:
            log = e1.close()
        for o, r in zip(again, computed):
            self.assertEqual(o["tokens"], r["tokens"])
        for name, outs in self.ref.items():
            want = 0 if name == "first" else PREFIX_BLOCKS * BT
            self.assertEqual([o["cached"] for o in outs], [want] * 2, name)
            self.assertEqual([o["loaded_blocks"] for o in outs], [0, 0], name)
        # the answers depend on the prompt (the weights are not degenerate)
        self.assertNotEqual(self.ref["dram"][0]["tokens"], self.ref["ssd"][0]["tokens"])
        self.assertEqual(log.count("kvtierd unavailable"), 2, "one warning per side:\n" + log)
        self.assertIn("kvtierd reached again", log)
        self.assertEqual(self.tiers(), [["dram"] * PREFIX_BLOCKS] * 2)

    def e2_engine(self):
        if self.__class__.e2 is None:
            self.__class__.e2 = Engine("e2", connector=self.connector(completions="wait"))
        return self.__class__.e2

    def test_2_loads_from_dram(self):
        self.check("dram", self.e2_engine().run(self.sets["dram"], GENERATE),
                   PREFIX_BLOCKS * BT)

    def test_3_loads_from_ssd_after_restart(self):
        on_ssd = [["ssd"] * PREFIX_BLOCKS] * 2
        self.assertTrue(push_to_ssd(self.socket, DRAM, lambda: self.tiers() == on_ssd),
                        self.tiers())
        self.assertEqual(self.daemon.stop(), 0)
        self.daemon.start()
        self.assertEqual(self.tiers(), [["ssd"] * PREFIX_BLOCKS] * 2)
        self.check("ssd", self.e2_engine().run(self.sets["ssd"], GENERATE), PREFIX_BLOCKS * BT)

    def test_4_killed_mid_load_recomputes(self):
        e2 = self.e2_engine()
        outs = e2.run(self.sets["killed"][:1], GENERATE, kill_pid=self.daemon.proc.pid)
        self.assertEqual(self.daemon.proc.wait(10), -signal.SIGKILL)
        self.daemon.log.close()
        ref = self.ref["killed"][0]
        self.assertEqual(outs[0]["tokens"], ref["tokens"])
        self.assertAlmostEqual(outs[0]["logprob0"], ref["logprob0"], delta=1e-4)
        self.assertTrue(outs[0]["load_failed"])
        # kvtierd gone: vLLM keeps serving, recomputing
        outs = e2.run(self.sets["gone"], GENERATE)
        for o, r in zip(outs, self.ref["gone"]):
            self.assertEqual(o["tokens"], r["tokens"])
            self.assertEqual(o["cached"], 0)
        # back (from SSD: the kill lost only DRAM): hits again, this time
        # copied through the device layer's host backend (the paged
        # scatter plan GPU memory gets)
        self.daemon.args += ["--host-copy", "device"]
        self.daemon.start()
        time.sleep(0.6)
        self.check("back", e2.run(self.sets["back"], GENERATE), PREFIX_BLOCKS * BT)


if __name__ == "__main__":
    rc = ensure_venv()
    if rc:
        sys.exit(rc)
    unittest.main(verbosity=2)
