#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A shared library exports exactly the symbols of its version script, each
with the version of the node that names it.

  symbols_check.py MAP LIBRARY   compare `objdump -T LIBRARY` with MAP
  symbols_check.py selftest      the comparison catches what it must

MAP is an ld version script of named nodes (NAME { global: a; b; local: *; }
[PARENT];), every symbol named in full. Exits 0 when they agree, 1 with one
line per difference, 77 when objdump is missing.
"""
import re
import shutil
import subprocess
import sys


def parse_map(text):
    """{symbol: version} of a version script; raises ValueError on a
    wildcard in a global list or a symbol in two nodes."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"#[^\n]*", "", text)
    want = {}
    for m in re.finditer(r"([A-Za-z_][\w.]*)\s*\{(.*?)\}\s*([\w.]*)\s*;", text, re.S):
        node, body = m.group(1), m.group(2)
        scope = "global"
        for item in re.split(r"[;\s]+", body):
            if not item:
                continue
            if item in ("global:", "local:"):
                scope = item[:-1]
                continue
            if scope != "global":
                continue
            if any(c in item for c in "*?["):
                raise ValueError(f"{node}: wildcard {item!r}: name every symbol")
            if item in want:
                raise ValueError(f"{item} in both {want[item]} and {node}")
            want[item] = node
    if not want:
        raise ValueError("no node with a global list")
    return want


def parse_objdump(text):
    """{symbol: version} of the defined dynamic symbols in `objdump -T`
    output (the version definitions themselves left out)."""
    have = {}
    for line in text.splitlines():
        m = re.match(r"^[0-9a-f]+\s+(\S.{6})\s+(\S+)\s+[0-9a-f]+\s+(\(?[\w.]+\)?)\s+(\S+)\s*$", line)
        if not m:
            continue
        section, version, name = m.group(2), m.group(3).strip("()"), m.group(4)
        if section == "*UND*":
            continue
        if section == "*ABS*" and name == version:
            continue  # the node's own definition
        have[name] = version
    return have


def compare(want, have):
    bad = []
    for name in sorted(set(want) | set(have)):
        if name not in have:
            bad.append(f"{name}: in the map ({want[name]}) but not exported")
        elif name not in want:
            bad.append(f"{name}: exported ({have[name]}) but not in the map")
        elif want[name] != have[name]:
            bad.append(f"{name}: exported as {have[name]}, the map says {want[name]}")
    return bad


def selftest():
    m = parse_map("""/* c */ A_1.0 { global: f; g; local: *; };
                     A_1.1 { global: h; } A_1.0;""")
    assert m == {"f": "A_1.0", "g": "A_1.0", "h": "A_1.1"}, m
    for broken in ("A { global: f*; };", "A { global: f; }; B { global: f; } A;", "A { local: *; };"):
        try:
            parse_map(broken)
        except ValueError:
            continue
        raise AssertionError(f"accepted {broken!r}")
    dump = """
lib.so:     file format elf64-x86-64

DYNAMIC SYMBOL TABLE:
0000000000000000      DF *UND*	0000000000000000 (GLIBC_2.2.5) free
0000000000000000 g    DO *ABS*	0000000000000000  A_1.0       A_1.0
0000000000001000 g    DF .text	0000000000000010  A_1.0       f
0000000000001010 g    DF .text	0000000000000010  A_1.0       g
0000000000001020 g    DF .text	0000000000000010  Base        h
0000000000001030 g    DF .text	0000000000000010  A_1.0       leak
"""
    have = parse_objdump(dump)
    assert have == {"f": "A_1.0", "g": "A_1.0", "h": "Base", "leak": "A_1.0"}, have
    bad = compare(m, have)
    assert len(bad) == 2 and bad[0].startswith("h: exported as Base") and \
        bad[1].startswith("leak: exported"), bad
    assert compare({"f": "A_1.0"}, {"f": "A_1.0"}) == []
    print("selftest: ok")
    return 0


def main(argv):
    if argv[1:] == ["selftest"]:
        return selftest()
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    if not shutil.which("objdump"):
        print("objdump is not installed (binutils): cannot read the exports")
        return 77
    with open(argv[1]) as f:
        want = parse_map(f.read())
    out = subprocess.run(["objdump", "-T", argv[2]], check=True, capture_output=True, text=True).stdout
    bad = compare(want, parse_objdump(out))
    for b in bad:
        print(b)
    print(f"{argv[2]}: {len(want)} symbols in the map; "
          f"{'FAILED, ' + str(len(bad)) + ' difference(s)' if bad else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
