#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kvtier's SGLang HiCache storage backend (kvtier.sglang) driven by SGLang's
own code on CPU, against a real kvtierd:

- SGLang's StorageBackendFactory loads it as the "dynamic" backend from the
  extra config (module and class), as --hicache-storage-backend dynamic does;
- SGLang's host KV pools (MHATokenToKVPoolHost, MLATokenToKVPoolHost) over
  device pools on CPU, in the three layouts (layer_first, page_first,
  page_first_direct);
- the HiCache controller's own methods (HiCacheController._page_backup,
  _storage_hit_query, _page_transfer, with the zero-copy page functions
  that "interface_v1" selects) call the backend, with the page hashes
  SGLang's own hash function gives a prompt's tokens: backup from one
  engine's host pool, prefetch into another's (an empty one), byte for byte;
- kvtierd restarted between backup and prefetch; ranks and layouts that
  never share a key; MLA's one copy per page;
- failures: kvtierd down at start, SIGKILLed in the middle of a prefetch, a
  wrong token: misses and failed pages, one warning naming the socket, no
  exception into SGLang.

Needs build/venv-sglang (scripts/sglang-venv.sh): exits 77 when it cannot
be made. Runs itself again under that venv's interpreter."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.environ.get("KVT_SGLANG_VENV") or os.path.join(ROOT, "build", "venv-sglang")

if os.environ.get("KVT_SGLANG_CHILD") != "1":
    rc = subprocess.call(["sh", os.path.join(ROOT, "scripts", "sglang-venv.sh"), VENV])
    if rc:
        print("SKIP: no SGLang venv (scripts/sglang-venv.sh exited %d)" % rc, file=sys.stderr)
        sys.exit(77 if rc == 77 else rc)
    env = dict(os.environ, KVT_SGLANG_CHILD="1")
    env.pop("LD_PRELOAD", None)
    py = os.path.join(VENV, "bin", "python")
    os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)

import functools  # noqa: E402
import hashlib  # noqa: E402
import logging  # noqa: E402
import queue  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
import unittest  # noqa: E402
import warnings  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "python"))
warnings.filterwarnings("ignore")
os.chdir("/")       # SGLang's imports must not find this checkout's files

import torch  # noqa: E402
from sglang.srt.managers.cache_controller import (HiCacheController,  # noqa: E402
                                                  PrefetchOperation, StorageOperation)
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage import StorageBackendFactory  # noqa: E402
from sglang.srt.mem_cache.utils import get_hash_str  # noqa: E402

import kvtier  # noqa: E402
from kvtier.daemon import Daemon  # noqa: E402
from kvtier.sglang import KvtierHiCacheStorage, model_id, page_key  # noqa: E402

P = 4               # tokens a page
LAYERS = 3
TOKENS = 1024       # device pool; the host pools hold twice that
LAYOUTS = ("layer_first", "page_first", "page_first_direct")
PROMPT = ("kvtier keeps the KV cache of long shared prefixes in DRAM and on SSD, "
          "so that an engine loads them instead of computing them again.")


def prompt_tokens(pages):
    """Token ids of a prompt, pages * P of them (its UTF-8 bytes, repeated)."""
    ids = list(PROMPT.encode())
    while len(ids) < pages * P:
        ids += ids
    return ids[:pages * P]


def host_pool(mla, layout):
    """SGLang's host KV pool over a device pool on CPU (bf16)."""
    if mla:
        dev = MLATokenToKVPool(TOKENS, P, torch.bfloat16, 16, 8, LAYERS, "cpu", False)
        return MLATokenToKVPoolHost(
            dev.get_device_pool_infos()[0].buffer_info, 2, 0, P, layout, pin_memory=False,
            device="cpu", device_capacity_tokens=dev.size, start_layer=dev.start_layer,
            end_layer=dev.end_layer, target_layer_num=dev.layer_num)
    dev = MHATokenToKVPool(TOKENS, P, torch.bfloat16, 2, 8, LAYERS, "cpu", False)
    return MHATokenToKVPoolHost(
        dev.get_device_pool_infos()[0].buffer_info, 2, 0, P, layout, pin_memory=False,
        device="cpu", device_capacity_tokens=dev.size, start_layer=dev.start_layer,
        end_layer=dev.end_layer, write_back_staging=dev.hicache_write_back_staging)


def fill(pool, seed):
    g = torch.Generator().manual_seed(seed)
    b = pool.kv_buffer.view(torch.int16)
    b.copy_(torch.randint(-32768, 32767, b.shape, dtype=torch.int16, generator=g))


def page_bytes(pool, index):
    """The page at token index, as SGLang's own get_data_page reads it."""
    return pool.get_data_page(index, flat=True).view(torch.int16)


class Engine:
    """One engine's side: its host pool, the backend SGLang's factory made
    for it, and a stand-in for the HiCache controller whose storage methods
    are SGLang's own (bound to it), with the zero-copy page functions."""

    def __init__(self, socket, layout="page_first", mla=False, tp=(0, 1), token=None,
                 model="kvtier-test/tiny", extra=None):
        self.pool = host_pool(mla, layout)
        cfg = dict(backend_name="kvtier", module_path="kvtier.sglang",
                   class_name="KvtierHiCacheStorage", interface_v1=1, socket=socket,
                   reconnect_s=0.2, timeout_s=10)
        if token is not None:
            cfg["token"] = token
        cfg.update(extra or {})
        self.config = HiCacheStorageConfig(
            tp_rank=tp[0], tp_size=tp[1], pp_rank=0, pp_size=1, attn_cp_rank=0,
            attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=False,
            is_page_first_layout=layout != "layer_first", model_name=model, extra_config=cfg)
        # what attach_storage_backend does, in its order
        self.backend = StorageBackendFactory.create_backend("dynamic", self.config, self.pool)
        self.backend.register_mem_pool_host(self.pool)
        self.backend.on_host_pools_registered()
        c = self.ctl = types.SimpleNamespace(storage_backend=self.backend, page_size=P,
                                             prefetch_sync_queue=queue.Queue())
        c.page_get_func = functools.partial(HiCacheController._page_get_zero_copy, c)
        c.page_set_func = functools.partial(HiCacheController._page_set_zero_copy, c)
        c._page_transfer_kv_batch = functools.partial(HiCacheController._page_transfer_kv_batch,
                                                      c)

    def backup(self, tokens, host_indices):
        """SGLang's _page_backup of the pages at host_indices as tokens';
        returns the tokens it stored."""
        op = StorageOperation(host_indices, tokens, hash_value=get_hash_str(tokens, None, P))
        HiCacheController._page_backup(self.ctl, op)
        return op.completed_tokens

    def prefetch(self, tokens, host_indices):
        """SGLang's hit query and page transfer into host_indices; returns
        (tokens the query found, pages transferred)."""
        op = PrefetchOperation("req", tokens, None, None)
        hashes, hit = HiCacheController._storage_hit_query(self.ctl, op)
        if hashes != get_hash_str(tokens, None, P)[:len(hashes)]:
            raise AssertionError("SGLang hashed the prompt other than get_hash_str")
        op.hash_value = hashes
        op.host_indices = host_indices[:len(hashes) * P]
        return hit, HiCacheController._page_transfer(self.ctl, op)

    def close(self):
        self.backend.close()


def indices(first_page, pages):
    return torch.arange(first_page * P, (first_page + pages) * P, dtype=torch.int64)


class SglangStorageTest(unittest.TestCase):

    def setUp(self):
        self.d = Daemon(dram="32M", ssd="64M")
        self.engines = []

    def tearDown(self):
        for e in self.engines:
            e.close()
        if self.d.running:
            self.d.proc.send_signal(signal.SIGCONT)
        self.d.remove()

    def engine(self, **kw):
        kw.setdefault("socket", self.d.socket)
        e = Engine(**kw)
        self.engines.append(e)
        return e

    def assert_pages_equal(self, a, a_first, b, b_first, pages):
        wrong = sum(int((page_bytes(a.pool, (a_first + i) * P) !=
                         page_bytes(b.pool, (b_first + i) * P)).sum()) for i in range(pages))
        self.assertEqual(wrong, 0, "wrong bytes")

    def test_backup_and_prefetch_every_layout(self):
        """MHA and MLA pools, each layout: one engine backs up a prompt's
        pages (through two of SGLang's storage batches of 128), another with
        an empty pool finds them all and reads them into other pages; a
        prompt that diverges after 5 pages finds those 5."""
        pages = 160
        tokens = prompt_tokens(pages)
        for mla in (False, True):
            for layout in LAYOUTS:
                with self.subTest(mla=mla, layout=layout):
                    a = self.engine(layout=layout, mla=mla)
                    fill(a.pool, seed=len(self.engines))
                    self.assertEqual(a.backup(tokens, indices(1, pages)), pages * P)
                    b = self.engine(layout=layout, mla=mla)
                    self.assertEqual(b.prefetch(tokens, indices(200, pages)),
                                     (pages * P, pages))
                    self.assert_pages_equal(a, 1, b, 200, pages)
                    other = tokens[:5 * P] + [t ^ 1 for t in tokens[5 * P:]]
                    self.assertEqual(b.prefetch(other, indices(300, pages)), (5 * P, 5))
                    self.assertEqual(a.backend.conn.stats["connects"], 1)

    def test_restart_between_backup_and_prefetch(self):
        """kvtierd stopped and started again on its directory between the
        backup and the prefetch: every page comes back, byte for byte, over
        the same backend (it reconnects and registers the pool again)."""
        pages = 40
        tokens = prompt_tokens(pages)
        a = self.engine(layout="layer_first")
        fill(a.pool, 7)
        self.assertEqual(a.backup(tokens, indices(3, pages)), pages * P)
        self.assertEqual(self.d.stop(), 0)
        self.d.start()
        self.assertEqual(a.prefetch(tokens, indices(100, pages)), (pages * P, pages))
        self.assert_pages_equal(a, 3, a, 100, pages)
        b = self.engine(layout="layer_first")
        self.assertEqual(b.prefetch(tokens, indices(50, pages)), (pages * P, pages))
        self.assert_pages_equal(a, 3, b, 50, pages)

    def test_ranks_and_layouts_share_no_key(self):
        """MHA: rank 0 of 2's pages are not rank 1's, nor another layout's,
        nor another TP size's; MLA: one copy a page, found by every rank, and
        a rank other than the writer stores nothing."""
        tokens = prompt_tokens(8)
        r0 = self.engine(layout="page_first", tp=(0, 2))
        fill(r0.pool, 1)
        self.assertEqual(r0.backup(tokens, indices(0, 8)), 8 * P)
        self.assertEqual(r0.prefetch(tokens, indices(20, 8))[0], 8 * P)
        for kw in (dict(layout="page_first", tp=(1, 2)), dict(layout="page_first_direct",
                   tp=(0, 2)), dict(layout="layer_first", tp=(0, 2)),
                   dict(layout="page_first", tp=(0, 1))):
            with self.subTest(**kw):
                self.assertEqual(self.engine(**kw).prefetch(tokens, indices(0, 8)), (0, 0))
        m0 = self.engine(layout="page_first", mla=True, tp=(0, 2))
        m1 = self.engine(layout="page_first", mla=True, tp=(1, 2))
        fill(m1.pool, 2)
        self.assertEqual(m1.backup(tokens, indices(0, 8)), 8 * P)    # told done
        self.assertEqual(m0.prefetch(tokens, indices(0, 8)), (0, 0))  # yet nothing stored
        fill(m0.pool, 3)
        self.assertEqual(m0.backup(tokens, indices(0, 8)), 8 * P)
        self.assertEqual(m1.prefetch(tokens, indices(10, 8)), (8 * P, 8))
        self.assert_pages_equal(m0, 0, m1, 10, 8)
        m8 = self.engine(layout="page_first", mla=True, tp=(0, 8))
        self.assertEqual(m8.prefetch(tokens, indices(10, 8)), (8 * P, 8))

    def test_daemon_down_at_start(self):
        """No kvtierd when the backend starts: prefetches miss, backups fail,
        no exception, one warning naming the socket; once kvtierd is there
        the same backend stores and finds pages."""
        self.d.stop()
        tokens = prompt_tokens(6)
        with self.assertLogs("kvtier", level="WARNING") as logs:
            e = self.engine(layout="page_first_direct")
            fill(e.pool, 4)
            for _ in range(3):
                self.assertEqual(e.prefetch(tokens, indices(0, 6)), (0, 0))
                self.assertEqual(e.backup(tokens, indices(0, 6)), 0)
        warned = [r for r in logs.output if "WARNING" in r]
        self.assertEqual(len(warned), 1, logs.output)
        self.assertIn(self.d.socket, warned[0])
        self.d.start()
        time.sleep(0.3)
        self.assertEqual(e.backup(tokens, indices(0, 6)), 6 * P)
        self.assertEqual(e.prefetch(tokens, indices(10, 6)), (6 * P, 6))
        self.assert_pages_equal(e, 0, e, 10, 6)

    def test_daemon_killed_in_a_prefetch(self):
        """kvtierd SIGKILLed while a prefetch waits for its LOAD: the
        transfer reports no page, no exception, the socket named in a
        warning; after a restart the pages (on SSD) load again."""
        pages = 24
        tokens = prompt_tokens(pages)
        e = self.engine(layout="page_first")
        fill(e.pool, 5)
        self.assertEqual(e.backup(tokens, indices(0, pages)), pages * P)
        self.assertEqual(self.d.stop(), 0)      # written down to SSD
        self.d.start()
        out = {}
        op = PrefetchOperation("req", tokens, None, None)
        hashes, hit = HiCacheController._storage_hit_query(e.ctl, op)
        self.assertEqual(hit, pages * P)
        op.hash_value, op.host_indices = hashes, indices(40, pages)
        with self.assertLogs("kvtier", level="WARNING") as logs:
            self.d.proc.send_signal(signal.SIGSTOP)
            t = threading.Thread(target=lambda: out.setdefault(
                "pages", HiCacheController._page_transfer(e.ctl, op)))
            t.start()
            time.sleep(0.5)                     # the LOAD is sent, unanswered
            self.assertTrue(t.is_alive())
            self.d.stop(signal.SIGKILL)
            t.join(30)
        self.assertEqual(out.get("pages"), 0)
        # the load's reset, and the socket named once when no new connection comes
        self.assertEqual(len([r for r in logs.output if self.d.socket in r]), 1, logs.output)
        self.assertLessEqual(len(logs.output), 2, logs.output)
        self.d.start()
        time.sleep(0.3)                         # reconnect_s after the last try
        self.assertEqual(e.prefetch(tokens, indices(80, pages)), (pages * P, pages))
        self.assert_pages_equal(e, 0, e, 80, pages)

    def test_wrong_token(self):
        """A kvtierd with tenants, and a backend with a token it does not
        know: misses and failed backups, one warning naming the socket."""
        self.d.stop()
        self.d.args += ["--tenant", "a:tok-a"]
        self.d.start()
        tokens = prompt_tokens(4)
        with self.assertLogs("kvtier", level="WARNING") as logs:
            e = self.engine(layout="layer_first", token="tok-wrong")
            fill(e.pool, 6)
            for _ in range(3):
                self.assertEqual(e.backup(tokens, indices(0, 4)), 0)
                self.assertEqual(e.prefetch(tokens, indices(0, 4)), (0, 0))
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertIn(self.d.socket, logs.output[0])
        good = self.engine(layout="layer_first", token="tok-a")
        fill(good.pool, 6)
        self.assertEqual(good.backup(tokens, indices(0, 4)), 4 * P)

    def test_factory_refuses_the_copying_interface(self):
        """Without "interface_v1" SGLang would pass page copies: the factory
        raises at attach, naming the setting; the copying calls are never
        served."""
        with self.assertRaisesRegex(ValueError, "interface_v1"):
            Engine(self.d.socket, extra=dict(interface_v1=0))
        e = self.engine()
        self.assertIsInstance(e.backend, KvtierHiCacheStorage)
        self.assertFalse(e.backend.batch_set(["k"], [torch.zeros(4)]))
        self.assertEqual(e.backend.batch_get(["k"], [torch.zeros(4)]), [None])
        self.assertIsNone(e.backend.get_stats())
        self.assertFalse(e.backend.clear())
        # host indices short of the pages: failed pages, not an exception
        self.assertEqual(e.backend.batch_set_v1(["a", "b"], indices(0, 1)), [False, False])
        self.assertEqual(e.backend.batch_get_v1(["a", "b"], indices(0, 1)), [False, False])

    def test_keys_and_model_ids(self):
        """A key is the first 16 bytes of SGLang's SHA-256 page hash (a
        digest of any other string); model ids fit kvtierd's 63 bytes, and
        two long model names keep apart."""
        h = get_hash_str(prompt_tokens(1), None, P)[0]
        self.assertEqual(page_key(h), bytes.fromhex(h)[:16])
        self.assertEqual(page_key("x.mamba"), hashlib.sha256(b"x.mamba").digest()[:16])
        # a hash of another type is keyed too, never an exception into SGLang
        self.assertEqual(page_key(12345), hashlib.sha256(b"12345").digest()[:16])
        self.assertEqual(model_id("org/m", "page_first", 64), "sglang:page_first:p64:org-m")
        a = model_id("org/" + "a" * 80 + "1", "page_first_direct", 64, pp=(1, 2))
        b = model_id("org/" + "a" * 80 + "2", "page_first_direct", 64, pp=(1, 2))
        self.assertLessEqual(len(a), 63)
        self.assertNotEqual(a, b)
        self.assertTrue(a.startswith("sglang:page_first_direct:p64:pp1/2:org-aaa"), a)

    def test_pool_moved_into_registered_memory(self):
        """register_mem_pool_host moves the pool's bytes into the memfd
        kvtierd maps: the pool's tensor, the views SGLang took of it and its
        pointer tables all name the memfd's pages, and what was in the pool
        is still there."""
        pool = host_pool(False, "layer_first")
        fill(pool, 9)
        before = pool.kv_buffer.clone()
        old_ptrs = pool.k_data_ptrs.clone()
        old_base = pool.kv_buffer.data_ptr()
        refs = list(pool.k_data_refs)
        b = KvtierHiCacheStorage(Engine(self.d.socket).config)
        b.register_mem_pool_host(pool)
        self.engines.append(types.SimpleNamespace(close=b.close))
        mem = torch.frombuffer(b._mem.buf, dtype=torch.uint8)
        self.assertEqual(pool.kv_buffer.data_ptr(), mem.data_ptr())
        self.assertTrue(torch.equal(pool.kv_buffer.view(torch.int16), before.view(torch.int16)))
        shift = pool.kv_buffer.data_ptr() - old_base
        self.assertEqual(pool.k_data_ptrs.view(torch.int64).tolist(),
                         [p + shift for p in old_ptrs.view(torch.int64).tolist()])
        self.assertEqual([r.data_ptr() for r in refs], pool.k_data_ptrs.view(torch.int64).tolist())


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    unittest.main(verbosity=2)
