#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The connector when the daemon fails it (kvtier.connector against a real
kvtierd): a step whose load failed never saves the pages that load should
have filled, and a restarted daemon is reached again at the next request.

vLLM computes a request whose prefix is loaded and whose prompt ends in the
same step; the connector saves the prompt's full blocks at the end of that
step. When the load stops short (a block evicted between LOOKUP and LOAD),
the pages of the missing blocks hold whatever was there before: vLLM
recomputes them in a later step, but a save in this step would store them
under the prompt's keys, and every later hit would serve those bytes.

Here: blocks 0..2 of a prefix are stored, LOOKUP finds all three, block 2
is removed, the step loads (0 and 1 arrive, the load fails at the last
layer) and then saves. Block 2 must still be absent, and the save counted
as a failure."""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python"))

import kvtier  # noqa: E402
from kvtier.connector import EngineConnector, ScheduledRequest  # noqa: E402
from kvtier.daemon import Daemon  # noqa: E402

DAEMON_ENV = dict(os.environ, ASAN_OPTIONS=os.environ["KVT_DAEMON_ASAN_OPTIONS"]) \
    if os.environ.get("KVT_DAEMON_ASAN_OPTIONS") else None
BT = 16
LAYERS = 2


class Req:
    def __init__(self, rid, tokens):
        self.request_id = rid
        self.prompt_token_ids = tokens


class FailedLoadTest(unittest.TestCase):
    def setUp(self):
        self.d = Daemon(dram="16M", env=DAEMON_ENV)

    def tearDown(self):
        self.assertEqual(self.d.stop(), 0)
        self.d.remove()

    def connector(self):
        c = EngineConnector("failed-load-test", LAYERS, 2, 16, BT, kv_dtype="fp32",
                            socket=self.d.socket, use_plan=False)
        kv = c.allocate_kv_cache(16)
        c.register_kv_caches({"layer%d" % i: kv[i] for i in range(LAYERS)})
        return c, kv

    def step(self, c, req, block_ids, computed):
        meta = c.build_connector_meta([ScheduledRequest(req, block_ids, computed,
                                                        len(req.prompt_token_ids) - computed)])
        c.bind_connector_metadata(meta)
        c.start_load_kv()
        ok = [c.wait_for_layer_load(i) for i in range(LAYERS)]
        saved = c.wait_for_save()
        c.clear_connector_metadata()
        return ok, saved

    def test_no_save_from_a_step_whose_load_failed(self):
        prefix = list(range(100, 100 + 3 * BT))
        a = Req("a", prefix + [7] * 5)
        c, kv = self.connector()
        torch.manual_seed(1)
        kv.copy_(torch.randn_like(kv))
        # a computes the prefix: its three full blocks are saved
        self.assertEqual(c.get_num_new_matched_tokens(a, 0), (0, False))
        self.assertEqual(self.step(c, a, [0, 1, 2, 3], 0)[1], 3)
        with kvtier.Client(socket=self.d.socket) as cl:
            ns = cl.hello("failed-load-test", layers=LAYERS, kv_heads=2, head_dim=16,
                          block_tokens=BT, dtype="fp32")
            keys = ns.prefix_keys(prefix)
            self.assertEqual(cl.lookup(ns, keys)[0], 3)
            # b shares the prefix; LOOKUP finds it whole
            b = Req("b", prefix + [9] * 5)
            self.assertEqual(c.get_num_new_matched_tokens(b, 0), (3 * BT, False))
            c.update_state_after_alloc(b, [4, 5, 6, 7], 3 * BT)
            kv[:, :, 6].zero_()         # what b's third page held before
            cl.remove(ns, keys[2:])     # evicted between LOOKUP and LOAD
            ok, saved = self.step(c, b, [4, 5, 6, 7], 3 * BT)
            self.assertEqual(ok, [True, False])
            self.assertEqual(c.get_block_ids_with_load_errors(), {4, 5, 6})
            self.assertEqual(saved, 0)
            self.assertEqual(c.stats["save_failures"], 1)
            # page 6 was never filled: its zeros must not become block 2
            self.assertEqual(cl.lookup(ns, keys)[0], 2)
        c.close()

    def test_no_memory_registered_fails_loads_and_saves_cleanly(self):
        """A worker whose KV memory was never registered (a layout it could
        not describe, warned and left off) while the daemon is up: its loads
        fail (vLLM recomputes) and its saves are counted as failed, instead
        of a save or load naming no region."""
        prefix = list(range(500, 500 + 2 * BT))
        with kvtier.Client(socket=self.d.socket) as cl:
            ns = cl.hello("failed-load-test", layers=LAYERS, kv_heads=2, head_dim=16,
                          block_tokens=BT, dtype="fp32")
            with kvtier.EngineMemory.paged(ns, pages=4) as mem:
                region = cl.register(ns, mem)
                self.assertEqual(cl.save(ns, region, ns.prefix_keys(prefix), range(2)).wait(),
                                 2)
        c = EngineConnector("failed-load-test", LAYERS, 2, 16, BT, kv_dtype="fp32",
                            socket=self.d.socket, use_plan=False)
        a = Req("a", prefix + [3] * 5)
        self.assertEqual(c.get_num_new_matched_tokens(a, 0), (2 * BT, False))
        c.update_state_after_alloc(a, [0, 1, 2], 2 * BT)
        ok, saved = self.step(c, a, [0, 1, 2], 2 * BT)
        self.assertEqual(ok, [False, False])
        self.assertEqual(c.get_block_ids_with_load_errors(), {0, 1})
        self.assertEqual(saved, 0)
        self.assertEqual(c.stats["save_failures"], 1)
        c.close()

    def test_lookup_after_a_restart_finds_the_blocks(self):
        """The daemon restarted since the connector last asked: the first
        LOOKUP meets a closed connection, reconnects at once (whatever
        reconnect_s) and answers from the new daemon."""
        prefix = list(range(300, 300 + 3 * BT))
        c = EngineConnector("failed-load-test", LAYERS, 2, 16, BT, kv_dtype="fp32",
                            socket=self.d.socket, use_plan=False, reconnect_s=3600)
        self.assertTrue(c.connected)
        self.assertEqual(self.d.stop(), 0)
        self.d.start()
        with kvtier.Client(socket=self.d.socket) as cl:
            ns = cl.hello("failed-load-test", layers=LAYERS, kv_heads=2, head_dim=16,
                          block_tokens=BT, dtype="fp32")
            with kvtier.EngineMemory.paged(ns, pages=4) as mem:
                region = cl.register(ns, mem)
                self.assertEqual(cl.save(ns, region, ns.prefix_keys(prefix), range(3)).wait(), 3)
        self.assertEqual(c.get_num_new_matched_tokens(Req("r", prefix + [1]), 0),
                         (3 * BT, False))
        self.assertEqual(c.stats["connects"], 2)
        c.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
