#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The summary of the GPU check (tests/gpu/run.sh calls it last).

Reads what the run left in --out (ctest-gpu.xml: the gpu tests; copy.json:
kvtier-bench copy), prints one summary with PASS, FAIL or SKIP on each line,
writes it to summary.txt and, line by line, to summary.json there, and exits
0 (every line passed on a GPU), 1 (a line failed) or 77 (no GPU: the build and
the skips are reported, but nothing ran on hardware).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

MIB = 1 << 20
PINNED_MIN_BYTES = 4 * MIB  # below this a copy is latency-bound: shown, not judged
MODEL = {"layers": 32, "block_tokens": 16}  # the model the targets name

# path in copy.json -> (minimum ratio, what the ratio is against)
TARGETS = {
    "h2d_pinned": (0.90, "of the best pinned copy of the run"),
    "d2h_pinned": (0.90, "of the best pinned copy of the run"),
    "gather_direct": (0.85, "of one contiguous pinned copy"),
    "scatter_direct": (0.85, "of one contiguous pinned copy"),
    "gather_direct_vs_per_layer": (5.0, "x the per-layer baseline"),
    "scatter_direct_vs_per_layer": (5.0, "x the per-layer baseline"),
}

STEP_FAILURES = {
    "nvcc-missing": "nvcc not found",
    "libraries": "libraries missing (neither the system's nor a bundle)",
    "configure": "configure failed (configure.log)",
    "cuda-off": "configured without the CUDA kernels (configure.log)",
    "build": "build of gpu-check failed (build.log)",
    "configure-timeout": "configure ran out of time (KVT_GPU_DEADLINE; configure.log)",
    "build-timeout": "build of gpu-check ran out of time (KVT_GPU_DEADLINE; build.log)",
}


def size(n):
    return f"{n // MIB} MiB" if n >= MIB else f"{n // 1024} KiB"


def commit(src):
    try:
        return subprocess.run(["git", "-C", src, "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def read_tests(path):
    """[(name, status, seconds, note)] from ctest's JUnit file, or None."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    tests = []
    for tc in root.iter("testcase"):
        out = (tc.findtext("system-out") or "").strip().splitlines()
        skip_lines = [l for l in out if l.startswith("SKIP")]
        if tc.find("skipped") is not None or tc.get("status") == "notrun":
            note = skip_lines[0].split(":", 1)[-1] if skip_lines else "skipped"
            status = "SKIP"
        elif tc.find("failure") is not None or tc.get("status") == "fail":
            fails = [l for l in out if "FAIL" in l or "rror" in l]
            note = (fails or out or ["failed"])[-1]
            status = "FAIL"
        else:
            status, note = "PASS", ""
        tests.append((tc.get("name"), status, float(tc.get("time") or 0), note.strip()))
    return tests


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--src", default=".")
    ap.add_argument("--gpu", default="")
    ap.add_argument("--gpu-reason", default="")
    ap.add_argument("--require", default="0")
    ap.add_argument("--deps", default="-")
    ap.add_argument("--archs", default="")
    ap.add_argument("--nvcc", default="")
    ap.add_argument("--jobs", default="")
    ap.add_argument("--times", default="")
    ap.add_argument("--failed", default="")
    a = ap.parse_args()

    failed = a.failed.split()
    gpu = a.gpu.strip()
    require = a.require == "1"
    lines = []  # dicts: section, status, name, detail (+ figures)
    text = []

    def line(section, status, name, detail="", **extra):
        lines.append(dict(section=section, status=status, name=name, detail=detail, **extra))
        text.append(f"  {status:5} {name:34} {detail}".rstrip())

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text.append(f"== kvtier GPU check, {now}, commit {commit(a.src) or 'unknown'}")

    # the machine and the build
    if gpu:
        line("gpu", "PASS", "GPU", gpu)
    elif require:
        line("gpu", "FAIL", "GPU", f"none ({a.gpu_reason}) and KVT_TEST_REQUIRE_GPU=1")
    else:
        line("gpu", "SKIP", "GPU", f"none ({a.gpu_reason})")
    build_fail = [STEP_FAILURES[f] for f in failed if f in STEP_FAILURES]
    how = f"CUDA kernels for {a.archs or '?'}, nvcc {a.nvcc or '?'}, {a.jobs} jobs"
    line("build", "FAIL" if build_fail else "PASS", "build (target gpu-check)",
         "; ".join(build_fail) if build_fail else how)
    line("build", "info", "libraries", a.deps)

    # the tests
    text.append(f"tests (label gpu, KVT_TEST_REQUIRE_GPU={1 if require or gpu else 0}):")
    tests = read_tests(os.path.join(a.out, "ctest-gpu.xml"))
    ctest_rc = [f for f in failed if f.startswith("ctest-rc-")]
    if build_fail:
        line("tests", "FAIL", "gpu tests", "not run: the build failed")
    elif tests is None:
        line("tests", "FAIL", "gpu tests", "no results (ctest-gpu.log)")
    else:
        for name, status, secs, note in tests:
            line("tests", status, name, f"{secs:6.1f} s  {note}".rstrip(), seconds=secs)
        if not tests:
            line("tests", "FAIL", "gpu tests", "ctest found no test labelled gpu")
    for f in ctest_rc:
        line("tests", "FAIL", "ctest", f"exit status {f[len('ctest-rc-'):]} (ctest-gpu.log)")

    # the figures
    copy = None
    try:
        with open(os.path.join(a.out, "copy.json")) as f:
            copy = json.load(f)
    except (OSError, ValueError):
        pass
    bench_rc = [f for f in failed if f.startswith("bench-rc-")]
    if copy and copy.get("backend") == "cuda":
        model = copy.get("model", {})
        text.append(f"figures: kvtier-bench copy --backend cuda on {copy.get('device')} "
                    f"(sm_{copy.get('compute_capability', '?').replace('.', '')}, PCIe gen "
                    f"{copy.get('pcie_gen')} x{copy.get('pcie_width')}), medians of "
                    f"{copy.get('reps')}; gather/scatter: {model.get('blocks_per_call')} blocks "
                    f"of {model.get('block_tokens')} tokens, {model.get('layers')} layers, "
                    f"{model.get('kv_heads')} KV heads x {model.get('head_dim')}, "
                    f"{model.get('dtype')}")
        like_model = all(model.get(k) == v for k, v in MODEL.items())
        seen = set()
        for c in copy.get("cases", []):
            path, bb, ratio = c["path"], c["block_bytes"], c["ratio"]
            fig = (f"{c['gbps']:8.2f} GB/s vs {c['reference_gbps']:8.2f}  "
                   f"ratio {ratio:5.2f}")
            target = TARGETS.get(path)
            judged = target and (not path.endswith("_pinned") or bb >= PINNED_MIN_BYTES)
            if judged:
                want, against = target
                seen.add(path)
                ok = ratio >= want and (like_model or path.endswith("_pinned"))
                note = f"target >= {want:g} {against}"
                if not like_model and not path.endswith("_pinned"):
                    note += f" (model is not {MODEL}: not comparable)"
                line("figures", "PASS" if ok else "FAIL", f"{path} {size(bb)}",
                     f"{fig}  {note}", ratio=ratio, target=want, gbps=c["gbps"],
                     reference_gbps=c["reference_gbps"], block_bytes=bb)
            else:
                line("figures", "info", f"{path} {size(bb)}", fig, ratio=ratio,
                     gbps=c["gbps"], reference_gbps=c["reference_gbps"], block_bytes=bb)
        for path in TARGETS:
            if path not in seen:
                line("figures", "FAIL", path, "missing from copy.json")
    elif gpu:
        text.append("figures: kvtier-bench copy --backend cuda")
        try:
            with open(os.path.join(a.out, "copy.err")) as f:
                err = f.readline().strip()
        except OSError:
            err = ""
        why = (f"the bench failed ({', '.join(bench_rc)}): {err}" if bench_rc
               else "no cuda figures in copy.json")
        for path in TARGETS:
            line("figures", "FAIL", path, why)
    else:
        text.append("figures: no GPU, so none of the targets is measured")
        if copy and not bench_rc:
            line("figures", "PASS", "kvtier-bench copy runs",
                 f"host backend, {len(copy.get('cases', []))} cases at toy sizes (copy.json)")
        elif not build_fail:
            line("figures", "FAIL", "kvtier-bench copy runs",
                 (", ".join(bench_rc) or "no copy.json") + " (copy.err)")
        for path, (want, against) in TARGETS.items():
            line("figures", "SKIP", path, f"target >= {want:g} {against}: no GPU")

    times = dict(t.split("=", 1) for t in a.times.split() if "=" in t)
    total = sum(int(v) for v in times.values())
    text.append(f"elapsed {total} s (" + ", ".join(f"{k} {v} s" for k, v in times.items()) + ")")
    n_fail = sum(1 for l in lines if l["status"] == "FAIL")
    n_skip = sum(1 for l in lines if l["status"] == "SKIP")
    if n_fail:
        result, rc = f"FAIL ({n_fail} lines)", 1
    elif not gpu:
        result, rc = (f"SKIPPED: no GPU, the kernels did not run on hardware "
                      f"(built; {n_skip} lines skipped)"), 77
    else:
        result, rc = f"PASS on {gpu}", 0
    text.append(f"RESULT: {result}")

    summary = "\n".join(text) + "\n"
    sys.stdout.write(summary)
    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write(summary)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"gpu": gpu or None, "gpu_reason": a.gpu_reason or None,
                   "result": result, "exit": rc, "seconds": times, "libraries": a.deps,
                   "lines": lines}, f, indent=2)
        f.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
