"""Signals from Python: batch_transfer_async(signal=...) at the sender,
wait_signal() at the receiver (COMPLETED with the bytes there, TIMEOUT only
at the deadline, FAILED PEER_LOST for a sender that cannot be reached), and
get_notifies(with_failures=True) (docs/signals.md)."""
import pytest

from conftest import new_engine, pattern


@pytest.fixture
def two(pair, monkeypatch):
    """The conftest pair; engines made here lose a silent sender after 300 ms."""
    monkeypatch.setenv("HAWSER_SIGNAL_PEER_TIMEOUT_MS", "300")
    return pair


def test_a_signal_completes_once_its_requests_landed(two, hw):
    a, ra, b, rb = two
    data = pattern(8192, 11)
    ra.write(0, data)
    bid = a.batch_transfer_async(b.get_segment_name(), [ra.addr, ra.addr + 4096], [rb.addr, rb.addr + 4096],
                                 [4096, 4096], hw.TransferOpcode.Write, signal="req-7")
    assert bid > 0, hw.last_error()
    r = b.wait_signal(a.get_segment_name(), "req-7", 2, timeout_ms=20000)
    assert r.state == "COMPLETED", r
    assert r and r.landed == 2 and r.reason == "NONE" and r.code == 0
    assert r.peer == a.get_segment_name()
    assert rb.read(0, 8192) == data
    assert a.get_batch_transfer_status([bid]) == 0, hw.last_error()
    # Consumed: a second wait starts from nothing, and ends at its deadline.
    r = b.wait_signal(a.get_segment_name(), "req-7", 2, timeout_ms=20)
    assert r.state == "TIMEOUT" and not r and r.code == -hw.codes["timeout"], r


def test_a_sender_that_cannot_be_reached_fails_the_wait(two, hw):
    b = new_engine()  # with the short peer timeout
    r = b.wait_signal("127.0.0.1:1", "never", 1, timeout_ms=60000)
    assert r.state == "FAILED" and r.reason == "PEER_LOST", r
    assert "127.0.0.1:1" in r.error


def test_notifications_with_failures_keep_the_old_shape(two, hw):
    a, ra, b, rb = two
    assert a.transfer_sync(b.get_segment_name(), ra.addr, rb.addr, 16, hw.TransferOpcode.Write,
                           notify=("kv", "1")) == 0, hw.last_error()
    got, = b.get_notifies(with_failures=True)
    assert (got.name, got.msg, got.failed, got.code, got.error) == ("kv", "1", False, 0, "")


def test_bad_arguments(two, hw):
    a, ra, b, rb = two
    with pytest.raises(TypeError):
        a.batch_transfer_async(b.get_segment_name(), [ra.addr], [rb.addr], [16], hw.TransferOpcode.Write,
                               notify=("n", "m"), signal="s")
    r = b.wait_signal(a.get_segment_name(), "x", 0, timeout_ms=10)
    assert r.state == "INVALID" and r.code == -hw.codes["invalid_argument"], r
    assert "expected is 0" in hw.last_error()
