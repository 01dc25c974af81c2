#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The PyTorch reference engine (examples/torch_engine) against a real
kvtierd: KV computed by real attention, offloaded and loaded back, lets the
model continue exactly as if it had recomputed the prefix.

Engine A (a process) prefills a system prompt + question 1 and saves its
blocks; engine B (another process) gets the system prompt + question 2,
loads the shared blocks, prefills only the rest and generates 32 tokens.
Later Bs run in the test process, each with a connection and KV memory of
its own.
A from-scratch run of B's prompt with the same chunk cuts (here, in the test
process) must give bitwise the same logits and tokens, and the loaded KV
bytes must be those A computed. Then the same with the blocks demoted to SSD
(a small DRAM tier filled by other blocks), after a daemon restart, and with
the daemon SIGKILLed in the middle of B's load (the engine recomputes and
still produces the same tokens).

Every B loads all the stored blocks it matches, whatever kvtierd's plan
says (--no-plan, use_plan=False): whether a block pays to load is
test_engine_plan's subject, and on a busy machine the plan may rightly
prefer to recompute so few tokens of so small a model (a run under a full
parallel ctest once loaded none).

Run by ctest with the interpreter that has torch, KVTIERD, KVTIER_CLIENT_LIB
and PYTHONPATH set. Prompt lengths are random: KVT_TEST_SEED replays."""

import json
import os
import random
import signal
import subprocess
import sys
import unittest

import torch

import kvtier
from kvtier.daemon import Daemon

from engine_env import DAEMON_ENV, ENGINE_DIR, SEED  # noqa: E402  (puts the engine on sys.path)
import engine as torch_engine  # noqa: E402
from model import Config, Weights  # noqa: E402

CONFIG = os.path.join(ENGINE_DIR, "configs", "tiny.json")
CHUNK = 64
GENERATE = 32
BT = torch_engine.BLOCK_TOKENS
WEIGHT_SEED = 7


def make_prompts(rng, vocab):
    sys_len = rng.randrange(130, 200)
    q1_len, q2_len = rng.randrange(20, 60), rng.randrange(20, 60)
    system = [rng.randrange(vocab) for _ in range(sys_len)]
    q1 = [rng.randrange(vocab) for _ in range(q1_len)]
    q2 = [rng.randrange(vocab) for _ in range(q2_len)]
    q2[0] = (q1[0] + 1) % vocab  # the prompts part where the system prompt ends
    return system, system + q1, system + q2


class TorchEngineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.cfg = Config.load(CONFIG)
        cls.weights = Weights(cls.cfg, WEIGHT_SEED)
        rng = random.Random(SEED)
        cls.system, cls.prompt_a, cls.prompt_b = make_prompts(rng, cls.cfg.vocab)
        cls.shared = len(cls.system) // BT
        cls.d = Daemon(dram="4M", ssd="64M", env=DAEMON_ENV)
        cls.tmp = cls.d.dir
        for name in ("a", "b"):
            with open(os.path.join(cls.tmp, name + ".json"), "w") as f:
                json.dump(getattr(cls, "prompt_" + name), f)
        # B's prompt from scratch, cut where B's loaded prefix ends
        eng = cls.engine(None)
        cls.scratch = eng.generate(torch_engine.Request("scratch", cls.prompt_b, GENERATE),
                                   boundaries=[cls.shared * BT])
        cls.scratch_kv = eng.prompt_kv(cls.scratch, len(cls.prompt_b))

    @classmethod
    def tearDownClass(cls):
        if cls.d.running:
            assert cls.d.stop() == 0

    @classmethod
    def engine(cls, conn):
        # twice what a request needs: a failed load's pages are quarantined
        pages = 2 * ((max(len(cls.prompt_a), len(cls.prompt_b)) + GENERATE) // BT + 1)
        return torch_engine.Engine(cls.cfg, cls.weights, pages, conn, chunk_tokens=CHUNK)

    def run_engine(self, name, prompt):
        """engine.py in its own process; returns its summary and --out file."""
        out = os.path.join(self.tmp, name + ".pt")
        p = subprocess.run(
            [sys.executable, os.path.join(ENGINE_DIR, "engine.py"), "--config", CONFIG,
             "--seed", str(WEIGHT_SEED), "--socket", self.d.socket, "--prompt",
             os.path.join(self.tmp, prompt + ".json"), "--generate", str(GENERATE),
             "--chunk-tokens", str(CHUNK), "--out", out, "--json", "--no-plan"],
            capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout), torch.load(out)

    def run_here(self):
        """B in this process, as engine.py runs it: a fresh connector,
        connection and KV memory (a process start saved: they are slow under
        ASan)."""
        conn = torch_engine.make_connector(self.cfg, WEIGHT_SEED, self.d.socket, None,
                                           use_plan=False)
        eng = self.engine(conn)
        res = eng.generate(torch_engine.Request("b", self.prompt_b, GENERATE))
        conn.close()
        return ({"fallback": res.fallback, "loaded_tokens": res.loaded_tokens,
                 "chunks": res.chunks, "connector": conn.stats},
                {"tokens": res.tokens, "logits": torch.stack(res.logits),
                 "kv": eng.prompt_kv(res, len(self.prompt_b))})

    def hello(self, c):
        return c.hello(torch_engine.model_id(self.cfg, WEIGHT_SEED), layers=self.cfg.layers,
                       kv_heads=self.cfg.kv_heads, head_dim=self.cfg.head_dim,
                       block_tokens=BT, dtype="bf16")

    def shared_tiers(self):
        with kvtier.Client(socket=self.d.socket) as c:
            ns = self.hello(c)
            return c.lookup(ns, ns.prefix_keys(self.system[:self.shared * BT]))

    def forget_b(self):
        """Remove the blocks B saved after the shared ones, so that the next
        B finds A's blocks only, as the first did."""
        with kvtier.Client(socket=self.d.socket) as c:
            ns = self.hello(c)
            keys = ns.prefix_keys(self.prompt_b)
            c.remove(ns, keys[self.shared:][::-1])
            self.assertEqual(c.lookup(ns, keys)[0], self.shared)

    def check_b(self, summary, out):
        """B loaded the shared blocks, computed the rest, and matches the
        from-scratch run bit for bit; the KV it loaded is A's."""
        self.assertFalse(summary["fallback"])
        self.assertEqual(summary["loaded_tokens"], self.shared * BT)
        self.assertEqual(summary["chunks"][0][0], self.shared * BT)
        self.assertEqual(summary["connector"]["loaded_blocks"], self.shared)
        self.assertEqual(out["tokens"], self.scratch.tokens)
        self.assertEqual(len(out["tokens"]), GENERATE)
        self.assertTrue(torch.equal(out["logits"], torch.stack(self.scratch.logits)),
                        "B's logits differ from the from-scratch run's")
        self.assertTrue(torch.equal(out["kv"][:self.shared], self.kv_a[:self.shared]),
                        "the loaded KV differs from what A computed")
        self.assertTrue(torch.equal(out["kv"], self.scratch_kv))
        # only the blocks kvtier lacked were saved
        self.assertEqual(summary["connector"]["save_present_blocks"], self.shared)
        self.assertEqual(summary["connector"]["saved_blocks"],
                         len(self.prompt_b) // BT - self.shared)

    def test_0_an_absent_daemon_is_named(self):
        """The connector's warning names the socket it could not reach."""
        from types import SimpleNamespace
        from kvtier.connector import EngineConnector
        nope = os.path.join(self.d.sockdir, "absent.sock")
        req = SimpleNamespace(request_id="r", prompt_token_ids=list(range(4 * BT)))
        with self.assertLogs("kvtier.connector", "WARNING") as logs:
            conn = EngineConnector("test/absent", layers=2, kv_heads=2, head_dim=16,
                                   block_tokens=BT, socket=nope)
            self.assertEqual(conn.get_num_new_matched_tokens(req, 0), (0, False))
        self.assertIn(nope, "\n".join(logs.output))
        conn.close()

    def test_0_connector_contract(self):
        from kvtier.connector import EngineConnector, ScheduledRequest
        conn = EngineConnector("test/contract", layers=2, kv_heads=2, head_dim=16,
                               block_tokens=BT, socket=self.d.socket)
        # kvtierd can only reach memory the connector allocated
        with self.assertRaises(ValueError):
            conn.register_kv_caches({"l0": torch.zeros(2, 4, BT, 2, 16, dtype=torch.bfloat16),
                                     "l1": torch.zeros(2, 4, BT, 2, 16, dtype=torch.bfloat16)})
        kv = conn.allocate_kv_cache(8)
        with self.assertRaises(ValueError):   # layers out of order
            conn.register_kv_caches({"l0": kv[1], "l1": kv[0]})
        conn.register_kv_caches({"l0": kv[0], "l1": kv[1]})
        kv.copy_(torch.randn(kv.shape))       # the tensor is the registered memory
        req = torch_engine.Request("r", list(range(4 * BT)), 1)
        self.assertEqual(conn.get_num_new_matched_tokens(req, 0), (0, False))
        meta = conn.build_connector_meta([ScheduledRequest(req, [0, 1, 2, 3], 0, 4 * BT)])
        self.assertEqual(meta.loads, [])
        self.assertEqual([s.pages for s in meta.saves], [[0, 1, 2, 3]])
        # saved with the reuse class of the output it asks for (1 token)
        self.assertEqual([s.reuse_class for s in meta.saves], [1])
        self.assertEqual(conn._reuse_class(torch_engine.Request("o", [1], 400)), 9)
        self.assertEqual(conn._reuse_class(type("R", (), {"reuse_class": 4})()), 4)
        self.assertEqual(conn._reuse_class(object()), 0)
        conn.bind_connector_metadata(meta)
        self.assertEqual(conn.wait_for_save(), 4)
        conn.clear_connector_metadata()
        conn.request_finished(req)
        # all four blocks are there; the last token is left to compute
        self.assertEqual(conn.get_num_new_matched_tokens(req, 0), (3 * BT, False))
        self.assertEqual(conn.get_num_new_matched_tokens(req, 3 * BT), (0, False))
        self.assertEqual(conn.get_num_new_matched_tokens(req, BT), (2 * BT, False))
        conn.update_state_after_alloc(req, [4, 5, 6, 7], 2 * BT)
        meta = conn.build_connector_meta([ScheduledRequest(req, [4, 5, 6, 7], BT, 3 * BT)])
        self.assertEqual([(s.pages, len(s.keys)) for s in meta.loads], [([5, 6], 2)])
        conn.bind_connector_metadata(meta)
        conn.start_load_kv()
        self.assertTrue(conn.wait_for_layer_load("l0"))
        self.assertTrue(conn.wait_for_layer_load(1))
        self.assertEqual(conn.get_finished(), ({"r"}, {"r"}))
        self.assertTrue(torch.equal(kv[:, :, 5:7], kv[:, :, 1:3]))
        self.assertEqual(conn.wait_for_save(), 0)   # all present: nothing sent
        self.assertEqual((conn.stats["saved_blocks"], conn.stats["save_present_blocks"]), (4, 4))
        conn.close()

    def test_1_b_loads_from_dram(self):
        summary, out = self.run_engine("a", "a")
        self.assertEqual(summary["loaded_tokens"], 0)
        self.assertEqual(summary["connector"]["saved_blocks"], len(self.prompt_a) // BT)
        type(self).kv_a = out["kv"]
        # A's shared blocks equal the from-scratch run's: the chunk that
        # straddles the end of the system prompt does not change them
        self.assertTrue(torch.equal(self.kv_a[:self.shared], self.scratch_kv[:self.shared]))
        self.assertEqual(self.shared_tiers(), (self.shared, ["dram"] * self.shared))
        self.check_b(*self.run_engine("b_dram", "b"))

    def test_2_b_loads_from_ssd(self):
        self.forget_b()
        # other blocks fill the 4 MiB DRAM tier until the shared ones are demoted
        with kvtier.Client(socket=self.d.socket) as c:
            ns = c.hello("test/filler", layers=8, kv_heads=8, head_dim=128, block_tokens=16)
            with kvtier.EngineMemory.paged(ns, pages=4) as mem:
                region = c.register(ns, mem)
                rng = random.Random(SEED)
                for i in range(64):
                    keys = ns.prefix_keys([rng.randrange(1 << 30) for _ in range(64)])
                    c.save(ns, region, keys, range(4)).wait()
                    if self.shared_tiers()[1] == ["ssd"] * self.shared:
                        break
        self.assertEqual(self.shared_tiers(), (self.shared, ["ssd"] * self.shared))
        self.check_b(*self.run_here())

    def test_3_b_loads_after_restart(self):
        self.forget_b()
        self.assertEqual(self.d.stop(), 0)
        self.d.start()
        hit, tiers = self.shared_tiers()
        self.assertEqual(hit, self.shared)
        self.check_b(*self.run_here())

    def test_4_daemon_killed_mid_load(self):
        self.forget_b()
        # WAIT round trips: the kill lands between two of them, before the
        # engine has heard of layer 1 (pushed completions of so small a load
        # would all be in the socket before the kill)
        conn = torch_engine.make_connector(self.cfg, WEIGHT_SEED, self.d.socket, None,
                                           completions="wait", use_plan=False)
        eng = self.engine(conn)
        wait = conn.wait_for_layer_load
        layers_seen = []

        def wait_then_kill(layer):
            ok = wait(layer)
            layers_seen.append((layer, ok))
            if layer == 0:
                self.assertEqual(self.d.stop(signal.SIGKILL), -signal.SIGKILL)
            return ok

        conn.wait_for_layer_load = wait_then_kill
        res = eng.generate(torch_engine.Request("killed", self.prompt_b, GENERATE))
        conn.close()
        self.assertEqual(res.matched_tokens, self.shared * BT)
        self.assertEqual(layers_seen, [(0, True), (1, False)])
        self.assertTrue(res.fallback)
        self.assertEqual(res.loaded_tokens, 0)
        self.assertEqual(conn.stats["load_failures"], 1)
        self.assertEqual(res.tokens, self.scratch.tokens)
        self.assertTrue(torch.equal(torch.stack(res.logits), torch.stack(self.scratch.logits)))
        # the pages the dead load held are never handed out again
        self.assertEqual(len(eng.pool.quarantined), self.shared)
        self.assertFalse(set(res.block_table) & eng.pool.quarantined)


if __name__ == "__main__":
    unittest.main(verbosity=2)
