"""hawser.TransferEngine with Mooncake's method names: two engines in one
process moving bytes over TCP, each bad input's exact code, the Pythonic
layer (hawser.Error, last_error)."""
import ctypes
import gc
import socket
import threading
import time

import pytest

from conftest import REGION, Region, new_engine, pattern, require_hawser, use_softverbs


def neg(hw, name):
    return -hw.codes[name]


# ---- initialize ----------------------------------------------------------------


def test_p2p_segment_name_is_host_and_rpc_port(hw):
    e = new_engine()
    assert e.get_rpc_port() > 0
    assert e.get_segment_name() == f"127.0.0.1:{e.get_rpc_port()}"
    assert "tcp" in e.transports()


def test_initialize_host_port_listens_on_that_port(hw):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = hw.TransferEngine()
    assert e.initialize(f"127.0.0.1:{port}", "p2p", "tcp", "") == 0, hw.last_error()
    assert e.get_rpc_port() == port
    assert e.get_segment_name() == f"127.0.0.1:{port}"


def test_initialize_twice_is_invalid_argument(hw):
    e = new_engine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == neg(hw, "invalid_argument")
    assert "already initialized" in hw.last_error()


def test_initialize_bad_port_is_invalid_argument(hw):
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1:99999", "P2PHANDSHAKE", "tcp", "") == neg(hw, "invalid_argument")
    assert hw.last_error_code() == "invalid_argument"
    assert "99999" in hw.last_error()
    # The engine can still be initialized after a failed attempt.
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, hw.last_error()


def test_initialize_with_a_protocol_nobody_has_is_not_supported_listing_the_built_ones(hw):
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "carrier-pigeon", "") == neg(hw, "not_supported")
    err = hw.last_error()
    assert "'carrier-pigeon'" in err and "this build's transports" in err and "tcp" in err, err


def test_initialize_accepts_any_installed_transport_as_protocol(hw):
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "file", "") == 0, hw.last_error()


def test_initialize_unsupported_metadata_scheme_is_invalid_argument(hw):
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1", "redis://127.0.0.1:6379", "tcp", "") == neg(hw, "invalid_argument")
    assert "redis://" in hw.last_error()


def test_protocol_rdma_forced_by_the_operator_that_cannot_load_verbs_is_no_transport(hw, monkeypatch):
    # With or without the rdma transport in this build, rdma forced by
    # HAWSER_TRANSPORT (the operator's word: no fallback) whose verbs library
    # cannot be loaded installs no rdma: initialize says so.
    monkeypatch.setenv("HAWSER_RDMA_VERBS_LIB", "/nonexistent/libibverbs.so.1")
    monkeypatch.setenv("HAWSER_TRANSPORT", "rdma")
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == neg(hw, "no_transport")
    assert hw.last_error_code() == "no_transport"
    assert "transport 'rdma' (forced by config 'transport')" in hw.last_error()
    assert e.get_rpc_port() == 0  # not initialized
    monkeypatch.delenv("HAWSER_TRANSPORT")
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, hw.last_error()


def test_protocol_rdma_is_forced_and_moves_bytes(hw, monkeypatch, tmp_path):
    use_softverbs(monkeypatch, tmp_path, "sv0")  # one software RDMA NIC
    a, b = hw.TransferEngine(), hw.TransferEngine()
    for e in (a, b):
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0, hw.last_error()
        assert "rdma" in e.transports()
    ra, rb = Region(65536, pattern(65536, 6)), Region(65536)
    assert a.register_memory(ra.addr, 65536) == 0, hw.last_error()
    assert b.register_memory(rb.addr, 65536) == 0, hw.last_error()
    assert a.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr, 65536) == 0, hw.last_error()
    assert rb.read() == ra.read()


def bytes_over(engine, transport):
    """The bytes `engine` moved over `transport` (hawser_transferred_bytes_total)."""
    samples = engine.get_metrics()["hawser_transferred_bytes_total"]["samples"]
    return sum(s["value"] for s in samples if s["labels"].get("transport") == transport)


@pytest.mark.parametrize("env, argument", [("tcp", "shm"), ("shm", "tcp"), ("tcp", "rdma")])
def test_env_transport_overrides_protocol_argument(hw, monkeypatch, tmp_path, env, argument):
    # Both transports install in `a`, so the bytes' transport says which side won.
    if argument == "rdma":
        use_softverbs(monkeypatch, tmp_path, "sv0")
    b = new_engine()
    monkeypatch.setenv("HAWSER_TRANSPORT", env)
    a = hw.TransferEngine()
    assert a.initialize("127.0.0.1", "P2PHANDSHAKE", argument, "") == 0, hw.last_error()
    assert env in a.transports() and argument in a.transports(), a.transports()
    ra, rb = Region(4096, pattern(4096, 1)), Region(4096)
    assert a.register_memory(ra.addr, 4096) == 0
    assert b.register_memory(rb.addr, 4096) == 0
    assert a.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr, 4096) == 0, hw.last_error()
    assert rb.read() == ra.read()
    assert (bytes_over(a, env), bytes_over(a, argument)) == (4096, 0)


def test_bad_knob_value_fails_initialize_naming_the_env(hw, monkeypatch):
    monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_MS", "soon")
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == neg(hw, "invalid_argument")
    assert "HAWSER_PYTHON_SYNC_TIMEOUT_MS" in hw.last_error()


def test_initialize_ext(hw):
    e = hw.TransferEngine()
    assert e.initialize_ext("127.0.0.1", "P2PHANDSHAKE", "tcp", "", "etcd") == 0, hw.last_error()
    assert e.get_rpc_port() > 0


def test_calls_before_initialize_are_invalid_argument(hw):
    e = hw.TransferEngine()
    r = Region(64)
    assert e.register_memory(r.addr, 64) == neg(hw, "invalid_argument")
    assert "initialize" in hw.last_error()
    assert e.transfer_sync_read("127.0.0.1:1", r.addr, 0, 64) == neg(hw, "invalid_argument")
    assert e.allocate_managed_buffer(64) == 0
    assert e.get_rpc_port() == 0
    assert e.get_segment_name() == ""


# ---- registration ----------------------------------------------------------------


def test_register_rejects_zero_overlap_and_unknown(hw):
    e = new_engine()
    r = Region(8192)
    assert e.register_memory(r.addr, 0) == neg(hw, "invalid_argument")
    assert e.register_memory(r.addr, 8192) == 0
    assert e.register_memory(r.addr + 4096, 100) == neg(hw, "address_overlapped")
    assert e.unregister_memory(r.addr + 1) == neg(hw, "not_registered")
    assert e.unregister_memory(r.addr) == 0
    assert e.unregister_memory(r.addr) == neg(hw, "not_registered")


def test_batch_register_is_all_or_nothing(hw):
    e = new_engine()
    r = Region(3 * 4096)
    addrs = [r.addr, r.addr + 4096, r.addr + 8192]
    assert e.batch_register_memory(addrs, [4096, 4096]) == neg(hw, "invalid_argument")
    # The third entry overlaps the second: nothing is registered.
    assert e.batch_register_memory(addrs, [4096, 8192, 4096]) == neg(hw, "address_overlapped")
    assert e.register_memory(r.addr, 4096) == 0  # proves the first entry was not kept
    assert e.unregister_memory(r.addr) == 0
    assert e.batch_register_memory(addrs, [4096, 4096, 4096], "cpu:0") == 0
    assert e.batch_unregister_memory(addrs) == 0
    assert e.batch_unregister_memory(addrs) == neg(hw, "not_registered")


# ---- data ----------------------------------------------------------------------


def test_sync_write_then_read_moves_bytes(pair, hw):
    a, ra, b, rb = pair
    data = pattern(REGION, 7)
    ra.write(0, data)
    seg = b.get_segment_name()
    assert a.transfer_sync_write(seg, ra.addr, rb.addr, REGION) == 0, hw.last_error()
    assert rb.read() == data
    ctypes.memset(ra.addr, 0, REGION)
    assert a.transfer_sync_read(seg, ra.addr + 100, rb.addr + 5000, 70000) == 0, hw.last_error()
    assert ra.read(100, 70000) == data[5000:75000]
    assert ra.read(0, 100) == bytes(100)


def test_a_route_contract_refuses_a_request_naming_the_route_and_why(pair, hw):
    # The engines force tcp (new_engine's protocol): a contract allowing shm
    # only forbids every request, naming tcp and why shm is not taken.
    a, ra, b, rb = pair
    data = pattern(4096, 3)
    ra.write(0, data)
    seg = b.get_segment_name()
    assert a.set_route_contract("shm") == 0, hw.last_error()
    assert a.transfer_sync_write(seg, ra.addr, rb.addr, 4096) == neg(hw, "no_transport")
    err = hw.last_error()
    assert ("the route contract (transports shm, from the request) forbids the route this request would take, "
            "tcp; the expected route, shm, is not the transport forced by config 'transport'") in err, err
    assert rb.read(0, 4096) == bytes(4096)
    assert a.set_route_contract("tcp", "no_staging") == 0, hw.last_error()
    assert a.transfer_sync_write(seg, ra.addr, rb.addr, 4096) == 0, hw.last_error()
    assert rb.read(0, 4096) == data
    assert a.set_route_contract() == 0  # the engine's again: none
    assert a.transfer_sync_read(seg, ra.addr + 8192, rb.addr, 4096) == 0, hw.last_error()
    assert a.set_route_contract("shm", "fast") == neg(hw, "invalid_argument")
    assert "'fast' is not a route property" in hw.last_error()


def test_transfer_sync_with_opcode(pair, hw):
    a, ra, b, rb = pair
    ra.write(0, b"opcode-write")
    seg = b.get_segment_name()
    assert a.transfer_sync(seg, ra.addr, rb.addr + 64, 12, hw.TransferOpcode.Write) == 0, hw.last_error()
    assert rb.read(64, 12) == b"opcode-write"
    assert a.transfer_sync(seg, ra.addr + 512, rb.addr + 64, 12, a.TransferOpcode.Read) == 0, hw.last_error()
    assert ra.read(512, 12) == b"opcode-write"
    assert a.transfer_sync(seg, ra.addr, rb.addr, 12, 7) == neg(hw, "invalid_argument")
    with pytest.raises(TypeError, match="TransferNotify"):
        a.transfer_sync(seg, ra.addr, rb.addr, 12, 1, notify=object())


def test_batch_sync_write_and_read(pair, hw):
    a, ra, b, rb = pair
    data = pattern(REGION, 3)
    ra.write(0, data)
    seg = b.get_segment_name()
    srcs = [ra.addr, ra.addr + 4096, ra.addr + 300000]
    dsts = [rb.addr + 900000, rb.addr + 17, rb.addr + 400000]
    lens = [4096, 250000, 1]
    assert a.batch_transfer_sync_write(seg, srcs, dsts, lens) == 0, hw.last_error()
    assert rb.read(900000, 4096) == data[0:4096]
    assert rb.read(17, 250000) == data[4096:254096]
    assert rb.read(400000, 1) == data[300000:300001]
    ctypes.memset(ra.addr, 0, REGION)
    assert a.batch_transfer_sync_read(seg, srcs, dsts, lens) == 0, hw.last_error()
    assert ra.read(0, 4096) == data[0:4096]
    assert ra.read(4096, 250000) == data[4096:254096]
    assert ra.read(300000, 1) == data[300000:300001]


def test_async_batches_and_get_batch_transfer_status(pair, hw):
    a, ra, b, rb = pair
    data = pattern(65536, 11)
    ra.write(0, data)
    seg = b.get_segment_name()
    w = a.batch_transfer_async_write(seg, [ra.addr, ra.addr + 32768], [rb.addr, rb.addr + 65536], [32768, 32768])
    assert w > 0, hw.last_error()
    assert a.get_batch_transfer_status([w]) == 0
    assert rb.read(0, 32768) == data[:32768]
    assert rb.read(65536, 32768) == data[32768:]
    r1 = a.batch_transfer_async_read(seg, [ra.addr + 200000], [rb.addr], [32768])
    r2 = a.batch_transfer_async_read(seg, [ra.addr + 300000], [rb.addr + 65536], [32768])
    assert r1 > 0 and r2 > 0 and r1 != r2
    assert a.get_batch_transfer_status([r1, r2]) == 0
    assert ra.read(200000, 32768) == data[:32768]
    assert ra.read(300000, 32768) == data[32768:]
    # Collected batches are gone; ids never issued are refused: one int, as
    # Mooncake's, the first failure's code (its message names the id).
    assert a.get_batch_transfer_status([r1, -5, 987654]) == neg(hw, "invalid_batch")
    assert hw.last_error_code() == "invalid_batch"
    assert f"batch id {r1}" in hw.last_error()
    # An id no int64 holds (Mooncake's failed submit returned UINT64_MAX) is no batch either.
    assert a.get_batch_transfer_status([2**64 - 1]) == neg(hw, "invalid_batch")
    assert a.get_batch_transfer_status([]) == 0


def test_batch_transfer_async_with_opcode(pair, hw):
    a, ra, b, rb = pair
    ra.write(0, b"x" * 100)
    bid = a.batch_transfer_async(b.get_segment_name(), [ra.addr], [rb.addr + 8], [100], hw.TransferOpcode.Write)
    assert bid > 0, hw.last_error()
    assert a.get_batch_transfer_status([bid]) == 0
    assert rb.read(8, 100) == b"x" * 100


def _poll(a, bid):
    for _ in range(30000):  # bounded: at most ~30 s
        rc = a.transfer_check_status(bid)
        if rc != 0:
            return rc
        time.sleep(0.001)
    pytest.fail(f"batch {bid} still running")


def test_transfer_submit_and_check_status(pair, hw):
    a, ra, b, rb = pair
    data = pattern(100000, 5)
    ra.write(0, data)
    seg = b.get_segment_name()
    bid = a.transfer_submit_write(seg, ra.addr, rb.addr + 1000, 100000)
    assert bid > 0, hw.last_error()
    assert _poll(a, bid) == 1
    assert rb.read(1000, 100000) == data
    # Its outcome was collected: the id is no longer known.
    assert a.transfer_check_status(bid) == -1
    assert hw.last_error_code() == "invalid_batch"
    rid = a.transfer_submit_read(seg, ra.addr + 500000, rb.addr + 1000, 100000)
    assert rid > 0, hw.last_error()
    assert _poll(a, rid) == 1
    assert ra.read(500000, 100000) == data


def test_check_status_reports_a_failed_transfer_then_forgets_it(hw):
    a, b = new_engine(), new_engine()
    ra, rb = Region(4096), Region(4096)
    assert a.register_memory(ra.addr, 4096) == 0, hw.last_error()
    assert b.register_memory(rb.addr, 4096) == 0, hw.last_error()
    seg = b.get_segment_name()
    assert a.transfer_sync_write(seg, ra.addr, rb.addr, 4096) == 0, hw.last_error()  # descriptor cached
    # The peer goes away without unregistering anything: the cached
    # descriptor still covers the range, so the submit is accepted and the
    # transfer fails in flight (nobody listens on the peer's port any more).
    del b
    gc.collect()
    bid = a.transfer_submit_write(seg, ra.addr, rb.addr, 4096)
    assert bid > 0, hw.last_error()
    assert _poll(a, bid) == -1
    assert hw.last_error_code() == "unavailable", hw.last_error()
    assert "transfer_submit_write" in hw.last_error()
    assert seg in hw.last_error()
    assert a.transfer_check_status(bid) == -1
    assert hw.last_error_code() == "invalid_batch"


# ---- bad input: exact codes -------------------------------------------------------------


def test_zero_length_is_invalid_argument(pair, hw):
    a, ra, b, rb = pair
    assert a.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr, 0) == neg(hw, "invalid_argument")
    assert "length is 0" in hw.last_error()
    assert a.batch_transfer_sync_read(b.get_segment_name(), [ra.addr, ra.addr], [rb.addr, rb.addr],
                                      [8, 0]) == neg(hw, "invalid_argument")
    assert "requests[1]" in hw.last_error()


def test_unregistered_local_buffer_is_not_registered(pair, hw):
    a, ra, b, rb = pair
    other = Region(4096)
    assert a.transfer_sync_write(b.get_segment_name(), other.addr, rb.addr, 4096) == neg(hw, "not_registered")
    # Runs past the end of the registered region.
    assert a.transfer_sync_read(b.get_segment_name(), ra.addr + REGION - 10, rb.addr, 20) == neg(hw, "not_registered")


def test_unknown_segment_is_segment_not_found(pair, hw):
    a, ra, b, rb = pair
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens once closed
    assert a.transfer_sync_write(dead, ra.addr, rb.addr, 16) == neg(hw, "segment_not_found")
    assert dead in hw.last_error()
    assert a.get_first_buffer_address(dead) == 0
    assert hw.last_error_code() == "segment_not_found"
    # A failed async submit returns 0, as Mooncake's (the code is in last_error()).
    assert a.batch_transfer_async_read(dead, [ra.addr], [rb.addr], [16]) == 0
    assert hw.last_error_code() == "segment_not_found"


def test_peer_address_out_of_range(pair, hw):
    a, ra, b, rb = pair
    seg = b.get_segment_name()
    assert a.transfer_sync_write(seg, ra.addr, rb.addr + REGION - 10, 100) == neg(hw, "out_of_range")
    assert a.transfer_sync_read(seg, ra.addr, 0x1000, 100) == neg(hw, "out_of_range")
    assert "0x1000" in hw.last_error()
    assert a.transfer_submit_write(seg, ra.addr, rb.addr + REGION, 1) == 0
    assert hw.last_error_code() == "out_of_range"


def test_batch_list_mismatch_is_invalid_argument_and_an_empty_batch_succeeds(pair, hw):
    a, ra, b, rb = pair
    seg = b.get_segment_name()
    assert a.batch_transfer_sync_write(seg, [ra.addr, ra.addr], [rb.addr], [8, 8]) == neg(hw, "invalid_argument")
    assert "differ" in hw.last_error()
    assert a.batch_transfer_async_write(seg, [ra.addr], [], [8]) == 0
    assert "differ" in hw.last_error()
    # vLLM sends an empty batch on a full prefix-cache hit: Mooncake returns 0.
    assert a.batch_transfer_sync_write(seg, [], [], []) == 0
    assert a.batch_transfer_sync_read(seg, [], [], []) == 0
    assert a.batch_transfer_sync(seg, [], [], [], hw.Write) == 0
    # An empty async batch is a batch that has completed.
    bid = a.batch_transfer_async_write(seg, [], [], [])
    assert bid > 0, hw.last_error()
    assert a.transfer_check_status(bid) == 1
    bid = a.batch_transfer_async_read(seg, [], [], [])
    assert a.get_batch_transfer_status([bid]) == 0


def test_transport_hint_is_ignored(pair, hw):
    a, ra, b, rb = pair
    ra.write(0, b"hinted")
    rc = a.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr, 6, transport_hint="rdma")
    assert rc == 0, hw.last_error()
    assert rb.read(0, 6) == b"hinted"
    bid = a.batch_transfer_async_write(b.get_segment_name(), [ra.addr], [rb.addr], [6], "nvlink")
    assert bid > 0, hw.last_error()
    assert a.get_batch_transfer_status([bid]) == 0, hw.last_error()


def test_rejected_submit_leaves_nothing_behind(pair, hw):
    a, ra, b, rb = pair
    seg = b.get_segment_name()
    for _ in range(50):
        assert a.transfer_sync_write(seg, ra.addr, 0x1000, 8) == neg(hw, "out_of_range")
    assert a.unreclaimed_batches() == 0
    assert a.transfer_sync_write(seg, ra.addr, rb.addr, 8) == 0


# ---- managed buffers -------------------------------------------------------------------


def test_managed_buffers_move_bytes_between_engines(hw):
    a, b = new_engine(), new_engine()
    src = a.allocate_managed_buffer(5000)
    dst = b.allocate_managed_buffer(5000)
    assert src and dst, hw.last_error()
    data = pattern(5000, 9)
    assert a.write_bytes_to_buffer(src, data, 5000) == 0
    assert b.get_first_buffer_address(b.get_segment_name()) == dst  # pool start = first allocation
    assert a.transfer_sync_write(b.get_segment_name(), src, dst, 5000) == 0, hw.last_error()
    assert b.read_bytes_from_buffer(dst, 5000) == data
    assert a.free_managed_buffer(src, 5000) == 0
    assert b.free_managed_buffer(dst, 5000) == 0


def mapping_of(addr):
    """The name of the mapping of this process that holds addr ("" if it has none; None: no mapping does)."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= addr < hi:
                return " ".join(fields[5:])
    return None


def test_managed_buffers_are_shareable_allocator_memory(hw, monkeypatch):
    # hawser::allocateHostMemory's memfds: a shm peer of this host maps them
    # once and copies with memcpy (private memory would take cross-memory attach).
    monkeypatch.setenv("HAWSER_PYTHON_MANAGED_POOL_SIZE", "1M")
    e = new_engine()
    small = e.allocate_managed_buffer(100)
    big = e.allocate_managed_buffer(3 << 20)  # larger than a pool: a mapping of its own
    assert small and big, hw.last_error()
    assert mapping_of(small).startswith("/memfd:hawser-host-1048576")
    assert mapping_of(big).startswith("/memfd:hawser-host-3145728")
    assert e.free_managed_buffer(big, 3 << 20) == 0
    assert not (mapping_of(big) or "").startswith("/memfd:hawser-host-3145728")  # freed: unmapped
    assert e.free_managed_buffer(small, 100) == 0


def test_managed_free_checks_the_address_not_the_length(hw):
    e = new_engine()
    p = e.allocate_managed_buffer(100)
    assert p != 0
    assert e.free_managed_buffer(p + 64, 100) == neg(hw, "invalid_argument")
    # Mooncake's callers pass another length than they allocated: accepted.
    assert e.free_managed_buffer(p, 99) == 0
    q = e.allocate_managed_buffer(100)
    assert q == p  # the whole block came back to the pool
    assert e.free_managed_buffer(p, 100) == 0
    assert e.free_managed_buffer(p, 100) == neg(hw, "invalid_argument")
    assert "already freed" in hw.last_error()
    assert e.allocate_managed_buffer(0) == 0
    assert hw.last_error_code() == "invalid_argument"


def test_managed_pool_reuses_and_coalesces_freed_space(hw):
    e = new_engine()
    x = e.allocate_managed_buffer(1000)
    y = e.allocate_managed_buffer(1000)
    z = e.allocate_managed_buffer(1000)
    assert x and y and z
    assert len({x, y, z}) == 3
    assert e.free_managed_buffer(y, 1000) == 0
    assert e.free_managed_buffer(x, 1000) == 0
    # x and y were adjacent: freed, they form one block that fits 2000 bytes.
    assert e.allocate_managed_buffer(2000) == x
    assert e.unregister_memory(x) == neg(hw, "invalid_argument")  # owned by the allocator
    assert "free_managed_buffer" in hw.last_error()


def test_managed_buffer_larger_than_pool_gets_its_own_mapping(hw, monkeypatch):
    monkeypatch.setenv("HAWSER_PYTHON_MANAGED_POOL_SIZE", "1M")
    a, b = new_engine(), new_engine()
    n = 3 << 20
    big = a.allocate_managed_buffer(n)
    small = a.allocate_managed_buffer(10)
    assert big and small, hw.last_error()
    dst = Region(n)
    assert b.register_memory(dst.addr, n) == 0
    data = pattern(n, 4)
    assert a.write_bytes_to_buffer(big, data, n) == 0
    assert a.transfer_sync_write(b.get_segment_name(), big, dst.addr, n) == 0, hw.last_error()
    assert dst.read() == data
    assert a.free_managed_buffer(big, n) == 0
    assert a.transfer_sync_write(b.get_segment_name(), big, dst.addr, 8) == neg(hw, "not_registered")


def test_bytes_copies_check_registration(hw):
    e = new_engine()
    r = Region(256)
    assert e.write_bytes_to_buffer(r.addr, b"abc", 3) == neg(hw, "not_registered")
    assert e.register_memory(r.addr, 256) == 0
    assert e.write_bytes_to_buffer(r.addr, b"abc", 4) == neg(hw, "invalid_argument")
    assert e.write_bytes_to_buffer(r.addr + 250, b"abcdefgh", 8) == neg(hw, "not_registered")
    assert e.write_bytes_to_buffer(r.addr + 10, bytearray(b"hello"), 5) == 0
    assert e.write_bytes_to_buffer(r.addr + 20, memoryview(b"xyz"), 2) == 0
    assert r.read(10, 12) == b"hello\0\0\0\0\0xy"
    assert e.read_bytes_from_buffer(r.addr + 10, 5) == b"hello"
    assert e.read_bytes_from_buffer(r.addr, 0) == b""
    with pytest.raises(hw.Error) as ei:
        e.read_bytes_from_buffer(r.addr + 200, 100)
    assert ei.value.code_name == "not_registered"


# ---- segments ---------------------------------------------------------------------------


def test_first_buffer_address_and_segment_buffers(pair, hw):
    a, ra, b, rb = pair
    seg = b.get_segment_name()
    assert a.get_first_buffer_address(seg) == rb.addr
    extra = Region(8192)
    assert b.register_memory(extra.addr, 8192) == 0
    bufs = a.get_segment_buffers(seg)
    # In registration order, as Mooncake's descriptor lists them.
    assert [(addr, n) for addr, n, _ in bufs] == [(rb.addr, REGION), (extra.addr, 8192)]
    assert a.get_first_buffer_address(seg) == rb.addr
    # A buffer registered after the segment was first opened is reachable.
    extra.write(0, b"late")
    assert a.transfer_sync_read(seg, ra.addr, extra.addr, 4) == 0, hw.last_error()
    assert ra.read(0, 4) == b"late"


# ---- the Pythonic layer ---------------------------------------------------------------------


def test_raise_on_error_raises_hawser_error_with_code(hw):
    a = new_engine(raise_on_error=True)
    b = new_engine()
    ra, rb = Region(4096), Region(4096)
    a.register_memory(ra.addr, 4096)
    b.register_memory(rb.addr, 4096)
    with pytest.raises(hw.Error) as ei:
        a.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr + 4000, 200)
    e = ei.value
    assert isinstance(e, RuntimeError)
    assert e.code == hw.codes["out_of_range"] and e.code_name == "out_of_range"
    assert "not inside one registered buffer" in e.message
    assert str(e) == hw.last_error()
    with pytest.raises(hw.Error) as ei:
        a.get_batch_transfer_status([42])
    assert ei.value.code_name == "invalid_batch"
    with pytest.raises(hw.Error) as ei:
        a.allocate_managed_buffer(0)
    assert ei.value.code_name == "invalid_argument"
    assert a.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr, 200) == 0


def test_last_error_is_per_thread(pair, hw):
    a, ra, b, rb = pair
    assert a.transfer_sync_write(b.get_segment_name(), ra.addr, rb.addr, 0) == neg(hw, "invalid_argument")
    seen = {}

    def other():
        seen["before"] = hw.last_error()
        a.transfer_sync_write(b.get_segment_name(), ra.addr, 0x1000, 8)
        seen["after"] = a.last_error_code()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {"before": "", "after": "out_of_range"}
    assert hw.last_error_code() == "invalid_argument"
    assert a.last_error() == hw.last_error()


def test_code_names(hw):
    assert hw.code_name(-5) == "segment_not_found"
    assert hw.code_name(4) == "out_of_range"
    assert hw.code_name(-99).startswith("unknown")
    assert hw.codes["ok"] == 0 and hw.codes["timeout"] == 15


def test_concurrent_sync_transfers_from_threads(pair, hw):
    a, ra, b, rb = pair
    seg = b.get_segment_name()
    data = pattern(REGION, 21)
    ra.write(0, data)
    n, chunk = 8, REGION // 8
    results = [None] * n

    def worker(i):
        results[i] = a.transfer_sync_write(seg, ra.addr + i * chunk, rb.addr + i * chunk, chunk)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0] * n
    assert rb.read() == data


def test_file_segment_through_the_same_calls(hw, tmp_path):
    # protocol "tcp" forces the memory transport only: file segments still
    # go to the file transport.
    path = tmp_path / "seg.bin"
    content = pattern(1 << 20, 8)
    path.write_bytes(content)
    e = new_engine("tcp")
    r = Region(1 << 20)
    assert e.register_memory(r.addr, 1 << 20) == 0
    seg = f"file://{path}"
    assert e.transfer_sync_read(seg, r.addr, 4096, 8192) == 0, hw.last_error()
    assert r.read(0, 8192) == content[4096:4096 + 8192]
    r.write(0, b"written-by-python")
    assert e.transfer_sync_write(seg, r.addr, 100, 17) == 0, hw.last_error()
    assert path.read_bytes()[100:117] == b"written-by-python"
    assert e.transfer_sync_read(seg, r.addr, (1 << 20) - 10, 8192) == -hw.codes["out_of_range"]
    assert e.get_segment_buffers(seg) == [(0, 1 << 20, str(path))]


def test_initialize_config_is_this_engines_and_checked(hw):
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "", {"no.such_key": "1"}) == neg(hw, "invalid_argument")
    assert "no.such_key" in hw.last_error()
    # notify.max_message_bytes for these two engines only: a 100 KiB notification passes (default 64K).
    a, b = hw.TransferEngine(), hw.TransferEngine()
    big = {"notify.max_message_bytes": "1M"}
    assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "", big) == 0, hw.last_error()
    assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "", config=big) == 0, hw.last_error()
    msg = "x" * (100 << 10)
    assert a.batch_transfer_sync(b.get_segment_name(), [], [], [], 1, ("n", msg)) == 0, hw.last_error()
    assert [n.msg for n in b.get_notifies()] == [msg]
    c = new_engine()  # the default still holds elsewhere
    assert c.batch_transfer_sync(b.get_segment_name(), [], [], [], 1, ("n", msg)) < 0
