#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_frame: one valid frame per op, a stream of
several frames, and the classic malformed cases. Run from this folder."""
import os
import struct

MAGIC, VER = 0x3154564B, 1
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "frame")
os.makedirs(out, exist_ok=True)


def frame(op, payload, rid=1, status=0, ver=VER, magic=MAGIC, length=None):
    n = len(payload) if length is None else length
    return struct.pack("<IHHIiQ", magic, ver, op, n, status, rid) + payload


def hello(token=b"s3cret", model=b"Qwen/Qwen3-8B"):
    return (struct.pack("<HHHH", 1, 1, len(token), 0) + token +
            struct.pack("<H", len(model)) + model +
            struct.pack("<BBH6I", 1, 1, 0, 36, 8, 128, 16, 0, 1))


key = bytes(range(16))
keys3 = key * 3
seeds = {
    "hello": frame(1, hello()),
    "register": frame(2, struct.pack("<IIQQIIQQQII", 1, 1, 1 << 20, 0, 4, 16,
                                     65536, 32768, 2048, 0, 0)),
    "lookup": frame(3, struct.pack("<II", 1, 3) + keys3),
    "save": frame(4, struct.pack("<IIII", 1, 0, 3, 1) + key + keys3 +
                  struct.pack("<3I", 0, 1, 2)),
    "load": frame(5, struct.pack("<IIII", 1, 0, 3, 0) + bytes(16) + keys3 +
                  struct.pack("<3I", 0, 1, 2)),
    "wait": frame(6, struct.pack("<QII", 1, 0xFFFFFFFF, 1000)),
    "poll": frame(7, struct.pack("<Q", 1)),
    "pin": frame(8, struct.pack("<II", 1, 1) + key),
    "unpin": frame(9, struct.pack("<II", 1, 1) + key),
    "remove": frame(10, struct.pack("<II", 1, 1) + key),
    "stats": frame(11, b""),
    "ping": frame(12, b"ping"),
    "reply_lookup": frame(3 | 0x8000, struct.pack("<II3B", 2, 3, 2, 3, 0)),
    "reply_wait": frame(6 | 0x8000, struct.pack("<iII", 3, 36, 1)),
    "stream": frame(12, b"a", 1) + frame(3, struct.pack("<II", 1, 1) + key, 2) +
              frame(7, struct.pack("<Q", 5), 3),
    "bad_magic": frame(12, b"", magic=0xDEADBEEF),
    "bad_version": frame(12, b"", ver=9),
    "huge_length": frame(3, b"", length=0xFFFFFFF0),
    "truncated": frame(3, struct.pack("<II", 1, 3) + key),
    "lying_count": frame(3, struct.pack("<II", 1, 0xFFFFFFFF) + key),
    "unknown_op": frame(77, b"xyz"),
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
