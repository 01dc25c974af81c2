#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora of fuzz_frame (the sidecar protocol) and
fuzz_peer_frame (the peer protocol): one valid frame per op, a stream of
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
    "register_parts": frame(15, struct.pack("<IIIIQQIIII", 1, 1, 2, 4, 256, 512, 0, 2, 0, 0) +
                            struct.pack("<QQQQ", 0, 8192, 4096, 8192) +
                            struct.pack("<IIQIIQ", 1, 0, 64, 0, 0, 128)),
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


# ---- the peer protocol (fuzz_peer_frame) --------------------------------
PMAGIC = 0x3150564B
pout = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "peer")
os.makedirs(pout, exist_ok=True)


def pframe(op, payload, rid=1, status=0, ver=1, magic=PMAGIC, length=None):
    return frame(op, payload, rid, status, ver, magic, length)


def node_id(s):
    return struct.pack("<HH", len(s), 0) + s


salt = bytes(range(100, 116))
nonce = bytes(range(32))
mac = bytes(range(32, 64))
entry_ok = struct.pack("<iI", 0, 0x42) + key + struct.pack("<QQQQ", 1 << 20, 32768, 9, 77)
entry_miss = struct.pack("<iI", -2, 0) + key + bytes(32)
ep = struct.pack("<IIHBB", 0x1234, 0x55, 3, 1, 5) + bytes(16) + bytes(8)
peer_seeds = {
    "challenge": pframe(1, struct.pack("<HHI", 1, 1, 1) + nonce + node_id(b"owner-1")),
    "auth": pframe(2, struct.pack("<I", 0) + nonce + mac + node_id(b"reader")),
    "auth_reply": pframe(2 | 0x8000, mac),
    "auth_refused": pframe(2 | 0x8000, b"", status=-13),
    "get": pframe(3, salt + struct.pack("<QII", 32768, 3, 0) + keys3),
    "block": pframe(3 | 0x8000, struct.pack("<II", 0, 0) + key + struct.pack("<Q", 32768)),
    "block_miss": pframe(3 | 0x8000, struct.pack("<II", 1, 0) + key + bytes(8), status=-2),
    "get_failed": pframe(3 | 0x8000, b"", status=-9),
    "lease": pframe(4, salt + struct.pack("<QII", 32768, 1, 500) + key),
    "lease_reply": pframe(4 | 0x8000, struct.pack("<QII", 7, 2, 500) + entry_ok + entry_miss),
    "release": pframe(5, struct.pack("<Q", 7)),
    "release_reply": pframe(5 | 0x8000, struct.pack("<I", 2)),
    "qp_connect": pframe(6, ep),
    "stream": pframe(1, struct.pack("<HHI", 1, 1, 0) + nonce + node_id(b"a")) +
              pframe(3, salt + struct.pack("<QII", 4096, 1, 0) + key, 2),
    "sidecar_magic": frame(3, struct.pack("<II", 1, 1) + key),
    "lying_count": pframe(3, salt + struct.pack("<QII", 32768, 0xFFFFFFFF, 0) + key),
    "bad_id": pframe(2, struct.pack("<I", 0) + nonce + mac + node_id(b"a b")),
}
for name, data in peer_seeds.items():
    with open(os.path.join(pout, name), "wb") as f:
        f.write(data)
