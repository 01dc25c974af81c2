#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A tiny Llama whose answers depend on every K and V: the config of
tests/vllm/tiny-llama with weights drawn from a seed, written as
safetensors into a model directory vLLM loads like any checkpoint.

    python seeded_model.py OUT_DIR SEED      (the vLLM venv's python)

vLLM's dummy weights (uniform in +-1e-3) give near-flat logits in which the
KV hardly counts, and weights changed in the live model after loading miss
the copies vLLM's CPU kernels pack at load time: only a checkpoint reaches
every layer, and vLLM shards it across tensor-parallel ranks as it would a
real one, so each rank's heads differ. Normal weights of std 0.2, norms 1.
Written to a temporary directory, then renamed: engines that start at once
find either nothing or the whole model."""

import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "tiny-llama", "config.json")
STD = 0.2


def shapes(cfg):
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,),
           "lm_head.weight": (vocab, h)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out.update({p + "input_layernorm.weight": (h,),
                    p + "post_attention_layernorm.weight": (h,),
                    p + "self_attn.q_proj.weight": (q, h),
                    p + "self_attn.k_proj.weight": (kv, h),
                    p + "self_attn.v_proj.weight": (kv, h),
                    p + "self_attn.o_proj.weight": (h, q),
                    p + "mlp.gate_proj.weight": (inter, h),
                    p + "mlp.up_proj.weight": (inter, h),
                    p + "mlp.down_proj.weight": (h, inter)})
    return out


def write(out_dir, seed):
    with open(CONFIG) as f:
        cfg = json.load(f)
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in sorted(shapes(cfg).items()):
        if name.endswith("norm.weight"):
            weights[name] = torch.ones(shape)
        else:
            weights[name] = torch.randn(shape, generator=g) * STD
    parent = os.path.dirname(os.path.abspath(out_dir))
    tmp = tempfile.mkdtemp(prefix=".seeded-", dir=parent)
    shutil.copy(CONFIG, os.path.join(tmp, "config.json"))
    save_file(weights, os.path.join(tmp, "model.safetensors"))
    try:
        os.rename(tmp, out_dir)
    except OSError:
        shutil.rmtree(tmp)  # another engine made it first
        if not os.path.exists(os.path.join(out_dir, "model.safetensors")):
            raise


if __name__ == "__main__":
    write(sys.argv[1], int(sys.argv[2]))
