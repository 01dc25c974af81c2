"""A real kvtierd for the Python tests: started on a socket in its own
directory under $KVT_TEST_TMPDIR, ready when a connection succeeds, stopped
by signal; restartable on the same data directory."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


class Daemon:
    def __init__(self, extra=(), dram="64M", ssd="0"):
        base = os.environ.get("KVT_TEST_TMPDIR") or None
        if base:
            os.makedirs(base, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="kvtierd-py.", dir=base)
        self.socket = os.path.join(self.dir, "kvtierd.sock")
        self.args = [os.environ["KVTIERD"], "--socket", self.socket, "--data-dir",
                     os.path.join(self.dir, "data"), "--dram", dram, "--ssd", ssd,
                     "--metrics", "off", *extra]
        self.proc = None
        self.start()

    def start(self):
        """Start (again, on the same directory); wait until it answers."""
        self.log = open(os.path.join(self.dir, "kvtierd.log"), "a")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=self.log)
        for _ in range(1500):
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(self.socket)
                s.close()
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
