#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The verdicts of tests/gpu/summary.py on made-up results of a GPU run:
which figures it judges against which target, and its exit status. Time on a
GPU machine is short; a summary that misjudges must be caught here, not there."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SUMMARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "summary.py")
MIB = 1 << 20

JUNIT_CASE = """	<testcase name="{name}" classname="{name}" time="1.5" status="{status}">
{inner}	</testcase>
"""


def junit(results):
    cases = ""
    for name, status in results.items():
        inner = ""
        if status == "fail":
            inner = ('\t\t<failure message="Failed"/>\n'
                     "\t\t<system-out>[  FAILED  ] gather_matches_reference\n</system-out>\n")
        elif status == "notrun":
            inner = ('\t\t<skipped message="SKIP_RETURN_CODE=77"/>\n'
                     "\t\t<system-out>SKIP: CUDA backend unavailable: no usable GPU\n</system-out>\n")
        cases += JUNIT_CASE.format(name=name, status=status, inner=inner)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="(empty)" tests="%d">\n%s'
            "</testsuite>\n" % (len(results), cases))


def bench(overrides=None, drop=(), layers=32):
    """A cuda copy.json in kvtier-bench's shape, every target met unless overridden."""
    cases = []
    for bb in (64 << 10, 256 << 10, MIB, 4 * MIB, 16 * MIB, 64 * MIB):
        for d in ("h2d", "d2h"):
            # small copies are latency-bound: far below the best, and not judged
            cases.append((f"{d}_pinned", bb, 0.3 if bb < 4 * MIB else 0.97))
            cases.append((f"{d}_pageable", bb, 0.6))
    for d in ("gather", "scatter"):
        cases += [(f"{d}_direct", 2 * MIB, 0.92), (f"{d}_staged", 2 * MIB, 0.5),
                  (f"{d}_per_layer", 2 * MIB, 0.1), (f"{d}_direct_vs_per_layer", 2 * MIB, 9.2)]
    out = []
    for path, bb, ratio in cases:
        ratio = (overrides or {}).get((path, bb), ratio)
        if (path, bb) in drop:
            continue
        out.append({"path": path, "block_bytes": bb, "gbps": 50.0 * ratio,
                    "reference_gbps": 50.0, "ratio": ratio})
    return {"backend": "cuda", "device": "NVIDIA H200", "compute_capability": "9.0",
            "pcie_gen": 5, "pcie_width": 16, "reps": 5,
            "model": {"layers": layers, "kv_heads": 8, "head_dim": 128, "dtype": "bf16",
                      "block_tokens": 16, "blocks_per_call": 32},
            "cases": out}


TESTS_PASS = {f"test_gpu_{n}": "run" for n in ("gather", "stream", "api", "store", "ipc")}


class Summary(unittest.TestCase):
    def run_summary(self, tests=TESTS_PASS, copy_json=None, gpu="NVIDIA H200, 570.86", failed="",
                    require="1"):
        d = tempfile.mkdtemp(prefix="kvt-gpu-summary-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        if tests is not None:
            with open(os.path.join(d, "ctest-gpu.xml"), "w") as f:
                f.write(junit(tests))
        if copy_json is not None:
            with open(os.path.join(d, "copy.json"), "w") as f:
                json.dump(copy_json, f)
        p = subprocess.run([sys.executable, SUMMARY, "--out", d, "--gpu", gpu,
                            "--gpu-reason", "" if gpu else "nvidia-smi not found",
                            "--require", require, "--deps", "system", "--archs", "90-real",
                            "--times", "configure=10 build=40 tests=20 bench=30",
                            "--failed", failed], capture_output=True, text=True)
        with open(os.path.join(d, "summary.json")) as f:
            js = json.load(f)
        with open(os.path.join(d, "summary.txt")) as f:
            self.assertEqual(f.read(), p.stdout)
        return p.returncode, p.stdout, js

    def status(self, js, name):
        return [l["status"] for l in js["lines"] if l["name"] == name]

    def test_every_target_met_passes(self):
        rc, out, js = self.run_summary(copy_json=bench())
        self.assertEqual(rc, 0, out)
        self.assertIn("RESULT: PASS on NVIDIA H200", out)
        for name in ("h2d_pinned 4 MiB", "d2h_pinned 64 MiB", "gather_direct 2 MiB",
                     "scatter_direct_vs_per_layer 2 MiB"):
            self.assertEqual(self.status(js, name), ["PASS"], name)
        # latency-bound small copies are shown, not judged
        self.assertEqual(self.status(js, "h2d_pinned 64 KiB"), ["info"])
        self.assertEqual(self.status(js, "gather_staged 2 MiB"), ["info"])
        self.assertEqual(js["seconds"]["build"], "40")

    def test_pinned_below_090_of_best_fails(self):
        rc, out, js = self.run_summary(copy_json=bench({("d2h_pinned", 16 * MIB): 0.89}))
        self.assertEqual(rc, 1, out)
        self.assertEqual(self.status(js, "d2h_pinned 16 MiB"), ["FAIL"])
        self.assertEqual(self.status(js, "d2h_pinned 4 MiB"), ["PASS"])
        self.assertIn("RESULT: FAIL (1 lines)", out)

    def test_gather_below_085_and_under_5x_per_layer_fail(self):
        rc, _, js = self.run_summary(copy_json=bench({("gather_direct", 2 * MIB): 0.84,
                                                     ("scatter_direct_vs_per_layer", 2 * MIB): 4.9}))
        self.assertEqual(rc, 1)
        self.assertEqual(self.status(js, "gather_direct 2 MiB"), ["FAIL"])
        self.assertEqual(self.status(js, "scatter_direct_vs_per_layer 2 MiB"), ["FAIL"])
        self.assertEqual(self.status(js, "scatter_direct 2 MiB"), ["PASS"])

    def test_another_model_is_not_comparable(self):
        rc, out, js = self.run_summary(copy_json=bench(layers=16))
        self.assertEqual(rc, 1)
        self.assertEqual(self.status(js, "gather_direct 2 MiB"), ["FAIL"])
        self.assertIn("not comparable", out)
        self.assertEqual(self.status(js, "h2d_pinned 4 MiB"), ["PASS"])

    def test_missing_figure_fails(self):
        rc, _, js = self.run_summary(copy_json=bench(drop={("scatter_direct", 2 * MIB)}))
        self.assertEqual(rc, 1)
        self.assertEqual(self.status(js, "scatter_direct"), ["FAIL"])

    def test_failed_bench_on_a_gpu_fails_every_target(self):
        rc, out, js = self.run_summary(copy_json=None, failed="bench-rc-1")
        self.assertEqual(rc, 1)
        self.assertEqual(sum(l["status"] == "FAIL" for l in js["lines"]), 6, out)

    def test_failed_test_fails(self):
        tests = dict(TESTS_PASS, test_gpu_ipc="fail")
        rc, out, js = self.run_summary(tests=tests, copy_json=bench())
        self.assertEqual(rc, 1)
        self.assertEqual(self.status(js, "test_gpu_ipc"), ["FAIL"])
        self.assertIn("gather_matches_reference", out)

    def test_build_failure_fails_without_results(self):
        rc, out, js = self.run_summary(tests=None, failed="build")
        self.assertEqual(rc, 1)
        self.assertEqual(self.status(js, "build (target gpu-check)"), ["FAIL"])
        self.assertEqual(self.status(js, "gpu tests"), ["FAIL"])

    def test_deadline_reached_says_so(self):
        rc, out, js = self.run_summary(tests=None, failed="configure-timeout")
        self.assertEqual(rc, 1)
        self.assertEqual(self.status(js, "build (target gpu-check)"), ["FAIL"])
        self.assertIn("ran out of time (KVT_GPU_DEADLINE", out)

    def test_no_gpu_is_a_skip_with_reasons(self):
        host = dict(bench(), backend="host")
        tests = {n: "notrun" for n in TESTS_PASS}
        rc, out, js = self.run_summary(tests=tests, copy_json=host, gpu="", require="0")
        self.assertEqual(rc, 77, out)
        self.assertIn("RESULT: SKIPPED: no GPU", out)
        self.assertEqual(self.status(js, "test_gpu_api"), ["SKIP"])
        self.assertIn("no usable GPU", out)
        self.assertEqual(self.status(js, "gather_direct"), ["SKIP"])

    def test_no_gpu_when_required_fails(self):
        tests = {n: "notrun" for n in TESTS_PASS}
        rc, _, js = self.run_summary(tests=tests, copy_json=dict(bench(), backend="host"),
                                     gpu="", require="1")
        self.assertEqual(rc, 1)
        self.assertEqual(self.status(js, "GPU"), ["FAIL"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
