#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kvtier's vLLM connector with asynchronous loads and saves (extra config
"async_load": true; saves are asynchronous by default), in vLLM itself on
CPU, against a real kvtierd: a request whose prefix kvtier holds waits
outside the running batch while its LOAD runs (WAITING_FOR_REMOTE_KVS), and
a finished request keeps its pages until kvtierd has gathered its blocks.

  ref  vLLM without kvtier, its own prefix cache on: the reference answers
       (each set after the first over a cached prefix, what a kvtier hit
       computes, so first-token logprobs compare bitwise).
  e    async loads and saves (completions "wait": a load's end is learnt by
       asking, so a daemon killed before the connector asks fails it):
       saves of computed prefixes; async loads that answer as ref; a
       request aborted while its load runs, one aborted after its save was
       sent, one of max_tokens 1: no page held afterwards; kvtierd SIGKILLed
       with an async load in flight (the request recomputes, answers as
       ref) and right after a save was sent (no page held).
  e3   a fresh engine, kvtierd restarted: answers as ref. Its KV cache
       holds 24 blocks, so three long requests at once preempt each other:
       a preempted request whose save was sent keeps no page, comes back
       through an async load of its prompt, and answers as ref.
Every drain steps the engine until it holds no request, finished ones
waiting on a save included, and checks that every page is free.

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

from vllm_env import BT, NAMESPACE, SEED, VOCAB, Engine, connector_config, ensure_venv  # noqa: E402,E501

import kvtier  # noqa: E402
from kvtier.daemon import Daemon  # noqa: E402

PREFIX_BLOCKS = 3
QUESTION = 20
GENERATE = 8
LONG = 300              # tokens each preempted request generates
SMALL_KV = 24 * 4 * 2 * 2 * 32 * BT * 4     # 24 blocks of the tiny model (fp32)


class VllmAsyncTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        print("seed: KVT_TEST_SEED=%d" % SEED, file=sys.stderr)
        rng = random.Random(SEED)

        def toks(n):
            return [rng.randrange(3, VOCAB) for _ in range(n)]
        cls.prefixes = [toks(PREFIX_BLOCKS * BT) for _ in range(2)]
        cls.prefixes2 = [toks(PREFIX_BLOCKS * BT) for _ in range(2)]
        cls.sets = {name: [p + toks(QUESTION) for p in cls.prefixes]
                    for name in ("warm", "load", "killed")}
        cls.sets.update({name: [p + toks(QUESTION) for p in cls.prefixes2]
                         for name in ("save", "after")})
        cls.aborts = [cls.prefixes[0] + toks(QUESTION), toks(PREFIX_BLOCKS * BT + QUESTION),
                      toks(PREFIX_BLOCKS * BT + QUESTION)]
        cls.long = [toks(4 * BT) for _ in range(3)]
        cls.daemon = Daemon(dram="64M", ssd="256M")
        cls.ref = {}

    @classmethod
    def tearDownClass(cls):
        cls.daemon.remove()

    def connector(self, **extra):
        return connector_config(self.daemon.socket, reconnect_s=0.5, async_load=True, **extra)

    def check(self, name, outs, hit=None, bitwise=True):
        for o, r in zip(outs, self.ref[name]):
            self.assertEqual(o["tokens"], r["tokens"], name)
            if bitwise:
                self.assertEqual(o["logprob0"], r["logprob0"], name)
            else:
                self.assertAlmostEqual(o["logprob0"], r["logprob0"], delta=1e-4, msg=name)
            if hit is not None:
                self.assertEqual(o["cached"], hit, name)

    def drained(self, reply, what):
        """The engine holds no request and every page is free."""
        self.assertEqual(reply["held_requests"], 0, what)
        self.assertEqual(reply["free_blocks"], reply["total_blocks"], what)
        return reply

    def quiet(self, log, kvtier_warnings=False):
        """No error in the engine's log (vLLM logs a harmless traceback
        of its own at start: no tokenizer); no kvtier warning about a load
        or save unless kvtierd was killed."""
        bad = [" ERROR ", "AssertionError"]
        if not kvtier_warnings:
            bad += ["kvtier save", "kvtier load"]
        for b in bad:
            self.assertNotIn(b, log)

    def held(self, prefixes):
        with kvtier.Client(socket=self.daemon.socket) as c:
            ns = c.hello(NAMESPACE, layers=4, kv_heads=2, head_dim=32, block_tokens=BT,
                         dtype="fp32")
            return [c.lookup(ns, ns.prefix_keys(p))[0] for p in prefixes]

    def test_1_reference(self):
        ref = Engine("async-ref", prefix_caching=True)
        try:
            for name in ("warm", "load", "killed", "save", "after"):
                self.ref[name] = ref.run(self.sets[name], GENERATE)
            self.ref["long"] = ref.run(self.long, LONG, batch=True)
        finally:
            ref.close()
        self.assertEqual([o["cached"] for o in self.ref["load"]], [PREFIX_BLOCKS * BT] * 2)

    def test_2_async_loads_saves_aborts_kills(self):
        e = Engine("async-e", connector=self.connector(completions="wait"))
        try:
            self._async_engine(e)
        finally:
            log = e.close()
        self.quiet(log, kvtier_warnings=True)

    def _async_engine(self, e):
        # computed, saved asynchronously: the drain ends once both saves did
        r = self.drained(self.drain_run(e, self.sets["warm"], GENERATE), "warm")
        self.check("warm", r["outputs"], hit=0)
        self.assertEqual(r["stats"]["async_saves"], 2)
        self.assertEqual(self.held(self.prefixes), [PREFIX_BLOCKS] * 2)
        # loaded asynchronously: as vLLM computes it, bitwise
        r = self.drained(self.drain_run(e, self.sets["load"], GENERATE), "load")
        self.check("load", r["outputs"], hit=PREFIX_BLOCKS * BT)
        self.assertEqual([o["loaded_blocks"] for o in r["outputs"]], [PREFIX_BLOCKS] * 2)
        self.assertEqual(r["stats"]["async_loads"], 2)
        self.assertEqual(r["stats"]["load_failures"], 0)
        # aborted while its load runs; after its save was sent; max_tokens 1
        a = self.drained(self._abort(e, self.aborts[0], "load"), "abort in load")
        self.assertEqual(a["status"], "WAITING_FOR_REMOTE_KVS")
        a = self.drained(self._abort(e, self.aborts[1], "prefill"), "abort after save")
        self.assertEqual(a["stats"]["async_saves"], 3)
        r = self.drained(self.drain_run(e, self.aborts[2:], 1), "max_tokens 1")
        self.assertEqual(len(r["outputs"][0]["tokens"]), 1)
        self.assertEqual(r["stats"]["async_saves"], 4)
        # kvtierd SIGKILLed with an async load in flight: recomputed, right
        r = self.drain_run(e, self.sets["killed"][:1], GENERATE, kill_pid=self.daemon.proc.pid,
                  kill_on="async_load")
        self.assertEqual(self.daemon.proc.wait(10), -signal.SIGKILL)
        self.daemon.log.close()
        self.drained(r, "killed mid-load")
        self.assertTrue(r["outputs"][0]["load_failed"])
        self.assertEqual(r["outputs"][0]["cached"], 0)
        self.check("killed", r["outputs"], bitwise=False)
        # back; SIGKILLed again right after a save was sent: no page held
        self.daemon.start()
        time.sleep(0.6)
        r = self.drain_run(e, self.sets["save"][:1], GENERATE, kill_pid=self.daemon.proc.pid,
                  kill_on="save")
        self.assertEqual(self.daemon.proc.wait(10), -signal.SIGKILL)
        self.daemon.log.close()
        self.drained(r, "killed mid-save")
        self.check("save", r["outputs"][:1], hit=0)

    @staticmethod
    def _abort(e, prompt, after):
        return e.call({"abort": prompt, "after": after, "max_tokens": 64})

    @staticmethod
    def drain_run(e, prompts, max_tokens, **extra):
        """Run, then drain: the whole answer."""
        return e.call(dict(extra, prompts=prompts, max_tokens=max_tokens, drain=True))

    def test_3_restarted_fresh_engine_and_preemption(self):
        self.daemon.start()
        e3 = Engine("async-e3", connector=self.connector(), kv_bytes=SMALL_KV,
                    max_model_len=512)
        try:
            # whatever survived the kill mid-save: the answers are vLLM's
            r = self.drained(self.drain_run(e3, self.sets["save"], GENERATE), "restarted")
            self.check("save", r["outputs"], bitwise=False)
            self.assertEqual(self.held(self.prefixes2), [PREFIX_BLOCKS] * 2)
            r = self.drained(self.drain_run(e3, self.sets["after"], GENERATE), "after")
            self.check("after", r["outputs"], hit=PREFIX_BLOCKS * BT)
            # three requests that do not fit together: preempted, resumed
            r = self.drained(self.drain_run(e3, self.long, LONG, batch=True), "preempted")
        finally:
            log = e3.close()
        self.quiet(log)
        self.assertGreater(r["preemptions"], 0)
        for o, ref in zip(r["outputs"], self.ref["long"]):
            self.assertEqual(o["tokens"], ref["tokens"])
        # a preempted request came back through an async load of its prompt
        self.assertGreater(r["stats"]["async_loads"], 2, r["stats"])


if __name__ == "__main__":
    rc = ensure_venv()
    if rc:
        sys.exit(rc)
    unittest.main(verbosity=2)
