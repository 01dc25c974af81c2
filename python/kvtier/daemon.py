# SPDX-License-Identifier: Apache-2.0
"""A private kvtierd for tests, benches and local runs: started on a socket
in a directory of its own, ready when a connection succeeds, stopped by
signal, restartable on the same data directory.

    from kvtier.daemon import Daemon
    d = Daemon(dram="1G", ssd="4G")          # binary: $KVTIERD, a build tree, PATH
    ... kvtier.Client(socket=d.socket) ...
    d.stop()                                  # SIGTERM; returns the exit status
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def find_kvtierd():
    """$KVTIERD, else build/{release,asan}/app/kvtierd of this source tree,
    else kvtierd on PATH."""
    env = os.environ.get("KVTIERD")
    if env:
        return env
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for preset in ("release", "asan"):
        p = os.path.join(root, "build", preset, "app", "kvtierd")
        if os.path.exists(p):
            return p
    found = shutil.which("kvtierd")
    if not found:
        raise FileNotFoundError("kvtierd not found: build kvtier or set KVTIERD")
    return found


class Daemon:
    """kvtierd in a fresh directory under base (default $KVT_TEST_TMPDIR or
    the system's temporary directory; the SSD tier needs one that allows
    O_DIRECT, so not tmpfs), metrics off; env for its environment (default
    this process's). Its socket sits in a short directory of its own under
    /tmp: a Unix socket's path must fit 108 bytes, and base may be deep."""

    def __init__(self, extra=(), dram="64M", ssd="0", base=None, binary=None, env=None):
        base = base or os.environ.get("KVT_TEST_TMPDIR") or None
        if base:
            os.makedirs(base, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="kvtierd-py.", dir=base)
        self.sockdir = tempfile.mkdtemp(prefix="kvtd.", dir="/tmp")
        self.socket = os.path.join(self.sockdir, "kvtierd.sock")
        self.args = [binary or find_kvtierd(), "--socket", self.socket, "--data-dir",
                     os.path.join(self.dir, "data"), "--dram", dram, "--ssd", ssd,
                     "--metrics", "off", *extra]
        self.env = env
        self.proc = None
        self.start()

    def start(self):
        """Start (again, on the same directory); wait until it answers."""
        self.log = open(os.path.join(self.dir, "kvtierd.log"), "a")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=self.log, env=self.env)
        for _ in range(1500):
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.socket)
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
        raise RuntimeError("kvtierd did not start: " + open(self.log.name).read())

    def stop(self, sig=signal.SIGTERM):
        """Signal it and reap it; returns its exit status (its log is printed
        when that is not 0 after SIGTERM)."""
        self.proc.send_signal(sig)
        rc = self.proc.wait(60)
        self.log.close()
        if rc != 0 and sig == signal.SIGTERM:
            print(open(self.log.name).read(), file=sys.stderr)
        return rc

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def remove(self):
        """Delete its directory (stopped first if running)."""
        if self.running:
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.sockdir, ignore_errors=True)
