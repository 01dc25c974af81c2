#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Grafana dashboard (packaging/grafana/kvtier-dashboard.json) against a
live kvtierd (its SSD tier over two directories, so that the per-device
families are there): every metric its queries name is on /metrics, with samples,
once an engine has saved, looked up and loaded. A family renamed or removed
in the daemon fails here, not on an operator's empty panel.

Run by ctest with KVTIERD, KVTIER_CLIENT_LIB, PYTHONPATH and KVT_SOURCE_DIR
set; KVT_TEST_TMPDIR holds the daemon's directory."""

import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest
import urllib.request

import kvtier
from kvtier.daemon import Daemon

DAEMON_ENV = dict(os.environ, ASAN_OPTIONS=os.environ["KVT_DAEMON_ASAN_OPTIONS"]) \
    if os.environ.get("KVT_DAEMON_ASAN_OPTIONS") else None
DASHBOARD = os.path.join(os.environ.get("KVT_SOURCE_DIR") or
                         os.path.join(os.path.dirname(__file__), "..", ".."),
                         "packaging", "grafana", "kvtier-dashboard.json")
# PromQL words that are not metrics (functions are told by their "(")
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
            "offset", "and", "or", "unless", "inf", "nan"}


def metric_names(expr):
    """The metric names a PromQL expression reads."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)           # strings
    e = re.sub(r"\{[^}]*\}", "", e)                          # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                         # range durations
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?", e):
        if not m.group(2) and m.group(1).lower() not in KEYWORDS:
            names.add(m.group(1))
    return names


def dashboard_queries(board):
    """Every PromQL query in the dashboard: panels' targets (rows' too) and
    the templating's label_values()."""
    out = []
    panels = list(board["panels"])
    while panels:
        p = panels.pop()
        panels.extend(p.get("panels", []))
        out.extend(t["expr"] for t in p.get("targets", []) if t.get("expr"))
    for v in board.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.match(r"label_values\((\w+)", q or "")
        if m:
            out.append(m.group(1))
    return out


def sampled(text, name):
    """Whether the exposition has a sample of name (a histogram's through
    its _bucket, _sum and _count series, which PromQL names directly)."""
    return re.search(r"^%s(\{| )" % re.escape(name), text, re.M) is not None


class DashboardTest(unittest.TestCase):
    def test_the_extractor_reads_promql(self):
        self.assertEqual(metric_names(
            'histogram_quantile(0.99, sum by (le, op) (rate(a_bucket{x=~"$i",y="b c"}[$__rate_interval])))'
            ' / on (op) group_left b_total * 1e9 + c'), {"a_bucket", "b_total", "c"})

    def test_every_queried_metric_is_on_a_live_daemon(self):
        with open(DASHBOARD) as f:
            board = json.load(f)
        queries = dashboard_queries(board)
        self.assertGreater(len(queries), 20)
        wanted = set().union(*(metric_names(q) for q in queries))
        # the SSD tier over two directories, so the per-device panels have
        # samples too (every other family is the same as over one)
        base = os.environ.get("KVT_TEST_TMPDIR") or None
        if base:
            os.makedirs(base, exist_ok=True)
        ssd_dirs = [tempfile.mkdtemp(prefix="kvtier-dash-ssd.", dir=base) for _ in range(2)]
        d = Daemon(["--metrics", "127.0.0.1:0", "--no-prefault"] +
                   [a for p in ssd_dirs for a in ("--ssd-dir", p + ":16M")],
                   ssd="32M", env=DAEMON_ENV)
        self.addCleanup(lambda: [shutil.rmtree(p, ignore_errors=True) for p in ssd_dirs])
        try:
            port = self.metrics_port(d)
            self.traffic(d)
            text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
            no_ssd = "ssd.odirect_refused" in self.read(d.log.name)
        finally:
            self.assertEqual(d.stop(), 0)
            d.remove()
        if no_ssd:
            self.skipTest("the temp dir's file system has no O_DIRECT: no SSD tier")
        missing = sorted(n for n in wanted if not sampled(text, n))
        self.assertEqual(missing, [], "queried by the dashboard, absent from /metrics")

    @staticmethod
    def read(path):
        with open(path) as f:
            return f.read()

    @classmethod
    def metrics_port(cls, d):
        for _ in range(200):
            m = re.search(r"metrics\s+http://127\.0\.0\.1:(\d+)/metrics", cls.read(d.log.name))
            if m:
                return int(m.group(1))
            time.sleep(0.01)
        raise RuntimeError("no metrics address in the daemon's summary")

    @staticmethod
    def traffic(d):
        """Save, look up and load: what fills the hit, plan, delivered-rate
        and miss-ratio families."""
        with kvtier.Client(socket=d.socket) as c:
            ns = c.hello("dash/test", layers=4, kv_heads=2, head_dim=16, block_tokens=4)
            with kvtier.EngineMemory.paged(ns, pages=16) as mem:
                region = c.register(ns, mem)
                keys = ns.prefix_keys(list(range(8 * 4)))
                c.save(ns, region, keys, range(8)).wait()
                for _ in range(3):
                    c.lookup(ns, keys)
                    c.lookup_plan(ns, keys)
                    c.load(ns, region, keys, range(8, 16)).wait()


if __name__ == "__main__":
    unittest.main(verbosity=2)
