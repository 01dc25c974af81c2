#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The tree's structure, checked (docs/structure.md).

  structure_check.py [--root DIR] includes   no #include "..." points from a
                                             lower folder to a higher one
  structure_check.py [--root DIR] lines      no source file of the core
                                             folders is over MAX_LINES lines
  structure_check.py selftest                both checks catch what they must

Exits 0 when the tree holds, 1 with one line per offence otherwise.
"""
import argparse
import os
import re
import sys
import tempfile

# The layers, low to high. A file may include headers of its own folder and
# of any folder below it, never of one above. include/kvtier (the public API,
# included as "kvtier/...") is below everything. bench/ sits with the
# programs: it drives the store, the tiers and the cluster directly.
LAYERS = ["kvtier", "util", "cuda", "model", "tiers", "store", "transport",
          "cluster", "app", "bench"]
# where the files of each layer live (the public headers are under include/)
FOLDER = {name: name for name in LAYERS}
FOLDER["kvtier"] = "include/kvtier"

# One job per file keeps files short; these folders hold the project's code.
LINE_FOLDERS = ["store", "tiers", "transport", "cluster", "app"]
MAX_LINES = 900
# Files over MAX_LINES that are being split right now. Each entry goes when
# its split lands; the list then stays empty and takes no new entries.
LINE_ALLOW = {
    "store/store.c",
    "store/tiering.c",
    "tiers/ssd_io.c",
    "app/daemon_config.c",
}

SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def sources(root, folder):
    top = os.path.join(root, folder)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(SOURCE_EXT):
                yield os.path.join(dirpath, name)


def check_includes(root):
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = []
    for layer in LAYERS:
        for path in sources(root, FOLDER[layer]):
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE_RE.match(line)
                    if not m or "/" not in m.group(1):
                        continue  # "x.h" beside the file: its own folder
                    target = m.group(1).split("/", 1)[0]
                    if target in rank and rank[target] > rank[layer]:
                        bad.append(f"{rel}:{lineno}: {layer} includes "
                                   f"\"{m.group(1)}\" of {target}, a higher "
                                   f"layer ({' < '.join(LAYERS)})")
    return bad


def count_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def check_lines(root):
    bad, allowed = [], []
    for folder in LINE_FOLDERS:
        for path in sources(root, folder):
            rel = os.path.relpath(path, root)
            n = count_lines(path)
            if n <= MAX_LINES:
                continue
            if rel in LINE_ALLOW:
                allowed.append(f"{rel}: {n} lines (allowed while it is split)")
            else:
                bad.append(f"{rel}: {n} lines, over {MAX_LINES}: split it by job")
    for rel in sorted(LINE_ALLOW):
        path = os.path.join(root, rel)
        if os.path.exists(path) and count_lines(path) <= MAX_LINES:
            bad.append(f"{rel}: {count_lines(path)} lines, no longer over "
                       f"{MAX_LINES}: take it off LINE_ALLOW")
    return bad, allowed


def report(what, bad, notes=()):
    for n in notes:
        print(f"note: {n}")
    for b in bad:
        print(b)
    print(f"{what}: {'FAILED, ' + str(len(bad)) + ' offence(s)' if bad else 'ok'}")
    return 1 if bad else 0


def selftest():
    def write(root, rel, text):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    with tempfile.TemporaryDirectory(prefix="structure-selftest-") as root:
        write(root, "util/a.h", '#include "kvtier/log.h"\n')
        write(root, "store/b.c", '#include "tiers/tier.h"\n#include "b.h"\n')
        assert check_includes(root) == [], check_includes(root)
        write(root, "tiers/c.c", '#include "util/a.h"\n  # include "store/b.h"\n')
        bad = check_includes(root)
        assert len(bad) == 1 and bad[0].startswith("tiers/c.c:2:"), bad
        write(root, "include/kvtier/x.h", '#include "util/a.h"\n')
        assert len(check_includes(root)) == 2

        write(root, "cluster/short.c", "x\n" * MAX_LINES)
        bad, allowed = check_lines(root)
        assert bad == [] and allowed == [], (bad, allowed)
        write(root, "cluster/long.c", "x\n" * (MAX_LINES + 1))
        write(root, "store/store.c", "x\n" * (MAX_LINES + 1))
        bad, allowed = check_lines(root)
        assert len(bad) == 1 and bad[0].startswith("cluster/long.c"), bad
        assert len(allowed) == 1 and allowed[0].startswith("store/store.c"), allowed
        write(root, "store/store.c", "x\n")
        bad, _ = check_lines(root)
        assert any("take it off LINE_ALLOW" in b for b in bad), bad
    print("selftest: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("check", choices=["includes", "lines", "selftest"])
    a = ap.parse_args()
    if a.check == "selftest":
        return selftest()
    if a.check == "includes":
        return report("includes", check_includes(a.root))
    bad, allowed = check_lines(a.root)
    return report("lines", bad, allowed)


if __name__ == "__main__":
    sys.exit(main())
