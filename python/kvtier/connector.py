# SPDX-License-Identifier: Apache-2.0
"""kvtier's KV connector: the API an inference engine integrates to share
prefix KV blocks through kvtierd.

Shaped after vLLM's KV connector (KVConnectorBase_V1), so that an adapter
for vLLM, or SGLang's hierarchical cache, is a thin mapping (docs/engines.md
has the table). One object serves both roles; an engine that runs its scheduler
and its workers in different processes makes one in each.

Scheduler side, per request:
    get_num_new_matched_tokens(request, num_computed_tokens)
        -> (tokens worth loading beyond those, False)   LOOKUP with the plan
    update_state_after_alloc(request, block_ids, num_external_tokens)
        the pages those tokens will be loaded into
    build_connector_meta(scheduled) -> EngineConnectorMetadata
        this step's loads, and the saves of requests whose prefill ends in it

Worker side, once:
    allocate_kv_cache(pages) -> tensor [layers, 2, pages, block_tokens,
        kv_heads, head_dim] in a sealed memfd (torch.frombuffer over its
        mapping: the daemon reads and writes the engine's own tensor)
    register_kv_caches({layer name: tensor [2, pages, ...]})   REGISTER
and per step:
    bind_connector_metadata(meta)
    start_load_kv()                 LOAD per request (a ticket each)
    wait_for_layer_load(layer)      the layer's pages are in place
    save_kv_layer(...)              nothing: kvtierd gathers whole blocks
    wait_for_save()                 SAVE of the blocks kvtier lacks, waited
                                    (async_save: sent, not waited); the step's
                                    prefill speed reported (PREFILL)
    get_finished(ids), get_block_ids_with_load_errors()
    clear_connector_metadata()
With async_load / async_save (vLLM's asynchronous transfers; both off by
default here), loads run between steps and saves past their step:
get_finished_async(finished ids) names what ended, handle_preemptions(ids)
waits for the saves of requests whose pages are about to be reused.

The daemon plans: LOOKUP answers how many stored blocks are worth loading,
comparing what each tier delivers on this machine (it measures every LOAD)
with the engine's prefill speed, which the connector measures on the steps
that only prefill (from bind_connector_metadata to wait_for_save, time spent
waiting for loads left out) and reports when a prompt's prefill ends. An
engine that measures better itself calls report_prefill(tokens, seconds).
Layer completions are pushed by the daemon: wait_for_layer_load costs no
round trip.

Failures never reach the engine as exceptions on the step path: a daemon
that is gone, a load cut short, a timeout make wait_for_layer_load return
False and name the pages in get_block_ids_with_load_errors(); the engine
recomputes them. The connector reconnects (HELLO and REGISTER again) on a
later lookup, at most every reconnect_s seconds.

Requests are read through two attributes, request_id and prompt_token_ids
(vLLM's Request has both), and, for the reuse class their blocks are saved
with (a hint the daemon's class-lru policy learns from; reuse_classes=False
saves without), an optional third: reuse_class if the request has it, else
the class of max_tokens (vLLM: sampling_params.max_tokens), the output it
asks for, by kvtier.reuse_class_of (the bit length of the count).
"""

import errno
import logging
import os
import time
from dataclasses import dataclass, field

import torch

import kvtier

log = logging.getLogger("kvtier.connector")

_TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# errors after which the connection is unusable
_GONE = {errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN, errno.ECONNABORTED}


@dataclass
class ScheduledRequest:
    """One request in a step, as the engine's scheduler scheduled it: the
    tokens [num_computed_tokens, num_computed_tokens + num_scheduled_tokens)
    are computed in this step into the request's pages block_ids."""
    request: object
    block_ids: list
    num_computed_tokens: int
    num_scheduled_tokens: int


@dataclass
class LoadSpec:
    req_id: str
    keys: list
    pages: list


@dataclass
class SaveSpec:
    req_id: str
    keys: list
    pages: list
    reuse_class: int = 0


@dataclass
class EngineConnectorMetadata:
    """What the scheduler side tells the worker side for one step."""
    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    async_loads: list = field(default_factory=list)  # started, not waited for in the step
    preempted: list = field(default_factory=list)   # request ids whose pages the step frees
    idle: bool = False              # nothing computed in the step
    prefill_tokens: int = 0         # tokens the step computes, all of them prefill
    prefill_only: bool = False      # no decode in the step: its time is prefill's
    prefill_done: bool = False      # a prompt's prefill ends in the step


class _Req:
    def __init__(self, tokens):
        self.tokens = list(tokens)
        self.keys = None            # keys of the full blocks of the prompt
        self.num_computed = 0
        self.matched_blocks = 0
        self.load = None            # LoadSpec waiting for build_connector_meta
        self.saved = False
        self.save_sent = False      # a SaveSpec went to the workers: they owe its end


class EngineConnector:
    """The engine's connector to kvtierd for one model namespace.

    tp_rank, tp_size: the shard of the KV this process holds when the model
    is split over a tensor- (or pipeline-) parallel group: part of the
    namespace, so ranks never load each other's blocks, and the daemon's plan
    costs a load as the whole group's (tp_size shares of a block).

    async_load: loads run between steps: get_num_new_matched_tokens says so
    (its second value), the worker starts them in start_load_kv without
    waiting, and get_finished names each request once its load ended (a
    failed one with its pages in get_block_ids_with_load_errors).
    async_save: wait_for_save starts the SAVE and returns; request_finished
    then returns True (keep the pages) for a request whose save was sent to
    the workers, and get_finished names it once the engine finished it and
    kvtierd has gathered its blocks (or the save failed)."""

    def __init__(self, model_id, layers, kv_heads, head_dim, block_tokens, kv_dtype="bf16",
                 socket=None, token=None, load_timeout_s=30.0, reconnect_s=5.0, use_plan=True,
                 completions="push", reuse_classes=True, tp_rank=0, tp_size=1,
                 async_load=False, async_save=False, layout="paged"):
        if kv_dtype not in _TORCH_DTYPES:
            raise ValueError("kv_dtype: one of %s" % ", ".join(_TORCH_DTYPES))
        self.model_id = model_id
        self.layers = layers
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.block_tokens = block_tokens
        self.kv_dtype = kv_dtype
        self.layout = layout        # kvtier's: "paged" (K and V), "mla" (one tensor)
        if not 0 <= tp_rank < tp_size:
            raise ValueError("tp_rank %d of tp_size %d" % (tp_rank, tp_size))
        # the rank's shard: part of the namespace, so no two ranks share a key
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.torch_dtype = _TORCH_DTYPES[kv_dtype]
        self.load_timeout_s = load_timeout_s
        self.reconnect_s = reconnect_s
        self.use_plan = use_plan    # False: load every stored block (benches)
        self.completions = completions  # "push", or "wait": a WAIT per layer
        self.reuse_classes = reuse_classes  # save with each request's reuse class
        self.async_load = bool(async_load)
        self.async_save = bool(async_save)
        self._socket = socket
        self._token = token
        self._client = None
        self._ns = None
        self._region = None
        self._next_try = 0.0
        self._down = False          # the last try to connect failed
        self._mem = []              # (EngineMemory, address) of allocate_kv_cache
        self._region_spec = None    # what register_kv_caches registered
        self._layer_index = {}
        self._reqs = {}
        self._meta = None
        self._loading = []          # [LoadSpec, ticket or None, failed]
        self._load_errors = set()
        self._finished_recving = set()
        self._finished_sending = set()
        self._pending_loads = []    # scheduler: async LoadSpecs for the next metadata
        self._async_loads = {}      # worker: req id -> [LoadSpec, ticket or None, deadline]
        self._saving = {}           # worker: req id -> [SaveSpec, ticket or None, deadline]
        self._save_owed = set()     # worker: saves sent, their end not yet reported
        self._engine_done = set()   # worker: of those, requests the engine finished
        self._step_t0 = None        # when the bound step began
        self._load_wait_s = 0.0     # of it, spent in wait_for_layer_load
        self._pf_tokens = 0         # prefill measured, not yet reported
        self._pf_s = 0.0
        self._can_report = True     # False once a daemon of protocol 1 said so
        self.stats = dict(lookups=0, lookup_blocks=0, hit_blocks=0, plan_blocks=0,
                          recompute_blocks=0, loads=0, loaded_blocks=0,
                          load_failures=0, saves=0, saved_blocks=0, save_present_blocks=0,
                          save_failures=0, disconnects=0, connects=0, prefill_reports=0,
                          async_loads=0, async_saves=0, preempt_save_waits=0)
        self._ensure()

    # ---- connection ----------------------------------------------------

    @property
    def socket_path(self):
        """The socket this connector dials (socket=, else $KVTIER_SOCKET, else
        the client library's default), for messages."""
        return self._socket or os.environ.get("KVTIER_SOCKET") or kvtier.default_socket()

    @property
    def connected(self):
        return self._client is not None

    def _ensure(self):
        """Connected, with HELLO and (when there is memory) REGISTER done."""
        if self._client is not None:
            return True
        now = time.monotonic()
        if now < self._next_try:
            return False
        self._next_try = now + self.reconnect_s
        c = None
        try:
            c = kvtier.Client(socket=self._socket, token=self._token,
                              completions=self.completions)
            ns = c.hello(self.model_id, layers=self.layers, kv_heads=self.kv_heads,
                         head_dim=self.head_dim, block_tokens=self.block_tokens,
                         dtype=self.kv_dtype, layout=self.layout, tp_rank=self.tp_rank,
                         tp_size=self.tp_size)
            region = c.register(ns, self._region_spec) if self._region_spec else None
        except OSError as e:
            if c is not None:
                c.close()
            # once per outage: an engine retrying every few seconds stays quiet
            (log.debug if self._down else log.warning)(
                "kvtierd unavailable (%s; socket %s): prefixes are recomputed, nothing "
                "saved; retrying every %g s", e, self.socket_path, self.reconnect_s)
            self._down = True
            return False
        if self._down:
            log.warning("kvtierd reached again: prefixes are loaded and saved")
        self._down = False
        self._client, self._ns, self._region = c, ns, region
        self.stats["connects"] += 1
        return True

    def _failed(self, e, what):
        """Count an error; drop the connection when it is unusable."""
        log.warning("kvtier %s: %s", what, e)
        if isinstance(e, (ConnectionError, BrokenPipeError)) or e.errno in _GONE:
            if self._client is not None:
                self._client.close()
                self.stats["disconnects"] += 1
                # a connection that worked is worth one try at once (the
                # daemon restarted); reconnect_s spaces the tries after it
                self._next_try = 0.0
            self._client = self._ns = self._region = None
            for item in self._loading:
                item[2] = True
            # tickets of the connection are gone: loads fail, saves end
            for item in list(self._async_loads.values()) + list(self._saving.values()):
                item[1] = None
            return True
        return False

    def _again(self, call, what):
        """call(), and once more on a new connection when the daemon hung
        up since the last request (it restarted: the engine learns it only
        by asking). Raises the OSError that remains."""
        try:
            return call()
        except OSError as e:
            if not self._failed(e, what) or not self._ensure():
                raise
        try:
            return call()
        except OSError as e:
            self._failed(e, what)
            raise

    def call(self, what, fn):
        """fn(client, namespace, region) with the daemon reached and the
        registered memory known to it (connected again if need be, and once
        more on a new connection when the daemon restarted since the last
        call): for adapters whose engine drives the transfers itself
        (SGLang's storage backend). Returns fn's result, or None when
        kvtierd cannot be reached or the call failed (warned as every
        failure here is)."""
        if not self._has_memory():
            return None
        try:
            return self._again(lambda: fn(self._client, self._ns, self._region), what)
        except OSError:
            return None

    def close(self):
        """Close the connection. The KV memory stays valid while tensors use it."""
        if self._client is not None:
            self._client.close()
        self._client = self._ns = self._region = None

    shutdown = close

    # ---- scheduler side ------------------------------------------------

    def _keys(self, st):
        if st.keys is None:
            st.keys = self._ns.prefix_keys(st.tokens)
        return st.keys

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """Tokens past num_computed_tokens whose KV kvtier holds and the
        daemon's plan says to load (loading them beats recomputing them): a
        whole number of blocks, leaving at least the prompt's last token to
        compute (the engine needs its logits). Returns (count, False): loads
        are synchronous with the step that computes the request; (count,
        True) with async_load when count > 0: the engine waits for the load
        outside the step (get_finished)."""
        st = self._reqs.get(request.request_id)
        if st is None:
            st = self._reqs[request.request_id] = _Req(request.prompt_token_ids)
        st.num_computed = num_computed_tokens
        st.matched_blocks = 0
        usable = (len(st.tokens) - 1) // self.block_tokens
        first = num_computed_tokens // self.block_tokens
        if usable <= first or not self._ensure():
            return 0, False
        try:
            keys = self._keys(st)[:usable]
            hit, load, _ = self._again(lambda: self._client.lookup_plan(self._ns, keys),
                                       "lookup")
        except OSError:
            return 0, False
        self.stats["lookups"] += 1
        self.stats["lookup_blocks"] += len(keys)
        self.stats["hit_blocks"] += hit
        self.stats["plan_blocks"] += load
        self.stats["recompute_blocks"] += hit - load
        st.matched_blocks = load if self.use_plan else hit
        n = max(0, st.matched_blocks * self.block_tokens - num_computed_tokens)
        return n, self.async_load and n > 0

    def update_state_after_alloc(self, request, block_ids, num_external_tokens):
        """The request's pages are allocated: remember where the
        num_external_tokens tokens (from get_num_new_matched_tokens) go."""
        st = self._reqs.get(request.request_id)
        if st is None or num_external_tokens <= 0:
            return
        bt = self.block_tokens
        first = st.num_computed // bt
        last = (st.num_computed + num_external_tokens) // bt
        st.load = LoadSpec(request.request_id, st.keys[first:last], list(block_ids[first:last]))
        if self.async_load:
            # the request waits unscheduled: its load goes in the next metadata
            self._pending_loads.append(st.load)
            st.load = None

    def build_connector_meta(self, scheduled, preempted=()):
        """This step's metadata from the engine's scheduled requests
        (ScheduledRequest entries): loads decided for them, and saves of the
        full prompt blocks of each request whose prefill completes now.
        preempted: ids of requests whose pages the engine frees in this step
        (a save of theirs still running is waited for first)."""
        meta = EngineConnectorMetadata(prefill_only=bool(scheduled), idle=not scheduled,
                                       async_loads=self._pending_loads,
                                       preempted=[r for r in preempted
                                                  if getattr(self._reqs.get(r), "save_sent",
                                                             False)])
        self._pending_loads = []
        bt = self.block_tokens
        for s in scheduled:
            rid = s.request.request_id
            st = self._reqs.get(rid)
            if st is None:
                st = self._reqs[rid] = _Req(s.request.prompt_token_ids)
            if st.load is not None:
                meta.loads.append(st.load)
                st.load = None
            if s.num_computed_tokens >= len(st.tokens):
                meta.prefill_only = False   # a decode: the step's time is not prefill's
            meta.prefill_tokens += s.num_scheduled_tokens
            done = s.num_computed_tokens + s.num_scheduled_tokens >= len(st.tokens)
            if done and s.num_computed_tokens < len(st.tokens):
                meta.prefill_done = True
            n = len(st.tokens) // bt
            if done and not st.saved and n:
                st.saved = True
                if self._ns is not None or self._ensure():
                    meta.saves.append(SaveSpec(rid, self._keys(st)[:n], list(s.block_ids[:n]),
                                               self._reuse_class(s.request)))
                    st.save_sent = True
                else:
                    self.stats["save_failures"] += 1
        return meta

    def _reuse_class(self, request):
        """The reuse class a request's blocks are saved with: its
        reuse_class attribute, else that of the output it asks for
        (max_tokens, or sampling_params.max_tokens), else 0 (none)."""
        if not self.reuse_classes:
            return 0
        cls = getattr(request, "reuse_class", None)
        if cls is not None:
            return min(max(int(cls), 0), kvtier.REUSE_CLASS_MAX)
        out = getattr(request, "max_tokens", None)
        if out is None:
            out = getattr(getattr(request, "sampling_params", None), "max_tokens", None)
        return kvtier.reuse_class_of(out) if out else 0

    def request_finished(self, request, block_ids=None):
        """The engine is done with the request: forget its state. Returns
        (keep the pages, None): synchronous saves were waited for in
        wait_for_save, so the pages are free at once; with async_save a
        request whose save went to the workers keeps them until
        get_finished names it (the workers report every save they were
        sent, ended or failed)."""
        st = self._reqs.pop(request.request_id, None)
        return bool(self.async_save and st is not None and st.save_sent), None

    # ---- worker side: memory -------------------------------------------

    def allocate_kv_cache(self, pages):
        """A paged KV cache [layers, 2, pages, block_tokens, kv_heads,
        head_dim] of kv_dtype in a sealed memfd: the tensor is a view of the
        mapping (torch.frombuffer, no copy), so what kvtierd scatters is in
        the tensor. Register it with register_kv_caches."""
        el = torch.tensor([], dtype=self.torch_dtype).element_size()
        page_bytes = self.block_tokens * self.kv_heads * self.head_dim * el
        kv_stride = page_bytes * pages
        layer_stride = 2 * kv_stride
        mem = kvtier.EngineMemory(layer_stride * self.layers, self.layers, pages, layer_stride,
                                  kv_stride, page_bytes, page_bytes)
        t = torch.frombuffer(mem.buf, dtype=self.torch_dtype)
        self._mem.append((mem, t.data_ptr()))
        return t.view(self.layers, 2, pages, self.block_tokens, self.kv_heads, self.head_dim)

    def register_kv_caches(self, kv_caches):
        """Register the engine's per-layer KV tensors, in layer order
        ({name: tensor [2, pages, block_tokens, kv_heads, head_dim]}), views
        of one allocate_kv_cache tensor with the same strides per layer.
        Raises ValueError for tensors kvtierd cannot reach or describe."""
        names = list(kv_caches)
        ts = [kv_caches[n] for n in names]
        if len(ts) != self.layers:
            raise ValueError("%d KV tensors for %d layers" % (len(ts), self.layers))
        shape = (2, None, self.block_tokens, self.kv_heads, self.head_dim)
        el = ts[0].element_size()
        ptr0 = ts[0].data_ptr()
        mem = base = None
        for m, addr in self._mem:
            if addr <= ptr0 < addr + m.nbytes:
                mem, base = m, addr
        if mem is None:
            raise ValueError("KV tensors not in memory from allocate_kv_cache: kvtierd cannot "
                             "reach them")
        for t in ts:
            if t.device.type != "cpu" or t.dtype != self.torch_dtype or t.dim() != 5 or \
               any(w is not None and w != d for w, d in zip(shape, t.shape)):
                raise ValueError("KV tensor of shape %s, dtype %s: want [2, pages, %d, %d, %d] "
                                 "of %s" % (tuple(t.shape), t.dtype, self.block_tokens,
                                            self.kv_heads, self.head_dim, self.torch_dtype))
            if not t[0, 0].is_contiguous() or t.stride() != ts[0].stride():
                raise ValueError("KV tensors: each page contiguous, the same strides per layer")
        layer_stride = ts[1].data_ptr() - ptr0 if len(ts) > 1 else mem.layer_stride
        for i, t in enumerate(ts):
            if t.data_ptr() != ptr0 + i * layer_stride:
                raise ValueError("KV tensors: layers must be evenly spaced in one allocation")
        pages = ts[0].shape[1]
        spec = _RegionSpec(mem.fd, ptr0 - base, self.layers, pages,
                           layer_stride, ts[0].stride(0) * el, ts[0].stride(1) * el)
        spec.nbytes = mem.nbytes - spec.offset
        last = spec.offset + (self.layers - 1) * layer_stride + spec.kv_stride + \
            pages * spec.page_stride
        if last > mem.nbytes or layer_stride <= 0:
            raise ValueError("KV tensors: layout runs outside their memory")
        self.register_region(spec, names)

    def register_region(self, spec, layer_names):
        """Register engine memory described by spec (the attributes
        kvtier.Client.register reads, or a kvtier.RegionParts: a part per
        allocation and each layer's part and offset) whose layers are
        layer_names, in order: for engines that allocate their KV tensors
        themselves. Kept and registered again after a reconnect."""
        self._region_spec = spec
        self._layer_index = {n: i for i, n in enumerate(layer_names)}
        if self._client is not None:
            try:
                self._region = self._client.register(self._ns, spec)
            except OSError as e:
                self._failed(e, "register")
        else:
            self._ensure()

    # ---- worker side: per step -----------------------------------------

    def bind_connector_metadata(self, meta):
        self._meta = meta
        self._step_t0 = time.perf_counter()
        self._load_wait_s = 0.0

    def clear_connector_metadata(self):
        self._meta = None
        self._loading = []
        self._step_t0 = None

    def start_load_kv(self, forward_context=None, **kwargs):
        """Start this step's loads: one LOAD per request, its blocks into its
        pages, layer by layer."""
        self._loading = []
        for spec in (self._meta.loads if self._meta else []):
            item = [spec, None, False]
            self._loading.append(item)
            if not self._has_memory():
                item[2] = True
                continue
            try:
                item[1] = self._again(lambda: self._client.load(self._ns, self._region,
                                                                spec.keys, spec.pages), "load")
                item[2] = False     # a retry on a new connection went through
                self.stats["loads"] += 1
            except OSError:
                item[2] = True
        self._note_failures()
        for spec in (self._meta.async_loads if self._meta else []):
            self._start_async_load(spec)

    def _start_async_load(self, spec):
        """LOAD for a request that waits outside the step; get_finished
        reports its end. One that cannot start fails at the next report."""
        item = self._async_loads[spec.req_id] = [spec, None,
                                                 time.monotonic() + self.load_timeout_s]
        if not self._has_memory():
            return
        try:
            item[1] = self._again(lambda: self._client.load(self._ns, self._region, spec.keys,
                                                            spec.pages), "load")
            self.stats["loads"] += 1
            self.stats["async_loads"] += 1
        except OSError:
            item[1] = None

    def _has_memory(self):
        """Connected with the KV memory registered: loads and saves can go.
        Memory never registered (a layout the engine's adapter could not
        describe) means none can: its requests recompute, nothing is saved."""
        if self._region is None and self._region_spec is not None:
            self._ensure()
        return self._region is not None

    def _note_failures(self):
        for spec, _, failed in self._loading:
            if failed and spec.req_id not in self._finished_recving:
                self._load_errors.update(spec.pages)
                self._finished_recving.add(spec.req_id)
                self.stats["load_failures"] += 1

    def wait_for_layer_load(self, layer):
        """Block until layer (an index, or a name given to
        register_kv_caches) of this step's loads is in the pages. Returns
        True when every load of the step got there; False when one failed
        (its pages are then in get_block_ids_with_load_errors). At the last
        layer, a load that stopped short (a block evicted since the lookup)
        fails too."""
        t0 = time.perf_counter()
        try:
            return self._wait_layer(layer)
        finally:
            self._load_wait_s += time.perf_counter() - t0

    def _wait_layer(self, layer):
        idx = self._layer_index.get(layer, layer)
        last = idx == self.layers - 1
        for item in self._loading:
            spec, ticket, failed = item
            if failed or ticket is None:
                continue
            try:
                ticket.wait_layer(idx, timeout=self.load_timeout_s)
                if last:
                    got = ticket.wait(timeout=self.load_timeout_s)
                    if got < len(spec.keys):
                        raise OSError(errno.ENODATA, "%d of %d blocks loaded" %
                                      (got, len(spec.keys)))
                    self.stats["loaded_blocks"] += got
                    self._finished_recving.add(spec.req_id)
            except OSError as e:
                item[2] = True
                self._failed(e, "load layer %d" % idx)
        self._note_failures()
        return not any(item[2] for item in self._loading)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata=None, **kwargs):
        """Nothing to do per layer: kvtierd gathers whole blocks (every
        layer) from the registered memory in wait_for_save."""

    def wait_for_save(self):
        """Save this step's finished prompts: LOOKUP their blocks, SAVE those
        kvtier lacks (chained to the last one it has), and wait, so the pages
        may be reused afterwards. Returns the number of blocks saved.
        The step's prefill time counts up to here; when a prompt's prefill
        ended in it, the speed measured so far is reported."""
        meta = self._meta
        if meta is not None and meta.prefill_only and self._step_t0 is not None:
            self._pf_tokens += meta.prefill_tokens
            self._pf_s += time.perf_counter() - self._step_t0 - self._load_wait_s
            self._step_t0 = None
        saved = 0
        # a request whose load failed in this step has pages the daemon never
        # wrote: they are recomputed, and never saved from this step
        failed = {spec.req_id for spec, _, bad in self._loading if bad}
        for spec in (self._meta.saves if self._meta else []):
            if self.async_save:
                # owed: reported once ended and finished, whatever happens below
                self._save_owed.add(spec.req_id)
            if spec.req_id in failed:
                self.stats["save_failures"] += 1
                continue
            if not self._has_memory():
                self.stats["save_failures"] += 1
                continue
            try:
                hit, _ = self._again(lambda: self._client.lookup(self._ns, spec.keys), "lookup")
                self.stats["save_present_blocks"] += hit
                if hit < len(spec.keys):
                    t = self._client.save(self._ns, self._region, spec.keys[hit:],
                                          spec.pages[hit:],
                                          parent=spec.keys[hit - 1] if hit else None,
                                          reuse_class=spec.reuse_class)
                    self.stats["saves"] += 1
                    if self.async_save:
                        # the pages stay the engine's until get_finished says so
                        self._saving[spec.req_id] = [spec, t, time.monotonic() +
                                                     self.load_timeout_s]
                        self.stats["async_saves"] += 1
                        continue
                    n = t.wait(timeout=self.load_timeout_s)
                    self.stats["saved_blocks"] += n
                    saved += n
                self._finished_sending.add(spec.req_id)
            except OSError as e:
                self.stats["save_failures"] += 1
                self._failed(e, "save")
        if meta is not None and meta.prefill_done and self._pf_tokens:
            self.report_prefill(self._pf_tokens, self._pf_s)
            self._pf_tokens, self._pf_s = 0, 0.0
        return saved

    def report_prefill(self, tokens, seconds):
        """Tell kvtierd the engine prefilled `tokens` tokens in `seconds`
        (loads waited for left out), for LOOKUP's plan. Quiet when the
        daemon is unreachable or too old to take it."""
        if tokens <= 0 or seconds <= 0 or not self._can_report or self._client is None:
            return
        try:
            self._client.prefill(self._ns, tokens, seconds)
            self.stats["prefill_reports"] += 1
        except OSError as e:
            if e.errno == errno.EOPNOTSUPP:
                self._can_report = False
            else:
                self._failed(e, "prefill report")

    def get_finished(self, finished_req_ids=()):
        """(request ids whose saves finished, ids whose loads finished or
        failed) since the last call: the synchronous ones of the step and
        the asynchronous ones (get_finished_async)."""
        sending, recving = self._finished_sending, self._finished_recving
        self._finished_sending, self._finished_recving = set(), set()
        a_send, a_recv = self._poll_async(finished_req_ids)
        return sending | a_send, recving | a_recv

    def get_finished_async(self, finished_req_ids=()):
        """Only the asynchronous ends, as vLLM's get_finished wants them:
        (ids of finished requests, among finished_req_ids of this call or an
        earlier one, whose save ended or failed; ids whose async load ended
        or failed). Synchronous loads and saves ended in their step and are
        not named."""
        self._finished_sending, self._finished_recving = set(), set()
        return self._poll_async(finished_req_ids)

    def handle_preemptions(self, preempted):
        """The engine frees the pages of the preempted request ids in this
        step: a save still gathering from them is waited for first (a
        failed or late one is given up: the pages are the engine's)."""
        for rid in preempted:
            item = self._saving.get(rid)
            if item is None or item[1] is None:
                continue
            self.stats["preempt_save_waits"] += 1
            try:
                self.stats["saved_blocks"] += item[1].wait(
                    timeout=max(0.0, item[2] - time.monotonic()))
            except OSError as e:
                self.stats["save_failures"] += 1
                self._failed(e, "save")
            self._saving.pop(rid, None)

    def _poll_async(self, finished_req_ids):
        """Poll the async loads and saves (without waiting, but for a step
        with nothing to compute: up to 5 ms on the oldest load, so that an
        engine with only loads to wait for does not spin)."""
        if self._meta is not None and self._meta.idle and self._async_loads:
            spec, ticket, _ = next(iter(self._async_loads.values()))
            if ticket is not None:
                try:
                    ticket.wait_layer(self.layers - 1, timeout=0.005)
                except OSError:
                    pass            # its poll below tells
        recving, sending = set(), set()
        now = time.monotonic()
        for rid, item in list(self._async_loads.items()):
            ok, got = self._poll(item, now, "load")
            if ok is None:
                continue
            spec = item[0]
            if ok and got < len(spec.keys):
                log.warning("kvtier load: %d of %d blocks loaded", got, len(spec.keys))
                ok = False
            if ok:
                self.stats["loaded_blocks"] += got
            else:
                self._load_errors.update(spec.pages)
                self.stats["load_failures"] += 1
            del self._async_loads[rid]
            recving.add(rid)
        for rid, item in list(self._saving.items()):
            ok, got = self._poll(item, now, "save")
            if ok is None:
                continue
            if ok:
                self.stats["saved_blocks"] += got
            else:
                self.stats["save_failures"] += 1
            del self._saving[rid]
        self._engine_done.update(r for r in finished_req_ids if r in self._save_owed)
        for rid in list(self._engine_done):
            if rid not in self._saving:
                sending.add(rid)
                self._engine_done.discard(rid)
                self._save_owed.discard(rid)
        return sending, recving

    def _poll(self, item, now, what):
        """(None, _) while item's ticket runs; (True, count) when it ended;
        (False, 0) when it failed, its connection broke or it outlived
        load_timeout_s (given up: its pages go back to the engine)."""
        if item[1] is None:
            return False, 0
        try:
            done, got, _ = item[1].poll()
        except OSError as e:
            self._failed(e, what)
            return False, 0
        if done:
            return True, got
        if now < item[2]:
            return None, 0
        log.warning("kvtier %s: still running after %g s, given up", what, self.load_timeout_s)
        return False, 0

    def get_block_ids_with_load_errors(self):
        """Pages a failed load may have left half-written, since the last
        call. A daemon that lost the connection may still finish a copy into
        them, so the engine should not reuse them for other data."""
        bad, self._load_errors = self._load_errors, set()
        return bad


@dataclass
class _RegionSpec:
    """The attributes kvtier.Client.register reads."""
    fd: int
    offset: int
    layers: int
    pages: int
    layer_stride: int
    kv_stride: int
    page_stride: int
    nbytes: int = 0
    cuda_ipc: bytes = None      # GPU memory: fd -1 and a cudaIpcMemHandle_t
    device: int = 0


# The names of kvtier 0.1, deprecated: one letter's case apart from vLLM's
# adapter (kvtier.vllm.KvtierConnector), they read as one class.
KVTierConnector = EngineConnector
KVTierConnectorMetadata = EngineConnectorMetadata
