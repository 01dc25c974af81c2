#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One vLLM engine (offline LLM, CPU) serving the test's requests: started
once per engine the test needs, it reads JSON lines on stdin and answers
each with one JSON line on stdout.

    argv[1]: JSON {"model": dir (a checkpoint: vllm_env.seeded_model),
                   "connector": {...kv_transfer_config} or null,
                   "prefix_caching": bool, "seed": int, "tp": tensor parallel size,
                   "load_format": "dummy" for a model directory without weights (benches),
                   "per_layer_kv": bool (a KV tensor per layer, as older
                   vLLM releases allocated)}
    request:  {"prompts": [[token ids]...], "max_tokens": n}
    answer:   {"outputs": [{"tokens": [...], "logprob0": float,
                            "cached": num_cached_tokens, "loaded_blocks": n,
                            "load_failed": bool, "seconds": time of generate}...]}
              (with "kill_pid": kvtierd is SIGKILLed after the first layer
              of the next load; with "kill_on": "async_load", once the
              first layer of the next async load is in place, "save": once
              the next save is sent; "batch": true, the prompts go in one
              generate; "drain": true, the engine steps until it holds no
              request, finished ones included, and the answer adds
              "free_blocks", "total_blocks", "preemptions")
    request:  {"abort": prompt, "after": "load" or "prefill", "max_tokens": n}
              ("load": the connector sees the load running until after
              the abort, as it would a slow one)
    answer:   {"aborted": true, "status": the request's status when aborted,
               "free_blocks", "total_blocks"} (the engine drained)
    request:  {"quit": true}

The engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so
a test's SIGKILL of kvtierd hits a load in the same process as the answer.
"""

import json
import os
import signal
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# the answers get the real stdout; whatever vLLM and its libraries print
# (from C too) goes to stderr
ANSWERS = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)


def main():
    cfg = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kw = {}
    if cfg.get("per_layer_kv"):
        _allocate_per_layer()
    if cfg.get("connector"):
        kw["kv_transfer_config"] = cfg["connector"]
    llm = LLM(model=cfg["model"], load_format=cfg.get("load_format", "auto"),
              skip_tokenizer_init=True,
              seed=cfg.get("seed", 0), dtype=cfg.get("dtype", "float32"),
              block_size=cfg.get("block_size", 32), enforce_eager=True,
              enable_prefix_caching=cfg.get("prefix_caching", False),
              kv_cache_memory_bytes=cfg.get("kv_bytes", 64 << 20),
              max_model_len=cfg.get("max_model_len", 2048),
              max_num_batched_tokens=cfg.get("max_batched", 2048),
              served_model_name=cfg.get("served_name", "kvtier-tiny"),
              tensor_parallel_size=cfg.get("tp", 1), **kw)
    out = ANSWERS
    sched = llm.llm_engine.engine_core.engine_core.scheduler
    preemptions = _count_preemptions(sched)
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        if "abort" in req:
            print(json.dumps(_abort(llm, sched, req)), file=out, flush=True)
            continue
        sp = SamplingParams(temperature=0.0, max_tokens=req.get("max_tokens", 8),
                            logprobs=1, detokenize=False, ignore_eos=True)
        failures, loaded = _load_failures(), _stat("loaded_blocks")
        if req.get("kill_pid"):
            {"async_load": _kill_after_async_layer, "save": _kill_after_save}.get(
                req.get("kill_on"), _kill_after_first_layer)(req["kill_pid"])
        answers = []
        if req.get("batch"):
            rs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in req["prompts"]], sp,
                              use_tqdm=False)
            answers = [_answer(r, False, 0, 0.0) for r in rs]
            req["prompts"] = []
        # one request at a time: each one's hits come from what the last saved
        for p in req["prompts"]:
            t0 = time.perf_counter()
            r = llm.generate([TokensPrompt(prompt_token_ids=p)], sp, use_tqdm=False)[0]
            seconds = time.perf_counter() - t0
            now, blocks = _load_failures(), _stat("loaded_blocks")
            answers.append(_answer(r, now > failures, blocks - loaded, seconds))
            failures, loaded = now, blocks
        if req.get("kill_pid"):
            for name in ("wait_for_layer_load", "_start_async_load", "wait_for_save"):
                _worker_connector().kvtier.__dict__.pop(name, None)
        reply = {"outputs": answers}
        if req.get("drain"):
            reply.update(_drain(llm, sched), preemptions=preemptions[0])
        print(json.dumps(reply), file=out, flush=True)


def _answer(r, load_failed, loaded_blocks, seconds):
    c = r.outputs[0]
    lp0 = c.logprobs[0][c.token_ids[0]].logprob if c.logprobs else None
    return {"tokens": list(c.token_ids), "logprob0": lp0, "cached": r.num_cached_tokens or 0,
            "load_failed": load_failed, "loaded_blocks": loaded_blocks, "seconds": seconds}


def _drain(llm, sched, limit_s=60.0):
    """Step the engine until its scheduler holds no request (a finished one
    whose pages wait for a save's end included); the pages free then."""
    end = time.monotonic() + limit_s
    while sched.has_requests() and time.monotonic() < end:
        llm.llm_engine.step()
    pool = sched.kv_cache_manager.block_pool
    return {"free_blocks": pool.get_num_free_blocks(), "total_blocks": pool.num_gpu_blocks - 1,
            "held_requests": len(sched.requests),
            "stats": _worker_connector().kvtier.stats if _worker_connector() else {}}


def _abort(llm, sched, req):
    """One request, stepped until its async load is in flight ("load") or
    its prefill has ended and its save been sent ("prefill"), then aborted
    (vLLM's LLMEngine.abort_request) and the engine drained."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.v1.request import RequestStatus
    sp = SamplingParams(temperature=0.0, max_tokens=req.get("max_tokens", 64),
                        detokenize=False, ignore_eos=True)
    rid = "abort-%d" % time.monotonic_ns()
    kv = _worker_connector().kvtier
    if req["after"] == "load":
        # a slow load: the connector sees it running until after the abort
        poll = kv._poll
        kv._poll = lambda item, now, what: (None, 0) if what == "load" else poll(item, now, what)
    llm.llm_engine.add_request(rid, TokensPrompt(prompt_token_ids=req["abort"]), sp)
    status = None
    for _ in range(1000):
        llm.llm_engine.step()
        r = next((x for k, x in sched.requests.items() if k.startswith(rid)), None)
        if r is None:
            break
        status = r.status.name
        if req["after"] == "load" and r.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
            break
        if req["after"] == "prefill" and r.num_computed_tokens >= r.num_prompt_tokens:
            break
    llm.llm_engine.step()
    llm.llm_engine.abort_request([rid])
    llm.llm_engine.step()
    kv.__dict__.pop("_poll", None)
    out = {"aborted": True, "status": status}
    out.update(_drain(llm, sched))
    return out


def _count_preemptions(sched):
    count = [0]
    preempt = sched._preempt_request

    def counted(*a, **kw):
        count[0] += 1
        return preempt(*a, **kw)

    sched._preempt_request = counted
    return count


def _worker_connector():
    """The worker's KvtierConnector (in this process: one in-process
    engine core with a uniprocess executor), or None (tensor parallel: the
    workers are processes of their own)."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group
    return get_kv_transfer_group() if has_kv_transfer_group() else None


def _stat(name):
    conn = _worker_connector()
    return conn.kvtier.stats[name] if conn else 0


def _load_failures():
    return _stat("load_failures")


def _allocate_per_layer():
    """vLLM's KV allocation as releases before the shared backing made it:
    one zeroed int8 tensor per layer, each viewed as that layer's pages (the
    same [B, H, N, C] view, dense pages, block stride one page). Each is an
    allocation of its own, at whatever address the allocator gives."""
    from dataclasses import replace
    from math import prod

    import torch
    from vllm.v1 import kv_cache_interface as kci
    from vllm.v1.worker import gpu_model_runner, utils

    def allocate(kv_cache_config, device, layout, kernel_block_sizes=None):
        kv_caches = {}
        for tensor in kv_cache_config.kv_cache_tensors:
            gid, group = next((i, g) for i, g in enumerate(kv_cache_config.kv_cache_groups)
                              if tensor.layers[0] in g.layer_names)
            kbs = kernel_block_sizes[gid] if kernel_block_sizes and \
                gid < len(kernel_block_sizes) else None
            blocks = kv_cache_config.num_blocks_of(tensor)
            for name in tensor.layers:
                spec = group.kv_cache_spec
                spec = getattr(spec, "kv_cache_specs", {}).get(name, spec)
                page = prod(kci.compute_layer_kv_cache_shape_bytes(spec, 1)[1:])
                buf = torch.zeros(blocks * page, dtype=torch.int8, device=device)
                one = replace(tensor, size=blocks * page, layers=[name], offset=0,
                              layer_stride=blocks * page, block_stride=page)
                kv_caches[name] = kci.create_kv_cache_views(buf, spec, blocks, layout, one,
                                                            kernel_block_size=kbs)[0]
        return kv_caches

    assert utils.allocate_kv_cache is gpu_model_runner.allocate_kv_cache
    utils.allocate_kv_cache = gpu_model_runner.allocate_kv_cache = allocate


def _kill_after_first_layer(pid):
    """SIGKILL kvtierd once the next load's first layer is in place, and
    return from that wait only when it is dead: the second layer's wait
    meets a daemon that is gone."""
    kv = _worker_connector().kvtier
    wait = kv.wait_for_layer_load

    def wait_then_kill(layer):
        ok = wait(layer)
        if kv._loading and kv.wait_for_layer_load is wait_then_kill:
            kv.wait_for_layer_load = wait
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.005)
        return ok

    kv.wait_for_layer_load = wait_then_kill


def _kill_now(pid):
    os.kill(pid, signal.SIGKILL)
    while _alive(pid):
        time.sleep(0.005)


def _kill_after_async_layer(pid):
    """SIGKILL kvtierd once the next async load's first layer is in place,
    before the connector polls it: with completions "wait" the poll asks
    the dead daemon, so the load fails."""
    kv = _worker_connector().kvtier
    start = kv._start_async_load

    def start_then_kill(spec):
        start(spec)
        kv.__dict__.pop("_start_async_load", None)
        ticket = kv._async_loads[spec.req_id][1]
        if ticket is not None:
            ticket.wait_layer(0, timeout=10)
        _kill_now(pid)

    kv._start_async_load = start_then_kill


def _kill_after_save(pid):
    """SIGKILL kvtierd as soon as the next step with a save has sent it."""
    kv = _worker_connector().kvtier
    wait = kv.wait_for_save

    def save_then_kill():
        sends = kv.stats["async_saves"]
        n = wait()
        if kv.stats["async_saves"] > sends:
            kv.__dict__.pop("wait_for_save", None)
            _kill_now(pid)
        return n

    kv.wait_for_save = save_then_kill


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


if __name__ == "__main__":
    main()
