"""hawser.nixl: NIXL's Python agent API (nixl._api, nixl._bindings) over
hawser, with NIXL's names, arguments, return values, states and exceptions
for what vLLM, SGLang, Dynamo and NIXL's tutorials call. Two agents in this
process (each its own engine); every transfer's bytes are checked.
test_connectors_nixl.py follows the connectors' call sequences across two
processes."""
import os
import pickle
import threading

import pytest

from conftest import eventually, require_hawser, require_torch

np = pytest.importorskip("numpy")


@pytest.fixture
def nx():
    return require_hawser().nixl


def agent(nx, name, **conf):
    return nx.nixl_agent(name, nx.nixl_agent_config(**conf) if conf else None)


def pool(n, seed=None):
    """A numpy byte pool (host memory) of n bytes."""
    if seed is None:
        return np.zeros(n, dtype=np.uint8)
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def loaded_pair(nx, **conf):
    """(a, b, pa, pb): agents a, b with 1 MiB pools registered as DRAM and
    each other's metadata loaded."""
    a, b = agent(nx, "A", **conf), agent(nx, "B", **conf)
    pa, pb = pool(1 << 20, 1), pool(1 << 20)
    assert a.register_memory([(pa.ctypes.data, pa.nbytes, 0, "")], "DRAM")
    assert b.register_memory([(pb.ctypes.data, pb.nbytes, 0, "")], "DRAM")
    assert a.add_remote_agent(b.get_agent_metadata()) == b"B"
    assert b.add_remote_agent(a.get_agent_metadata()) == b"A"
    return a, b, pa, pb


def wait_done(ag, h):
    assert eventually(lambda: ag.check_xfer_state(h) == "DONE"), ag.check_xfer_state(h)


def notifs_until(ag, count, key="A"):
    got = []

    def enough():
        got.extend(ag.get_new_notifs().get(key, []))
        return len(got) >= count
    assert eventually(enough), got
    return got


# ---- import paths and names ----------------------------------------------------------------


def test_nixl_import_paths_resolve_after_install_as_nixl(nx):
    import sys
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "nixl" or k.startswith("nixl.")}
    try:
        nx.install_as_nixl()
        from nixl._api import nixl_agent, nixl_agent_config  # vLLM, SGLang
        from nixl._bindings import nixlXferTelemetry, nixlBackendError, nixlCancelledError  # noqa: F401
        from nixl import nixl_agent as top_level  # NIXL's tutorials
        import nixl._bindings as nixl_bindings  # Dynamo
        from nixl.logging import get_logger
        assert nixl_agent is nx.nixl_agent and top_level is nx.nixl_agent
        assert nixl_agent_config is nx.nixl_agent_config and nixl_bindings.nixlNotFoundError is nx.nixlNotFoundError
        assert issubclass(nixlBackendError, RuntimeError)
        assert get_logger("x").name == "x"
    finally:
        for k in [k for k in sys.modules if k == "nixl" or k.startswith("nixl.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_config_takes_nixls_positions_and_keywords(nx):
    c = nx.nixl_agent_config(True, True, 5555)
    assert (c.enable_pthread, c.enable_listen, c.port, c.backends) == (True, True, 5555, ["UCX"])
    c = nx.nixl_agent_config(num_threads=4, capture_telemetry=True)
    assert (c.num_threads, c.capture_telemetry, c.enable_listen, c.port) == (4, True, False, nx.DEFAULT_COMM_PORT)
    assert nx.nixl_agent_config(backends=[]).backends == []
    with pytest.raises(TypeError):
        nx.nixl_agent_config(sync_mode="strict")
    assert nx.nixl_agent_config(sync_mode=nx.nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT).sync_mode == 1


def test_agent_answers_to_the_backend_names_callers_ask_for(nx):
    with pytest.raises(ValueError):
        nx.nixl_agent("")
    a = nx.nixl_agent("a")  # default config: backends=["UCX"]
    assert a.name == "a" and "UCX" in a.backends and "UCX" in a.get_plugin_list()
    assert a.get_backend_mem_types("UCX") == ["DRAM_SEG", "VRAM_SEG"]
    assert a.get_backend_mem_types("POSIX") == [] and a.get_plugin_mem_types("nope") == []
    with pytest.raises(nx.nixlNotAllowedError):
        a.create_backend("UCX")
    with pytest.raises(nx.nixlNotFoundError):
        a.create_backend("LIBFABRIC_X")
    # SGLang: backends=[] then create_backend(name, params) and a plugin-list check.
    s = nx.nixl_agent("s", nx.nixl_agent_config(backends=[], num_threads=8))
    assert s.backends == {}
    with pytest.raises(nx.nixlBackendError):
        s.get_new_notifs()
    s.create_backend("UCX", {"num_threads": 8})
    assert s.get_backend_params("UCX")["num_threads"] == "8"
    assert s.get_new_notifs() == {}
    assert a.nixl_mems["cpu"] == "DRAM" and a.nixl_mems["cuda"] == "VRAM"
    with pytest.raises(KeyError):
        a.nixl_ops["COPY"]


# ---- descriptors and registration ------------------------------------------------------------


def test_descriptor_lists_from_tuples_arrays_and_tensors(nx):
    a = nx.nixl_agent("a")
    p = pool(4096)
    d = a.get_xfer_descs([(p.ctypes.data, 1024, 0), (p.ctypes.data + 1024, 1024, 0)], "DRAM")
    assert d.descCount() == 2 and d.getType() == "DRAM" and d[1] == (p.ctypes.data + 1024, 1024, 0)
    assert a.get_xfer_descs([(p.ctypes.data, 1024, 0)]) is None            # no mem_type
    assert a.get_xfer_descs([(p.ctypes.data, 1024, 0, "")], "DRAM") is None  # 4-tuples are registrations
    with pytest.raises(KeyError):
        a.get_xfer_descs([(p.ctypes.data, 1024, 0)], "HBM")
    with pytest.raises(IndexError):
        a.get_xfer_descs([])
    for dtype in (np.uint64, np.int64):
        arr = np.array([[p.ctypes.data + 512 * i, 512, 0] for i in range(8)], dtype=dtype)
        d = a.get_xfer_descs(arr, "cpu")
        assert d.descCount() == 8 and d.getType() == "DRAM" and d[7][0] == p.ctypes.data + 3584
    r = a.get_reg_descs([(p.ctypes.data, 4096, 0, "meta")], "DRAM")
    assert r[0] == (p.ctypes.data, 4096, 0, "meta") and r.trim()[0] == (p.ctypes.data, 4096, 0)
    assert pickle.loads(pickle.dumps(r)) == r
    assert a.deserialize_descs(a.get_serialized_descs(d)) == d
    torch = require_torch()
    t = torch.zeros((4, 256), dtype=torch.float16)
    d = a.get_xfer_descs(t)
    assert (d.getType(), d[0]) == ("DRAM", (t.data_ptr(), 2048, 0))
    rows = a.get_xfer_descs([t[i] for i in range(4)])
    assert rows.descCount() == 4 and rows[3] == (t[3].data_ptr(), 512, 0)
    assert a.get_xfer_descs(t[:, :8]) is None  # not contiguous


def test_register_memory_every_form_and_deregister(nx):
    a = nx.nixl_agent("a")
    p = pool(8192)
    descs = a.register_memory([(p.ctypes.data, 4096, 0, "")], "DRAM")
    assert descs and descs.descCount() == 1
    arr = np.array([[p.ctypes.data + 4096, 4096, 0]], dtype=np.uint64)
    assert a.register_memory(arr, "cpu")
    buffers = a._engine.get_segment_buffers(a._engine.get_segment_name())
    assert [b[:2] for b in buffers] == [(p.ctypes.data, 4096), (p.ctypes.data + 4096, 4096)]
    with pytest.raises(nx.nixlInvalidParamError):  # the same memory twice: hawser refuses overlaps
        a.register_memory([(p.ctypes.data, 4096, 0, "")], "DRAM")
    a.deregister_memory(descs)
    a.deregister_memory(a.get_reg_descs(arr, "DRAM"))
    assert a._engine.get_segment_buffers(a._engine.get_segment_name()) == []
    torch = require_torch()
    t = torch.ones(1024, dtype=torch.bfloat16)
    d = a.register_memory(t)
    assert d.getType() == "DRAM" and d[0][:2] == (t.data_ptr(), 2048)
    a.deregister_memory(d)
    ts = [torch.ones(64), torch.ones(64)]
    d = a.register_memory(ts)
    assert d.descCount() == 2
    a.deregister_memory(d)


# ---- metadata --------------------------------------------------------------------------------


def test_metadata_blob_load_reload_remove_and_refusals(nx):
    a, b = nx.nixl_agent("A"), nx.nixl_agent("B")
    md = b.get_agent_metadata()
    assert isinstance(md, bytes)
    assert a.add_remote_agent(md) == b"B" and a.check_remote_metadata("B")
    assert a.add_remote_agent(md) == b"B"  # the same again is fine
    with pytest.raises(nx.nixlInvalidParamError):
        a.add_remote_agent(a.get_agent_metadata())
    with pytest.raises(nx.nixlMismatchError):
        a.add_remote_agent(b"garbage")
    other_b = nx.nixl_agent("B")  # same name, another engine
    with pytest.raises(nx.nixlNotAllowedError):
        a.add_remote_agent(other_b.get_agent_metadata())
    a.remove_remote_agent("B")
    a.remove_remote_agent("never-loaded")  # silent, as NIXL
    assert not a.check_remote_metadata("B")
    assert a.add_remote_agent(other_b.get_agent_metadata()) == b"B"


def test_partial_metadata_merges_and_check_remote_metadata_with_descs(nx):
    a, b = nx.nixl_agent("A"), nx.nixl_agent("B")
    p = pool(8192)
    r1 = b.register_memory([(p.ctypes.data, 4096, 0, "")], "DRAM")
    r2 = b.register_memory([(p.ctypes.data + 4096, 4096, 0, "")], "DRAM")
    a.add_remote_agent(b.get_partial_agent_metadata(r1, inc_conn_info=True))
    assert a.check_remote_metadata("B", r1.trim())
    assert not a.check_remote_metadata("B", r2.trim())
    with pytest.raises(nx.nixlNotFoundError):
        a.prep_xfer_dlist("B", r2.trim())
    a.add_remote_agent(b.get_partial_agent_metadata(r2, inc_conn_info=False))
    assert a.check_remote_metadata("B", r2.trim())
    assert a.prep_xfer_dlist("B", r2.trim())


# ---- transfers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["READ", "WRITE"])
def test_prepped_lists_of_twenty_thousand_descriptors_chosen_by_index(nx, op):
    a, b, pa, pb = loaded_pair(nx, capture_telemetry=True)
    n, blk = 20000, 48
    local = np.array([[pa.ctypes.data + i * blk, blk, 0] for i in range(n)], dtype=np.uint64)
    remote = np.array([[pb.ctypes.data + i * blk, blk, 0] for i in range(n)], dtype=np.uint64)
    lh = a.prep_xfer_dlist("NIXL_INIT_AGENT", a.get_xfer_descs(local, "DRAM"))
    rh = a.prep_xfer_dlist("B", remote, "DRAM")
    rng = np.random.default_rng(5)
    li = rng.permutation(n)[:15000].astype(np.int64)
    ri = rng.permutation(n)[:15000].astype(np.int32)
    if op == "READ":
        pb[:] = pool(1 << 20, 9)
    h = a.make_prepped_xfer(op, lh, li, rh, ri, notif_msg=b"req-1:1")
    assert h and a.transfer(h) in ("PROC", "DONE")
    wait_done(a, h)
    src, dst = (pa, pb) if op == "WRITE" else (pb, pa)
    sidx, didx = (li, ri) if op == "WRITE" else (ri, li)
    view_s, view_d = src[: n * blk].reshape(n, blk), dst[: n * blk].reshape(n, blk)
    assert np.array_equal(view_d[didx], view_s[sidx])
    # The notification reaches the transfer's target (READ or WRITE), keyed by the initiator's name.
    assert notifs_until(b, 1) == [b"req-1:1"]
    t = a.get_xfer_telemetry(h)
    assert t.totalBytes == 15000 * blk and 0 < t.descCount <= 15000 and t.xferDuration >= 0
    a.release_xfer_handle(h)
    a.release_dlist_handle(lh)
    rh.release()


def test_adjacent_descriptors_merge_in_the_telemetry_count(nx):
    a, b, pa, pb = loaded_pair(nx, capture_telemetry=True)
    rows = [(pa.ctypes.data + i * 64, 64, 0) for i in range(100)]
    lh = a.prep_xfer_dlist("", rows, "DRAM")
    rh = a.prep_xfer_dlist("B", [(pb.ctypes.data + i * 64, 64, 0) for i in range(100)], "DRAM")
    h = a.make_prepped_xfer("WRITE", lh, list(range(100)), rh, list(range(100)))
    a.transfer(h)
    wait_done(a, h)
    assert a.get_xfer_telemetry(h).descCount == 1
    assert np.array_equal(pb[:6400], pa[:6400])


def test_make_prepped_xfer_refuses_bad_indices_and_sides(nx):
    a, b, pa, pb = loaded_pair(nx)
    lh = a.prep_xfer_dlist("", [(pa.ctypes.data, 64, 0), (pa.ctypes.data + 64, 128, 0)], "DRAM")
    rh = a.prep_xfer_dlist("B", [(pb.ctypes.data, 64, 0), (pb.ctypes.data + 64, 64, 0)], "DRAM")
    for li, ri in (([0], [0, 1]), ([], []), ([2], [0]), ([1], [1])):
        with pytest.raises(nx.nixlInvalidParamError):
            a.make_prepped_xfer("WRITE", lh, li, rh, ri)
    with pytest.raises(nx.nixlInvalidParamError):
        a.make_prepped_xfer("WRITE", rh, [0], lh, [0])
    with pytest.raises(KeyError):
        a.make_prepped_xfer("SEND", lh, [0], rh, [0])
    with pytest.raises(nx.nixlNotFoundError):  # outside B's registrations, as its metadata says
        a.prep_xfer_dlist("B", [(pb.ctypes.data + (1 << 20), 64, 0)], "DRAM")
    with pytest.raises(nx.nixlNotFoundError):  # outside A's own registrations
        a.prep_xfer_dlist("", [(pa.ctypes.data - 64, 64, 0)], "DRAM")
    with pytest.raises(nx.nixlNotFoundError):  # registered as DRAM, not VRAM
        a.prep_xfer_dlist("", [(pa.ctypes.data, 64, 0)], "VRAM")
    with pytest.raises(nx.nixlNotFoundError):
        a.prep_xfer_dlist("C", [(pb.ctypes.data, 64, 0)], "DRAM")


def test_initialize_xfer_positional_and_keyword_and_repost(nx):
    a, b, pa, pb = loaded_pair(nx)
    ld = a.get_xfer_descs([(pa.ctypes.data, 4096, 0)], "DRAM")
    rd = a.get_xfer_descs([(pb.ctypes.data + 8192, 4096, 0)], "DRAM")
    h = a.initialize_xfer("WRITE", ld, rd, "B", "Done_writing")  # str notification, as the tutorial
    assert a.transfer(h) in ("PROC", "DONE")
    wait_done(a, h)
    assert np.array_equal(pb[8192:12288], pa[:4096])
    # Dynamo's keywords; its notification given at the first transfer().
    h2 = a.initialize_xfer(operation="READ", local_descs=a.get_xfer_descs([(pa.ctypes.data + 4096, 4096, 0)], "cpu"),
                           remote_descs=rd, remote_agent="B", notif_msg=b"")
    a.transfer(h2, b"key-7")
    wait_done(a, h2)
    assert np.array_equal(pa[4096:8192], pa[:4096])
    # Repost a finished handle: same bytes again, the creation notification again; then a new one that stays.
    pa[:4096] = 7
    a.transfer(h)
    wait_done(a, h)
    assert (pb[8192:12288] == 7).all()
    a.transfer(h, b"B-msg")
    wait_done(a, h)
    a.transfer(h)
    wait_done(a, h)
    assert notifs_until(b, 5) == [b"Done_writing", b"key-7", b"Done_writing", b"B-msg", b"B-msg"]
    with pytest.raises(nx.nixlInvalidParamError):
        a.initialize_xfer("WRITE", ld, a.get_xfer_descs([(pb.ctypes.data, 64, 0), (pb.ctypes.data, 64, 0)],
                                                         "DRAM"), "B")
    with pytest.raises(nx.nixlNotFoundError):
        a.initialize_xfer("WRITE", ld, rd, "nobody")


def test_empty_notif_sends_nothing_and_telemetry_needs_capture(nx):
    a, b, pa, pb = loaded_pair(nx)
    h = a.initialize_xfer("WRITE", a.get_xfer_descs([(pa.ctypes.data, 64, 0)], "DRAM"),
                          a.get_xfer_descs([(pb.ctypes.data, 64, 0)], "DRAM"), "B", b"")
    with pytest.raises(nx.nixlNotPostedError):
        a.check_xfer_state(h)
    a.transfer(h)
    wait_done(a, h)
    a.send_notif("B", b"marker")  # after the transfer's (absent) notification
    assert notifs_until(b, 1) == [b"marker"]
    with pytest.raises(nx.nixlNoTelemetryError):
        a.get_xfer_telemetry(h)


def test_a_failed_transfer_raises_nixl_errors_and_removed_agents_refuse(nx):
    a, b, pa, pb = loaded_pair(nx)
    rd = a.get_xfer_descs([(pb.ctypes.data, 4096, 0)], "DRAM")
    h = a.initialize_xfer("WRITE", a.get_xfer_descs([(pa.ctypes.data, 4096, 0)], "DRAM"), rd, "B", b"n")
    b.deregister_memory(b.get_reg_descs([(pb.ctypes.data, pb.nbytes, 0, "")], "DRAM"))
    errors = (nx.nixlNotFoundError, nx.nixlBackendError, nx.nixlRemoteDisconnectError)
    with pytest.raises(errors):
        a.transfer(h)
        wait_done(a, h)
    with pytest.raises(errors):
        a.check_xfer_state(h)
    assert b.get_new_notifs() == {}  # never for a failed transfer
    h2 = a.initialize_xfer("READ", a.get_xfer_descs([(pa.ctypes.data, 64, 0)], "DRAM"),
                           a.get_xfer_descs([(pb.ctypes.data, 64, 0)], "DRAM"), "B")
    a.remove_remote_agent("B")
    with pytest.raises(nx.nixlNotFoundError):
        a.transfer(h2)
    with pytest.raises(nx.nixlNotFoundError):
        a.send_notif("B", b"x")


def test_repost_while_in_progress_is_refused_and_release_cancels_then_frees_once_it_ended(nx):
    a, b, pa, pb = loaded_pair(nx)
    held = []

    class Held:  # the agent's waiters, holding each finished transfer back until the test lets it go
        def submit(self, fn, *args):
            held.append((fn, args))
    a._waiters = Held()
    h = a.initialize_xfer("WRITE", a.get_xfer_descs([(pa.ctypes.data, 4096, 0)], "DRAM"),
                          a.get_xfer_descs([(pb.ctypes.data, 4096, 0)], "DRAM"), "B", b"kept")
    assert a.transfer(h) == "PROC" and a.check_xfer_state(h) == "PROC"
    with pytest.raises(nx.nixlRepostActiveError):
        a.transfer(h)
    # Release while in progress: the cancel finds the transfer's tasks ended
    # (4 KiB is copied at submit), and the release waits for its waiter to
    # settle it before the handle is freed.
    released = threading.Event()
    t = threading.Thread(target=lambda: (a.release_xfer_handle(h), released.set()))
    t.start()
    with a._lock:
        assert not h.released and h.state == "PROC"
    (fn, args), = held
    fn(*args)  # the waiter: frees the batch, sends the notification, settles DONE
    assert released.wait(20) and h.released and h.state == "DONE"
    t.join()
    assert np.array_equal(pb[:4096], pa[:4096])
    a.send_notif("B", b"after")
    assert notifs_until(b, 2) == [b"kept", b"after"]  # a transfer that ended keeps its notification
    with pytest.raises(nx.nixlInvalidParamError):
        a.transfer(h)


def test_release_of_a_transfer_whose_waiter_is_queued_does_not_wait_for_the_pool(nx):
    a, b, pa, pb = loaded_pair(nx)
    # Every waiter of the agent's pool busy with another transfer (held here).
    go = threading.Event()
    busy = [a._waiters.submit(go.wait) for _ in range(a._waiters._max_workers)]
    try:
        pb[:4096] = 0
        h = a.initialize_xfer("WRITE", a.get_xfer_descs([(pa.ctypes.data, 4096, 0)], "DRAM"),
                              a.get_xfer_descs([(pb.ctypes.data, 4096, 0)], "DRAM"), "B", b"queued")
        assert a.transfer(h) == "PROC"
        released = threading.Event()
        t = threading.Thread(target=lambda: (a.release_xfer_handle(h), released.set()))
        t.start()
        # The release settles the transfer itself (its waiter taken back from
        # the queue) while every pool thread is still held.
        assert released.wait(20), "release waited for a pool thread"
        assert not go.is_set() and not any(f.done() for f in busy)
        t.join()
        assert h.released and h.state == "DONE"
        assert np.array_equal(pb[:4096], pa[:4096])
        assert notifs_until(b, 1) == [b"queued"]  # it ended before the cancel: its notification is sent
    finally:
        go.set()


def test_cancel_transfer_names_unknown_batches_and_waits_for_one_in_flight(nx):
    a, b, pa, pb = loaded_pair(nx)
    eng = a._engine
    assert eng.cancel_transfer(123456789) != 0 and nx._hawser.last_error_code() == "invalid_batch"
    seg = a._remotes["B"]["segment"]
    pb[:4096] = 0
    bid = eng.transfer_blocks_async(seg, np.array([pa.ctypes.data], dtype=np.uint64),
                                    np.array([pb.ctypes.data], dtype=np.uint64),
                                    np.array([4096], dtype=np.uint64), 1)
    assert bid > 0
    assert eng.cancel_transfer(bid) == 0  # its tasks ended: copied at submit, before the cancel
    assert eng.get_batch_transfer_status([bid]) == 0  # so it completed, and is freed now
    assert eng.cancel_transfer(bid) != 0 and nx._hawser.last_error_code() == "invalid_batch"
    assert np.array_equal(pb[:4096], pa[:4096])


# ---- notifications ---------------------------------------------------------------------------


def test_update_notifs_accumulates_and_check_remote_xfer_done_takes_one(nx):
    a, b, _, _ = loaded_pair(nx)
    a.send_notif("B", b"room1_kv_0")
    a.send_notif(b"B", notif_msg=b"room1_aux")
    assert eventually(lambda: len(b.update_notifs().get("A", [])) == 2)
    assert b.update_notifs() == {"A": [b"room1_kv_0", b"room1_aux"]}  # kept across calls
    assert b.check_remote_xfer_done("A", b"room1_a")  # prefix
    assert not b.check_remote_xfer_done("A", b"aux")
    assert b.check_remote_xfer_done("A", b"kv", tag_is_prefix=False)
    assert b.notifs == {"A": []}
    big = bytes(range(256)) * 1200  # 300 KiB, as vLLM's PUSH_REG can be
    a.send_notif("B", big)
    assert notifs_until(b, 1) == [big]
    b.send_notif("A", "from b")
    assert notifs_until(a, 1, key="B") == [b"from b"]


def test_many_agents_from_many_threads(nx):
    a, b, pa, pb = loaded_pair(nx)
    errors = []

    def worker(k):
        try:
            off = k * 4096
            h = a.initialize_xfer("WRITE", a.get_xfer_descs([(pa.ctypes.data + off, 4096, 0)], "DRAM"),
                                  a.get_xfer_descs([(pb.ctypes.data + off, 4096, 0)], "DRAM"), "B", f"t{k}")
            a.transfer(h)
            wait_done(a, h)
            # An agent of its own too (Dynamo: one agent per operation).
            x, y = nx.nixl_agent(f"x{k}"), nx.nixl_agent(f"y{k}")
            px, py = pool(256, k + 1), pool(256)
            x.register_memory([(px.ctypes.data, 256, 0, "")], "DRAM")
            y.register_memory([(py.ctypes.data, 256, 0, "")], "DRAM")
            x.add_remote_agent(y.get_agent_metadata())
            h = x.initialize_xfer("WRITE", x.get_xfer_descs([(px.ctypes.data, 256, 0)], "DRAM"),
                                  x.get_xfer_descs([(py.ctypes.data, 256, 0)], "DRAM"), f"y{k}")
            x.transfer(h)
            wait_done(x, h)
            assert np.array_equal(px, py)
        except Exception as exc:  # reported below
            errors.append(repr(exc))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert np.array_equal(pb[: 8 * 4096], pa[: 8 * 4096])
    assert sorted(notifs_until(b, 8)) == sorted(f"t{k}".encode() for k in range(8))


# ---- the listener (NIXL's tutorials) ----------------------------------------------------------


def test_listener_send_fetch_and_invalidate_metadata(nx):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = nx.nixl_agent("target", nx.nixl_agent_config(True, True, port))
    initiator = nx.nixl_agent("initiator", nx.nixl_agent_config(True, True, 0))
    p = pool(4096, 3)
    target.register_memory([(p.ctypes.data, 4096, 0, "")], "DRAM")
    initiator.fetch_remote_metadata("target", "127.0.0.1", port)
    initiator.send_local_metadata("127.0.0.1", port)
    assert eventually(lambda: initiator.check_remote_metadata("target"))
    assert target.check_remote_metadata("initiator")
    q = pool(4096)
    initiator.register_memory([(q.ctypes.data, 4096, 0, "")], "DRAM")
    h = initiator.initialize_xfer("READ", initiator.get_xfer_descs([(q.ctypes.data, 4096, 0)], "DRAM"),
                                  initiator.get_xfer_descs([(p.ctypes.data, 4096, 0)], "DRAM"), "target",
                                  "Done_reading")
    initiator.transfer(h)
    wait_done(initiator, h)
    assert np.array_equal(p, q)
    assert notifs_until(target, 1, key="initiator") == [b"Done_reading"]
    initiator.invalidate_local_metadata("127.0.0.1", port)
    assert eventually(lambda: not target.check_remote_metadata("initiator"))
    with pytest.raises(nx.nixlNotSupportedError):
        initiator.send_local_metadata()  # no ip: a central store, which hawser.nixl does not provide


# ---- files -------------------------------------------------------------------------------------


def test_file_memory_write_and_read_through_the_own_agent(nx, tmp_path):
    a = nx.nixl_agent("a", nx.nixl_agent_config(backends=["POSIX"]))
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\0" * 65536)
    fd = os.open(path, os.O_RDWR)
    try:
        src, back = pool(8192, 4), pool(8192)
        a.register_memory([(src.ctypes.data, 8192, 0, ""), (back.ctypes.data, 8192, 0, "")], "DRAM")
        fdescs = a.register_memory([(0, 65536, fd, str(path))], "FILE")
        h = a.initialize_xfer("WRITE", a.get_xfer_descs([(src.ctypes.data, 8192, 0)], "DRAM"),
                              a.get_xfer_descs([(4096, 8192, fd)], "FILE"), "a")
        a.transfer(h)
        wait_done(a, h)
        assert path.read_bytes()[4096:12288] == src.tobytes()
        h = a.initialize_xfer("READ", a.get_xfer_descs([(back.ctypes.data, 8192, 0)], "DRAM"),
                              a.get_xfer_descs([(4096, 8192, fd)], "FILE"), "a")
        a.transfer(h)
        wait_done(a, h)
        assert np.array_equal(back, src)
        a.deregister_memory(fdescs)
    finally:
        os.close(fd)


# ---- CUDA (the GPU machine) -------------------------------------------------------------------


def test_vram_descriptors_from_cuda_tensors(nx):
    from conftest import require_cuda
    torch = require_cuda()
    a, b = nx.nixl_agent("A"), nx.nixl_agent("B")
    src = torch.arange(1 << 16, dtype=torch.int32, device="cuda")
    dst = torch.zeros_like(src)
    ra, rb = a.register_memory(src), b.register_memory(dst)
    assert ra.getType() == "VRAM" and rb[0][2] == 0
    a.add_remote_agent(b.get_agent_metadata())
    torch.cuda.synchronize()
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), a.get_xfer_descs([(dst.data_ptr(), 1 << 18, 0)], "cuda"),
                          "B", b"vram")
    a.transfer(h)
    wait_done(a, h)
    torch.cuda.synchronize()
    assert torch.equal(src, dst)
    assert notifs_until(b, 1) == [b"vram"]
