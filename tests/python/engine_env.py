# SPDX-License-Identifier: Apache-2.0
"""What the tests of the reference engine share: where the engine lives (put
on sys.path, so `import engine` and `import model` work), the daemon's
environment under ASan (leak checks on in the daemon, off in Python), and
the random seed (KVT_TEST_SEED replays; printed)."""

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINE_DIR = os.path.join(ROOT, "examples", "torch_engine")
sys.path.insert(0, ENGINE_DIR)

DAEMON_ENV = dict(os.environ, ASAN_OPTIONS=os.environ["KVT_DAEMON_ASAN_OPTIONS"]) \
    if os.environ.get("KVT_DAEMON_ASAN_OPTIONS") else None
SEED = int(os.environ.get("KVT_TEST_SEED") or time.time_ns() % (1 << 31))
print("seed: KVT_TEST_SEED=%d" % SEED, file=sys.stderr)
