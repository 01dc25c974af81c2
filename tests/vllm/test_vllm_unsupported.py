#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A KV layout kvtier cannot serve stops vLLM's start with an error that
says what differs, instead of a vLLM that serves without kvtier while the
operator believes it loads prefixes; "on_unsupported": "warn" in the
connector's extra config is the way to serve anyway (a misspelt choice:
test_vllm_models).

The layout: vLLM's KV cache in memory kvtierd cannot map (the test's
connector, kvtier_test_connectors.UnmappedKvtierConnector, leaves the
allocation to vLLM's own allocator).

Needs the vLLM venv (scripts/vllm-venv.sh): exits 77 when it cannot be made."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from vllm_env import ensure_venv, Engine  # noqa: E402

from kvtier.daemon import Daemon  # noqa: E402


class VllmUnsupportedLayoutTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(dram="16M")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.remove()

    def connector(self, **extra):
        return {"kv_connector": "UnmappedKvtierConnector",
                "kv_connector_module_path": "kvtier_test_connectors",
                "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                "kv_connector_extra_config": dict(socket=self.daemon.socket, **extra)}

    def test_an_unservable_layout_stops_the_start(self):
        with self.assertRaises(RuntimeError) as cm:
            Engine("unmapped", connector=self.connector()).close()
        self.assertIn("kvtier cannot serve this KV layout: KV buffer not allocated through "
                      "get_mem_pool_context", str(cm.exception))
        self.assertIn('"on_unsupported": "warn"', str(cm.exception))

    def test_warn_serves_without_kvtier(self):
        e = Engine("unmapped-warn", connector=self.connector(on_unsupported="warn"))
        try:
            outs = e.run([list(range(3, 80))], 4)
        finally:
            log = e.close()
        self.assertEqual(len(outs[0]["tokens"]), 4)
        self.assertIn("kvtier off: KV buffer not allocated", log)


if __name__ == "__main__":
    rc = ensure_venv()
    if rc:
        sys.exit(rc)
    unittest.main(verbosity=2)
