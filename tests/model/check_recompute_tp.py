#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kvtier-bench recompute's models on one H100: a model whose weights and
prefix do not fit one GPU is modeled on the tensor-parallel group it needs
(recompute at that many GPUs' FLOP/s), never on one GPU it does not fit.
Usage: check_recompute_tp.py REPORT.json MODEL=TP..."""
import json
import sys

report = json.load(open(sys.argv[1]))
by_name = {m["name"]: m for m in report["models"]}
for want in sys.argv[2:]:
    name, tp = want.split("=")
    m = by_name[name]
    gpu = next(r for r in m["recompute"] if r["name"] == "gpu")
    flops = report["gpu_bf16_flops"] * report["mfu"] * int(tp)
    if m["tp"] != int(tp) or abs(gpu["flops_per_s"] - flops) > 1e-6 * flops:
        sys.exit("%s: tp %d at %.4g FLOP/s, expected tp %s at %.4g" %
                 (name, m["tp"], gpu["flops_per_s"], tp, flops))
# a failed measurement says why, a working one says nothing
for p in report["paths"]:
    if (p["source"] == "measured" and p["bytes_per_s"] == 0) != (p.get("error") is not None):
        sys.exit("path %s: bytes_per_s %g, error %r" % (p["name"], p["bytes_per_s"], p.get("error")))
# the DRAM tier's ratio is to a memcpy from the same kind of pages as the tier's
for p in report["paths"]:
    if p["name"] == "dram-tier" and p["bytes_per_s"] > 0 and \
            (not p.get("pages") or p.get("reference_pages") != p["pages"]):
        sys.exit("path dram-tier on %r pages, its memcpy reference on %r" %
                 (p.get("pages"), p.get("reference_pages")))
print("ok")
