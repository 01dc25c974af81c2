#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that the documentation still says what the code does.

    docs_check.py samples [--bin-dir build/release]   the marked shell samples, kvtierd's
                                                      options and the tests' names
    docs_check.py links                               links, anchors, tree paths, README
                                                      length, the status table's copy
    docs_check.py diagrams [--write]                  docs/diagrams/*.dot against their .svg
    docs_check.py selftest                            the checker's own cases

A sample to check is a code block (indented or fenced) right after a line
`<!-- doc-check -->` in README.md or docs/*.md. In it, a line starting with
`$ ` is a command, run with sh from the root of the tree with the build's
programs first on PATH; the lines after it, up to the next command, are the
output it must print (stdout, trailing blanks ignored). A line `...` stands
for any number of lines. `<!-- doc-check daemon -->` runs the block with
KVTIER_SOCKET naming a private kvtierd that this script starts (and stops).

Exit status: 0 all good, 1 a check failed, 77 a tool the check needs is
missing (ctest reports a skip).
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = 77
README_MAX_LINES = 400


def doc_files():
    docs = os.path.join(ROOT, "docs")
    names = sorted(n for n in os.listdir(docs) if n.endswith(".md"))
    return [os.path.join(ROOT, "README.md")] + [os.path.join(docs, n) for n in names]


def rel(path):
    return os.path.relpath(path, ROOT)


# ---- samples ---------------------------------------------------------------

def code_block(lines, i):
    """The code block starting at or after line i (blank lines skipped): its
    lines without indentation or fences, and the index after it."""
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines) and lines[i].lstrip().startswith("```"):
        j = i + 1
        while j < len(lines) and not lines[j].lstrip().startswith("```"):
            j += 1
        return lines[i + 1:j], j + 1
    block = []
    while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
        block.append(lines[i][4:])
        i += 1
    while block and not block[-1].strip():
        block.pop()
    return block, i


def samples():
    """(file, line, daemon?, [(command, expected lines)]) of every marked block."""
    out = []
    for path in doc_files():
        lines = open(path, encoding="utf-8").read().split("\n")
        for i, line in enumerate(lines):
            m = re.match(r"\s*<!-- doc-check( daemon)? -->\s*$", line)
            if not m:
                continue
            block, _ = code_block(lines, i + 1)
            cmds = []
            for b in block:
                if b.startswith("$ "):
                    cmds.append((b[2:], []))
                elif cmds:
                    cmds[-1][1].append(b.rstrip())
            if not cmds:
                out.append((path, i + 1, False, None))
            else:
                out.append((path, i + 1, bool(m.group(1)), cmds))
    return out


def matches(expected, actual):
    """Whether actual lines match expected ones, `...` matching any run."""
    memo = {}

    def go(e, a):
        key = (e, a)
        if key in memo:
            return memo[key]
        if e == len(expected):
            r = a == len(actual)
        elif expected[e] == "...":
            r = any(go(e + 1, k) for k in range(a, len(actual) + 1))
        else:
            r = a < len(actual) and expected[e] == actual[a] and go(e + 1, a + 1)
        memo[key] = r
        return r

    return go(0, 0)


class Daemon:
    """A private kvtierd for the samples that talk to one."""

    def __init__(self, bin_dir):
        self.dir = tempfile.mkdtemp(prefix="kvt-docs-", dir=os.path.join(bin_dir, "tests")
                                    if os.path.isdir(os.path.join(bin_dir, "tests")) else None)
        # the socket in a short directory of its own: a Unix socket's path
        # holds 108 bytes, and the build tree may be deep
        self.sockdir = tempfile.mkdtemp(prefix="kvt-docs.", dir="/tmp")
        self.sock = os.path.join(self.sockdir, "kvtierd.sock")
        self.log = open(os.path.join(self.dir, "kvtierd.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(bin_dir, "app", "kvtierd"), "--socket", self.sock,
             "--data-dir", os.path.join(self.dir, "data"), "--dram", "256M", "--ssd", "1G",
             "--metrics", "off"], stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            if os.path.exists(self.sock) or self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if not os.path.exists(self.sock):
            self.stop()
            raise RuntimeError("kvtierd did not start; its log: " + self.logpath())

    def logpath(self):
        return os.path.join(self.dir, "kvtierd.log")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        rc = self.proc.returncode
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.sockdir, ignore_errors=True)
        return rc


def run_samples(bin_dir):
    bin_dir = os.path.abspath(bin_dir)
    if not os.path.exists(os.path.join(bin_dir, "app", "kvtier")):
        print("docs_check: no build in %s (build it first)" % bin_dir, file=sys.stderr)
        return SKIP
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.join(bin_dir, d) for d in ("app", "bench", "examples")]
                                  + [env.get("PATH", "")])
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    env["LC_ALL"] = "C"
    failed, count, daemon = 0, 0, None
    try:
        for path, line, needs_daemon, cmds in samples():
            where = "%s:%d" % (rel(path), line)
            if cmds is None:
                print("FAIL %s: a doc-check mark with no `$ command` in the block after it" % where)
                failed += 1
                continue
            run_env = env
            if needs_daemon:
                if daemon is None:
                    daemon = Daemon(bin_dir)
                run_env = dict(env, KVTIER_SOCKET=daemon.sock)
            for cmd, expected in cmds:
                count += 1
                p = subprocess.run(["sh", "-c", cmd], cwd=ROOT, env=run_env, timeout=300,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                actual = [l.rstrip() for l in p.stdout.split("\n")]
                while actual and not actual[-1]:
                    actual.pop()
                exp = list(expected)
                while exp and not exp[-1]:
                    exp.pop()
                if p.returncode != 0 or not matches(exp, actual):
                    failed += 1
                    print("FAIL %s: $ %s (exit %d)" % (where, cmd, p.returncode))
                    print("  the docs show:")
                    print("\n".join("    " + l for l in exp))
                    print("  it printed:")
                    print("\n".join("    " + l for l in actual))
                    if p.stderr.strip():
                        print("  stderr:\n" + "\n".join("    " + l for l in p.stderr.splitlines()))
                else:
                    print("ok   %s: $ %s" % (where, cmd))
    finally:
        if daemon is not None:
            rc = daemon.stop()
            if rc != 0:
                print("FAIL the private kvtierd exited %d" % rc)
                failed += 1
    failed += check_options(bin_dir, env)
    failed += check_test_names(bin_dir)
    print("docs_check samples: %d commands, %d failed" % (count, failed))
    return 1 if failed or not count else 0


def check_options(bin_dir, env):
    """Every option kvtierd --help documents is in docs/configuration.md."""
    out = subprocess.run([os.path.join(bin_dir, "app", "kvtierd"), "--help"], env=env,
                         stdout=subprocess.PIPE, text=True).stdout
    opts = sorted(set(re.findall(r"^\s*(?:-\w, )?(--[a-z][a-z-]*)", out, re.M)))
    page = open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8").read()
    missing = [o for o in opts if not re.search(r"`(?:-\w, )?%s[ `]" % re.escape(o), page)]
    for o in missing:
        print("FAIL docs/configuration.md does not document kvtierd %s" % o)
    print("%s   kvtierd --help: %d options, %d missing from docs/configuration.md" %
          ("FAIL" if missing or not opts else "ok", len(opts), len(missing)))
    return 1 if missing or not opts else check_shipped_ini(bin_dir, env)


def check_shipped_ini(bin_dir, env):
    """The installed kvtierd.ini names every key --print-config writes."""
    out = subprocess.run([os.path.join(bin_dir, "app", "kvtierd"), "--print-config"], env=env,
                         stdout=subprocess.PIPE, text=True).stdout
    keys = sorted(set(re.findall(r"^([a-z_]+) *=", out, re.M)))
    ini = open(os.path.join(ROOT, "packaging", "kvtierd.ini"), encoding="utf-8").read()
    missing = [k for k in keys if not re.search(r"^;?%s *=" % re.escape(k), ini, re.M)]
    for k in missing:
        print("FAIL packaging/kvtierd.ini does not name the key %s" % k)
    print("%s   kvtierd --print-config: %d keys, %d missing from packaging/kvtierd.ini" %
          ("FAIL" if missing or not keys else "ok", len(keys), len(missing)))
    return 1 if missing or not keys else 0


# tests registered only under an option, named in the docs all the same
OPTIONAL_TESTS = {"test_install_deb"}


def check_test_names(bin_dir):
    """Every test the docs name in backticks is one ctest knows."""
    known = set()
    for d, _, files in os.walk(bin_dir):
        if "CTestTestfile.cmake" in files:
            text = open(os.path.join(d, "CTestTestfile.cmake"), encoding="utf-8").read()
            known.update(re.findall(r"add_test\((?:\[=\[)?([A-Za-z0-9_]+)", text))
    if not known:
        print("FAIL no tests registered in %s" % bin_dir)
        return 1
    named = set()
    for path in doc_files():
        text = open(path, encoding="utf-8").read()
        named.update(re.findall(r"`((?:test|bench|fuzz|docs|gpu)_[a-z0-9_]+)`", text))
    missing = sorted(named - known - OPTIONAL_TESTS)
    for t in missing:
        print("FAIL the docs name the test %s, which ctest does not have" % t)
    print("%s   %d tests named in the docs, %d unknown to ctest" %
          ("FAIL" if missing else "ok", len(named), len(missing)))
    return 1 if missing else 0


# ---- links -----------------------------------------------------------------

def slug_github(text):
    s = text.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def slug_mkdocs(text):
    s = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", s)


def headings(path):
    """The anchors a page's headings get on both GitHub and the site."""
    slugs, in_fence = set(), False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        m = re.match(r"#{1,6} (.*)", line)
        if m and not in_fence:
            text = re.sub(r"`", "", m.group(1))
            if slug_github(text) == slug_mkdocs(text):
                slugs.add(slug_github(text))
    return slugs


def section(path, title):
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(title), text, re.M | re.S)
    return m.group(1).strip() if m else None


def check_links():
    errors = []
    for path in doc_files():
        text = open(path, encoding="utf-8").read()
        text_nocode = re.sub(r"```.*?```", "", text, flags=re.S)
        for m in re.finditer(r"\]\(([^)\s]+)\)", text_nocode):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            file_part, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                if file_part else path
            where = "%s: (%s)" % (rel(path), target)
            if not os.path.exists(dest):
                errors.append("%s: no such file %s" % (where, rel(dest)))
                continue
            if path != os.path.join(ROOT, "README.md") and \
                    not dest.startswith(os.path.join(ROOT, "docs") + os.sep):
                errors.append("%s: a docs page links outside docs/ (the site cannot)" % where)
            if frag and dest.endswith(".md") and frag not in headings(dest):
                errors.append("%s: no heading with the anchor #%s (on GitHub and the site alike)"
                              % (where, frag))
    # a path of the tree named in backticks must exist (files move)
    tree = r"(?:app|bench|cluster|cmake|cuda|docs|examples|include|model|packaging|python|" \
           r"scripts|store|tests|tiers|transport|util|\.ci)"
    for path in doc_files():
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r"`(%s/[A-Za-z0-9_./-]+)`" % tree, text):
            name = m.group(1).rstrip("/.")
            if not os.path.exists(os.path.join(ROOT, name)):
                errors.append("%s: names `%s`, which is not in the tree" % (rel(path), name))
    readme = os.path.join(ROOT, "README.md")
    n = open(readme, encoding="utf-8").read().count("\n")
    if n > README_MAX_LINES:
        errors.append("README.md: %d lines, more than %d: move detail into docs/" % (n, README_MAX_LINES))
    # the home page repeats the README's status table: they must say the same
    title = "What has run on real hardware"
    a, b = section(readme, title), section(os.path.join(ROOT, "docs", "index.md"), title)
    if a is None or b is None or a.replace("](docs/", "](") != b:
        errors.append("docs/index.md: section '%s' differs from README.md's" % title)
    for e in errors:
        print("FAIL " + e)
    print("docs_check links: %d files, %d problems" % (len(doc_files()), len(errors)))
    return 1 if errors else 0


# ---- diagrams --------------------------------------------------------------

def check_diagrams(write):
    dot = shutil.which("dot")
    if not dot:
        print("docs_check: Graphviz's dot is not installed (apt-get install graphviz)",
              file=sys.stderr)
        return SKIP
    d = os.path.join(ROOT, "docs", "diagrams")
    failed = 0
    for name in sorted(os.listdir(d)):
        if not name.endswith(".dot"):
            continue
        src, svg = os.path.join(d, name), os.path.join(d, name[:-4] + ".svg")
        out = subprocess.run([dot, "-Tsvg", src], check=True, stdout=subprocess.PIPE).stdout
        if write:
            with open(svg, "wb") as f:
                f.write(out)
            print("wrote " + rel(svg))
        elif not os.path.exists(svg) or open(svg, "rb").read() != out:
            print("FAIL %s is not what %s renders to: run make docs" % (rel(svg), rel(src)))
            failed += 1
    return 1 if failed else 0


# ---- the checker's own cases ------------------------------------------------

def selftest():
    """Cases the checks must get right: a stale sample fails, wildcards
    match what they should and no more, anchors are those of both sites."""
    cases = [
        (matches(["a", "b"], ["a", "b"]), True),
        (matches(["a", "b"], ["a", "c"]), False),            # a changed line
        (matches(["a"], ["a", "b"]), False),                 # a line more
        (matches(["a", "b"], ["a"]), False),                 # a line less
        (matches(["...", "b"], ["x", "y", "b"]), True),
        (matches(["a", "...", "z"], ["a", "z"]), True),      # ... may be empty
        (matches(["a", "...", "z"], ["a", "m", "y"]), False),
        (matches(["..."], []), True),
        (code_block(["", "    $ x", "    out", "", "    more", "text"], 0),
         (["$ x", "out", "", "more"], 5)),
        (code_block(["```", "$ x", "out", "```", "text"], 0), (["$ x", "out"], 4)),
        (slug_github("The peer tier") == slug_mkdocs("The peer tier") == "the-peer-tier", True),
        (slug_github("SSD admission (--ssd-admission)"), "ssd-admission---ssd-admission"),
        (slug_mkdocs("SSD admission (--ssd-admission)"), "ssd-admission-ssd-admission"),
    ]
    bad = [i for i, (got, want) in enumerate(cases) if got != want]
    for i in bad:
        print("FAIL selftest case %d: got %r, want %r" % (i, cases[i][0], cases[i][1]))
    print("docs_check selftest: %d cases, %d failed" % (len(cases), len(bad)))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("samples")
    s.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "release"))
    sub.add_parser("links")
    d = sub.add_parser("diagrams")
    d.add_argument("--write", action="store_true")
    sub.add_parser("selftest")
    a = ap.parse_args()
    if a.cmd == "selftest":
        return selftest()
    if a.cmd == "samples":
        return run_samples(a.bin_dir)
    if a.cmd == "links":
        return check_links()
    return check_diagrams(a.write)


if __name__ == "__main__":
    sys.exit(main())
