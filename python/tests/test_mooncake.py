"""Mooncake parity: `hawser.mooncake` gives mooncake.engine's names with
Mooncake's arguments, defaults and return conventions; protocols this host
cannot honour fall back to tcp with one log line; MC_* variables are honoured
or reported once; notifications; the *_on_cuda calls (against the stand-in
CUDA driver, in a child process so this one keeps its driver state)."""
import ctypes
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REGION, Region, _next_to_module, new_engine, pattern, softverbs_lib, use_softverbs


def neg(hw, name):
    return -hw.codes[name]


def hawser_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "hawser" and r.levelno >= logging.WARNING]


# ---- the one import a connector changes ---------------------------------------------------


def test_mooncake_module_has_mooncake_engines_names(hw):
    from hawser.mooncake import Read, TransferEngine, TransferNotify, TransferOpcode, Write
    import hawser.mooncake as mc

    assert TransferEngine is hw.TransferEngine
    assert (Read, Write) == (TransferOpcode.Read, TransferOpcode.Write) == (0, 1)
    assert (TransferOpcode.READ, TransferOpcode.WRITE) == (Read, Write)  # as Mooncake's docs spell them
    assert TransferEngine.TransferOpcode is TransferOpcode
    n = TransferNotify("layer-3", "done")
    assert (n.name, n.msg) == ("layer-3", "done")
    assert (TransferNotify().name, TransferNotify(name="a", msg="b").msg) == ("", "b")
    assert mc.SUPPORT_CUDA is True and mc.SUPPORT_EFA is False


def test_mooncake_methods_exist_with_mooncakes_keywords(hw):
    # pybind11 methods carry their signature on the first line of __doc__.
    from hawser.mooncake import TransferEngine

    expected = {
        "initialize": ["local_hostname", "metadata_server", "protocol", "device_name"],
        "initialize_ext": ["local_hostname", "metadata_server", "protocol", "device_name", "metadata_type"],
        "transfer_sync_write": ["target_hostname", "buffer", "peer_buffer_address", "length", "transport_hint"],
        "transfer_sync": ["target_hostname", "buffer", "peer_buffer_address", "length", "opcode", "notify",
                          "transport_hint"],
        "batch_transfer_sync_write": ["target_hostname", "buffers", "peer_buffer_addresses", "lengths",
                                      "transport_hint"],
        "batch_transfer_async": ["target_hostname", "buffers", "peer_buffer_addresses", "lengths", "opcode",
                                 "transport_hint"],
        "transfer_write_on_cuda": ["target_hostname", "buffer", "peer_buffer_address", "length", "stream_ptr",
                                   "transport_hint"],
        "batch_transfer_read_on_cuda": ["target_hostname", "buffers", "peer_buffer_addresses", "lengths",
                                        "stream_ptr", "transport_hint"],
        "register_memory": ["buffer_addr", "capacity", "location"],
        "batch_register_memory": ["buffer_addresses", "capacities", "location"],
        "get_local_topology": ["device_name"],
        "send_probe": ["peer_server_name"],
    }
    for name, args in expected.items():
        doc = getattr(TransferEngine, name).__doc__
        sig = doc.splitlines()[0]
        for a in args:
            assert f"{a}:" in sig, f"{name}: no argument {a} in {sig}"
    for name in ("get_rpc_port", "allocate_managed_buffer", "free_managed_buffer", "transfer_sync_read",
                 "batch_transfer_sync_read", "batch_transfer_sync", "batch_transfer_async_write",
                 "batch_transfer_async_read", "get_batch_transfer_status", "transfer_submit_write",
                 "transfer_check_status", "write_bytes_to_buffer", "read_bytes_from_buffer", "unregister_memory",
                 "batch_unregister_memory", "get_first_buffer_address", "warmup_efa_segment", "get_notifies",
                 "get_engine", "get_engine_ptr", "transfer_read_on_cuda", "batch_transfer_write_on_cuda"):
        assert callable(getattr(TransferEngine, name)), name


# ---- initialize: protocols, device_name, MC_* -------------------------------------------------


def test_protocol_rdma_without_a_nic_falls_back_to_tcp_with_one_log_line(hw, monkeypatch, caplog):
    monkeypatch.setenv("HAWSER_RDMA_VERBS_LIB", "/nonexistent/libibverbs.so.1")
    monkeypatch.delenv("HAWSER_TRANSPORT", raising=False)
    caplog.set_level(logging.INFO, logger="hawser")
    a = hw.TransferEngine()
    assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0, hw.last_error()
    warned = [m for m in hawser_warnings(caplog) if "protocol 'rdma'" in m]
    assert len(warned) == 1, hawser_warnings(caplog)
    assert "using tcp" in warned[0] and "/nonexistent/libibverbs.so.1" in warned[0], warned[0]
    assert "rdma" not in a.transports()
    b = new_engine()
    ra, rb = Region(4096, pattern(4096, 3)), Region(4096)
    assert a.register_memory(ra.addr, 4096) == 0 and b.register_memory(rb.addr, 4096) == 0
    assert a.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr, 4096) == 0, hw.last_error()
    assert rb.read() == ra.read()


def test_protocol_efa_falls_back_to_tcp(hw, monkeypatch, caplog):
    monkeypatch.delenv("HAWSER_TRANSPORT", raising=False)
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "efa", None) == 0, hw.last_error()
    assert any("protocol 'efa'" in m and "using tcp" in m for m in hawser_warnings(caplog))
    assert "tcp" in e.transports()


def test_mc_force_hca_keeps_rdma_from_falling_back(hw, monkeypatch):
    monkeypatch.setenv("HAWSER_RDMA_VERBS_LIB", "/nonexistent/libibverbs.so.1")
    monkeypatch.setenv("MC_FORCE_HCA", "1")
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == neg(hw, "no_transport")
    assert "rdma" in hw.last_error()


def test_mc_force_tcp_wins_over_protocol_rdma(hw, monkeypatch, tmp_path):
    lib = softverbs_lib()
    if lib is None:
        pytest.skip("this build has no rdma transport (no libhawser_softverbs.so next to the module)")
    # The target has no rdma: a sender that forced rdma cannot reach it, one on tcp can.
    monkeypatch.setenv("HAWSER_RDMA_VERBS_LIB", "/nonexistent/libibverbs.so.1")
    b = new_engine()
    assert "rdma" not in b.transports()
    rb = Region(8192)
    assert b.register_memory(rb.addr, 8192) == 0
    # rdma can install here (one software NIC): MC_FORCE_TCP still makes it tcp, as in Mooncake.
    monkeypatch.setenv("HAWSER_RDMA_VERBS_LIB", lib)
    monkeypatch.setenv("HAWSER_SOFTVERBS_DEVICES", "sv0")
    monkeypatch.setenv("HAWSER_SOFTVERBS_DIR", str(tmp_path))
    monkeypatch.setenv("MC_FORCE_TCP", "1")
    a = hw.TransferEngine()
    assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0, hw.last_error()
    assert "rdma" in a.transports()
    ra = Region(8192, pattern(8192, 5))
    assert a.register_memory(ra.addr, 8192) == 0
    assert a.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr, 8192) == 0, hw.last_error()
    assert rb.read() == ra.read()
    # Without it, protocol "rdma" forces rdma, which this target lacks.
    monkeypatch.delenv("MC_FORCE_TCP")
    c = hw.TransferEngine()
    assert c.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0, hw.last_error()
    assert c.register_memory(ra.addr, 8192) == 0
    assert c.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr, 8192) == neg(hw, "no_transport")


def test_non_numeric_mc_transfer_timeout_warns_once_and_keeps_the_default(hw, monkeypatch, caplog):
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "soon")
    for _ in range(2):
        e = hw.TransferEngine()
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, hw.last_error()
    warned = [m for m in hawser_warnings(caplog) if "MC_TRANSFER_TIMEOUT" in m]
    assert len(warned) == 1, warned
    assert "'soon'" in warned[0] and "HAWSER_PYTHON_SYNC_TIMEOUT_MS" in warned[0]


def test_mooncake_variables_hawser_ignores_are_reported_once_each(hw, monkeypatch, caplog):
    monkeypatch.setenv("MC_TCP_SLICE_SIZE", "65536")
    monkeypatch.setenv("MC_HAWSER_TEST_UNKNOWN_KNOB", "1")
    monkeypatch.setenv("MC_LEGACY_RPC_PORT_BINDING", "1")  # what hawser does anyway: not reported
    for _ in range(3):
        e = hw.TransferEngine()
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, hw.last_error()
    msgs = hawser_warnings(caplog)
    slice_lines = [m for m in msgs if m.startswith("MC_TCP_SLICE_SIZE ")]
    assert len(slice_lines) == 1 and "HAWSER_TCP_SLICE_SIZE" in slice_lines[0], msgs
    assert len([m for m in msgs if m.startswith("MC_HAWSER_TEST_UNKNOWN_KNOB ")]) == 1, msgs
    assert not [m for m in msgs if "MC_LEGACY_RPC_PORT_BINDING" in m], msgs


def test_device_name_none_is_empty(hw):
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", None) == 0, hw.last_error()
    f = hw.TransferEngine()
    assert f.initialize_ext("127.0.0.1", "P2PHANDSHAKE", "tcp", None, "p2p") == 0, hw.last_error()


# ---- what connectors call besides transfers ---------------------------------------------------


def test_send_probe_answers_for_a_live_peer_only(hw):
    a, b = new_engine(), new_engine()
    seg = b.get_segment_name()
    assert a.send_probe(seg) == 0, hw.last_error()
    rb = Region(64)
    assert b.register_memory(rb.addr, 64) == 0
    ra = Region(64)
    assert a.register_memory(ra.addr, 64) == 0
    assert a.transfer_sync_read(seg, ra.addr, rb.addr, 64) == 0  # the segment is open and cached now
    del b
    rc = a.send_probe(seg)
    assert rc < 0 and hw.last_error_code() == "segment_not_found", hw.last_error()
    assert seg in hw.last_error()
    assert hw.TransferEngine().send_probe(seg) < 0  # not initialized


def test_get_engine_and_engine_ptr(hw):
    e = hw.TransferEngine()
    assert e.get_engine() is e
    assert e.get_engine_ptr() == 0
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert e.get_engine_ptr() != 0


def numa_nodes():
    """This host's NUMA nodes (node 0 alone where sysfs shows none)."""
    try:
        names = os.listdir("/sys/devices/system/node")
    except OSError:
        names = []
    nodes = sorted(int(n[4:]) for n in names if n.startswith("node") and n[4:].isdigit())
    return nodes or [0]


def test_local_topology_is_mooncakes_json(hw, monkeypatch):
    # No NIC (no verbs library): one "cpu:N" per NUMA node, each with two empty NIC lists.
    monkeypatch.setenv("HAWSER_RDMA_VERBS_LIB", "/nonexistent/libibverbs.so.1")
    e = new_engine()
    assert "rdma" not in e.transports()
    topo = json.loads(e.get_local_topology())
    assert topo == {f"cpu:{n}": [[], []] for n in numa_nodes()}
    assert json.loads(hw.TransferEngine().get_local_topology()) == topo  # from a temporary engine too


def test_local_topology_lists_the_rdma_nics(hw, monkeypatch, tmp_path):
    use_softverbs(monkeypatch, tmp_path, "sv0,sv1")
    nics = sorted(sum(json.loads(hw.TransferEngine().get_local_topology()).values(), [])[0] +
                  sum(json.loads(hw.TransferEngine().get_local_topology()).values(), [])[1])
    assert nics == ["sv0", "sv1"]
    only = json.loads(hw.TransferEngine().get_local_topology("sv1"))
    assert sorted(sum((p + o for p, o in only.values()), [])) == ["sv1"]


def test_warmup_efa_segment_is_zero(hw):
    e = new_engine()
    assert e.warmup_efa_segment(e.get_segment_name()) == 0


def test_failed_async_submits_return_zero_and_raise_when_asked(pair, hw):
    a, ra, b, rb = pair
    seg = b.get_segment_name()
    assert a.transfer_submit_write(seg, ra.addr, 0x1000, 8) == 0
    assert hw.last_error_code() == "out_of_range"
    assert a.transfer_check_status(0) == -1  # what a caller that checks `< 0` only polls next
    assert a.batch_transfer_async(seg, [ra.addr], [rb.addr], [8], 7) == 0
    assert "opcode 7" in hw.last_error()
    r = new_engine(raise_on_error=True)
    rr = Region(64)
    assert r.register_memory(rr.addr, 64) == 0
    with pytest.raises(hw.Error) as ei:
        r.batch_transfer_async_write(seg, [rr.addr], [0x1000], [8])
    assert ei.value.code_name == "out_of_range"


# ---- notifications ----------------------------------------------------------------------------


def test_notify_arrives_after_the_bytes_and_never_for_a_failed_transfer(pair, hw):
    from hawser.mooncake import TransferNotify, TransferOpcode

    a, ra, b, rb = pair
    seg = b.get_segment_name()
    data = pattern(REGION, 12)
    ra.write(0, data)
    assert b.get_notifies() == []
    rc = a.transfer_sync(seg, ra.addr, rb.addr, REGION, TransferOpcode.Write, TransferNotify("kv", "req-1"))
    assert rc == 0, hw.last_error()
    got = b.get_notifies()
    assert [(n.name, n.msg, n.peer) for n in got] == [("kv", "req-1", a.get_segment_name())]
    assert rb.read() == data  # visible when the notification is
    rc = a.batch_transfer_sync(seg, [ra.addr, ra.addr + 100], [rb.addr, rb.addr + 200], [50, 60],
                               TransferOpcode.Write, TransferNotify("kv", "req-2"))
    assert rc == 0, hw.last_error()
    # An empty batch sends the notification alone.
    assert a.batch_transfer_sync(seg, [], [], [], TransferOpcode.Write, notify=TransferNotify("kv", "req-3")) == 0
    # A failed transfer sends none.
    rc = a.transfer_sync(seg, ra.addr, 0x1000, 8, TransferOpcode.Write, TransferNotify("kv", "never"))
    assert rc == neg(hw, "out_of_range")
    assert [n.msg for n in b.get_notifies()] == ["req-2", "req-3"]
    assert b.get_notifies() == []


# ---- *_on_cuda and CUDA memory found without a location ------------------------------------


def fake_cuda():
    return _next_to_module(("../tests/libhawser_fake_cuda.so",), os.path.isfile)


CHILD = textwrap.dedent("""
    import ctypes, json, sys
    import hawser
    from hawser.mooncake import TransferEngine
    mode = sys.argv[1]
    a, b = TransferEngine(), TransferEngine()
    for e in (a, b):
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, hawser.last_error()
    dst = ctypes.create_string_buffer(65536)
    assert b.register_memory(ctypes.addressof(dst), 65536) == 0
    out = {}
    if mode == "none":
        src = ctypes.create_string_buffer(b"x" * 4096)
        assert a.register_memory(ctypes.addressof(src), 4096) == 0
        try:
            a.transfer_write_on_cuda(b.get_segment_name(), ctypes.addressof(src), ctypes.addressof(dst), 4096)
            out["raised"] = None
        except hawser.Error as e:
            out["raised"] = e.code_name
            out["message"] = e.message
    else:
        cu = ctypes.CDLL(sys.argv[2])
        ctx, dev = ctypes.c_void_p(), ctypes.c_ulonglong()
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert cu.cuCtxSetCurrent(ctx) == 0
        assert cu.cuMemAlloc_v2(ctypes.byref(dev), 65536) == 0
        data = bytes((i * 7 + 3) & 0xFF for i in range(65536))
        host = ctypes.create_string_buffer(data, 65536)
        # No location: the driver says it is GPU memory.
        assert a.register_memory(dev.value, 65536) == 0, hawser.last_error()
        out["location"] = a.get_segment_buffers(a.get_segment_name())[0][2]
        # The data reaches the GPU by a copy queued on a stream (the stand-in
        # driver runs it later, on its own thread): the write must wait for it.
        stream = ctypes.c_void_p()
        assert cu.cuStreamCreate(ctypes.byref(stream), 0) == 0
        assert cu.cuMemcpyAsync(dev, ctypes.c_ulonglong(ctypes.addressof(host)), ctypes.c_size_t(65536), stream) == 0
        a.transfer_write_on_cuda(b.get_segment_name(), dev.value, ctypes.addressof(dst), 32768, stream.value)
        a.batch_transfer_write_on_cuda(b.get_segment_name(), [dev.value + 32768], [ctypes.addressof(dst) + 32768],
                                       [32768], stream_ptr=0)
        out["moved"] = dst.raw == data
    print(json.dumps(out))
""")


def run_child(mode, env_extra, *args):
    env = dict(os.environ)
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", CHILD, mode, *args], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_on_cuda_without_a_cuda_driver_raises_not_supported(hw):
    out = run_child("none", {"HAWSER_GPU_CUDA_DRIVER": "/nonexistent/libcuda.so.1"})
    assert out["raised"] == "not_supported", out
    assert "transfer_write_on_cuda" in out["message"] and "CUDA driver" in out["message"], out


def test_on_cuda_waits_for_the_stream_then_moves_gpu_memory(hw):
    lib = fake_cuda()
    if lib is None:
        pytest.skip("the stand-in CUDA driver (tests/libhawser_fake_cuda.so) is not built next to the module")
    out = run_child("fake", {"HAWSER_GPU_CUDA_DRIVER": lib}, lib)
    assert out == {"location": "cuda:0", "moved": True}, out


def test_on_cuda_with_the_real_driver_waits_for_the_torch_stream(hw):
    from conftest import require_cuda
    torch = require_cuda()
    a, b = new_engine(""), new_engine("")
    n = 1 << 22
    src = torch.zeros(n, dtype=torch.uint8, device="cuda")
    dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
    assert a.register_memory(src.data_ptr(), n) == 0 and b.register_memory(dst.data_ptr(), n) == 0
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        src.fill_(7)  # queued on `stream`: the write must wait for it
        a.transfer_write_on_cuda(b.get_segment_name(), src.data_ptr(), dst.data_ptr(), n, stream.cuda_stream)
    torch.cuda.synchronize()
    assert bool((dst == 7).all())


# ---- the gaps Mooncake's own tests expose ------------------------------------------------------


def test_batch_register_memory_of_nothing_is_zero_as_mooncake(hw):
    e = new_engine()
    assert e.batch_register_memory([], []) == 0, hw.last_error()
    assert e.batch_unregister_memory([]) == 0, hw.last_error()
    # Nothing was registered: a region registers afterwards as if the call had not happened.
    r = Region(4096)
    assert e.batch_register_memory([r.addr], [4096]) == 0
    assert [b[:2] for b in e.get_segment_buffers(e.get_segment_name())] == [(r.addr, 4096)]
    # A length mismatch is still refused, empty or not.
    assert e.batch_register_memory([], [4096]) == neg(hw, "invalid_argument")
    # Before initialize() it fails as every call does.
    assert hw.TransferEngine().batch_register_memory([], []) == neg(hw, "invalid_argument")


def test_write_bytes_to_buffer_takes_a_str_as_mooncakes_char_pointer(hw):
    e = new_engine()
    r = Region(64)
    assert e.register_memory(r.addr, 64) == 0
    assert e.write_bytes_to_buffer(r.addr, "hello", 5) == 0, hw.last_error()
    assert r.read(0, 5) == b"hello"
    # Its UTF-8 bytes: "é" is two of them.
    assert e.write_bytes_to_buffer(r.addr + 8, "caf\u00e9", 5) == 0, hw.last_error()
    assert r.read(8, 5) == "caf\u00e9".encode()
    assert e.write_bytes_to_buffer(r.addr, "abc", 4) == neg(hw, "invalid_argument")
    assert "exceeds the 3 bytes" in hw.last_error()
    with pytest.raises(TypeError):
        e.write_bytes_to_buffer(r.addr, 12345, 4)


def test_shared_segment_is_refused_with_what_to_use_instead(hw):
    import hawser.mooncake as mc
    with pytest.raises(hw.Error) as ei:
        mc.SharedSegment("name", 4096)
    assert ei.value.code_name == "not_supported"
    assert "register_memory" in ei.value.message
    assert hw.last_error_code() == "not_supported"
    with pytest.raises(RuntimeError):  # what a caller catching Mooncake's errors catches
        mc.SharedSegment()


class _MooncakeHttpMetadata:
    """Mooncake's HTTP metadata server protocol (GET/PUT/DELETE <url>?key=K), in a thread."""

    def __init__(self):
        import http.server
        import threading
        import urllib.parse
        store = self.store = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def _key(self):
                return urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["key"][0]

            def _answer(self, code, body=b""):
                try:
                    self.send_response(code)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # an engine that stopped without reading its answer

            def do_GET(self):
                k = self._key()
                self._answer(200, store[k]) if k in store else self._answer(404)

            def do_PUT(self):
                store[self._key()] = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer(200)

            def do_DELETE(self):
                self._answer(200 if store.pop(self._key(), None) is not None else 404)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metadata"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_metadata_server_of_mooncake_is_accepted(hw):
    server = _MooncakeHttpMetadata()
    try:
        a, b = hw.TransferEngine(), hw.TransferEngine()
        assert a.initialize(f"127.0.0.1:{_free_port()}", server.url, "tcp", "") == 0, hw.last_error()
        assert b.initialize(f"127.0.0.1:{_free_port()}", server.url, "tcp", "") == 0, hw.last_error()
        assert any(k.endswith("/segments/" + b.get_segment_name()) for k in server.store), server.store.keys()
        ra, rb = Region(4096, pattern(4096, 3)), Region(4096)
        assert a.register_memory(ra.addr, 4096) == 0 and b.register_memory(rb.addr, 4096) == 0
        assert a.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr, 4096) == 0, hw.last_error()
        assert rb.read() == pattern(4096, 3)
        del a, b
    finally:
        server.close()
