#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Models whose KV kvtier cannot serve are refused by name when vLLM makes
the connector, before any engine work: MLA (a DeepSeek-V2 config), hybrids
of attention kinds (two KV cache groups: full attention beside sliding
window, or beside a Mamba state), sliding-window attention, and KV dtypes
kvtier does not store (fp8). With on_unsupported "warn" the connector is
made, off: it matches, loads and saves nothing. A plain Llama is served.

The connector is made as vLLM makes it (KVConnectorFactory-style: the
class with a VllmConfig, a role and a KVCacheConfig), from vLLM's own
config classes; no engine runs. Runs itself in the vLLM venv
(scripts/vllm-venv.sh; exit 77 when it cannot be made)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

MLA_CONFIG = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
    "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
    "kv_lora_rank": 64, "q_lora_rank": None, "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32, "v_head_dim": 32, "first_k_dense_replace": 2,
    "vocab_size": 2048, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "torch_dtype": "float32", "tie_word_embeddings": False}


class VllmModelsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(dir=os.environ.get("KVT_TEST_TMPDIR"))
        cls.mla = os.path.join(cls.tmp.name, "tiny-mla")
        os.makedirs(cls.mla)
        with open(os.path.join(cls.mla, "config.json"), "w") as f:
            json.dump(MLA_CONFIG, f)
        # no daemon: a connector that cannot reach one still starts (it
        # warns and retries); the refusals come before any connection
        cls.socket = os.path.join(cls.tmp.name, "absent.sock")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def make(self, model, groups=None, cache_dtype="auto", **extra):
        import torch
        from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
        from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
        from kvtier.vllm import KvtierConnector

        mc = ModelConfig(model=model, skip_tokenizer_init=True, dtype="float32")
        kt = KVTransferConfig(kv_connector="KvtierConnector",
                              kv_connector_module_path="kvtier.vllm", kv_role="kv_both",
                              kv_connector_extra_config=dict(socket=self.socket,
                                                             reconnect_s=60, **extra))
        cfg = VllmConfig(model_config=mc, kv_transfer_config=kt,
                         cache_config=CacheConfig(block_size=32, cache_dtype=cache_dtype))
        kcc = None
        if groups is not None:
            kcc = KVCacheConfig(num_blocks=16, kv_cache_tensors=[], kv_cache_groups=[
                KVCacheGroupSpec(["model.layers.%d.self_attn.attn" % i], spec)
                for i, spec in enumerate(groups(torch))])
        return KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc)

    def refused(self, model, want, **kw):
        with self.assertRaises(ValueError) as cm:
            self.make(model, **kw)
        self.assertIn("kvtier cannot serve this model: " + want, str(cm.exception))
        self.assertIn('"on_unsupported": "warn"', str(cm.exception))

    @staticmethod
    def full(torch):
        from vllm.v1.kv_cache_interface import FullAttentionSpec
        return FullAttentionSpec(block_size=32, num_kv_heads=2, head_size=32,
                                 dtype=torch.float32)

    @staticmethod
    def window(torch):
        from vllm.v1.kv_cache_interface import SlidingWindowSpec
        return SlidingWindowSpec(block_size=32, num_kv_heads=2, head_size=32,
                                 dtype=torch.float32, sliding_window=128)

    @staticmethod
    def mamba(torch):
        from vllm.v1.kv_cache_interface import MambaSpec
        return MambaSpec(block_size=32, shapes=((4, 8),), dtypes=(torch.float32,))

    def test_a_plain_llama_is_served(self):
        c = self.make(os.path.join(HERE, "tiny-llama"), groups=lambda t: [self.full(t)])
        self.assertEqual(type(c.kvtier).__name__, "EngineConnector")
        c.shutdown()

    def test_mla_is_refused_by_name(self):
        self.refused(self.mla, "MLA attention")

    def test_a_hybrid_of_attention_kinds_is_refused_by_name(self):
        llama = os.path.join(HERE, "tiny-llama")
        self.refused(llama, "2 KV cache groups (FullAttentionSpec, SlidingWindowSpec)",
                     groups=lambda t: [self.full(t), self.window(t)])
        self.refused(llama, "2 KV cache groups (FullAttentionSpec, MambaSpec)",
                     groups=lambda t: [self.full(t), self.mamba(t)])

    def test_sliding_window_is_refused_by_name(self):
        self.refused(os.path.join(HERE, "tiny-llama"), "sliding-window or local attention "
                     "(SlidingWindowSpec)", groups=lambda t: [self.window(t)])

    def test_an_fp8_kv_cache_is_refused_by_name(self):
        self.refused(os.path.join(HERE, "tiny-llama"), "KV dtype fp8",
                     cache_dtype="fp8")

    def test_a_misspelt_choice_is_refused(self):
        with self.assertRaises(ValueError) as cm:
            self.make(os.path.join(HERE, "tiny-llama"), on_unsupported="warning")
        self.assertIn('on_unsupported is "error" (default) or "warn"', str(cm.exception))

    def test_warn_makes_a_connector_that_does_nothing(self):
        c = self.make(self.mla, on_unsupported="warn")
        req = type("Req", (), {"request_id": "r", "prompt_token_ids": list(range(200))})()
        self.assertEqual(c.get_num_new_matched_tokens(req, 0), (0, False))
        self.assertEqual(c.request_finished(req, []), (False, None))
        self.assertEqual(c.get_block_ids_with_load_errors(), set())
        c.shutdown()


if __name__ == "__main__":
    try:
        import vllm  # noqa: F401
    except ImportError:
        # the system interpreter: run again in the vLLM venv
        from vllm_env import PYTHON, engine_env, ensure_venv
        rc = ensure_venv()
        if rc:
            sys.exit(rc)
        sys.exit(subprocess.call([PYTHON] + sys.argv, env=engine_env()))
    unittest.main(verbosity=2)
