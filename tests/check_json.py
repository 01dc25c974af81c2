#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Check that stdin is one JSON object holding the given fields.

usage: check_json.py FIELD...   e.g. cases[].put_gbps lookup_keys_per_s
A field ending in [] must be a non-empty array; name[].x requires x in every
element. Numbers must be finite. Exits 0 when all are there, 1 otherwise."""
import json
import math
import sys


def check(obj, path, where):
    head, _, rest = path.partition(".")
    is_list = head.endswith("[]")
    name = head[:-2] if is_list else head
    if not isinstance(obj, dict) or name not in obj:
        sys.exit(f"missing field {where}{name}")
    value = obj[name]
    if is_list:
        if not isinstance(value, list) or not value:
            sys.exit(f"{where}{name} is not a non-empty array")
        for i, item in enumerate(value):
            if rest:
                check(item, rest, f"{where}{name}[{i}].")
        return
    if rest:
        check(value, rest, f"{where}{name}.")
    elif isinstance(value, float) and not math.isfinite(value):
        sys.exit(f"{where}{name} is not finite")


doc = json.load(sys.stdin)
for field in sys.argv[1:]:
    check(doc, field, "")
print(f"ok: {len(sys.argv) - 1} fields present")
