# SPDX-License-Identifier: Apache-2.0
"""A small decoder-only transformer in PyTorch, Llama architecture: RMSNorm,
rotary positions, grouped-query attention, SwiGLU; Qwen3's per-head q/k
RMSNorm when the config says model_type "qwen3". Shapes come from a Hugging
Face config.json; weights are random from a seed (no checkpoint is read), so
the model computes real attention over real KV at a real model's shapes.

Attention reads keys and values from a paged KV cache,
[layers][K,V][pages][block_tokens][kv_heads][head_dim], through a block
table. Compute is float32 on the CPU; the cache holds the config's
torch_dtype (bf16 for the shipped configs), so the KV bytes per token are
the model's.

Bitwise reproducibility: a token's KV and logits depend only on the tokens
before it and on where chunks begin, never on what else a chunk holds.
Every op is row-wise (projections, norms, rotary, MLP) or reduces in a fixed
order: attention walks the context in fixed tiles of tile_tokens positions
aligned to position 0, each tile the same shape whatever the context length
(pages past the context read as a zero page), and merges them with an online
softmax in tile order. A tile wholly after a query contributes exactly
nothing (its weights are exp(-inf) = 0), so a chunk that runs further does not
change earlier rows. Run with a fixed thread count (torch.set_num_threads).
"""

import json
import math
import os

import torch

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
KV_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def dtype_bytes(dtype):
    return torch.tensor([], dtype=dtype).element_size()


class Config:
    """The shapes of a model, read from a Hugging Face config.json."""

    def __init__(self, d, name):
        def need(key):
            if key not in d:
                raise ValueError("config %s: no %s" % (name, key))
            return int(d[key])

        self.name = name
        self.model_type = d.get("model_type", "llama")
        self.hidden = need("hidden_size")
        self.layers = need("num_hidden_layers")
        self.heads = need("num_attention_heads")
        self.kv_heads = int(d.get("num_key_value_heads") or self.heads)
        self.head_dim = int(d.get("head_dim") or self.hidden // self.heads)
        self.intermediate = need("intermediate_size")
        self.vocab = need("vocab_size")
        self.eps = float(d.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(d.get("rope_theta", 10000.0))
        self.tie_embeddings = bool(d.get("tie_word_embeddings", False))
        self.qk_norm = self.model_type.startswith("qwen3")
        dtype = d.get("torch_dtype", "bfloat16")
        if dtype not in _DTYPES:
            raise ValueError("config %s: torch_dtype %s not supported" % (name, dtype))
        self.kv_dtype = _DTYPES[dtype]
        if self.heads % self.kv_heads:
            raise ValueError("config %s: heads not a multiple of kv heads" % name)
        if self.head_dim % 2:
            raise ValueError("config %s: rotary positions need an even head_dim" % name)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            d = json.load(f)
        d = d.get("text_config", d)
        return cls(d, os.path.splitext(os.path.basename(path))[0])

    @property
    def kv_bytes_per_token(self):
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes(self.kv_dtype)


class Weights:
    """Random weights from a seed, stored [in, out] so x @ W needs no transpose.
    Scaled by 1/sqrt(fan_in) so activations stay finite through the layers."""

    def __init__(self, cfg, seed):
        g = torch.Generator().manual_seed(seed)

        def rand(rows, cols):
            return torch.randn(rows, cols, generator=g) / math.sqrt(rows)

        h, hd = cfg.hidden, cfg.head_dim
        qkv = (cfg.heads + 2 * cfg.kv_heads) * hd
        self.embed = torch.randn(cfg.vocab, h, generator=g)
        self.layers = []
        for _ in range(cfg.layers):
            self.layers.append({
                "attn_norm": torch.ones(h),
                "wqkv": rand(h, qkv),
                "q_norm": torch.ones(hd),
                "k_norm": torch.ones(hd),
                "wo": rand(cfg.heads * hd, h),
                "mlp_norm": torch.ones(h),
                "w_gate_up": rand(h, 2 * cfg.intermediate),
                "w_down": rand(cfg.intermediate, h),
            })
        self.final_norm = torch.ones(h)
        # the head as [hidden, vocab]: the embedding's transpose when tied
        self.head = self.embed.t() if cfg.tie_embeddings else rand(h, cfg.vocab)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate(x, cos, sin):
    """Rotary positions, the half-split convention: x [rows, heads, hd]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Model:
    """Forward passes over a paged KV cache.

    kv is the cache tensor [layers, 2, pages, block_tokens, kv_heads, head_dim];
    zero_page a page index that always holds zeros (never in a block table).
    """

    def __init__(self, cfg, weights, kv, block_tokens, zero_page, tile_tokens=256):
        if tile_tokens % block_tokens:
            raise ValueError("tile_tokens must be a multiple of block_tokens")
        self.cfg = cfg
        self.w = weights
        self.kv = kv
        self.bt = block_tokens
        self.zero_page = zero_page
        self.tile = tile_tokens
        hd = cfg.head_dim
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.scale = 1.0 / math.sqrt(hd)

    def _rope(self, positions):
        ang = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        cos, sin = torch.cos(ang), torch.sin(ang)
        return cos[:, None, :], sin[:, None, :]

    def _tile_pages(self, block_table, t, n_blocks):
        """Page ids of tile t: the table's pages, the zero page past n_blocks."""
        per = self.tile // self.bt
        ids = [block_table[b] if b < n_blocks else self.zero_page
               for b in range(t * per, (t + 1) * per)]
        return torch.tensor(ids, dtype=torch.long)

    def _attention(self, layer, q, block_table, start, end):
        """q [rows, heads, hd] at positions start.. (rows past end are padding);
        keys and values of positions [0, end) from the cache."""
        cfg = self.cfg
        rows = q.shape[0]
        kvh, g, hd = cfg.kv_heads, cfg.heads // cfg.kv_heads, cfg.head_dim
        # [kv_heads, g*rows, hd]: the query heads sharing a KV head side by side
        qg = q.reshape(rows, kvh, g, hd).permute(1, 2, 0, 3).reshape(kvh, g * rows, hd)
        qpos = (start + torch.arange(rows)).repeat(g)[:, None]
        n_blocks = (end + self.bt - 1) // self.bt
        kc, vc = self.kv[layer, 0], self.kv[layer, 1]
        m = torch.full((kvh, g * rows, 1), -math.inf)
        den = torch.zeros(kvh, g * rows, 1)
        acc = torch.zeros(kvh, g * rows, hd)
        for t in range((end + self.tile - 1) // self.tile):
            pages = self._tile_pages(block_table, t, n_blocks)
            k = kc.index_select(0, pages).reshape(self.tile, kvh, hd).to(torch.float32)
            v = vc.index_select(0, pages).reshape(self.tile, kvh, hd).to(torch.float32)
            s = torch.bmm(qg, k.permute(1, 2, 0))
            if (t + 1) * self.tile > start:
                kpos = (t * self.tile + torch.arange(self.tile))[None, :]
                s.masked_fill_((kpos > qpos) | (kpos >= end), -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            corr = torch.exp(m - m_new)
            den = den * corr + p.sum(-1, keepdim=True)
            acc = acc * corr + torch.bmm(p, v.permute(1, 0, 2))
            m = m_new
        out = acc / den
        return out.reshape(kvh, g, rows, hd).permute(2, 0, 1, 3).reshape(rows, cfg.heads * hd)

    def forward(self, tokens, start, n_valid, block_table, before_attention=None):
        """Compute positions [start, start + n_valid) of a sequence whose KV for
        [0, start) is in the cache at block_table's pages; write their KV into
        the cache and return the hidden state of the last one. tokens may be
        longer than n_valid (padding rows, computed and thrown away).
        before_attention(layer), when given, runs before a layer reads the
        cache (a load can fill the earlier positions' pages until then); it
        returns False to abandon the pass (None is returned)."""
        cfg, bt = self.cfg, self.bt
        rows = len(tokens)
        end = start + n_valid
        hd, kvh, h = cfg.head_dim, cfg.kv_heads, cfg.heads
        pos = start + torch.arange(rows)
        cos, sin = self._rope(pos)
        # where the valid rows' KV goes: page * block_tokens + slot
        vpos = pos[:n_valid]
        table = torch.tensor(block_table, dtype=torch.long)
        dst = table[vpos // bt] * bt + vpos % bt
        x = self.w.embed.index_select(0, torch.as_tensor(tokens, dtype=torch.long))
        for layer, lw in enumerate(self.w.layers):
            a = rms_norm(x, lw["attn_norm"], cfg.eps)
            qkv = a @ lw["wqkv"]
            q = qkv[:, :h * hd].reshape(rows, h, hd)
            k = qkv[:, h * hd:(h + kvh) * hd].reshape(rows, kvh, hd)
            v = qkv[:, (h + kvh) * hd:].reshape(rows, kvh, hd)
            if cfg.qk_norm:
                q = rms_norm(q, lw["q_norm"], cfg.eps)
                k = rms_norm(k, lw["k_norm"], cfg.eps)
            q = rotate(q, cos, sin) * self.scale
            k = rotate(k, cos, sin)
            flat = self.kv[layer].view(2, -1, kvh, hd)
            flat[0].index_copy_(0, dst, k[:n_valid].to(cfg.kv_dtype))
            flat[1].index_copy_(0, dst, v[:n_valid].to(cfg.kv_dtype))
            if before_attention is not None and before_attention(layer) is False:
                return None
            x = x + self._attention(layer, q, block_table, start, end) @ lw["wo"]
            a = rms_norm(x, lw["mlp_norm"], cfg.eps)
            gu = a @ lw["w_gate_up"]
            gate, up = gu[:, :cfg.intermediate], gu[:, cfg.intermediate:]
            x = x + (torch.nn.functional.silu(gate) * up) @ lw["w_down"]
        return x[n_valid - 1]

    def logits(self, hidden):
        """Logits of one position's final hidden state, [vocab] float32."""
        return rms_norm(hidden[None, :], self.w.final_norm, self.cfg.eps)[0] @ self.w.head
