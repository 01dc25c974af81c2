#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The benches' results as data, and the docs' tables generated from them.

    bench_report.py [--check]             write (or, --check, compare) every table
                                          between markers in README.md and docs/*.md
    bench_report.py --from BENCH=FILE     take a bench's own --json output as
                                          docs/results/BENCH.json (the machine probed here)
    bench_report.py --run BENCH[,BENCH]   run each bench's documented command (its
                                          "command" in docs/results/BENCH.json) and take
                                          its JSON; then write the tables

A table is generated between two markers:

    <!-- table:results/dram.json -->          (or results/peers.json#2M: a named view)
    ...the generated Markdown table...
    <!-- /table -->

The path is relative to docs/. docs/results/BENCH.json holds "bench",
"source" ("run" or "transcribed from docs at DATE"), "command", "machine"
(CPU model, cores, kernel, disk, fio, page sizes, date, commit) and "data":
the bench's own JSON, or {"tables": {VIEW: {"columns", "rows", "formats"}}}
where no view reads the bench's JSON yet. --check also fails where a ratio
quoted in the prose of the measured pages (N.NN× or N.NNx) is in no results
file: a figure stated twice then has one source.

Exit status: 0 all good, 1 a table or a figure differs from its JSON.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = re.compile(r"^<!-- table:(results/[A-Za-z0-9_.-]+\.json)(?:#([A-Za-z0-9_-]+))? -->\n"
                  r"(.*?)^<!-- /table -->$", re.M | re.S)
MACHINE_KEYS = ("cpu_model", "cores", "kernel", "disk", "fio", "page_size",
                "huge_page_size", "date", "commit")
# pages whose prose ratios must come from a results file
PROSE_PAGES = ("README.md", "docs/benchmarks.md", "docs/ssd-performance.md", "docs/device.md",
               "docs/engines.md", "docs/trace-replay.md",
               "docs/peers-bench.md", "docs/limits.md")


# ---- rendering ----------------------------------------------------------------

def cell(v, fmt=None):
    if v is None:
        return "n/a"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if fmt:
        return format(v, fmt)
    return format(v, "g")


def markdown(columns, rows, formats=None, align=None):
    formats = formats or [None] * len(columns)
    align = align or ["---"] * len(columns)
    def line(cells):
        return "|" + "|".join(" %s " % c if c != "" else " " for c in cells) + "|"
    out = [line(columns), "|" + "|".join(align) + "|"]
    for r in rows:
        out.append(line([cell(v, f) for v, f in zip(r, formats)]))
    return "\n".join(out)


def size_name(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


# ---- views: a bench's own JSON as a table --------------------------------------

def view_dram(d, _):
    rows = [[size_name(c["block_bytes"]), c["put_gbps"], c["get_gbps"], c["memcpy_gbps"],
             c["put_ratio"], c["get_ratio"]] for c in d["cases"]]
    return markdown(["block", "put GB/s", "get GB/s", "memcpy GB/s", "put / memcpy",
                     "get / memcpy"], rows, [None, ".2f", ".2f", ".2f", ".3f", ".3f"])


def view_ssd(d, _):
    """kvtier-bench ssd --json: the tier against fio per block size and depth."""
    by = {}
    for c in d["cases"]:
        by.setdefault((c["block_bytes"], c["qd"]), {})[c["op"]] = c["ratio"]
    rows = [["`kvtier-bench ssd`, pages %s" % d.get("pages", "?") if i == 0 else "",
             size_name(blk), str(qd), r.get("write", ""), r.get("read", "")]
            for i, ((blk, qd), r) in enumerate(sorted(by.items()))]
    return markdown(["run", "block", "qd", "write / fio", "read / fio"], rows,
                    [None, None, None, ".2f", ".2f"])


def view_ssd_codecs(d, _):
    rows = [[c["data"], c["codec"], c["ratio"], c["encode_gbps"], c["decode_gbps"],
             c["memcpy_gbps"]] for c in d["compression"]]
    return markdown(["data", "codec", "ratio", "encode GB/s", "decode GB/s", "memcpy GB/s"],
                    rows, [None, None, ".3f", ".2f", ".2f", ".2f"],
                    ["---", "---", "---:", "---:", "---:", "---:"])


SIDECAR_OPS = (("ping", "PING"), ("lookup", "LOOKUP (64 keys)"),
               ("save", "SAVE 1 block + WAIT"), ("load", "LOAD 1 block + WAIT"))


def view_sidecar(d, view):
    """kvtier-bench sidecar --json: round trips, throughput, per-layer waits."""
    if view == "latency":
        rows = [[r["clients"], label, r[op + "_p50_us"], r[op + "_p99_us"],
                 r[op + "_ops_per_s"]] for r in d["runs"] for op, label in SIDECAR_OPS]
        return markdown(["clients", "op", "p50 µs", "p99 µs", "ops/s"], rows,
                        [None, None, ",.1f", ",.1f", ",.0f"])
    if view == "throughput":
        return markdown(["copies (`--host-copy`)", "run", "memcpy GB/s", "SAVE / memcpy",
                         "LOAD / memcpy"],
                        [["`%s`" % d["host_copy"], "one run", d["memcpy_gbps"],
                          d["save_vs_memcpy"], d["load_vs_memcpy"]]],
                        [None, None, ".2f", ".2f", ".2f"])
    pushed, waited = d["layer_wait_p50_us_pushed"], d["layer_wait_p50_us_waited"]
    lp, lw = d["layer_load_p50_us_pushed"], d["layer_load_p50_us_waited"]
    return markdown(["LOAD of %d × 2 MiB blocks, %d layers, %d µs of compute after each"
                     % (d["layer_blocks"], d["layers"], d["layer_compute_us"]),
                     "pushed", "WAIT per layer", "pushed / WAIT"],
                    [["one `kvt_client_wait_layer`, p50", "%.1f µs" % pushed,
                      "%.1f µs" % waited, "%.3f×" % (pushed / waited if waited else 0)],
                     ["the whole LOAD, request to result, p50", "%.2f ms" % (lp / 1e3),
                      "%.2f ms" % (lw / 1e3), "**%.2f×**" % (lp / lw if lw else 0)]])


PEER_ROWS = [
    ("put_gbps_1", "put GB/s, 1 client"), ("get_gbps_1", "get GB/s, 1 client"),
    ("put_gbps_8", "put GB/s, N clients"), ("get_gbps_8", "get GB/s, N clients"),
    ("get32_p50_ms", "32-block get p50 ms"), ("get32_p99_ms", "32-block get p99 ms"),
    ("lookup64_p50_us", "64-block lookup p50 us"), ("ssd_get_gbps", "SSD-resident get GB/s"),
    ("peer_get_gbps", "get GB/s from another node, TCP"), ("mem_per_gb", "memory per GB stored"),
    ("ready_s", "start to ready s"),
]


def peer_value(v):
    """three significant digits, trailing zeros kept (1.90, 1020)"""
    if v is None:
        return "n/a"
    if v >= 100:
        return "%.0f" % v
    return "%.1f" % v if v >= 10 else "%.2f" % v if v >= 1 else "%.3g" % v


def peer_ratio(v):
    return "n/a" if v is None else format(v, ".2f")


def view_peers_shape(d, name):
    sh = next(s for s in d["shapes"] if s["block"] == name)
    stores = d["stores"]
    peers = [s for s in stores if s != "kvtier"]
    rows = []
    for key, label in PEER_ROWS:
        r = sh["rows"][key]
        rows.append([label.replace("N clients", "%d clients" % d["clients"])]
                    + [peer_value(r.get(s)) for s in stores]
                    + [peer_ratio(r.get("kvtier_over_" + p)) for p in peers])
    return markdown(["row"] + stores + ["kvtier/" + p for p in peers], rows)


def view_peers_ratios(d, _):
    """kvtier/peer for both shapes side by side: the README's table."""
    shapes = d["shapes"]
    peers = [s for s in d["stores"] if s != "kvtier"]
    cols = ["row"] + ["/%s %s" % (p.capitalize().replace("Lmcache", "LMCache"),
                                  s["block"].replace("M", " MiB").replace("K", " KiB"))
                      for p in peers for s in shapes]
    rows = []
    for key, label in PEER_ROWS:
        cells = [label.replace("N clients", "%d clients" % d["clients"])]
        for p in peers:
            for s in shapes:
                r = s["rows"][key]
                v = r.get("kvtier_over_" + p)
                cells.append(peer_ratio(v) if v is not None else r.get("why", {}).get(p, "n/a"))
        rows.append(cells)
    return markdown(cols, rows)


def view_recompute_model(d, name):
    """Each path's rate, its ratio to its reference where measured, and what
    it does for one model's longest prefix against the GPU's recompute."""
    m = next(x for x in d["models"] if x["name"] == name)
    gpu = next(r for r in m["recompute"] if r["name"] == "gpu")
    last = gpu["points"][-1]
    paths = {p["name"]: p for p in d["paths"]}
    rows = [["recompute on the GPU", "modeled", "", "", "%.2f s" % last["seconds"], ""]]
    for ic in m["interconnects"]:
        p = paths[ic["name"]]
        be = ic["break_even_tokens"]
        ratio = "%.2f× %s" % (p["vs_reference"], p["reference"]) \
            if p["source"] == "measured" and p["vs_reference"] else ""
        rows.append([ic["name"], ic["source"], peer_value(p["bytes_per_s"] / 1e9), ratio,
                     fmt_s(ic["points"][-1]["load_s"]),
                     "always" if be == 1 else "never" if be < 0 else "{:,} tokens".format(be)])
    return markdown(["path", "measured or modeled", "GB/s", "vs reference",
                     "%s, %s prefix" % (name, tokens_name(last["tokens"])),
                     "loading wins from"], rows)


def fmt_s(s):
    return "%.2f s" % s if s >= 1 else "%.1f ms" % (s * 1e3)


def tokens_name(n):
    return "%dK" % (n // 1024) if n % 1024 == 0 else str(n)


def view_vllm_serve(d, _):
    """bench/vllm_serve.py --json: each server's throughput and TTFT, kvtier's
    ratio to it; a server that did not start says why."""
    rows = []
    for r in d["rows"]:
        if not r["ran"]:
            rows.append([r["mode"], "did not start: " + r["why_not"]] + [""] * 5)
            continue
        ratio = "%.2f×, %.2f×" % (r["kvtier_throughput_x"], r["kvtier_ttft_mean_x"]) \
            if "kvtier_throughput_x" in r else "—"
        rows.append([r["mode"], r["req_per_s"], r["out_tok_per_s"], r["ttft_mean_s"] * 1000,
                     r["ttft_p99_s"] * 1000, "%.0f%%" % (100 * r["cached_fraction"]), ratio])
    return markdown(["server", "requests/s", "output tokens/s", "TTFT mean ms", "TTFT p99 ms",
                     "prompt tokens cached", "kvtier vs this: throughput, TTFT mean"], rows,
                    [None, ".3f", ".1f", ",.0f", ",.0f", None, None])


def view_ssd_devices(d, _):
    """scripts/ssd-bench.sh --rows devs: kvtier-bench sidecar --tier ssd's JSON
    for each device count; medians of same-run ratios against the summed fio."""
    rows = []
    for r in d["runs"]:
        # one device: the bench lists none (it is the whole tier)
        per = [dev["kvtierd_read_bytes"] for dev in r["runs"][0].get("devices", [])]
        rows.append([r["devices"], r["fio_read_gbps"], r["fio_write_gbps"], r["load_gbps"],
                     r["save_gbps"], r["load_vs_fio"], r["save_vs_fio"], r["load_rest_vs_fio"],
                     "%d–%d" % (min(per) >> 20, max(per) >> 20) if per else "all"])
    return markdown(["devices", "fio read GB/s (summed)", "fio write GB/s (summed)",
                     "LOAD GB/s", "SAVE GB/s", "LOAD / fio", "SAVE / fio",
                     "LOAD of SSD blocks / fio", "MiB read per device"], rows,
                    [None, ".2f", ".2f", ".2f", ".2f", ".2f", ".2f", ".2f", None])


def view_tables(d, name):
    t = d["tables"][name or "main"]
    return markdown(t["columns"], t["rows"], t.get("formats"), t.get("align"))


VIEWS = {
    "dram": {None: view_dram},
    "vllm-serve": {None: view_vllm_serve},
    "ssd-devices": {None: view_ssd_devices},
    "ssd": {None: view_ssd},
    "ssd-codecs": {None: view_ssd_codecs},
    "sidecar": {"latency": view_sidecar, "throughput": view_sidecar, "layers": view_sidecar},
    "peers": {"2M": view_peers_shape, "256K": view_peers_shape, "ratios": view_peers_ratios},
    "recompute": {"Qwen3-8B": view_recompute_model,
                  "DeepSeek-V3": view_recompute_model, "Llama-3.1-70B": view_recompute_model},
}


def render(doc, view):
    d = doc["data"]
    if "tables" in d:
        return view_tables(d, view)
    fn = VIEWS.get(doc["bench"], {}).get(view)
    if fn is None:
        raise KeyError("no view %r of bench %r" % (view, doc["bench"]))
    return fn(d, view)


# ---- results files -------------------------------------------------------------

def load(path):
    doc = json.load(open(path, encoding="utf-8"))
    missing = [k for k in ("bench", "source", "command", "machine", "data") if k not in doc]
    missing += ["machine." + k for k in MACHINE_KEYS if k not in doc.get("machine", {})]
    if missing:
        raise ValueError("%s lacks %s" % (path, ", ".join(missing)))
    return doc


def probe_machine(dir_for_disk=None):
    """What the file records of the machine a bench ran on."""
    def run(*cmd):
        try:
            return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, check=True, cwd=ROOT).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None
    cpu = None
    for line in open("/proc/cpuinfo", encoding="utf-8"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    huge = None
    for line in open("/proc/meminfo", encoding="utf-8"):
        if line.startswith("Hugepagesize:"):
            huge = int(line.split()[1]) * 1024
    disk = run("findmnt", "-n", "-o", "SOURCE,FSTYPE", "--target", dir_for_disk or ROOT)
    if disk and disk.startswith("/dev/"):
        model = run("lsblk", "-n", "-s", "-o", "MODEL", disk.split()[0])
        model = " ".join(x for x in (model or "").split("\n") if x.strip())
        disk += " (%s)" % model.strip() if model.strip() else ""
    return {
        "cpu_model": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
        "disk": disk, "fio": run("fio", "--version") if shutil.which("fio") else None,
        "page_size": os.sysconf("SC_PAGE_SIZE"), "huge_page_size": huge,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "commit": (run("git", "rev-parse", "HEAD") or "") +
        (" with uncommitted changes" if run("git", "status", "--porcelain", "-uno") else ""),
    }


def take(root, bench, data, command):
    path = os.path.join(root, "docs", "results", bench + ".json")
    old = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else {}
    doc = {"bench": bench, "source": "run", "command": command or old.get("command", ""),
           "machine": probe_machine(), "data": data}
    if "tables" in old.get("data", {}) and "tables" not in data and bench not in VIEWS:
        sys.exit("bench_report: no view reads %s's own JSON yet; docs/results/%s.json "
                 "keeps its transcribed tables" % (bench, bench))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote " + os.path.relpath(path, root))


def run_bench(root, bench):
    doc = load(os.path.join(root, "docs", "results", bench + ".json"))
    cmd = doc["command"]
    if "--json" not in cmd:
        cmd += " --json"
    print("running: " + cmd, file=sys.stderr)
    out = subprocess.run(cmd, shell=True, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
    take(root, bench, json.loads(out.stdout), doc["command"])


# ---- the pages -----------------------------------------------------------------

def pages(root):
    names = [os.path.join(root, "README.md")]
    names += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    return [n for n in names if os.path.exists(n)]


def regenerate(root, write):
    """Each table between markers against its JSON. Returns the problems."""
    problems, cache = [], {}
    for page in pages(root):
        text = open(page, encoding="utf-8").read()

        def repl(m):
            path = os.path.join(root, "docs", m.group(1))
            try:
                if path not in cache:
                    cache[path] = load(path)
                want = render(cache[path], m.group(2)) + "\n"
            except (OSError, ValueError, KeyError, StopIteration) as e:
                problems.append("%s: %s: %s" % (os.path.relpath(page, root), m.group(1), e))
                return m.group(0)
            if m.group(3) != want and not write:
                problems.append("%s: the table from %s%s differs from its JSON (make bench-report)"
                                % (os.path.relpath(page, root), m.group(1),
                                   "#" + m.group(2) if m.group(2) else ""))
            return m.group(0)[:m.start(3) - m.start(0)] + want + "<!-- /table -->"
        new = MARK.sub(repl, text)
        if write and new != text:
            with open(page, "w", encoding="utf-8") as f:
                f.write(new)
            print("wrote " + os.path.relpath(page, root))
    return problems


def quotable(doc):
    """The figures a page may quote from one results file: what its tables
    show, and what its notes say (a figure of the run kept beside them)."""
    texts = []
    if "tables" in doc["data"]:
        texts += [render(doc, v) for v in doc["data"]["tables"]]
    for view in VIEWS.get(doc["bench"], {}):
        try:
            texts.append(render(doc, view))
        except (KeyError, StopIteration, TypeError):
            pass  # a view of a model or shape this run did not have
    texts += [str(v) for v in doc.get("notes", {}).values()]
    texts += ["%.1f %.2f" % (v, v) for v in doc.get("targets", {}).values()]
    for k, v in doc["data"].items():  # the bench's own scalar figures
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            texts += [format(v, f) for f in ("g", ".1f", ".2f", ".3f")]
            texts.append(format(v / 1e6, ".2f"))  # rates quoted in millions
    return set(re.findall(r"\d+\.\d+", "\n".join(texts)))


def prose_ratios(root):
    """A ratio in the prose of a measured page must be in a results file
    that its section names (a table marker or a `docs/results/X.json`)."""
    cache, problems = {}, []

    def known(name):
        if name not in cache:
            path = os.path.join(root, "docs", "results", name + ".json")
            cache[name] = quotable(load(path)) if os.path.exists(path) else set()
        return cache[name]
    for page in PROSE_PAGES:
        path = os.path.join(root, page)
        if not os.path.exists(path):
            continue
        text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
        for section in re.split(r"^(?=#{1,6} )", text, flags=re.M):
            names = set(re.findall(r"results/([A-Za-z0-9_.-]+)\.json", section))
            figures = set().union(*(known(n) for n in names)) if names else set()
            for line in MARK.sub("", section).split("\n"):
                if line.startswith("    ") or line.startswith("|"):
                    continue  # code blocks and option tables
                for m in re.finditer(r"(?<![\d.])(\d+\.\d+)\s?[×x](?![A-Za-z0-9])", line):
                    if not names:
                        problems.append("%s: '%s' in a section that names no docs/results "
                                        "file: name the file it comes from" % (page, m.group(0)))
                    elif m.group(1) not in figures:
                        problems.append("%s: '%s' is in none of %s: quote the figure from "
                                        "the file that holds it" % (page, m.group(0), ", ".join(
                                            "docs/results/%s.json" % n for n in sorted(names))))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare, write nothing")
    ap.add_argument("--from", dest="take", action="append", default=[], metavar="BENCH=FILE")
    ap.add_argument("--command", default=None,
                    help="with --from: the command that wrote FILE (else the file's old one)")
    ap.add_argument("--tables", action="store_true", help="with --check: the tables only")
    ap.add_argument("--run", default="", metavar="BENCH[,BENCH]")
    ap.add_argument("--root", default=ROOT, help=argparse.SUPPRESS)
    a = ap.parse_args()
    for spec in a.take:
        bench, _, path = spec.partition("=")
        take(a.root, bench, json.load(open(path, encoding="utf-8")), a.command)
    for bench in filter(None, a.run.split(",")):
        run_bench(a.root, bench)
    problems = regenerate(a.root, write=not a.check)
    if a.check and not a.tables:
        problems += prose_ratios(a.root)
    for p in problems:
        print("FAIL " + p)
    if a.check:
        print("bench_report: %d problems" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
