# SPDX-License-Identifier: Apache-2.0
"""What the vLLM tests and the bench share: the venv with the pinned vLLM
(made by scripts/vllm-venv.sh), the environment of an engine process, and
Engine, one vLLM process (vllm_engine.py) driven over its stdin/stdout."""

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.environ.get("KVT_VLLM_VENV") or os.path.join(ROOT, "build", "venv-vllm")
PYTHON = os.path.join(VENV, "bin", "python")


# what the vLLM tests share: the seed of their random prompts (printed by
# each test; KVT_TEST_SEED replays it), vLLM's block size (the CPU backend
# wants a multiple of 32), the tiny model's vocabulary, the connector's
# namespace for it (served name, device, layout)
SEED = int(os.environ.get("KVT_TEST_SEED") or time.time_ns() % (1 << 31))
BT = 32
VOCAB = 2048
NAMESPACE = "kvtier-tiny|vllm-cpu-LBHNC"


def connector_config(socket, **extra):
    """vLLM's kv_transfer_config for kvtier's connector on socket, loading
    every stored block (use_plan off), with extra connector settings."""
    return {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": dict(dict(socket=socket, use_plan=False), **extra)}


def ensure_venv():
    """0 when the venv is ready (made now if need be), else the script's
    status (77: cannot be made here; its reason is on stderr)."""
    return subprocess.call(["sh", os.path.join(ROOT, "scripts", "vllm-venv.sh"), VENV])


def seeded_model(seed=0):
    """The tiny Llama with weights from seed, as a checkpoint directory
    (seeded_model.py), made once per seed under $KVT_TEST_TMPDIR."""
    base = os.environ.get("KVT_TEST_TMPDIR") or tempfile.gettempdir()
    out = os.path.join(base, "tiny-llama-seed%d" % seed)
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        os.makedirs(base, exist_ok=True)
        subprocess.check_call([PYTHON, os.path.join(HERE, "seeded_model.py"), out, str(seed)])
    return out


def engine_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    env.pop("LD_PRELOAD", None)
    # one unbound thread: the tiny model gains nothing from more, and on a
    # shared machine spinning OpenMP threads lose more than they gain
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Engine:
    """A vLLM process with the tiny model (seeded weights); run() sends prompts (lists of
    token ids) and returns one answer each ({tokens, logprob0, cached,
    load_failed})."""

    def __init__(self, name, connector=None, prefix_caching=False, model=None, **cfg):
        d = os.environ.get("KVT_TEST_TMPDIR") or None
        if d:
            os.makedirs(d, exist_ok=True)
        self.name = name
        self.logf = tempfile.NamedTemporaryFile("w+", prefix="vllm-%s." % name, suffix=".log",
                                                dir=d, delete=False)
        model = model or seeded_model(cfg.get("seed", 0))
        cfg = dict(cfg, model=model, connector=connector, prefix_caching=prefix_caching)
        self.p = subprocess.Popen([PYTHON, os.path.join(HERE, "vllm_engine.py"),
                                   json.dumps(cfg)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.logf, text=True,
                                  env=engine_env())
        self._read()

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            self.p.wait(30)
            raise RuntimeError("vLLM %s exited %s:\n%s" % (self.name, self.p.returncode,
                                                          self.log()[-6000:]))
        return json.loads(line)

    def log(self):
        self.logf.flush()
        with open(self.logf.name) as f:
            return f.read()

    def run(self, prompts, max_tokens, **extra):
        return self.call(dict(extra, prompts=prompts, max_tokens=max_tokens))["outputs"]

    def call(self, req):
        """One request line (vllm_engine.py), its whole answer."""
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        return self._read()

    def close(self):
        """Stop it; returns its log."""
        if self.p.poll() is None:
            try:
                self.p.stdin.write(json.dumps({"quit": True}) + "\n")
                self.p.stdin.close()
                self.p.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()
        log = self.log()
        self.logf.close()
        os.unlink(self.logf.name)
        if self.p.returncode not in (0, None):
            print(log[-6000:], file=sys.stderr)
        return log


def push_to_ssd(socket, dram_bytes, on_ssd):
    """Push blocks out of kvtierd's DRAM so that they are only on SSD (a
    clean stop writes DRAM-only blocks down but keeps nothing out of DRAM
    in a running daemon): other blocks (a namespace of their own, 2 MiB each)
    are saved, a DRAM's worth at a time, until on_ssd() (which may LOOKUP:
    a lookup is a use, so it waits for each DRAM's worth) says so; then they
    are removed. Returns on_ssd()."""
    import kvtier
    with kvtier.Client(socket=socket) as c:
        ns = c.hello("kvtier-test/filler", layers=32, kv_heads=8, head_dim=128,
                     block_tokens=16)
        with kvtier.EngineMemory.paged(ns, pages=16) as mem:
            region = c.register(ns, mem)
            saved = []
            for _ in range(4):
                for _ in range(dram_bytes // ns.block_bytes // 16 + 2):
                    keys = ns.prefix_keys([len(saved) * 16 + i for i in range(256)])
                    c.save(ns, region, keys, range(16)).wait()
                    saved.append(keys)
                if on_ssd():
                    break
            for keys in saved:
                c.remove(ns, keys[::-1])
    return on_ssd()

