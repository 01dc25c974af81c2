#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The tree's structure, checked (docs/structure.md).

  structure_check.py [--root DIR] includes   no #include "..." points from a
                                             lower folder to a higher one
  structure_check.py [--root DIR] lines      no source file of the core
                                             folders is over MAX_LINES lines
  structure_check.py [--root DIR] api        util/api_layout.c checks the size
                                             of every struct of include/kvtier/
                                             and the offset of each of its fields
  structure_check.py [--root DIR] api-lines [--build-dir B]
                                             print today's KVT_SIZE/KVT_AT lines
                                             (compiled with cc against B's
                                             generated headers), to compare with
                                             util/api_layout.c after a change
  structure_check.py selftest                the checks catch what they must

Exits 0 when the tree holds, 1 with one line per offence otherwise.
"""
import argparse
import os
import re
import subprocess
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


def check_lines(root, allow=None):
    allow = LINE_ALLOW if allow is None else allow
    bad, allowed = [], []
    for folder in LINE_FOLDERS:
        for path in sources(root, folder):
            rel = os.path.relpath(path, root)
            n = count_lines(path)
            if n <= MAX_LINES:
                continue
            if rel in allow:
                allowed.append(f"{rel}: {n} lines (allowed while it is split)")
            else:
                bad.append(f"{rel}: {n} lines, over {MAX_LINES}: split it by job")
    for rel in sorted(allow):
        path = os.path.join(root, rel)
        if os.path.exists(path) and count_lines(path) <= MAX_LINES:
            bad.append(f"{rel}: {count_lines(path)} lines, no longer over "
                       f"{MAX_LINES}: take it off LINE_ALLOW")
    return bad, allowed


STRUCT_RE = re.compile(r"^struct (\w+) \{(.*?)^\};", re.S | re.M)


def public_fields(root):
    """[(struct, [field, ...])] of the public headers, in their order."""
    out = []
    top = os.path.join(root, FOLDER["kvtier"])
    for name in sorted(os.listdir(top)):
        if not name.endswith(".h"):
            continue
        with open(os.path.join(top, name)) as f:
            text = f.read()
        for m in STRUCT_RE.finditer(text):
            body = re.sub(r"/\*.*?\*/", "", m.group(2), flags=re.S)
            # a function pointer "ret (*name)(args)" is the field name
            body = re.sub(r"\(\s*\*\s*(\w+)\s*\)\s*\([^)]*\)", r"\1", body)
            fields = []
            for decl in (d.strip() for d in body.split(";")):
                if not decl:
                    continue
                decl = re.sub(r"\[[^]]*\]", "", decl)
                parts = decl.split(",")
                fields.append(re.split(r"[\s*]+", parts[0].strip())[-1])
                fields += [p.strip().lstrip("*").strip() for p in parts[1:]]
            out.append((m.group(1), fields))
    return out


def check_api(root):
    path = os.path.join(root, "util", "api_layout.c")
    with open(path) as f:
        text = f.read()
    sizes = set(re.findall(r"^KVT_SIZE\((\w+),", text, re.M))
    offsets = set(re.findall(r"^KVT_AT\((\w+), (\w+),", text, re.M))
    bad = []
    for struct, fields in public_fields(root):
        if struct not in sizes:
            bad.append(f"util/api_layout.c: no KVT_SIZE({struct}, ...)")
        for f in fields:
            if (struct, f) not in offsets:
                bad.append(f"util/api_layout.c: no KVT_AT({struct}, {f}, ...)")
    return bad


def api_lines(root, build_dir):
    """Today's layout lines, from a program that prints sizeof and offsetof."""
    headers = sorted(n for n in os.listdir(os.path.join(root, FOLDER["kvtier"])) if n.endswith(".h"))
    src = ["#include <stdio.h>", "#include <stddef.h>", "#include <stdbool.h>",
           "#include <stdint.h>"] + ['#include "kvtier/%s"' % h for h in headers]
    src.append("int main(void)\n{")
    for struct, fields in public_fields(root):
        src.append('printf("KVT_SIZE(%s, %%zu);\\n", sizeof(struct %s));' % (struct, struct))
        for f in fields:
            src.append('printf("KVT_AT(%s, %s, %%zu);\\n", offsetof(struct %s, %s));'
                       % (struct, f, struct, f))
    src.append("return 0;\n}")
    with tempfile.TemporaryDirectory(prefix="api-lines-") as tmp:
        c, exe = os.path.join(tmp, "lines.c"), os.path.join(tmp, "lines")
        with open(c, "w") as f:
            f.write("\n".join(src) + "\n")
        subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-I", os.path.join(root, "include"),
                        "-I", os.path.join(build_dir, "include"), c, "-o", exe], check=True)
        return subprocess.run([exe], check=True, capture_output=True, text=True).stdout


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
        test_allow = {"store/store.c"}
        bad, allowed = check_lines(root, test_allow)
        assert bad == [] and allowed == [], (bad, allowed)
        write(root, "cluster/long.c", "x\n" * (MAX_LINES + 1))
        write(root, "store/store.c", "x\n" * (MAX_LINES + 1))
        bad, allowed = check_lines(root, test_allow)
        assert len(bad) == 1 and bad[0].startswith("cluster/long.c"), bad
        assert len(allowed) == 1 and allowed[0].startswith("store/store.c"), allowed
        write(root, "store/store.c", "x\n")
        bad, _ = check_lines(root, test_allow)
        assert any("take it off LINE_ALLOW" in b for b in bad), bad

        write(root, "include/kvtier/x.h", "struct kvt_a {\n\tsize_t size;\n\tuint32_t b, c;"
              "\n\tchar d[4]; /* e; */\n};\n")
        write(root, "util/api_layout.c", "KVT_SIZE(kvt_a, 16);\nKVT_AT(kvt_a, size, 0);\n"
              "KVT_AT(kvt_a, b, 8);\nKVT_AT(kvt_a, c, 12);\n")
        bad = check_api(root)
        assert bad == ["util/api_layout.c: no KVT_AT(kvt_a, d, ...)"], bad
    print("selftest: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--build-dir", help="for api-lines: a configured build tree (default build/release)")
    ap.add_argument("check", choices=["includes", "lines", "api", "api-lines", "selftest"])
    a = ap.parse_args()
    if a.check == "selftest":
        return selftest()
    if a.check == "includes":
        return report("includes", check_includes(a.root))
    if a.check == "api":
        return report("api", check_api(a.root))
    if a.check == "api-lines":
        sys.stdout.write(api_lines(a.root, a.build_dir or os.path.join(a.root, "build", "release")))
        return 0
    bad, allowed = check_lines(a.root)
    return report("lines", bad, allowed)


if __name__ == "__main__":
    sys.exit(main())
