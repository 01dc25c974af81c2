# SPDX-License-Identifier: Apache-2.0
"""The peers bench's two-node row for two kvtierd builds, alternated in one
run: the same pair of nodes, workload and checks as the row of
peers_bench.py (node A stores, node B gets what it finds remote), each
build started afresh per repetition, the order swapped every repetition.
Prints each value and, per shape, the medians and new/old.

usage: two_builds.py --old KVTIERD --new KVTIERD [--reps 5] [--shapes 256K,2M]
                     [--total 256M] [--dir build/peers-bench/two-builds]
"""

import argparse
import os
import statistics
import sys

import peers_bench
import side_kvtier


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the kvtierd to compare against")
    ap.add_argument("--new", required=True, help="the kvtierd under test")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shapes", default="256K,2M")
    ap.add_argument("--total", default="256M", help="bytes node A stores and B gets")
    ap.add_argument("--dir", default="build/peers-bench/two-builds")
    args = ap.parse_args()
    builds = {"old": os.path.abspath(args.old), "new": os.path.abspath(args.new)}
    total = peers_bench.parse_size(args.total)
    got = {}
    for shape in [peers_bench.parse_size(s) for s in args.shapes.split(",")]:
        nblocks = total // shape
        capacity = total + total // 4 + (256 << 20)
        for rep in range(args.reps):
            for name in ("old", "new") if rep % 2 == 0 else ("new", "old"):
                os.environ["KVTIERD"] = builds[name]
                store = side_kvtier.Store()
                store.generation = rep
                os.makedirs(args.dir, exist_ok=True)
                v = peers_bench.peer_row(store, args.dir, shape, capacity,
                                         nblocks)["peer_get_gbps"]
                got.setdefault((shape, name), []).append(v)
                print("%d KiB %s rep %d: %.3f GB/s" % (shape >> 10, name, rep, v), flush=True)
        old = statistics.median(got[(shape, "old")])
        new = statistics.median(got[(shape, "new")])
        print("%d KiB: old %.3f, new %.3f GB/s (medians of %d), new/old %.2f" %
              (shape >> 10, old, new, args.reps, new / old), flush=True)


if __name__ == "__main__":
    sys.exit(main())
