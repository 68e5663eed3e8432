"""Notifications from Python: notify= on the sync and async batch calls,
get_notifies() on the receiver (Mooncake's TransferNotify objects, with the
sender in .peer), a full receiving queue as the sender's error, and the
accepted forms of notify=."""
import pytest

from conftest import REGION, EnginePair, Region, pattern, require_hawser


def neg(hw, name):
    return -hw.codes[name]


def engine(hw, depth=None, monkeypatch=None):
    if depth is not None:
        monkeypatch.setenv("HAWSER_NOTIFY_QUEUE_DEPTH", str(depth))
    e = hw.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, hw.last_error()
    if depth is not None:
        monkeypatch.delenv("HAWSER_NOTIFY_QUEUE_DEPTH")
    return e


@pytest.fixture
def two(hw, monkeypatch):
    a = engine(hw)
    b = engine(hw, depth=3, monkeypatch=monkeypatch)
    ra, rb = Region(REGION), Region(REGION)
    assert a.register_memory(ra.addr, REGION) == 0, hw.last_error()
    assert b.register_memory(rb.addr, REGION) == 0, hw.last_error()
    return EnginePair(a, ra, b, rb)


def test_sync_write_with_notify_delivers_after_the_bytes(two, hw):
    a, ra, b, rb = two
    data = pattern(8192, 4)
    ra.write(0, data)
    seg = b.get_segment_name()
    n = hw.TransferNotify("kv", "layer-0")
    assert (n.name, n.msg) == ("kv", "layer-0")
    rc = a.batch_transfer_sync(seg, [ra.addr, ra.addr + 4096], [rb.addr, rb.addr + 4096], [4096, 4096],
                               hw.TransferOpcode.Write, notify=n)
    assert rc == 0, hw.last_error()
    got = b.get_notifies()
    assert [(n.peer, n.name, n.msg) for n in got] == [(a.get_segment_name(), "kv", "layer-0")]
    assert rb.read(0, 8192) == data
    assert b.get_notifies() == []
    # A (name, msg) tuple, and bytes that are not UTF-8.
    assert a.transfer_sync(seg, ra.addr, rb.addr, 16, hw.TransferOpcode.Write, notify=("t", b"\xff\x00")) == 0
    got, = b.get_notifies()
    assert got.name == "t" and got.msg.encode("utf-8", "surrogateescape") == b"\xff\x00"


def test_async_batch_with_notify(two, hw):
    a, ra, b, rb = two
    ra.write(0, b"async-bytes")
    bid = a.batch_transfer_async(b.get_segment_name(), [ra.addr], [rb.addr + 100], [11], hw.TransferOpcode.Write,
                                 notify=hw.TransferNotify("done", "1"))
    assert bid > 0, hw.last_error()
    assert a.get_batch_transfer_status([bid]) == 0, hw.last_error()
    for _ in range(2000):
        got = b.get_notifies()
        if got:
            break
    assert [(n.peer, n.name, n.msg) for n in got] == [(a.get_segment_name(), "done", "1")]
    assert rb.read(100, 11) == b"async-bytes"


def test_a_full_queue_is_capacity_exceeded_at_the_sender(two, hw):
    a, ra, b, rb = two
    seg = b.get_segment_name()
    for i in range(3):
        assert a.transfer_sync(seg, ra.addr, rb.addr, 8, 1, notify=("n", str(i))) == 0, hw.last_error()
    assert a.transfer_sync(seg, ra.addr, rb.addr, 8, 1, notify=("n", "3")) == neg(hw, "capacity_exceeded")
    assert "notify.queue_depth" in hw.last_error()
    assert [n.msg for n in b.get_notifies()] == ["0", "1", "2"]


def test_notify_of_a_failed_transfer_is_never_delivered(two, hw):
    a, ra, b, rb = two
    seg = b.get_segment_name()
    # Outside the target's registered memory: refused before anything moves.
    assert a.transfer_sync(seg, ra.addr, rb.addr + REGION, 8, 1, notify=("x", "")) == neg(hw, "out_of_range")
    assert b.get_notifies() == []


def test_bad_notify_values_raise_type_error(two, hw):
    a, ra, b, rb = two
    seg = b.get_segment_name()
    for bad in (object(), ("only-name",), (1, 2)):
        with pytest.raises(TypeError, match="notify"):
            a.batch_transfer_sync(seg, [ra.addr], [rb.addr], [8], 1, notify=bad)
