# SPDX-License-Identifier: Apache-2.0
"""kvtier as SGLang's HiCache storage backend (the L3 tier under HiCache's
host pool), loaded by SGLang's dynamic backend option:

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.sglang", "class_name": "KvtierHiCacheStorage",
        "interface_v1": 1, "socket": "/run/kvtier/kvtierd.sock"}'

interface_v1 makes SGLang's cache controller call the zero-copy pair
batch_get_v1 / batch_set_v1 with the host pool's page indices: kvtierd
scatters stored pages into the host pool and gathers them from it itself,
no copy in Python. Without it SGLang would hand over page copies, so the
backend refuses to start (a clear error at launch).

The host pool's memory is moved once, at register_mem_pool_host, into a
sealed memfd (the memory kvtierd may map) and registered with kvtierd as
the vLLM connector registers vLLM's KV memory: the storage under the
pool's tensor is swapped for the memfd's pages (its bytes copied first), so
every view SGLang took of the pool sees the new memory, and SGLang's
pointer tables into the pool are moved by the same offset.

Keys are SGLang's page hashes (the first 16 bytes of each SHA-256), in a
kvtierd namespace named by model, layout (layer_first, page_first,
page_first_direct), page size, dtype and TP rank and size, so no two ranks
or layouts share a key. MLA pages are the same on every rank: one copy per
page, in a namespace of rank 0 of 1, written by SGLang's writer rank only.

Failures never reach SGLang as exceptions: a kvtierd that is down, dies in
a transfer or refuses the token makes batch_exists return 0 and the
transfers report their pages as failed (SGLang recomputes them), with one
warning naming the socket per outage; a later call tries again (at most
every reconnect_s seconds) and re-registers the pool.

Extra config keys: socket, token, timeout_s (a transfer's wait, 30),
reconnect_s (5), model (the namespace's model name, default SGLang's
model_name).
"""

import hashlib
import logging
import threading

import torch

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

import kvtier
from kvtier.connector import EngineConnector

log = logging.getLogger("kvtier.sglang")

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
_MODEL_ID_MAX = 63


def page_key(page_hash):
    """kvtier's 16-byte key of one SGLang page hash: the first 16 bytes of
    the SHA-256 it spells in hex, or a digest of any other string."""
    if isinstance(page_hash, (bytes, bytearray)):
        raw = bytes(page_hash)
    else:
        page_hash = str(page_hash)  # whatever SGLang hands over: never raise into it
        try:
            raw = bytes.fromhex(page_hash)
        except ValueError:
            raw = b""
        if len(raw) < kvtier.KEY_BYTES:
            raw = hashlib.sha256(page_hash.encode()).digest()
    return raw[:kvtier.KEY_BYTES]


def model_id(model, layout, page_size, pp=(0, 1), cp=(0, 1)):
    """The namespace's model id (at most 63 bytes): engine, layout, page size,
    pipeline and context shards when split, model name (a digest of it when
    long)."""
    head = "sglang:%s:p%d:" % (layout, page_size)
    for tag, (rank, size) in (("pp", pp), ("cp", cp)):
        if size > 1:
            head += "%s%d/%d:" % (tag, rank, size)
    name = (model or "model").replace("/", "-")
    if len(head) + len(name) > _MODEL_ID_MAX:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = name[:_MODEL_ID_MAX - len(head) - 13] + "#" + digest
    return head + name


class PoolGeometry:
    """How a host pool's pages sit in its buffer, in kvtier's terms: a page
    of kvtier "layer" l of page p at offsets[l] + p*page_stride (bytes from
    the buffer's start), its V at + kv_stride (MHA; 0 for MLA). page_first
    and page_first_direct keep a page's every layer in one run, so they are
    one kvtier layer of layer_num x heads "heads"."""

    def __init__(self, pool):
        kind = type(pool).__name__
        if kind not in ("MHATokenToKVPoolHost", "MLATokenToKVPoolHost"):
            raise ValueError("host pool %s: kvtier serves MHATokenToKVPoolHost and "
                             "MLATokenToKVPoolHost" % kind)
        self.mla = kind == "MLATokenToKVPoolHost"
        self.layout = pool.layout
        if self.layout not in _LAYOUTS:
            raise ValueError("host pool layout %s: kvtier serves %s" %
                             (self.layout, ", ".join(_LAYOUTS)))
        if pool.dtype not in _DTYPES:
            raise ValueError("host pool dtype %s: kvtier serves %s" %
                             (pool.dtype, ", ".join(str(d) for d in _DTYPES)))
        buf = pool.kv_buffer
        if not isinstance(buf, torch.Tensor) or not buf.is_contiguous():
            raise ValueError("host pool buffer is not one contiguous tensor")
        self.dtype = _DTYPES[pool.dtype]
        el = buf.element_size()
        self.page_size = P = pool.page_size
        L = pool.layer_num
        if self.mla:
            heads, dim = 1, pool.kv_cache_dim
        else:
            heads, dim = pool.head_num, pool.head_dim
            if getattr(pool, "v_head_dim", dim) not in (dim, None):
                raise ValueError("K and V of different widths")
        T = heads * dim * el                      # one token of one layer
        self.pages = pool.size // P
        self.kv_stride = 0 if self.mla else buf.stride(0) * el
        self.head_dim = dim
        if self.layout == "layer_first":
            self.layers, self.kv_heads = L, heads
            self.offsets = [l * pool.size * T for l in range(L)]
            self.page_stride = P * T
        elif self.mla:
            # kvtierd's MLA namespaces have one head: a page's layers widen it
            self.layers, self.kv_heads, self.head_dim = 1, 1, L * dim
            self.offsets = [0]
            self.page_stride = P * L * T
        else:
            self.layers, self.kv_heads = 1, L * heads
            self.offsets = [0]
            self.page_stride = P * L * T
        self.page_bytes = P * self.kv_heads * self.head_dim * el


class KvtierHiCacheStorage(HiCacheStorage):
    """SGLang's HiCacheStorage over kvtierd. Built by SGLang's
    StorageBackendFactory as backend_class(storage_config, kwargs)."""

    def __init__(self, storage_config, kwargs=None):
        extra = dict(storage_config.extra_config or {})
        if not int(extra.get("interface_v1", 0)):
            raise ValueError('kvtier: set "interface_v1": 1 in '
                             "--hicache-storage-backend-extra-config (kvtierd moves pages "
                             "into and out of the host pool itself)")
        self.config = storage_config
        self.socket = extra.get("socket")
        self.token = extra.get("token")
        self.timeout_s = float(extra.get("timeout_s", 30.0))
        self.reconnect_s = float(extra.get("reconnect_s", 5.0))
        self.model = extra.get("model") or storage_config.model_name
        self.mem_pool_host = None
        self.geometry = None
        self.conn = None
        self._mem = None            # the memfd under the host pool, for good
        self._lock = threading.Lock()
        self._stats_lock = threading.Lock()  # the controller's threads count at once
        self.stats = dict(exists_calls=0, exists_hits=0, get_pages=0, got_pages=0,
                          set_pages=0, stored_pages=0, failed_calls=0)

    # ---- the host pool, once --------------------------------------------

    def register_mem_pool_host(self, mem_pool_host):
        """Take SGLang's host pool: its memory into a memfd, registered with
        kvtierd (connected now if it is up, else on a later call)."""
        self.mem_pool_host = mem_pool_host
        g = self.geometry = PoolGeometry(mem_pool_host)
        self._mem = _move_into_memfd(mem_pool_host)
        cfg = self.config
        rank, size = (0, 1) if g.mla else (cfg.tp_rank, cfg.tp_size)
        mid = model_id(self.model, g.layout, g.page_size, (cfg.pp_rank, cfg.pp_size),
                       (cfg.attn_cp_rank, cfg.attn_cp_size))
        self.conn = EngineConnector(
            mid, g.layers, g.kv_heads, g.head_dim, g.page_size, kv_dtype=g.dtype,
            socket=self.socket, token=self.token, load_timeout_s=self.timeout_s,
            reconnect_s=self.reconnect_s, use_plan=False, tp_rank=rank, tp_size=size,
            layout="mla" if g.mla else "paged")
        spec = kvtier.RegionParts([kvtier.Part(self._mem.fd, self._mem.nbytes)],
                                  [(0, off) for off in g.offsets], g.pages,
                                  kv_stride=g.kv_stride, page_stride=g.page_stride)
        with self._lock:
            self.conn.register_region(spec, ["kv%d" % i for i in range(g.layers)])

    # ---- what the cache controller calls ---------------------------------

    def _count(self, name, n):
        with self._stats_lock:
            self.stats[name] += n

    def _call(self, what, fn):
        if self.conn is None:
            return None
        with self._lock:
            got = self.conn.call(what, fn)
        if got is None:
            self._count("failed_calls", 1)
        return got

    def batch_exists(self, keys, extra_info=None):
        """How many leading pages of keys kvtierd holds (0 when unreachable)."""
        self._count("exists_calls", 1)
        if not keys:
            return 0
        k = [page_key(h) for h in keys]
        hit = self._call("lookup", lambda c, ns, r: c.lookup(ns, k)[0]) or 0
        self._count("exists_hits", hit)
        return hit

    def exists(self, key):
        return self.batch_exists([key]) == 1

    def _pages(self, n, host_indices):
        """The host pool's page of each key (SGLang passes page_size token
        indices a page, the first of each page-aligned), or None, logged,
        when there are too few."""
        P = self.geometry.page_size if self.geometry else 0
        if not P or len(host_indices) < n * P:
            log.error("kvtier: %d host indices for %d pages of %d tokens", len(host_indices), n, P)
            return None
        firsts = host_indices[0:n * P:P]
        return [int(i) // P for i in (firsts.tolist() if hasattr(firsts, "tolist") else firsts)]

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Pages keys[i] into the host pool at host_indices[i*page_size...]:
        one LOAD, kvtierd writing the pool; True for each page in place (a
        leading run: a LOAD stops at the first miss)."""
        if not keys:
            return []
        k = [page_key(h) for h in keys]
        pages = self._pages(len(k), host_indices)
        if pages is None:
            return [False] * len(k)
        self._count("get_pages", len(k))
        got = self._call("load", lambda c, ns, r: c.load(ns, r, k, pages).wait(
            timeout=self.timeout_s)) or 0
        self._count("got_pages", got)
        return [i < got for i in range(len(k))]

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Store the host pool's pages at host_indices as keys: one SAVE,
        kvtierd gathering from the pool, chained to the page before the
        batch (extra_info.prefix_keys). Pages kvtierd holds already count as
        stored. MLA: the pages of SGLang's writer rank only."""
        if not keys:
            return []
        if self.geometry is not None and self.geometry.mla and \
           not getattr(self.config, "is_storage_writer", self.config.tp_rank == 0):
            return [True] * len(keys)
        k = [page_key(h) for h in keys]
        pages = self._pages(len(k), host_indices)
        if pages is None:
            return [False] * len(k)
        prefix = getattr(extra_info, "prefix_keys", None)
        parent = page_key(prefix[-1]) if prefix else None
        self._count("set_pages", len(k))
        n = self._call("save", lambda c, ns, r: c.save(ns, r, k, pages, parent=parent).wait(
            timeout=self.timeout_s)) or 0
        self._count("stored_pages", n)
        return [i < n for i in range(len(k))]

    # The copying interface (pages handed over as tensors) is what
    # interface_v1 replaces; the controller calls none of it then.

    def get(self, key, target_location=None, target_sizes=None):
        log.debug("kvtier: get without interface_v1 is not served")
        return None

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        return [None] * len(keys)

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return False

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        return False

    def clear(self):
        """Nothing: kvtierd's blocks are shared with other engines and
        outlive this one (kvtier remove, or the daemon's eviction, drops
        them)."""
        return False

    def get_stats(self):
        return None

    def close(self):
        with self._lock:
            if self.conn is not None:
                self.conn.close()


def _move_into_memfd(pool):
    """Move the storage under pool.kv_buffer into a sealed memfd (its bytes
    copied, then the two storages' data swapped, so that every view of the
    pool sees the memfd) and shift the pool's pointer tables (tensors of
    addresses, *_ptrs) by as much. Returns the kvtier.EngineMemory that
    holds the memfd: it must live as long as the pool."""
    st = pool.kv_buffer.untyped_storage()
    nbytes = st.nbytes()
    old = st.data_ptr()
    if pool.kv_buffer.data_ptr() != old:
        raise ValueError("host pool buffer does not start its storage")
    mem = kvtier.EngineMemory((nbytes + 4095) // 4096 * 4096, 1, 1, 0, 0, 0, 0)
    new = torch.frombuffer(mem.buf, dtype=torch.uint8, count=nbytes)
    new.copy_(torch.empty(0, dtype=torch.uint8).set_(st))
    pinned = bool(getattr(pool, "pin_memory", False)) and torch.cuda.is_available()
    if pinned:
        # SGLang pins its host pool for the GPU's copies: pin the new pages
        torch.cuda.cudart().cudaHostRegister(new.data_ptr(), nbytes, 0)
    st._swap_data_ptr_(new.untyped_storage())
    base = st.data_ptr()
    for name, t in list(vars(pool).items()):
        if name.endswith("_ptrs") and isinstance(t, torch.Tensor) and \
           t.dtype in (torch.int64, torch.uint64):
            a = t.view(torch.int64)   # addresses fit; uint64 has few kernels
            inside = (a >= old) & (a < old + nbytes)
            a[inside] += base - old
    if pinned:
        torch.cuda.cudart().cudaHostUnregister(old)
    del new                      # the old pages, freed
    return mem
