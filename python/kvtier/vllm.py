# SPDX-License-Identifier: Apache-2.0
"""kvtier as a vLLM KV connector (vLLM's KVConnectorBase_V1), loaded with

    --kv-transfer-config '{"kv_connector":"KvtierConnector",
                           "kv_connector_module_path":"kvtier.vllm",
                           "kv_role":"kv_both",
                           "kv_load_failure_policy":"recompute",
                           "kv_connector_extra_config":{"socket":"/run/kvtier/kvtierd.sock"}}'

A thin adapter over kvtier.connector.EngineConnector, which does the work:
the scheduler's connector looks prefixes up (one LOOKUP with the plan per
request) and tells the worker's connector, through the step's metadata, which
blocks to load into which pages and which finished prompts to save; the
worker's connector has its KV tensors registered with kvtierd once, loads
layer by layer (wait_for_layer_load returns when the daemon has pushed that
layer's completion) and saves the full blocks of each prompt when its prefill
ends. A load that fails (daemon gone, block evicted, timeout) names its pages
in get_block_ids_with_load_errors; with kv_load_failure_policy "recompute"
vLLM then recomputes those tokens.

Saves are asynchronous (extra config async_save, default true): wait_for_save
sends the SAVE and returns; request_finished keeps the pages of a request
whose save went to the workers (a SaveSpec in a step's metadata: the rule
both sides share) until every worker names it in get_finished, once kvtierd
has gathered its blocks or the save failed. Loads are synchronous unless
async_load (default false): the request then waits outside the batch
(WAITING_FOR_REMOTE_KVS) while its LOAD runs, and get_finished names it when
the LOAD ended or failed (docs/vllm.md says when each pays).

KV memory. On CPU, vLLM allocates one int8 buffer for every layer's KV (or,
in older releases, one per layer); the connector's get_mem_pool_context
makes each such allocation a sealed memfd (the daemon maps it and copies
blocks in and out of the engine's own tensors). On CUDA each allocation is
exported to the daemon as a CUDA IPC handle (kvtierd with a GPU). Layers
evenly spaced in one allocation are registered as one region; any other
placement as a region in parts, one per allocation (kvtier.RegionParts).
In both, a block of one layer is one dense page [kv_heads,
block_tokens, 2*head_dim] (CPU, LBHNC) or whatever the resolved layout puts
there, as long as a layer's block is one contiguous run of bytes: the region
is registered as pages of 2 x half a block (kv_stride = half, page_stride =
the block stride), and the layout's name is part of the namespace, so blocks
of one layout are never loaded into another.

extra config (all optional): socket (else $KVTIER_SOCKET, else the daemon's
default), token (else $KVTIER_TOKEN), model_id (default the served model
name), use_plan (default true: load only what the daemon's plan says beats
recomputing), completions ("push", default, or "wait"), load_timeout_s,
reconnect_s, on_unsupported ("error", default: a KV layout kvtier cannot
serve stops the engine's start; "warn": the connector is off, vLLM serves),
async_load (false), async_save (true).

Tensor and pipeline parallel ranks each hold a shard of the KV: the shard
(rank modulo TP x PP, of TP x PP) goes into HELLO, so each rank has its own
namespace and keys.
"""

import contextlib
import ctypes
import hashlib
import logging
import os
import re
from dataclasses import dataclass, field

import torch

import kvtier
from kvtier.connector import EngineConnector, ScheduledRequest, _RegionSpec
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)

log = logging.getLogger("kvtier.vllm")

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


@dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    """The step's loads and saves, as kvtier.connector builds them."""
    inner: object = None


@dataclass
class _Sched:
    """A request as the scheduler side follows it: the vLLM Request and the
    pages it holds, in order."""
    request: object
    block_ids: list = field(default_factory=list)


def _namespace_id(model, device, layout):
    """The model id kvtierd sees: the model, the device kind and the KV
    layout's name (at most 63 bytes: a long name keeps its tail and a digest
    of the whole)."""
    name = "%s|vllm-%s-%s" % (model, device, layout)
    if len(name.encode()) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return (name.encode()[-(63 - 17):].decode(errors="ignore") + "#" + digest)[-63:]


def _shard_of(pc):
    """(rank, ranks) of this process's KV shard in its engine: vLLM numbers
    a data-parallel replica's workers PP-major, TP-minor (ModelConfig's
    get_layers_start_end_indices), so rank modulo TP x PP is the shard. A
    pipeline stage's namespace differs by its layer count too, but two
    stages of equal depth would not: the shard keeps them apart. The
    scheduler (rank 0) looks up the first shard's keys."""
    shards = pc.tensor_parallel_size * pc.pipeline_parallel_size
    return pc.rank % shards, shards


def _unsupported_model(mc, dtype, kv_cache_config):
    """Why kvtier cannot serve this model's KV, or None. The KV of an MLA
    model is one latent tensor per layer (no K and V); a hybrid model's
    layers keep state kvtier does not store, or KV cache groups of several
    attention kinds overlaid in one memory; sliding-window layers managed as
    such free their blocks outside the window, so a prompt's early blocks
    are gone by the time its prefill ends."""
    if dtype not in _DTYPES:
        return "KV dtype %s (kvtier stores bf16, fp16 and fp32)" % dtype
    if mc.use_mla:
        return "MLA attention (one latent tensor per layer, no K/V split)"
    if mc.is_hybrid or mc.is_attention_free:
        return "a hybrid model (layers with state that is not attention KV)"
    groups = getattr(kv_cache_config, "kv_cache_groups", None) or []
    if len(groups) > 1:
        return "%d KV cache groups (%s): a hybrid of attention kinds" % (
            len(groups), ", ".join(type(g.kv_cache_spec).__name__ for g in groups))
    # without vLLM's hybrid manager (off beside a connector that does not
    # declare it) sliding-window layers keep every block: full attention's
    # spec, and their KV is whole
    kinds = {type(g.kv_cache_spec).__name__ for g in groups}
    if kinds - {"FullAttentionSpec"}:
        return "sliding-window or local attention (%s)" % ", ".join(sorted(kinds))
    if not groups and mc.get_sliding_window():
        return "sliding-window attention (window %s)" % mc.get_sliding_window()
    return None


def _layer_order(name):
    nums = re.findall(r"\d+", name)
    return (int(nums[0]) if nums else 0, name)


class KvtierConnector(KVConnectorBase_V1):
    """vLLM's KV connector to kvtierd."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = dict(self._kv_transfer_config.kv_connector_extra_config or {})
        mc = vllm_config.model_config
        pc = vllm_config.parallel_config
        cc = vllm_config.cache_config
        self._block_size = cc.block_size
        dtype = mc.dtype if cc.cache_dtype in (None, "auto") else cc.cache_dtype
        from vllm.platforms import current_platform
        self._device = current_platform.device_type
        layout = cc.kv_cache_layout or ("LBHNC" if self._device == "cpu" else "auto")
        layout = getattr(layout, "name", layout)
        served = mc.served_model_name
        if isinstance(served, (list, tuple)):
            served = served[0]
        model = extra.get("model_id") or served or mc.model
        self.namespace = _namespace_id(model, self._device, layout)
        self.shard, self.shards = _shard_of(pc)
        self._on_unsupported = extra.get("on_unsupported", "error")
        if self._on_unsupported not in ("error", "warn"):
            raise ValueError('kvtier: on_unsupported is "error" (default) or "warn", not %r'
                             % (self._on_unsupported,))
        self._reqs = {}             # scheduler side: request id -> _Sched
        self._kv_mem = None         # worker side: the memfd of the KV buffer
        self._registered = False
        reason = _unsupported_model(mc, dtype, kv_cache_config)
        if reason:
            if self._on_unsupported != "warn":
                raise ValueError("kvtier cannot serve this model: %s (set "
                                 'kv_connector_extra_config "on_unsupported": "warn" to '
                                 "serve without kvtier)" % reason)
            log.warning("kvtier off: %s", reason)
            self._kv = _Off()
            return
        self._kv = EngineConnector(
            self.namespace, mc.get_num_layers(pc), mc.get_num_kv_heads(pc),
            mc.get_head_size(), self._block_size, kv_dtype=_DTYPES[dtype],
            socket=extra.get("socket") or os.environ.get("KVTIER_SOCKET"),
            token=extra.get("token") or os.environ.get("KVTIER_TOKEN"),
            load_timeout_s=float(extra.get("load_timeout_s", 30.0)),
            reconnect_s=float(extra.get("reconnect_s", 5.0)),
            use_plan=bool(extra.get("use_plan", True)),
            completions=extra.get("completions", "push"),
            tp_rank=self.shard, tp_size=self.shards,
            async_load=_flag(extra, "async_load", False),
            async_save=_flag(extra, "async_save", True))

    @property
    def kvtier(self):
        """The EngineConnector underneath (its stats, its connection)."""
        return self._kv

    # ---- scheduler side ------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        self._reqs.setdefault(request.request_id, _Sched(request))
        return self._kv.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        ids = list(blocks.get_block_ids()[0]) if blocks is not None else []
        st = self._reqs.setdefault(request.request_id, _Sched(request))
        if ids:
            st.block_ids = ids
        self._kv.update_state_after_alloc(request, ids, num_external_tokens)

    def build_connector_meta(self, scheduler_output):
        scheduled = []
        n_sched = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            st = self._reqs.get(new.req_id)
            if st is None:
                continue
            st.block_ids = list(new.block_ids[0])
            scheduled.append(ScheduledRequest(st.request, st.block_ids,
                                              new.num_computed_tokens, n_sched[new.req_id]))
        cached = scheduler_output.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", set())
        for i, rid in enumerate(cached.req_ids):
            st = self._reqs.get(rid)
            if st is None:
                continue
            new_ids = cached.new_block_ids[i]
            if new_ids is not None:
                if rid in resumed:
                    st.block_ids = list(new_ids[0])
                else:
                    st.block_ids.extend(new_ids[0])
            scheduled.append(ScheduledRequest(st.request, st.block_ids,
                                              cached.num_computed_tokens[i], n_sched[rid]))
        preempted = getattr(scheduler_output, "preempted_req_ids", None) or ()
        return KvtierConnectorMetadata(self._kv.build_connector_meta(scheduled, preempted))

    def request_finished(self, request, block_ids):
        """True (vLLM keeps the pages) when the request's save went to the
        workers (async_save): each worker names it in get_finished once
        kvtierd has gathered its blocks or the save failed."""
        self._reqs.pop(request.request_id, None)
        return self._kv.request_finished(request, block_ids)

    # ---- worker side: memory -------------------------------------------

    def get_mem_pool_context(self):
        """On CPU: vLLM's KV allocations (zeroed int8 buffers: one, or one
        per layer) come from sealed memfds kvtierd can map. Elsewhere:
        vLLM's own pool."""
        if self._device != "cpu":
            return None
        return self._memfd_allocation()

    @contextlib.contextmanager
    def _memfd_allocation(self):
        """Every zeroed 1-D int8 CPU buffer allocated inside (vLLM's KV: one
        buffer, or one per layer in releases that allocated so) comes from a
        sealed memfd of its own, kept in self._kv_mem."""
        real = torch.zeros
        if self._kv_mem is None:
            self._kv_mem = []
        mems = self._kv_mem

        def zeros(*size, dtype=None, device=None, **kw):
            if len(size) == 1 and isinstance(size[0], (list, tuple)):
                size = tuple(size[0])
            if dtype is torch.int8 and len(size) == 1 and isinstance(size[0], int) and \
               size[0] > 0 and not kw and torch.device(device or "cpu").type == "cpu":
                mem = kvtier.EngineMemory(size[0], 0, 0, 0, 0, 0, 0)
                mems.append(mem)
                # written now, as torch.zeros writes vLLM's own buffer: no
                # page faults later, in a prefill or under a load
                return torch.frombuffer(mem.buf, dtype=torch.int8).zero_()
            return real(*size, dtype=dtype, device=device, **kw)

        torch.zeros = zeros
        try:
            yield
        finally:
            torch.zeros = real

    def register_kv_caches(self, kv_caches):
        """Describe vLLM's per-layer KV views to kvtierd as a region.
        A layout kvtier cannot describe stops the engine's start with an
        error naming what differs; with extra config "on_unsupported":
        "warn" the connector is off instead (warned) and vLLM serves,
        recomputing every prefix."""
        if isinstance(self._kv, _Off):
            return
        try:
            spec, names = self._region_of(kv_caches)
        except ValueError as e:
            if self._on_unsupported != "warn":
                raise ValueError("kvtier cannot serve this KV layout: %s (set "
                                 'kv_connector_extra_config "on_unsupported": "warn" to '
                                 "serve without kvtier)" % e) from e
            log.warning("kvtier off: %s", e)
            return
        self._kv.register_region(spec, names)
        self._registered = True

    def _region_of(self, kv_caches):
        """The region of vLLM's per-layer KV views: the old single-part
        description when the layers are evenly spaced in one allocation
        (any kvtierd takes it), else kvtier.RegionParts, one part per
        backing allocation (a tensor per layer, or any grouping)."""
        names = sorted(set(kv_caches), key=_layer_order)
        views = [kv_caches[n] for n in names]
        if len(names) != self._kv.layers:
            raise ValueError("%d KV tensors for %d layers" % (len(names), self._kv.layers))
        v0 = views[0]
        el = v0.element_size()
        page = self._block_size * self._kv.kv_heads * self._kv.head_dim * el
        if len({v.data_ptr() for v in views}) != len(views):
            raise ValueError("layers share KV tensors")
        if any(v.stride() != v0.stride() or v.shape != v0.shape or v.dtype != v0.dtype or
               v.device != v0.device for v in views):
            raise ValueError("KV tensors of different shapes or strides")
        # a manager block may be several kernel blocks, dense (vLLM checks)
        kblock = v0[0].numel() * el
        if 2 * page % kblock or not v0[0].is_contiguous():
            raise ValueError("a block of a layer is not one run of %d bytes (view %s, "
                             "strides %s)" % (2 * page, tuple(v0.shape), v0.stride()))
        ratio = 2 * page // kblock
        page_stride = v0.stride(0) * el * ratio
        if ratio > 1 and v0.stride(0) * el != kblock:
            raise ValueError("kernel blocks of a block are not adjacent")
        pages = v0.shape[0] // ratio
        if v0.device.type not in ("cpu", "cuda"):
            raise ValueError("KV on %s: kvtier reaches CPU and CUDA memory" % v0.device)
        ptrs = [v.data_ptr() for v in views]
        layer_stride = ptrs[1] - ptrs[0] if len(ptrs) > 1 else page_stride * pages
        one = len({v.untyped_storage().data_ptr() for v in views}) == 1
        if not one or layer_stride <= 0 or \
           any(p != ptrs[0] + i * layer_stride for i, p in enumerate(ptrs)):
            return _parts_of(views, self._kv_mem, pages, page, page_stride), names
        if v0.device.type == "cpu":
            mem, base = _memfd_of(self._kv_mem, ptrs[0])
            spec = _RegionSpec(mem.fd, ptrs[0] - base, len(names), pages, layer_stride,
                               page, page_stride)
            spec.nbytes = mem.nbytes - spec.offset
        else:
            storage = v0.untyped_storage()
            ipc = storage._share_cuda_()
            # the handle names the CUDA allocation; the storage lies at
            # ipc[3] bytes into it (the caching allocator's blocks share one)
            at = int(ipc[3]) + ptrs[0] - storage.data_ptr()
            spec = _RegionSpec(-1, at, len(names), pages, layer_stride,
                               page, page_stride, cuda_ipc=bytes(ipc[1]),
                               device=v0.device.index or 0)
            spec.nbytes = storage.nbytes() - (ptrs[0] - storage.data_ptr())
        last = spec.offset + (len(names) - 1) * layer_stride + (pages - 1) * page_stride + \
            2 * page
        if last > spec.offset + spec.nbytes:
            raise ValueError("KV layout runs past its buffer")
        return spec, names

    # ---- worker side: per step -----------------------------------------

    def bind_connector_metadata(self, connector_metadata):
        super().bind_connector_metadata(connector_metadata)
        self._kv.bind_connector_metadata(getattr(connector_metadata, "inner", None))

    def clear_connector_metadata(self):
        super().clear_connector_metadata()
        self._kv.clear_connector_metadata()

    def start_load_kv(self, forward_context, **kwargs):
        self._kv.start_load_kv(forward_context)

    def wait_for_layer_load(self, layer_name):
        self._kv.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        """Nothing per layer: kvtierd gathers whole blocks in wait_for_save."""

    def wait_for_save(self):
        """Starts this step's saves (async_save: not waited for)."""
        self._kv.wait_for_save()

    def handle_preemptions(self, connector_metadata):
        """Before the step reuses preempted requests' pages: their saves
        still running are waited for."""
        inner = getattr(connector_metadata, "inner", None)
        if inner is not None and inner.preempted:
            self._kv.handle_preemptions(inner.preempted)

    def get_finished(self, finished_req_ids):
        """(finished requests whose async save ended or failed, requests
        whose async load ended or failed); synchronous loads and saves end
        within their step and are not named. Each rank reports its own; vLLM
        waits for all of them."""
        sending, recving = self._kv.get_finished_async(finished_req_ids)
        return sending or None, recving or None

    def get_block_ids_with_load_errors(self):
        return set(self._kv.get_block_ids_with_load_errors())

    def shutdown(self):
        self._kv.close()


def _flag(extra, name, default):
    """A boolean of the extra config (JSON true/false, or "true"/"false")."""
    v = extra.get(name, default)
    if isinstance(v, str):
        if v.lower() not in ("true", "false", "1", "0"):
            raise ValueError("kvtier: %s is true or false, not %r" % (name, v))
        return v.lower() in ("true", "1")
    return bool(v)


def _address(mem):
    """Address of an EngineMemory's mapping in this process."""
    return ctypes.addressof(ctypes.c_char.from_buffer(mem.buf))


class _Off:
    """The connector of a model kvtier cannot serve, with on_unsupported
    "warn": nothing matched, loaded or saved, on both sides; vLLM serves
    as without a connector."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return 0, False

    def update_state_after_alloc(self, request, block_ids, num_external_tokens):
        pass

    def build_connector_meta(self, scheduled, preempted=()):
        return None

    def request_finished(self, request, block_ids=None):
        return False, None

    def handle_preemptions(self, preempted):
        pass

    def bind_connector_metadata(self, meta):
        pass

    def clear_connector_metadata(self):
        pass

    def start_load_kv(self, forward_context=None, **kwargs):
        pass

    def wait_for_layer_load(self, layer):
        return True

    def wait_for_save(self):
        return 0

    def get_finished(self, finished_req_ids=()):
        return set(), set()

    def get_finished_async(self, finished_req_ids=()):
        return set(), set()

    def get_block_ids_with_load_errors(self):
        return set()

    def close(self):
        pass


def _memfd_of(mems, ptr):
    """(EngineMemory, its address) of the memfd of _memfd_allocation that
    holds ptr; ValueError when none does."""
    for mem in mems or ():
        base = _address(mem)
        if base <= ptr < base + mem.nbytes:
            return mem, base
    raise ValueError("KV buffer not allocated through get_mem_pool_context "
                     "(kvtierd cannot map it)")


def _parts_of(views, mems, pages, page, page_stride):
    """kvtier.RegionParts of per-layer views (each a run of pages of 2 x
    page bytes, K then V, page_stride apart): a part per memfd on CPU, per
    CUDA allocation (its IPC handle; a tensor's storage may sit inside a
    larger one) on GPU."""
    parts, index, layers = [], {}, []
    for v in views:
        if v.device.type == "cpu":
            mem, base = _memfd_of(mems, v.data_ptr())
            key = id(mem)
            if key not in index:
                index[key] = len(parts)
                parts.append(kvtier.Part(mem.fd, mem.nbytes))
            layers.append((index[key], v.data_ptr() - base))
            continue
        st = v.untyped_storage()
        ipc = st._share_cuda_()
        handle, at = bytes(ipc[1]), int(ipc[3])   # the storage's offset in the allocation
        if handle not in index:
            index[handle] = len(parts)
            parts.append(kvtier.Part(-1, 0, cuda_ipc=handle))
        part = parts[index[handle]]
        part.nbytes = max(part.nbytes, at + st.nbytes())
        layers.append((index[handle], at + v.data_ptr() - st.data_ptr()))
    if len(parts) > 128:
        raise ValueError("%d KV allocations: kvtierd takes 128 parts at most" % len(parts))
    return kvtier.RegionParts(parts, layers, pages, kv_stride=page, page_stride=page_stride,
                              device=views[0].device.index or 0)
