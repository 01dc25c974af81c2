# SPDX-License-Identifier: Apache-2.0
"""kvtier: the engine-side Python binding of kvtierd (ctypes over libkvtier-client.so).

An engine's KV connector connects to the daemon, opens the namespace of its
KV cache, registers its paged KV memory once, and then saves, looks up and
loads blocks by prefix key::

    import kvtier
    with kvtier.Client(socket="/run/kvtier/kvtierd.sock", token="s3cret") as c:
        ns = c.hello("Qwen/Qwen3-8B", layers=36, kv_heads=8, head_dim=128,
                     block_tokens=16, dtype="bf16")
        mem = kvtier.EngineMemory.paged(ns, pages=1024)   # a sealed memfd
        region = c.register(ns, mem)
        keys = ns.prefix_keys(tokens)
        hit, tiers = c.lookup(ns, keys)
        hit, load, tiers = c.lookup_plan(ns, keys)     # load: what the plan loads
        c.save(ns, region, keys, pages=[...]).wait()
        n = c.load(ns, region, keys, pages=[...]).wait()
        c.prefill(ns, tokens=512, seconds=0.8)          # the engine's measured speed

The daemon pushes SAVE/LOAD completions (per LOAD layer too), so
Ticket.wait / wait_layer / poll cost no round trip; Client(completions="wait")
asks with a WAIT (POLL) round trip each instead.

Errors raise OSError subclasses chosen by errno (PermissionError for a wrong
token or a forbidden model, FileNotFoundError for an unknown ticket,
TimeoutError, ConnectionResetError when the daemon hangs up, ...), with
kvtier's message.

The library is found through $KVTIER_CLIENT_LIB, next to this package, in the
build trees of a source checkout, where `pip install` found it (pkg-config's
kvtier-client), or on the loader's path (libkvtier-client.so.0).
"""

import ctypes
import errno
import json
import mmap
import os

__all__ = ["Client", "Namespace", "default_socket", "Ticket", "EngineMemory", "Part", "RegionParts",
           "TIER_NAMES", "KEY_BYTES", "REUSE_CLASS_MAX", "reuse_class_of"]

KEY_BYTES = 16

# A block's reuse class: a hint for the daemon's eviction policy (0 = none);
# see KVT_REUSE_CLASS_MAX and kvt_reuse_class_of in kvtier/types.h.
REUSE_CLASS_MAX = 15


def reuse_class_of(output_tokens):
    """The reference reuse class of a request with output_tokens output
    tokens: their bit length, at most REUSE_CLASS_MAX (0 for none)."""
    return min(max(int(output_tokens), 0).bit_length(), REUSE_CLASS_MAX)
TIER_NAMES = {0: "none", 1: "hbm", 2: "dram", 3: "ssd", 4: "remote"}
_LAYOUTS = {"paged": 1, "paged_kv": 1, "split": 2, "split_kv": 2, "mla": 3}
_DTYPES = {"bf16": 1, "bfloat16": 1, "fp16": 2, "float16": 2, "fp32": 3, "float32": 3,
           "fp8": 4, "fp8_e4m3": 4, "fp8_e5m2": 5, "int8": 6}
_DTYPE_BYTES = {1: 2, 2: 2, 3: 4, 4: 1, 5: 1, 6: 1}


_SONAME = "libkvtier-client.so.0"


def _library_candidates():
    """Where libkvtier-client may be, in order: beside this package; in the
    build trees of the source checkout this package sits in (run from it with
    PYTHONPATH); where `pip install` found it (recorded in _libpath.py at
    build time: pkg-config's kvtier-client, else the checkout's release
    build)."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.join(here, n) for n in (_SONAME, "libkvtier-client.so")]
    root = os.path.dirname(os.path.dirname(here))
    for preset in ("release", "asan", "tsan"):
        found.append(os.path.join(root, "build", preset, "transport", _SONAME))
    try:
        from kvtier._libpath import LIBRARIES
        found += LIBRARIES
    except ImportError:
        pass
    return found


def _load_library():
    """$KVTIER_CLIENT_LIB when set; else the first candidate that exists;
    else whatever the dynamic loader finds by the SONAME (LD_LIBRARY_PATH,
    the ld.so cache, /usr/lib)."""
    env = os.environ.get("KVTIER_CLIENT_LIB")
    if env:
        return ctypes.CDLL(env, use_errno=True)
    candidates = _library_candidates()
    for path in candidates:
        if os.path.exists(path):
            return ctypes.CDLL(path, use_errno=True)
    try:
        return ctypes.CDLL(_SONAME, use_errno=True)
    except OSError as e:
        raise ImportError("libkvtier-client not found (tried %s, then the loader: %s); install "
                          "kvtier, build it, or set KVTIER_CLIENT_LIB"
                          % (", ".join(candidates), e)) from e


_lib = _load_library()


class _Key(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint8 * KEY_BYTES)]


class _NsDesc(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("model_id", ctypes.c_char * 64),
                ("layout", ctypes.c_int), ("dtype", ctypes.c_int),
                ("layers", ctypes.c_uint32), ("kv_heads", ctypes.c_uint32),
                ("head_dim", ctypes.c_uint32), ("block_tokens", ctypes.c_uint32),
                ("tp_rank", ctypes.c_uint32), ("tp_size", ctypes.c_uint32),
                ("tenant_salt", ctypes.c_uint8 * 32), ("tenant_salt_len", ctypes.c_uint32)]


class _ClientNs(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_uint32), ("block_bytes", ctypes.c_uint64),
                ("salt", _Key), ("block_tokens", ctypes.c_uint32),
                ("max_keys", ctypes.c_uint32)]


class _Opts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("socket_path", ctypes.c_char_p),
                ("token", ctypes.c_char_p), ("completions", ctypes.c_int)]


_COMPLETIONS = {"push": 0, "wait": 1}


class _Region(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("memfd", ctypes.c_int),
                ("bytes", ctypes.c_uint64), ("offset", ctypes.c_uint64),
                ("layers", ctypes.c_uint32), ("pages", ctypes.c_uint32),
                ("layer_stride", ctypes.c_uint64), ("kv_stride", ctypes.c_uint64),
                ("page_stride", ctypes.c_uint64), ("cuda_ipc", ctypes.c_void_p),
                ("cuda_ipc_len", ctypes.c_uint32), ("device", ctypes.c_uint32)]


class _Part(ctypes.Structure):
    _fields_ = [("memfd", ctypes.c_int), ("offset", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64), ("cuda_ipc", ctypes.c_void_p)]


class _LayerAt(ctypes.Structure):
    _fields_ = [("part", ctypes.c_uint32), ("offset", ctypes.c_uint64)]


class _Parts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("n_parts", ctypes.c_uint32),
                ("parts", ctypes.POINTER(_Part)), ("layers", ctypes.c_uint32),
                ("pages", ctypes.c_uint32), ("layer", ctypes.POINTER(_LayerAt)),
                ("kv_stride", ctypes.c_uint64), ("page_stride", ctypes.c_uint64),
                ("cuda_ipc_len", ctypes.c_uint32), ("device", ctypes.c_uint32),
                ("why", ctypes.c_char_p), ("why_len", ctypes.c_size_t)]


_P = ctypes.POINTER
_vp = ctypes.c_void_p
_sigs = {
    "kvt_client_opts_init": (None, [_P(_Opts), ctypes.c_size_t]),
    "kvt_client_connect": (ctypes.c_int, [_P(_Opts), _P(_vp)]),
    "kvt_client_socket_path": (ctypes.c_char_p, [_P(_Opts), ctypes.c_char_p, ctypes.c_size_t]),
    "kvt_client_close": (None, [_vp]),
    "kvt_client_desc_init": (None, [_P(_NsDesc), ctypes.c_size_t]),
    "kvt_client_hello": (ctypes.c_int, [_vp, _P(_NsDesc), _P(_ClientNs)]),
    "kvt_client_prefix_keys": (ctypes.c_int, [_P(_ClientNs), _P(_Key), _P(ctypes.c_uint32),
                                              ctypes.c_size_t, _P(_Key), ctypes.c_size_t]),
    "kvt_client_register": (ctypes.c_int, [_vp, _P(_ClientNs), _P(_Region)]),
    "kvt_client_register_parts": (ctypes.c_int, [_vp, _P(_ClientNs), _P(_Parts)]),
    "kvt_client_memfd_create": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_uint64, _P(_vp)]),
    "kvt_client_lookup": (ctypes.c_int, [_vp, _P(_ClientNs), _P(_Key), ctypes.c_uint32,
                                         _P(ctypes.c_uint8)]),
    "kvt_client_lookup_plan": (ctypes.c_int, [_vp, _P(_ClientNs), _P(_Key), ctypes.c_uint32,
                                              _P(ctypes.c_uint8), _P(ctypes.c_uint32)]),
    "kvt_client_prefill": (ctypes.c_int, [_vp, _P(_ClientNs), ctypes.c_uint32, ctypes.c_uint64]),
    "kvt_client_version": (ctypes.c_int, [_vp]),
    "kvt_client_save": (ctypes.c_int, [_vp, _P(_ClientNs), ctypes.c_uint32, _P(_Key), _P(_Key),
                                       _P(ctypes.c_uint32), ctypes.c_uint32, _P(ctypes.c_uint64)]),
    "kvt_client_save_class": (ctypes.c_int, [_vp, _P(_ClientNs), ctypes.c_uint32, _P(_Key),
                                             _P(_Key), _P(ctypes.c_uint32), ctypes.c_uint32,
                                             ctypes.c_uint, _P(ctypes.c_uint64)]),
    "kvt_client_load": (ctypes.c_int, [_vp, _P(_ClientNs), ctypes.c_uint32, _P(_Key),
                                       _P(ctypes.c_uint32), ctypes.c_uint32, _P(ctypes.c_uint64)]),
    "kvt_client_wait": (ctypes.c_int, [_vp, ctypes.c_uint64, ctypes.c_int]),
    "kvt_client_wait_layer": (ctypes.c_int, [_vp, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int]),
    "kvt_client_poll": (ctypes.c_int, [_vp, ctypes.c_uint64, _P(ctypes.c_int), _P(ctypes.c_uint32)]),
    "kvt_client_pin": (ctypes.c_int, [_vp, _P(_ClientNs), _P(_Key), ctypes.c_uint32]),
    "kvt_client_unpin": (ctypes.c_int, [_vp, _P(_ClientNs), _P(_Key), ctypes.c_uint32]),
    "kvt_client_remove": (ctypes.c_int, [_vp, _P(_ClientNs), _P(_Key), ctypes.c_uint32]),
    "kvt_client_stats": (ctypes.c_int, [_vp, _P(ctypes.c_void_p)]),
    "kvt_client_ping": (ctypes.c_int, [_vp, ctypes.c_char_p, ctypes.c_size_t]),
    "kvt_strerror": (ctypes.c_char_p, [ctypes.c_int]),
}
for _name, (_res, _args) in _sigs.items():
    _f = getattr(_lib, _name)
    _f.restype = _res
    _f.argtypes = _args
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]


def _check(rc, what):
    """Raise the OSError subclass of a negative errno; return rc otherwise."""
    if rc < 0:
        msg = _lib.kvt_strerror(rc).decode()
        raise OSError(-rc, "%s: %s" % (what, msg))
    return rc


def _keys_array(keys):
    keys = list(keys)
    arr = (_Key * max(len(keys), 1))()
    for i, k in enumerate(keys):
        if len(k) != KEY_BYTES:
            raise ValueError("a key is %d bytes" % KEY_BYTES)
        ctypes.memmove(arr[i].bytes, bytes(k), KEY_BYTES)
    return arr, len(keys)


def _u32_array(values):
    values = list(values)
    return (ctypes.c_uint32 * max(len(values), 1))(*values), len(values)


def default_socket():
    """The socket a Client made without socket= dials: $KVTIER_SOCKET, else
    the client library's default."""
    opts = _Opts()
    _lib.kvt_client_opts_init(ctypes.byref(opts), ctypes.sizeof(opts))
    buf = ctypes.create_string_buffer(4096)
    return _lib.kvt_client_socket_path(ctypes.byref(opts), buf, len(buf)).decode()


class Namespace:
    """A namespace granted by HELLO: its handle, block size and key salt."""

    def __init__(self, raw, layers, layout, page_bytes):
        self._raw = raw
        self.handle = raw.handle
        self.block_bytes = raw.block_bytes
        self.block_tokens = raw.block_tokens
        self.max_keys = raw.max_keys
        self.salt = bytes(raw.salt.bytes)
        self.layers = layers
        self.layout = layout
        self.page_bytes = page_bytes  # bytes of one page of one layer (K or V)

    def prefix_keys(self, tokens, parent=None):
        """Keys of the full blocks of tokens (a partial tail block gets none)."""
        tokens = list(tokens)
        n = len(tokens) // self.block_tokens
        if n == 0:
            return []
        toks = (ctypes.c_uint32 * len(tokens))(*tokens)
        out = (_Key * n)()
        par = None
        if parent is not None:
            par = _Key()
            ctypes.memmove(par.bytes, bytes(parent), KEY_BYTES)
            par = ctypes.byref(par)
        got = _check(_lib.kvt_client_prefix_keys(ctypes.byref(self._raw), par, toks,
                                                 len(tokens), out, n), "prefix_keys")
        return [bytes(out[i].bytes) for i in range(got)]


class Ticket:
    """A SAVE or LOAD in flight."""

    def __init__(self, client, ticket, op):
        self._client = client
        self.id = ticket
        self.op = op

    def wait(self, timeout=None):
        """Blocks saved/loaded (a count; a LOAD stops at the first miss)."""
        ms = -1 if timeout is None else int(timeout * 1000)
        return _check(_lib.kvt_client_wait(self._client._c, self.id, ms), self.op + " wait")

    def wait_layer(self, layer, timeout=None):
        """Return once layer `layer` of a LOAD is in engine memory."""
        ms = -1 if timeout is None else int(timeout * 1000)
        _check(_lib.kvt_client_wait_layer(self._client._c, self.id, layer, ms), "wait_layer")

    def poll(self):
        """(done, result or None, layers_done) without waiting."""
        res = ctypes.c_int(0)
        layers = ctypes.c_uint32(0)
        done = _check(_lib.kvt_client_poll(self._client._c, self.id, ctypes.byref(res),
                                           ctypes.byref(layers)), "poll")
        if done and res.value < 0:
            raise OSError(-res.value, self.op + ": " + _lib.kvt_strerror(res.value).decode())
        return bool(done), (res.value if done else None), layers.value


class EngineMemory:
    """Paged KV memory in a sealed memfd, in the layout kvtierd gathers from:
    page p of layer l at l*layer_stride + p*page_stride, V at + kv_stride."""

    def __init__(self, nbytes, layers, pages, layer_stride, kv_stride, page_stride, page_bytes):
        ptr = ctypes.c_void_p()
        fd = _check(_lib.kvt_client_memfd_create(b"kvtier-engine", nbytes, ctypes.byref(ptr)),
                    "memfd")
        # the library's own mapping is dropped: Python maps the fd itself
        ctypes.CDLL(None).munmap(ptr, ctypes.c_size_t(nbytes))
        self.fd = fd
        self.buf = mmap.mmap(fd, nbytes)
        self.nbytes = nbytes
        self.layers = layers
        self.pages = pages
        self.layer_stride = layer_stride
        self.kv_stride = kv_stride
        self.page_stride = page_stride
        self.page_bytes = page_bytes
        self.kvn = 2 if kv_stride else 1

    @classmethod
    def paged(cls, ns, pages):
        """[layer][K,V][pages][page_bytes] for ns (one tensor per layer for MLA)."""
        kvn = 1 if ns.layout == _LAYOUTS["mla"] else 2
        kv_stride = ns.page_bytes * pages if kvn == 2 else 0
        layer_stride = ns.page_bytes * pages * kvn
        return cls(layer_stride * ns.layers, ns.layers, pages, layer_stride, kv_stride,
                   ns.page_bytes, ns.page_bytes)

    def page_offset(self, page, layer, kv=0):
        return layer * self.layer_stride + kv * self.kv_stride + page * self.page_stride

    def write_page(self, page, layer, kv, data):
        off = self.page_offset(page, layer, kv)
        self.buf[off:off + self.page_bytes] = data

    def read_page(self, page, layer, kv=0):
        off = self.page_offset(page, layer, kv)
        return self.buf[off:off + self.page_bytes]

    def close(self):
        if self.buf is not None:
            self.buf.close()
            os.close(self.fd)
            self.buf = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Part:
    """One allocation of engine KV memory: bytes [offset, offset + nbytes) of
    the memfd fd, or of a CUDA allocation (fd -1, cuda_ipc the 64 bytes of
    its cudaIpcMemHandle_t)."""

    def __init__(self, fd, nbytes, offset=0, cuda_ipc=None):
        self.fd, self.nbytes, self.offset, self.cuda_ipc = fd, nbytes, offset, cuda_ipc


class RegionParts:
    """Engine KV memory in parts, for Client.register: layers[l] = (part
    index, offset of the layer's page 0 from the part's start); page p of
    layer l at + p*page_stride, its V at + kv_stride (0 for MLA); the
    strides are the same for every layer. FlashAttention's [2, blocks, ...]
    is kv_stride = blocks*page, page_stride = page; FlashInfer's [blocks, 2,
    ...] kv_stride = page, page_stride = 2*page."""

    def __init__(self, parts, layers, pages, kv_stride, page_stride, device=0):
        self.parts = list(parts)
        self.layer_parts = [(int(p), int(o)) for p, o in layers]
        self.layers = len(self.layer_parts)
        self.pages, self.kv_stride, self.page_stride = pages, kv_stride, page_stride
        self.device = device


class Client:
    """A connection to kvtierd. Thread-safe: calls from several threads share it.
    completions: "push" (default: the daemon pushes each SAVE/LOAD's
    completion and each LOAD layer's) or "wait" (a WAIT round trip per wait)."""

    def __init__(self, socket=None, token=None, completions="push"):
        if completions not in _COMPLETIONS:
            raise ValueError("completions: push or wait")
        opts = _Opts()
        _lib.kvt_client_opts_init(ctypes.byref(opts), ctypes.sizeof(opts))
        self._socket = socket.encode() if socket else None
        self._token = token.encode() if token is not None else None
        opts.socket_path = self._socket
        opts.token = self._token
        opts.completions = _COMPLETIONS[completions]
        c = ctypes.c_void_p()
        rc = _lib.kvt_client_connect(ctypes.byref(opts), ctypes.byref(c))
        if rc < 0:
            # the path tried (socket=, else $KVTIER_SOCKET, else the default)
            # is the first thing to check: OSError's filename carries it
            buf = ctypes.create_string_buffer(4096)
            path = _lib.kvt_client_socket_path(ctypes.byref(opts), buf, len(buf)).decode()
            raise OSError(-rc, "cannot connect to kvtierd (%s)" % _lib.kvt_strerror(rc).decode(),
                          path)
        self._c = c

    def close(self):
        if self._c:
            _lib.kvt_client_close(self._c)
            self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def hello(self, model, layers, kv_heads, head_dim, block_tokens, dtype="bf16",
              layout="paged", tp_rank=0, tp_size=1):
        """Open (or join) a namespace; returns a Namespace."""
        d = _NsDesc()
        _lib.kvt_client_desc_init(ctypes.byref(d), ctypes.sizeof(d))
        d.model_id = model.encode()
        d.layout = _LAYOUTS[layout] if isinstance(layout, str) else int(layout)
        d.dtype = _DTYPES[dtype] if isinstance(dtype, str) else int(dtype)
        d.layers, d.kv_heads, d.head_dim = layers, kv_heads, head_dim
        d.block_tokens, d.tp_rank, d.tp_size = block_tokens, tp_rank, tp_size
        raw = _ClientNs()
        _check(_lib.kvt_client_hello(self._c, ctypes.byref(d), ctypes.byref(raw)), "hello")
        page_bytes = block_tokens * kv_heads * head_dim * _DTYPE_BYTES.get(d.dtype, 0)
        return Namespace(raw, layers, d.layout, page_bytes)

    def register(self, ns, mem):
        """Register EngineMemory (or any object with its attributes: fd, nbytes,
        layers, pages, strides; for GPU memory fd = -1 and cuda_ipc = the 64
        bytes of a cudaIpcMemHandle_t, e.g. from torch's storage._share_cuda_()),
        or a RegionParts; returns a region. A layout kvtierd refuses raises
        OSError(EINVAL) saying why (for RegionParts: the layer, and the stride
        or part at fault)."""
        if getattr(mem, "layer_parts", None) is not None:
            return self._register_parts(ns, mem)
        r = _Region()
        r.size = ctypes.sizeof(r)
        r.memfd = mem.fd
        ipc = getattr(mem, "cuda_ipc", None)
        if ipc is not None:
            ipc_buf = ctypes.create_string_buffer(bytes(ipc), len(ipc))
            r.cuda_ipc = ctypes.cast(ipc_buf, ctypes.c_void_p)
            r.cuda_ipc_len = len(ipc)
            r.device = getattr(mem, "device", 0)
        r.bytes = mem.nbytes
        r.offset = getattr(mem, "offset", 0)
        r.layers, r.pages = mem.layers, mem.pages
        r.layer_stride, r.kv_stride, r.page_stride = mem.layer_stride, mem.kv_stride, mem.page_stride
        rc = _lib.kvt_client_register(self._c, ctypes.byref(ns._raw), ctypes.byref(r))
        if rc == -errno.EINVAL:
            # what differs is in the daemon's log (register.refused)
            raise OSError(errno.EINVAL, "register: the memory is not the namespace's shape "
                          "(memory: %d layers, K to V %d bytes apart; namespace: %d layers "
                          "of %d-byte pages); kvtierd's log says what differs"
                          % (mem.layers, mem.kv_stride, ns.layers, ns.page_bytes))
        return _check(rc, "register")

    def _register_parts(self, ns, mem):
        n = len(mem.parts)
        parts = (_Part * max(n, 1))()
        keep = []
        ipc_len = 0
        for i, p in enumerate(mem.parts):
            parts[i].memfd, parts[i].offset, parts[i].bytes = p.fd, p.offset, p.nbytes
            if p.cuda_ipc is not None:
                buf = ctypes.create_string_buffer(bytes(p.cuda_ipc), len(p.cuda_ipc))
                keep.append(buf)
                parts[i].cuda_ipc = ctypes.cast(buf, ctypes.c_void_p)
                ipc_len = len(p.cuda_ipc)
        layer = (_LayerAt * max(mem.layers, 1))()
        for l, (part, off) in enumerate(mem.layer_parts):
            layer[l].part, layer[l].offset = part, off
        why = ctypes.create_string_buffer(512)
        r = _Parts(size=ctypes.sizeof(_Parts), n_parts=n, parts=parts, layers=mem.layers,
                   pages=mem.pages, layer=layer, kv_stride=mem.kv_stride,
                   page_stride=mem.page_stride, cuda_ipc_len=ipc_len,
                   device=getattr(mem, "device", 0),
                   why=ctypes.cast(why, ctypes.c_char_p), why_len=len(why))
        rc = _lib.kvt_client_register_parts(self._c, ctypes.byref(ns._raw), ctypes.byref(r))
        if rc == -errno.EINVAL and why.value:
            raise OSError(errno.EINVAL, "register: %s" % why.value.decode(errors="replace"))
        return _check(rc, "register")

    def lookup(self, ns, keys):
        """(count of leading keys stored, [tier name of each key])."""
        arr, n = _keys_array(keys)
        tiers = (ctypes.c_uint8 * max(n, 1))()
        hit = _check(_lib.kvt_client_lookup(self._c, ctypes.byref(ns._raw), arr, n, tiers),
                     "lookup")
        return hit, [TIER_NAMES.get(tiers[i], "none") for i in range(n)]

    def lookup_plan(self, ns, keys):
        """(stored count, count the daemon's plan loads, [tier name of each
        key]): past the plan's count, recomputing is faster on this machine."""
        arr, n = _keys_array(keys)
        tiers = (ctypes.c_uint8 * max(n, 1))()
        load = ctypes.c_uint32(0)
        hit = _check(_lib.kvt_client_lookup_plan(self._c, ctypes.byref(ns._raw), arr, n, tiers,
                                                 ctypes.byref(load)), "lookup")
        return hit, load.value, [TIER_NAMES.get(tiers[i], "none") for i in range(n)]

    def prefill(self, ns, tokens, seconds):
        """Report the engine's prefill speed: it computed `tokens` tokens of
        prefill in `seconds` (waits for loads left out). OSError EOPNOTSUPP
        from a daemon of protocol 1."""
        ns_elapsed = max(1, int(seconds * 1e9))
        _check(_lib.kvt_client_prefill(self._c, ctypes.byref(ns._raw), int(tokens), ns_elapsed),
               "prefill")

    @property
    def version(self):
        """The protocol version agreed at HELLO (1 to 3; 0 before one)."""
        return _lib.kvt_client_version(self._c)

    def save(self, ns, region, keys, pages, parent=None, reuse_class=0):
        """SAVE pages[i] as block keys[i] under parent. reuse_class (0 = none,
        up to REUSE_CLASS_MAX) is a hint the daemon's eviction policy may
        learn from (class-lru): the reference one is
        reuse_class_of(the request's output tokens). A daemon of protocol 1
        or 2 is not told it."""
        arr, n = _keys_array(keys)
        pg, m = _u32_array(pages)
        if n != m:
            raise ValueError("one page per key")
        par = None
        if parent is not None:
            par = _Key()
            ctypes.memmove(par.bytes, bytes(parent), KEY_BYTES)
            par = ctypes.byref(par)
        t = ctypes.c_uint64()
        _check(_lib.kvt_client_save_class(self._c, ctypes.byref(ns._raw), region, par, arr, pg,
                                          n, int(reuse_class), ctypes.byref(t)), "save")
        return Ticket(self, t.value, "save")

    def load(self, ns, region, keys, pages):
        arr, n = _keys_array(keys)
        pg, m = _u32_array(pages)
        if n != m:
            raise ValueError("one page per key")
        t = ctypes.c_uint64()
        _check(_lib.kvt_client_load(self._c, ctypes.byref(ns._raw), region, arr, pg, n,
                                    ctypes.byref(t)), "load")
        return Ticket(self, t.value, "load")

    def _keys_op(self, fn, what, ns, keys):
        arr, n = _keys_array(keys)
        return _check(fn(self._c, ctypes.byref(ns._raw), arr, n), what)

    def pin(self, ns, keys):
        return self._keys_op(_lib.kvt_client_pin, "pin", ns, keys)

    def unpin(self, ns, keys):
        return self._keys_op(_lib.kvt_client_unpin, "unpin", ns, keys)

    def remove(self, ns, keys):
        return self._keys_op(_lib.kvt_client_remove, "remove", ns, keys)

    def stats(self):
        """The daemon's counters as a dict (the JSON of `kvtier stats --json`)."""
        p = ctypes.c_void_p()
        _check(_lib.kvt_client_stats(self._c, ctypes.byref(p)), "stats")
        try:
            return json.loads(ctypes.string_at(p).decode())
        finally:
            _libc.free(p)

    def tier_counters(self, tier):
        """A tier's own named counters as a dict, name -> value (its table,
        docs/tiers-interface.md): {} for a tier the daemon does not have.
        tier: "dram", "ssd", "remote"."""
        return self.stats().get("tiers", {}).get(tier, {}).get("counters", {})

    def ping(self, data=b"ping"):
        _check(_lib.kvt_client_ping(self._c, data, len(data)), "ping")

