"""hawser.nixl: NIXL's Python agent API over hawser.

    from hawser.nixl import nixl_agent, nixl_agent_config
    # was: from nixl._api import nixl_agent, nixl_agent_config

The names, arguments, return values, transfer states ("DONE"/"PROC"/"ERR")
and exception classes are NIXL's (nixl._api and nixl._bindings) for what
vLLM's NixlConnector, SGLang's NIXL backend, Dynamo and NIXL's tutorials
call; docs/porting-from-nixl.md has every call and its status.
hawser.nixl.install_as_nixl() makes `import nixl`, `nixl._api` and
`nixl._bindings` resolve to this module, for code that cannot be edited.

Under it, each agent owns one hawser TransferEngine: its metadata blob
carries the engine's segment name ("host:port") and the agent's
registrations, a prepped descriptor list is a table of (addr, len, dev)
rows, a transfer is one hawser block request of the rows chosen by index,
and a transfer's notification is a hawser notification (name = this
agent, message = the bytes) sent to the transfer's peer once the transfer
completed, for READs and WRITEs alike.
"""
import enum
import json
import logging
import os
import socket
import struct
import threading
import time

_log = logging.getLogger("hawser.nixl")

DEFAULT_COMM_PORT = 8888
_INIT_AGENT = "NIXL_INIT_AGENT"
_MAGIC = b"HAWSER-NIXL/1\n"
# What the one backend of this module answers to: hawser chooses the
# transport per request (nvlink, shm, rdma, tcp); "UCX" is the name callers
# ask for by default, "HAWSER" its own, "POSIX"/"GDS" the file backends.
_PLUGINS = ["HAWSER", "UCX", "POSIX", "GDS"]
_PLUGIN_MEMS = {"HAWSER": ["DRAM_SEG", "VRAM_SEG", "FILE_SEG"], "UCX": ["DRAM_SEG", "VRAM_SEG"],
                "POSIX": ["DRAM_SEG", "FILE_SEG"], "GDS": ["DRAM_SEG", "VRAM_SEG", "FILE_SEG"]}
_PLUGIN_PARAMS = {"HAWSER": {"num_threads": "0"}, "UCX": {"num_threads": "0", "device_list": ""},
                  "POSIX": {"use_aio": "false", "use_uring": "true"}, "GDS": {"thread_count": "0"}}


def _np():
    import numpy
    return numpy


# ---- nixl._bindings: errors and types -------------------------------------------------------


class nixlNotPostedError(RuntimeError):
    pass


class nixlInvalidParamError(RuntimeError):
    pass


class nixlBackendError(RuntimeError):
    pass


class nixlNotFoundError(RuntimeError):
    pass


class nixlMismatchError(RuntimeError):
    pass


class nixlNotAllowedError(RuntimeError):
    pass


class nixlRepostActiveError(RuntimeError):
    pass


class nixlUnknownError(RuntimeError):
    pass


class nixlNotSupportedError(RuntimeError):
    pass


class nixlRemoteDisconnectError(RuntimeError):
    pass


class nixlCancelledError(RuntimeError):
    pass


class nixlNoTelemetryError(RuntimeError):
    pass


# hawser's code names -> the NIXL error a caller catches for them.
_ERRORS = {
    "invalid_argument": nixlInvalidParamError, "address_overlapped": nixlInvalidParamError,
    "not_registered": nixlNotFoundError, "out_of_range": nixlNotFoundError,
    "segment_not_found": nixlRemoteDisconnectError, "unavailable": nixlRemoteDisconnectError,
    "not_supported": nixlNotSupportedError, "canceled": nixlCancelledError,
}


def _raise_engine(what):
    """Raises the NIXL error for this thread's last hawser failure."""
    code = _hawser.last_error_code()
    raise _ERRORS.get(code, nixlBackendError)(f"{what}: {_hawser.last_error()}")


class nixlXferTelemetry:
    """Per-transfer telemetry: startTime (µs since the epoch), postDuration
    and xferDuration (µs), totalBytes, descCount (after merging)."""

    def __init__(self, startTime=0, postDuration=0, xferDuration=0, totalBytes=0, descCount=0):
        self.startTime, self.postDuration, self.xferDuration = startTime, postDuration, xferDuration
        self.totalBytes, self.descCount = totalBytes, descCount

    def __repr__(self):
        return (f"nixlXferTelemetry(startTime={self.startTime}, postDuration={self.postDuration}, "
                f"xferDuration={self.xferDuration}, totalBytes={self.totalBytes}, descCount={self.descCount})")


class nixl_thread_sync_t(enum.IntEnum):
    NIXL_THREAD_SYNC_NONE = 0
    NIXL_THREAD_SYNC_STRICT = 1
    NIXL_THREAD_SYNC_RW = 2
    NIXL_THREAD_SYNC_DEFAULT = 0


_MEM_NAMES = {"DRAM": "DRAM", "VRAM": "VRAM", "FILE": "FILE", "BLOCK": "BLOCK", "OBJ": "OBJ",
              "cpu": "DRAM", "cuda": "VRAM"}  # "cpu"/"cuda": NIXL's deprecated names, still used


def _mem(mem_type):
    """NIXL's memory type name; KeyError for one NIXL does not know."""
    return _MEM_NAMES[mem_type]


# ---- descriptor lists --------------------------------------------------------------------------


class _DList:
    """Rows (addr, len, dev_id[, meta]) of one memory type, kept as numpy
    arrays so that tens of thousands of rows cost no Python loop."""
    _meta = False

    def __init__(self, mem_type, rows=None, addrs=None, lens=None, devs=None, metas=None):
        np = _np()
        self._type = _mem(mem_type)
        if rows is not None:
            rows = list(rows)
            addrs = [int(r[0]) for r in rows]
            lens = [int(r[1]) for r in rows]
            devs = [int(r[2]) for r in rows]
            metas = [(r[3] if len(r) > 3 else "") for r in rows] if self._meta else None
        self.addrs = np.asarray(addrs if addrs is not None else [], dtype=np.uint64).reshape(-1)
        self.lens = np.asarray(lens if lens is not None else [], dtype=np.uint64).reshape(-1)
        self.devs = np.asarray(devs if devs is not None else [], dtype=np.int64).reshape(-1)
        self.metas = list(metas) if metas is not None else ([""] * len(self.addrs) if self._meta else None)

    def descCount(self):
        return len(self.addrs)

    def isEmpty(self):
        return len(self.addrs) == 0

    def getType(self):
        return self._type

    def _row(self, i):
        row = (int(self.addrs[i]), int(self.lens[i]), int(self.devs[i]))
        return row + (self.metas[i],) if self._meta else row

    def __getitem__(self, i):
        if not -len(self.addrs) <= i < len(self.addrs):
            raise IndexError(f"descriptor {i} of {len(self.addrs)}")
        return self._row(i)

    def __setitem__(self, i, row):
        self.addrs[i], self.lens[i], self.devs[i] = int(row[0]), int(row[1]), int(row[2])
        if self._meta:
            self.metas[i] = row[3] if len(row) > 3 else ""

    def __iter__(self):
        return (self._row(i) for i in range(len(self.addrs)))

    def addDesc(self, row):
        np = _np()
        self.addrs = np.append(self.addrs, np.uint64(int(row[0])))
        self.lens = np.append(self.lens, np.uint64(int(row[1])))
        self.devs = np.append(self.devs, np.int64(int(row[2])))
        if self._meta:
            self.metas.append(row[3] if len(row) > 3 else "")

    append = addDesc

    def index(self, row):
        for i in range(len(self.addrs)):
            if self._row(i)[:3] == tuple(int(x) for x in row[:3]):
                return i
        raise nixlNotFoundError(f"descriptor {tuple(row)} is not in the list")

    def remDesc(self, i):
        np = _np()
        self.addrs, self.lens, self.devs = (np.delete(a, i) for a in (self.addrs, self.lens, self.devs))
        if self._meta:
            del self.metas[i]

    def clear(self):
        self.__init__(self._type)

    def print(self):
        print(repr(self))

    def __eq__(self, other):
        return (type(self) is type(other) and self._type == other._type and list(self) == list(other))

    def __repr__(self):
        return f"{type(self).__name__}({self._type}, {self.descCount()} descriptors)"

    def __getstate__(self):
        return {"type": self._type, "addrs": self.addrs.tolist(), "lens": self.lens.tolist(),
                "devs": self.devs.tolist(), "metas": self.metas}

    def __setstate__(self, st):
        type(self).__init__(self, st["type"], addrs=st["addrs"], lens=st["lens"], devs=st["devs"],
                            metas=st["metas"])


class nixlXferDList(_DList):
    """Descriptors of a transfer: (addr, len, dev_id)."""


class nixlRegDList(_DList):
    """Descriptors of a registration: (addr, len, dev_id, meta)."""
    _meta = True

    def trim(self):
        return nixlXferDList(self._type, addrs=self.addrs, lens=self.lens, devs=self.devs)


class nixl_prepped_dlist_handle:
    """A prepared descriptor list (prep_xfer_dlist): rows chosen by index later."""

    def __init__(self, agent, remote, dlist):
        self._agent, self.remote, self.dlist = agent, remote, dlist
        self._handle = id(self)
        self.released = False

    def release(self):
        self.released = True

    def __bool__(self):
        return True


class nixl_xfer_handle:
    """A transfer (make_prepped_xfer / initialize_xfer), reposted with transfer()."""

    def __init__(self, agent, op, remote, segment, generation, local, peer, lens, notif, merged):
        self._agent, self.op, self.remote, self.segment, self.generation = agent, op, remote, segment, generation
        self.local, self.peer, self.lens, self.notif, self.merged = local, peer, lens, notif, merged
        self.bytes = int(lens.sum())
        self.state = "INIT"
        self.error = None
        self.released = False
        self.batches = []  # hawser batches of the post in progress
        self.waiter = None  # its waiter's future (queued or running), and what it was given
        self.waiter_args = None
        self.telemetry = nixlXferTelemetry()
        self._handle = id(self)

    def release(self):
        self._agent.release_xfer_handle(self)

    def __bool__(self):
        return True


def _notif_bytes(msg):
    if msg is None:
        return b""
    if isinstance(msg, str):
        return msg.encode()
    return bytes(msg)


def _name(name):
    return name.decode() if isinstance(name, (bytes, bytearray)) else str(name)


class _Ranges:
    """Registered ranges of one memory type, for checking descriptors at prep time."""

    def __init__(self, addrs, lens):
        np = _np()
        addrs = np.asarray(addrs, dtype=np.uint64)
        order = np.argsort(addrs, kind="stable")
        self.starts = addrs[order]
        self.ends = self.starts + np.asarray(lens, dtype=np.uint64)[order]

    def covers(self, addrs, lens):
        """Index of the first row not inside one range, or -1."""
        np = _np()
        if len(addrs) == 0:
            return -1
        if len(self.starts) == 0:
            return 0
        k = np.searchsorted(self.starts, addrs, side="right").astype(np.int64) - 1
        ok = (k >= 0) & (addrs + lens <= self.ends[np.maximum(k, 0)])
        bad = np.nonzero(~ok)[0]
        return int(bad[0]) if bad.size else -1


def _default_host():
    """The address peers reach this agent at: HAWSER_NIXL_HOST, else the
    address of the default route (no packet is sent), else 127.0.0.1."""
    host = os.environ.get("HAWSER_NIXL_HOST")
    if host:
        return host
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            ip = s.getsockname()[0]
            if ip and not ip.startswith("0."):
                return ip
    except OSError:
        pass
    return "127.0.0.1"


# ---- nixl._api -------------------------------------------------------------------------------


class nixl_agent_config:
    """NIXL's agent configuration; the same positions, keywords and attributes."""

    def __init__(self, enable_prog_thread=True, enable_listen_thread=False, listen_port=DEFAULT_COMM_PORT,
                 capture_telemetry=False, num_threads=0, backends=["UCX"], sync_mode=None):
        if sync_mode is not None and not isinstance(sync_mode, nixl_thread_sync_t):
            raise TypeError("sync_mode must be a nixl_thread_sync_t or None")
        self.backends = list(backends)
        self.enable_pthread = enable_prog_thread
        self.enable_listen = enable_listen_thread
        self.port = listen_port
        self.capture_telemetry = capture_telemetry
        self.num_threads = num_threads
        self.sync_mode = sync_mode


class nixl_agent:
    """NIXL's agent over one hawser TransferEngine. Thread safe: one agent may
    be used from many threads, and a process may hold many agents."""

    def __init__(self, agent_name, nixl_conf=None, instantiate_all=False):
        if not agent_name:
            raise ValueError("agent_name must be a non-empty string")
        from concurrent.futures import ThreadPoolExecutor
        conf = nixl_conf if nixl_conf is not None else nixl_agent_config()
        self.name = agent_name
        self.config = conf
        self.plugin_list = list(_PLUGINS)
        self.backends = {}
        self.backend_mems = {}
        self.notifs = {}
        self.nixl_mems = {"DRAM": "DRAM", "VRAM": "VRAM", "FILE": "FILE", "BLOCK": "BLOCK", "OBJ": "OBJ",
                          "cpu": "DRAM", "cuda": "VRAM"}
        self.nixl_ops = {"READ": 0, "WRITE": 1}
        self._lock = threading.RLock()
        self._ended = threading.Condition(self._lock)  # a transfer left "PROC"
        self._regs = {}          # mem type -> list of (addr, len, dev, meta)
        self._ranges = {}        # mem type -> _Ranges of self._regs
        self._objects = {}       # addr -> tensor kept alive while registered
        self._remotes = {}       # name -> {"segment", "regs": {mem: [...]}, "ranges", "generation"}
        self._generation = 0
        self._telemetry = bool(conf.capture_telemetry) or os.environ.get("NIXL_TELEMETRY_ENABLE", "").lower() in (
            "1", "y", "yes", "true", "on")
        self._engine = _hawser.TransferEngine()
        cfg = {}
        if "HAWSER_NOTIFY_MAX_MESSAGE_BYTES" not in os.environ:
            cfg["notify.max_message_bytes"] = "4M"  # NIXL's users send notifications of hundreds of KiB
        host = _default_host()
        if self._engine.initialize(host, "P2PHANDSHAKE", "", "", cfg) != 0:
            _raise_engine(f"nixl_agent('{agent_name}')")
        self._waiters = ThreadPoolExecutor(max_workers=max(4, int(conf.num_threads or 0)),
                                           thread_name_prefix=f"nixl-{agent_name}")
        for b in (self.plugin_list if instantiate_all else conf.backends):
            if b in _PLUGINS:
                self.create_backend(b, {"num_threads": str(conf.num_threads)} if conf.num_threads else {})
            else:
                _log.warning("nixl_agent('%s'): backend '%s' is not available (hawser offers %s)", agent_name, b,
                             ", ".join(_PLUGINS))
        self._listener = None
        if conf.enable_listen:
            self._listener = _Listener(self, conf.port)

    # -- backends --

    def get_plugin_list(self):
        return list(self.plugin_list)

    def get_plugin_mem_types(self, backend):
        if backend not in _PLUGIN_MEMS:
            _log.warning("get_plugin_mem_types: unknown plugin '%s'", backend)
            return []
        return list(_PLUGIN_MEMS[backend])

    def get_plugin_params(self, backend):
        if backend not in _PLUGIN_PARAMS:
            _log.warning("get_plugin_params: unknown plugin '%s'", backend)
            return {}
        return dict(_PLUGIN_PARAMS[backend])

    def get_backend_mem_types(self, backend):
        return list(_PLUGIN_MEMS[backend]) if backend in self.backends else []

    def get_backend_params(self, backend):
        return dict(self.backend_mems.get(backend, {})) if backend in self.backends else {}

    def create_backend(self, backend, initParams={}):
        """Every backend name is the one hawser engine of this agent."""
        if backend not in _PLUGINS:
            raise nixlNotFoundError(f"create_backend: no plugin '{backend}' (hawser offers {', '.join(_PLUGINS)})")
        with self._lock:
            if backend in self.backends:
                raise nixlNotAllowedError(f"create_backend: backend '{backend}' already exists")
            self.backends[backend] = len(self.backends) + 1
            params = dict(_PLUGIN_PARAMS[backend])
            params.update({str(k): str(v) for k, v in dict(initParams).items()})
            self.backend_mems[backend] = params
        return self.backends[backend]

    def _need_backend(self, what, backends=()):
        for b in backends or ():
            if b not in self.backends:
                raise KeyError(b)  # NIXL's self.backends[name]
        if not self.backends:
            raise nixlBackendError(f"{what}: no backend was created (nixl_agent_config(backends=[...]) or "
                                   f"create_backend)")

    # -- descriptors --

    def get_xfer_descs(self, descs, mem_type=None):
        return self._descs(nixlXferDList, descs, mem_type, "get_xfer_descs")

    def get_reg_descs(self, descs, mem_type=None):
        return self._descs(nixlRegDList, descs, mem_type, "get_reg_descs")

    def _descs(self, cls, descs, mem_type, what):
        np = _np()
        if isinstance(descs, _DList):
            if isinstance(descs, cls):
                return descs
            if cls is nixlXferDList:
                _log.error("%s: a nixlRegDList is not a transfer list (use .trim())", what)
                return None
            return nixlRegDList(descs.getType(), addrs=descs.addrs, lens=descs.lens, devs=descs.devs)
        if isinstance(descs, np.ndarray):
            if mem_type is None:
                _log.error("%s: mem_type is needed with an array", what)
                return None
            if descs.ndim != 2 or descs.shape[1] != 3 or descs.dtype.kind not in "iu" or \
                    not descs.flags["C_CONTIGUOUS"]:
                _log.error("%s: an N x 3 C-contiguous uint64/int64 array is needed", what)
                return None
            return cls(mem_type, addrs=descs[:, 0], lens=descs[:, 1], devs=descs[:, 2])
        if isinstance(descs, (list, tuple)) and descs and isinstance(descs[0], tuple):
            width = 4 if cls is nixlRegDList else 3
            if mem_type is None or any(len(d) != width for d in descs):
                _log.error("%s: %d-tuples and a mem_type are needed", what, width)
                return None
            return cls(mem_type, rows=descs)
        tensors = descs if isinstance(descs, (list, tuple)) else [descs]
        if isinstance(descs, (list, tuple)) and not descs:
            raise IndexError("list index out of range")  # as NIXL: descs[0] is read first
        rows, kind = [], None
        for t in tensors:
            d = _hawser.tensor_desc(t)
            if not d["contiguous"]:
                _log.error("%s: a non-contiguous tensor cannot be one descriptor", what)
                return None
            loc = d["location"]
            this = "VRAM" if loc.startswith("cuda") else "DRAM"
            if kind is not None and this != kind:
                _log.error("%s: tensors on different devices", what)
                return None
            kind = this
            dev = int(loc.split(":")[1]) if loc.startswith("cuda") else 0
            if cls is nixlRegDList:
                rows.append((d["addr"], d["nbytes"], dev, ""))
                with self._lock:
                    self._objects.setdefault(d["addr"], t)  # kept alive while registered
            else:
                rows.append((d["addr"], d["nbytes"], dev))
        return cls(mem_type or kind, rows=rows)

    def get_serialized_descs(self, descs):
        import pickle
        return pickle.dumps(descs)

    def deserialize_descs(self, serialized):
        import pickle
        return pickle.loads(serialized)

    # -- memory --

    def register_memory(self, reg_list, mem_type=None, backends=[]):
        descs = self.get_reg_descs(reg_list, mem_type)
        if descs is None:
            raise nixlInvalidParamError("register_memory: the descriptors could not be read (see the log)")
        self._need_backend("register_memory", backends)
        mem = descs.getType()
        if mem in ("BLOCK", "OBJ"):
            raise nixlNotSupportedError(f"register_memory: memory type {mem} is not supported by hawser")
        if mem != "FILE":
            rc = self._engine.batch_register_memory(descs.addrs.tolist(), descs.lens.tolist(), "*")
            if rc != 0:
                _raise_engine("register_memory")
        with self._lock:
            self._regs.setdefault(mem, []).extend(descs)
            self._reindex(mem)
        return descs

    def deregister_memory(self, dereg_list, backends=[]):
        descs = self.get_reg_descs(dereg_list)
        if descs is None:
            raise nixlInvalidParamError("deregister_memory: the descriptors could not be read")
        mem = descs.getType()
        if mem != "FILE":
            rc = self._engine.batch_unregister_memory(descs.addrs.tolist())
            if rc != 0:
                _raise_engine("deregister_memory")
        with self._lock:
            gone = {(a, n) for a, n, _, _ in descs}
            self._regs[mem] = [r for r in self._regs.get(mem, []) if (r[0], r[1]) not in gone]
            self._reindex(mem)
            for a, _ in gone:
                self._objects.pop(a, None)

    def _reindex(self, mem):
        regs = self._regs.get(mem, [])
        self._ranges[mem] = _Ranges([r[0] for r in regs], [r[1] for r in regs])

    def query_memory(self, reg_list, backend, mem_type=None):
        descs = self.get_reg_descs(reg_list, mem_type)
        out = []
        for a, n, dev, meta in descs:
            if descs.getType() == "FILE":
                path = meta or _fd_path(dev)
                out.append({"size": os.path.getsize(path), "mode": os.stat(path).st_mode} if path and
                           os.path.exists(path) else None)
            else:
                out.append(None)
        return out

    # -- metadata --

    def _metadata(self, regs, conn=True):
        body = {"name": self.name, "regs": {m: [list(r) for r in rs] for m, rs in regs.items()}}
        if conn:
            body["segment"] = self._engine.get_segment_name()
        return _MAGIC + json.dumps(body, separators=(",", ":")).encode()

    def get_agent_metadata(self):
        with self._lock:
            regs = {m: list(rs) for m, rs in self._regs.items() if m != "FILE"}
        return self._metadata(regs)

    def get_partial_agent_metadata(self, descs, inc_conn_info=False, backends=[]):
        regs = {}
        empty = descs is None or (descs.isEmpty() if isinstance(descs, _DList) else len(descs) == 0)
        if not empty:
            d = self.get_reg_descs(descs, None if isinstance(descs, _DList) else "DRAM")
            regs[d.getType()] = list(d)
        return self._metadata(regs, conn=inc_conn_info)

    def add_remote_agent(self, metadata):
        if not isinstance(metadata, (bytes, bytearray)) or not bytes(metadata).startswith(_MAGIC):
            raise nixlMismatchError("add_remote_agent: not the metadata of a hawser.nixl agent")
        try:
            body = json.loads(bytes(metadata)[len(_MAGIC):])
            name = body["name"]
        except (ValueError, KeyError) as exc:
            raise nixlMismatchError(f"add_remote_agent: malformed metadata ({exc})") from None
        if name == self.name:
            raise nixlInvalidParamError("add_remote_agent: this is the agent's own metadata")
        with self._lock:
            r = self._remotes.get(name)
            seg = body.get("segment")
            if r is not None and seg and r["segment"] and r["segment"] != seg:
                raise nixlNotAllowedError(f"add_remote_agent: agent '{name}' is loaded with connection info "
                                          f"{r['segment']}, the new metadata says {seg} (remove_remote_agent first)")
            if r is None:
                self._generation += 1
                r = self._remotes[name] = {"segment": None, "regs": {}, "ranges": {}, "generation": self._generation}
            if seg:
                r["segment"] = seg
            for mem, rows in body.get("regs", {}).items():
                known = set(tuple(x) for x in r["regs"].get(mem, []))
                r["regs"].setdefault(mem, []).extend(tuple(x) for x in rows if tuple(x) not in known)
                rs = r["regs"][mem]
                r["ranges"][mem] = _Ranges([x[0] for x in rs], [x[1] for x in rs])
        return name.encode()

    def remove_remote_agent(self, agent):
        with self._lock:
            self._remotes.pop(_name(agent), None)

    def check_remote_metadata(self, remote_name, descs=None):
        with self._lock:
            r = self._remotes.get(_name(remote_name))
            if r is None or not r["segment"]:
                return False
            if descs is None:
                return True
            d = descs if isinstance(descs, _DList) else self.get_xfer_descs(descs, "DRAM")
            rng = r["ranges"].get(d.getType())
            return rng is not None and rng.covers(d.addrs, d.lens) < 0

    def send_local_metadata(self, ip_addr="", port=DEFAULT_COMM_PORT):
        _Listener.send(ip_addr, port, {"op": "load"}, self.get_agent_metadata())

    def send_partial_agent_metadata(self, descs, inc_conn_info=False, backends=[], ip_addr="",
                                    port=DEFAULT_COMM_PORT, label=""):
        _Listener.send(ip_addr, port, {"op": "load"}, self.get_partial_agent_metadata(descs, inc_conn_info))

    def fetch_remote_metadata(self, remote_name, ip_addr="", port=DEFAULT_COMM_PORT, label=""):
        """Asks the listener at ip_addr:port for agent `remote_name`'s metadata;
        asynchronous: poll check_remote_metadata."""
        def fetch():
            try:
                md = _Listener.send(ip_addr, port, {"op": "fetch", "name": _name(remote_name)}, b"", reply=True)
                if md:
                    self.add_remote_agent(md)
            except (OSError, RuntimeError) as exc:
                _log.warning("fetch_remote_metadata('%s', %s:%s): %s", _name(remote_name), ip_addr, port, exc)
        threading.Thread(target=fetch, daemon=True).start()

    def invalidate_local_metadata(self, ip_addr="", port=DEFAULT_COMM_PORT):
        _Listener.send(ip_addr, port, {"op": "invalidate", "name": self.name}, b"")

    def make_connection(self, remote_agent, backends=[]):
        seg = self._remote(remote_agent, "make_connection")["segment"]
        if self._engine.send_probe(seg) != 0:
            _raise_engine(f"make_connection('{_name(remote_agent)}')")

    def _remote(self, agent, what):
        with self._lock:
            r = self._remotes.get(_name(agent))
        if r is None or not r["segment"]:
            raise nixlNotFoundError(f"{what}: no metadata of agent '{_name(agent)}' is loaded (add_remote_agent)")
        return r

    # -- transfers --

    def prep_xfer_dlist(self, agent_name, xfer_list, mem_type=None, backends=[]):
        descs = self.get_xfer_descs(xfer_list, mem_type)
        if descs is None:
            raise nixlInvalidParamError("prep_xfer_dlist: the descriptors could not be read (see the log)")
        self._need_backend("prep_xfer_dlist", backends)
        name = _name(agent_name)
        mem = descs.getType()
        if name in ("", _INIT_AGENT):
            with self._lock:
                rng = self._ranges.get(mem)
            bad = rng.covers(descs.addrs, descs.lens) if rng else (0 if descs.descCount() else -1)
            if bad >= 0:
                raise nixlNotFoundError(f"prep_xfer_dlist: descriptor {bad} {descs[bad]} is not inside memory "
                                        f"this agent registered as {mem}")
            return nixl_prepped_dlist_handle(self, None, descs)
        if name == self.name:  # loopback: this agent's own memory (or its files) as the remote side
            if mem == "FILE":
                return nixl_prepped_dlist_handle(self, name, descs)
            with self._lock:
                rng = self._ranges.get(mem)
        else:
            rng = self._remote(name, "prep_xfer_dlist")["ranges"].get(mem)
        bad = rng.covers(descs.addrs, descs.lens) if rng else (0 if descs.descCount() else -1)
        if bad >= 0:
            raise nixlNotFoundError(f"prep_xfer_dlist: descriptor {bad} {descs[bad]} is not inside memory agent "
                                    f"'{name}' registered as {mem} (as its loaded metadata says)")
        return nixl_prepped_dlist_handle(self, name, descs)

    def _segment(self, remote):
        if remote == self.name:
            return self._engine.get_segment_name(), 0
        r = self._remote(remote, "transfer")
        return r["segment"], r["generation"]

    def make_prepped_xfer(self, operation, local_xfer_side, local_indices, remote_xfer_side, remote_indices,
                          notif_msg=b"", backends=[], skip_desc_merge=False):
        np = _np()
        op = self.nixl_ops[operation]
        if local_xfer_side.remote is not None:
            raise nixlInvalidParamError("make_prepped_xfer: the local side was prepared for a remote agent")
        if remote_xfer_side.remote is None:
            raise nixlInvalidParamError("make_prepped_xfer: the remote side was prepared for the local agent")
        if local_xfer_side.released or remote_xfer_side.released:
            raise nixlInvalidParamError("make_prepped_xfer: a prepared list was released")
        li = np.asarray(local_indices).reshape(-1).astype(np.int64, copy=False)
        ri = np.asarray(remote_indices).reshape(-1).astype(np.int64, copy=False)
        if li.size == 0 or li.size != ri.size:
            raise nixlInvalidParamError(f"make_prepped_xfer: {li.size} local and {ri.size} remote indices "
                                        f"(non-empty and equal counts are needed)")
        ld, rd = local_xfer_side.dlist, remote_xfer_side.dlist
        for side, idx, d in (("local", li, ld), ("remote", ri, rd)):
            bad = np.nonzero((idx < 0) | (idx >= d.descCount()))[0]
            if bad.size:
                raise nixlInvalidParamError(f"make_prepped_xfer: {side} index [{int(bad[0])}] = {int(idx[bad[0]])} "
                                            f"is outside the {d.descCount()} prepared descriptors")
        return self._xfer(op, ld.addrs[li], ld.lens[li], rd.addrs[ri], rd.lens[ri], rd, remote_xfer_side.remote,
                          notif_msg, "make_prepped_xfer")

    def initialize_xfer(self, operation, local_descs, remote_descs, remote_agent, notif_msg=b"", backends=[]):
        op = self.nixl_ops[operation]
        ld = self.get_xfer_descs(local_descs, getattr(local_descs, "getType", lambda: None)())
        rd = self.get_xfer_descs(remote_descs, getattr(remote_descs, "getType", lambda: None)())
        if ld is None or rd is None:
            raise nixlInvalidParamError("initialize_xfer: nixlXferDList descriptors are needed")
        if ld.descCount() != rd.descCount():
            raise nixlInvalidParamError(f"initialize_xfer: {ld.descCount()} local and {rd.descCount()} remote "
                                        f"descriptors")
        self.prep_xfer_dlist(_INIT_AGENT, ld)
        prepped = self.prep_xfer_dlist(remote_agent, rd)
        return self._xfer(op, ld.addrs, ld.lens, rd.addrs, rd.lens, rd, prepped.remote, notif_msg, "initialize_xfer")

    def _xfer(self, op, local, llens, peer, plens, rd, remote, notif_msg, what):
        np = _np()
        bad = np.nonzero(llens != plens)[0]
        if bad.size:
            raise nixlInvalidParamError(f"{what}: descriptor pair {int(bad[0])} has lengths {int(llens[bad[0]])} "
                                        f"and {int(plens[bad[0]])}")
        if rd.getType() == "FILE":
            segment, generation = _fd_segments(rd, peer), 0
        else:
            segment, generation = self._segment(remote)
        # NIXL's descCount: descriptors after merging the ones contiguous on both sides.
        joined = (local[:-1] + llens[:-1] == local[1:]) & (peer[:-1] + llens[:-1] == peer[1:])
        merged = int(local.size - np.count_nonzero(joined))
        return nixl_xfer_handle(self, op, remote, segment, generation, np.ascontiguousarray(local),
                                np.ascontiguousarray(peer), np.ascontiguousarray(llens), _notif_bytes(notif_msg),
                                merged)

    def transfer(self, handle, notif_msg=b""):
        """Posts the transfer (again, once finished: a repost). "PROC" while it
        runs; check_xfer_state says when it is "DONE". A non-empty notif_msg
        replaces the handle's notification for this post and later ones."""
        with self._lock:
            if handle.released:
                raise nixlInvalidParamError("transfer: the handle was released")
            if handle.state == "PROC":
                raise nixlRepostActiveError("transfer: the handle is still in progress")
            if handle.remote not in (None, self.name) and not isinstance(handle.segment, dict):
                r = self._remotes.get(handle.remote)
                if r is None or r["generation"] != handle.generation or r["segment"] != handle.segment:
                    raise nixlNotFoundError(f"transfer: agent '{handle.remote}' was removed or reloaded since "
                                            f"this handle was made")
            if notif_msg:
                handle.notif = _notif_bytes(notif_msg)
            handle.state, handle.error = "PROC", None
        t0 = time.time()
        batches = []
        for segment, sel in (handle.segment.items() if isinstance(handle.segment, dict) else
                             [(handle.segment, None)]):
            local, peer, lens = (handle.local, handle.peer, handle.lens) if sel is None else \
                (handle.local[sel], handle.peer[sel], handle.lens[sel])
            bid = self._engine.transfer_blocks_async(segment, local, peer, lens, handle.op)
            if bid <= 0:
                err = f"transfer: {_hawser.last_error()}"
                code = _hawser.last_error_code()
                if batches:
                    self._engine.get_batch_transfer_status(batches)
                with self._lock:
                    handle.state = "ERR"
                    handle.error = _ERRORS.get(code, nixlBackendError)(err)
                    self._ended.notify_all()
                raise handle.error
            batches.append(bid)
        posted = time.time()
        handle.telemetry = nixlXferTelemetry(int(t0 * 1e6), int((posted - t0) * 1e6), 0, handle.bytes, handle.merged)
        with self._lock:
            handle.batches = batches
            handle.waiter_args = (batches, t0)
            handle.waiter = self._waiters.submit(self._finish, handle, batches, t0)
        return "PROC"

    def _finish(self, handle, batches, t0):
        """Waits for the transfer (GIL released), then sends its notification
        to the peer: a transfer is DONE once both happened."""
        rc = self._engine.get_batch_transfer_status(batches)
        err = None
        if rc != 0:
            code = _hawser.last_error_code()
            err = _ERRORS.get(code, nixlBackendError)(f"transfer to '{handle.remote}': {_hawser.last_error()}")
        elif handle.notif and not handle.released and not isinstance(handle.segment, dict):  # files: no peer
            if self._engine.batch_transfer_sync(handle.segment, [], [], [], handle.op,
                                                (self.name, handle.notif)) != 0:
                err = nixlBackendError(f"transfer to '{handle.remote}': its notification was not delivered: "
                                       f"{_hawser.last_error()}")
        with self._lock:
            handle.telemetry.xferDuration = int((time.time() - t0) * 1e6)
            handle.state, handle.error = ("ERR", err) if err else ("DONE", None)
            handle.batches = []
            handle.waiter = handle.waiter_args = None
            self._ended.notify_all()

    def check_xfer_state(self, handle):
        """"DONE" or "PROC"; a failed transfer raises its NIXL error (as NIXL's
        binding does: "ERR" is what a caller that catches it treats it as)."""
        with self._lock:
            state, err = handle.state, handle.error
        if state == "ERR":
            raise err
        if state == "INIT":
            raise nixlNotPostedError("check_xfer_state: the transfer was not posted")
        return state

    def get_xfer_telemetry(self, handle):
        if not self._telemetry:
            raise nixlNoTelemetryError("get_xfer_telemetry: telemetry is off (nixl_agent_config("
                                       "capture_telemetry=True) or NIXL_TELEMETRY_ENABLE=y)")
        with self._lock:
            t = handle.telemetry
            if handle.state != "DONE":
                return nixlXferTelemetry()
            return nixlXferTelemetry(t.startTime, t.postDuration, t.xferDuration, t.totalBytes, t.descCount)

    def query_xfer_backend(self, handle):
        return next(iter(self.backends), "HAWSER")

    def estimate_xfer_cost(self, handle):
        raise nixlNotSupportedError("estimate_xfer_cost: not provided by hawser")

    def release_xfer_handle(self, handle):
        """Frees the handle. One still in progress is canceled first, as NIXL
        does: what was not yet started is dropped, what is in flight ends
        (hawser waits up to python.cancel_wait_ms for that), and the handle
        is freed once nothing of it still moves, so its memory may be reused.
        A transfer that ended before the cancel took hold keeps its outcome
        (and sends its notification). Raises nixlRepostActiveError, the handle
        kept, when its I/O still runs after that wait: release it again later."""
        with self._lock:
            if handle.state != "PROC":
                handle.released = True
                return
            batches = list(handle.batches)
            waiter, waiter_args = handle.waiter, handle.waiter_args
        for b in batches:
            if self._engine.cancel_transfer(b) != 0 and _hawser.last_error_code() != "invalid_batch":
                raise nixlRepostActiveError(f"release_xfer_handle: the transfer to '{handle.remote}' is still in "
                                            f"progress after its cancel: {_hawser.last_error()}; release it again "
                                            f"once check_xfer_state says it ended")
        # A waiter still queued behind other transfers' waiters is taken back
        # and its work done here: the release does not wait for the pool.
        if waiter is not None and waiter.cancel():
            self._finish(handle, *waiter_args)
        with self._lock:
            # Its tasks ended: the waiter frees the batches and settles the
            # state (a completed transfer's notification included).
            self._ended.wait_for(lambda: handle.state != "PROC")
            handle.released = True

    def release_dlist_handle(self, handle):
        handle.release()

    def prep_mem_view(self, dlist, *, backends=None):
        raise nixlNotSupportedError("prep_mem_view: the GPU-initiated device API is not provided by hawser")

    def release_mem_view(self, mvh):
        raise nixlNotSupportedError("release_mem_view: the GPU-initiated device API is not provided by hawser")

    # -- notifications --

    def _pull(self):
        got = {}
        for n in self._engine.get_notifies():
            got.setdefault(n.name, []).append(n.msg.encode("utf-8", "surrogateescape"))
        return got

    def get_new_notifs(self, backends=[]):
        """{agent name: [messages]} received since the last call (consumed)."""
        self._need_backend("get_new_notifs", backends)
        with self._lock:
            return self._pull()

    def update_notifs(self, backends=[]):
        """Adds what arrived to self.notifs and returns all of it (never trimmed)."""
        self._need_backend("update_notifs", backends)
        with self._lock:
            for name, msgs in self._pull().items():
                self.notifs.setdefault(name, []).extend(msgs)
            return self.notifs

    def check_remote_xfer_done(self, remote_agent_name, lookup_tag, backends=[], tag_is_prefix=True):
        with self._lock:
            self.update_notifs(backends)
            msgs = self.notifs.get(_name(remote_agent_name), [])
            for i, m in enumerate(msgs):
                if (m.startswith(lookup_tag) if tag_is_prefix else lookup_tag in m):
                    del msgs[i]
                    return True
            return False

    def send_notif(self, remote_agent_name, notif_msg, backend=None):
        name = _name(remote_agent_name)
        seg = self._engine.get_segment_name() if name == self.name else self._remote(name, "send_notif")["segment"]
        if self._engine.batch_transfer_sync(seg, [], [], [], 1, (self.name, _notif_bytes(notif_msg))) != 0:
            _raise_engine(f"send_notif('{name}')")


# ---- files (NIXL's FILE memory: rows (offset, len, fd)) --------------------------------------


def _fd_path(fd):
    try:
        return os.readlink(f"/proc/self/fd/{int(fd)}")
    except OSError:
        return None


def _fd_segments(rd, offsets):
    """{hawser file segment "file:///path": row selector} for the FILE rows of
    a transfer, found from each row's file descriptor."""
    np = _np()
    out = {}
    devs = rd.devs
    for fd in np.unique(devs):
        path = _fd_path(fd)
        if not path or not path.startswith("/"):
            raise nixlNotFoundError(f"FILE descriptor with fd {int(fd)}: no such open file")
        out["file://" + path] = None
    if len(out) == 1:
        return {next(iter(out)): None}
    raise nixlNotSupportedError("a transfer over several files in one handle is not supported: one handle per file")


# ---- the listener (enable_listen_thread): send / fetch / invalidate metadata ----------------


class _Listener:
    """A TCP listener answering NIXL's peer-to-peer metadata exchange:
    frames of (4-byte header length, JSON header, 4-byte body length, body)."""

    def __init__(self, agent, port):
        import weakref
        self._agent = weakref.ref(agent)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", int(port)))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True, name=f"nixl-listen-{agent.name}").start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    header, body = _recv_frame(conn)
                    agent = self._agent()
                    if agent is None:
                        return
                    if header.get("op") == "load":
                        agent.add_remote_agent(body)
                        _send_frame(conn, {"ok": True}, b"")
                    elif header.get("op") == "fetch":
                        md = agent.get_agent_metadata() if header.get("name") == agent.name else b""
                        _send_frame(conn, {"ok": bool(md)}, md)
                    elif header.get("op") == "invalidate":
                        agent.remove_remote_agent(header.get("name", ""))
                        _send_frame(conn, {"ok": True}, b"")
                except (OSError, ValueError, RuntimeError) as exc:
                    _log.warning("nixl listener: %s", exc)

    @staticmethod
    def send(ip, port, header, body, reply=False):
        if not ip:
            raise nixlNotSupportedError("metadata exchange through a central store (no ip_addr) is not provided "
                                        "by hawser.nixl: pass the peer's ip_addr and port")
        with socket.create_connection((ip, int(port)), timeout=10) as s:
            _send_frame(s, header, body)
            h, b = _recv_frame(s)
        return b if reply else h


def _send_frame(s, header, body):
    h = json.dumps(header).encode()
    s.sendall(struct.pack("!I", len(h)) + h + struct.pack("!I", len(body)) + bytes(body))


def _recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ValueError("connection closed mid-frame")
        buf += chunk
    return bytes(buf)


def _recv_frame(s):
    (n,) = struct.unpack("!I", _recv_exact(s, 4))
    if n > 1 << 20:
        raise ValueError("frame header too long")
    header = json.loads(_recv_exact(s, n))
    (m,) = struct.unpack("!I", _recv_exact(s, 4))
    if m > 1 << 30:
        raise ValueError("frame body too long")
    return header, _recv_exact(s, m)


# ---- `import nixl` for code that cannot be edited ----------------------------------------------


def install_as_nixl():
    """Makes `import nixl`, `from nixl import nixl_agent`, `nixl._api`,
    `nixl._bindings` and `nixl.logging` resolve to hawser.nixl in this
    process (vLLM, SGLang and Dynamo import those). Returns the `nixl` module."""
    import sys
    import types
    me = sys.modules[__name__]
    pkg = types.ModuleType("nixl")
    pkg.__path__ = []
    for k in __all__:
        setattr(pkg, k, getattr(me, k))
    log = types.ModuleType("nixl.logging")
    log.get_logger = lambda name=None: logging.getLogger(name or "nixl")
    pkg._api, pkg._bindings, pkg.logging = me, me, log
    sys.modules.update({"nixl": pkg, "nixl._api": me, "nixl._bindings": me, "nixl.logging": log})
    return pkg


__all__ = ["nixl_agent", "nixl_agent_config", "nixlXferDList", "nixlRegDList", "nixl_xfer_handle",
           "nixl_prepped_dlist_handle", "nixlXferTelemetry", "nixl_thread_sync_t", "DEFAULT_COMM_PORT",
           "nixlNotPostedError", "nixlInvalidParamError", "nixlBackendError", "nixlNotFoundError",
           "nixlMismatchError", "nixlNotAllowedError", "nixlRepostActiveError", "nixlUnknownError",
           "nixlNotSupportedError", "nixlRemoteDisconnectError", "nixlCancelledError", "nixlNoTelemetryError"]
