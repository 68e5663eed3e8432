"""The binding against a `hawser serve` child process: bytes moved and
verified, and what a sync call does when the peer stops answering (timeout,
cancel, the batch freed only once its I/O ended, the GIL released while it
waits)."""
import inspect
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import Region, eventually, hawser_bin, new_engine, pattern, require_hawser

SERVE_MEMORY = 8 << 20


class Serve:
    def __init__(self, prefix=()):
        """prefix: a command the child runs under (unshare ...)."""
        exe = hawser_bin()
        if exe is None:
            pytest.skip("the hawser CLI (build/bin/hawser) is not built next to the module; set HAWSER_BIN")
        self.proc = subprocess.Popen(
            [*prefix, exe, "serve", "--listen", "127.0.0.1:0", "--memory", str(SERVE_MEMORY)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.segment = None
        self.addr = None
        lines = []
        for line in self.proc.stdout:  # ends at EOF if the child dies
            lines.append(line)
            m = re.match(r"segment: (\S+)", line)
            if m:
                self.segment = m.group(1)
            m = re.match(r"memory: (0x[0-9a-f]+) (\d+) bytes", line)
            if m:
                self.addr = int(m.group(1), 16)
            if line.strip() == "ready":
                break
        if self.segment is None or self.addr is None:
            self.close()
            pytest.fail(f"hawser serve did not start: {''.join(lines)} {self.proc.stderr.read()}")
        self.stopped = False

    def stop(self):
        """SIGSTOP, then waits until every thread has stopped (kill returns while
        a thread on another core still runs on until it next enters the kernel)."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.stopped = True
        if not eventually(lambda: all_threads_stopped(self.proc.pid)):
            pytest.fail(f"hawser serve (pid {self.proc.pid}) did not stop within 20 s")

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)
        self.stopped = False

    def close(self):
        if self.proc.poll() is None:
            if getattr(self, "stopped", False):
                self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


def all_threads_stopped(pid):
    """Whether every thread of `pid` is in the stopped state (/proc/PID/task/*/stat)."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            pass  # the thread just ended
    return bool(states) and all(st in ("T", "t") for st in states)


@pytest.fixture
def serve(hw):
    s = Serve()
    yield s
    s.close()


def test_write_and_read_back_through_serve_child(serve, hw):
    e = new_engine()
    n = 3 << 20
    r = Region(2 * n)
    assert e.register_memory(r.addr, 2 * n) == 0
    data = pattern(n, 13)
    r.write(0, data)
    assert e.get_first_buffer_address(serve.segment) == serve.addr
    assert e.transfer_sync_write(serve.segment, r.addr, serve.addr + 12345, n) == 0, hw.last_error()
    assert e.transfer_sync_read(serve.segment, r.addr + n, serve.addr + 12345, n) == 0, hw.last_error()
    assert r.read(n, n) == data
    bid = e.batch_transfer_async_read(serve.segment, [r.addr, r.addr + 100], [serve.addr + 12345, serve.addr],
                                      [100, 50])
    assert bid > 0, hw.last_error()
    assert e.get_batch_transfer_status([bid]) == 0
    assert r.read(0, 100) == data[:100]
    assert e.transfer_sync_read(serve.segment, r.addr, serve.addr + SERVE_MEMORY - 8, 16) == -hw.codes["out_of_range"]


def _engine_with_region(hw, size):
    e = new_engine()
    r = Region(size, pattern(size, 2))
    assert e.register_memory(r.addr, size) == 0
    return e, r


def test_sync_timeout_cancels_and_frees_the_batch(serve, hw, monkeypatch):
    # The peer stops answering: after python.sync_timeout_ms the call cancels
    # its batch; the slice already on the wire fails when tcp.timeout_ms
    # passes, well inside python.cancel_wait_ms, so the batch is freed.
    monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_MS", "300")
    monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_NS_PER_BYTE", "0")
    monkeypatch.setenv("HAWSER_PYTHON_CANCEL_WAIT_MS", "60000")
    monkeypatch.setenv("HAWSER_TCP_TIMEOUT_MS", "1000")
    e, r = _engine_with_region(hw, 65536)
    assert e.transfer_sync_write(serve.segment, r.addr, serve.addr, 4096) == 0, hw.last_error()  # connected
    serve.stop()
    rc = e.transfer_sync_write(serve.segment, r.addr, serve.addr, 65536)
    assert rc == -hw.codes["timeout"], hw.last_error()
    msg = hw.last_error()
    assert "canceled" in msg and "300 ms" in msg
    assert e.unreclaimed_batches() == 0
    serve.resume()
    assert e.transfer_sync_write(serve.segment, r.addr, serve.addr, 4096) == 0, hw.last_error()


def test_timed_out_batch_still_in_flight_is_kept_then_freed(serve, hw, monkeypatch):
    # cancel_wait 0 and a long tcp.timeout_ms: when the call returns, the
    # slice on the wire still references local memory, so the batch cannot be
    # freed yet; it is freed by a later call once the resumed peer answers.
    monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_MS", "200")
    monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_NS_PER_BYTE", "0")
    monkeypatch.setenv("HAWSER_PYTHON_CANCEL_WAIT_MS", "0")
    monkeypatch.setenv("HAWSER_TCP_TIMEOUT_MS", "600000")
    e, r = _engine_with_region(hw, 65536)
    assert e.transfer_sync_write(serve.segment, r.addr, serve.addr, 4096) == 0, hw.last_error()
    serve.stop()
    assert e.transfer_sync_write(serve.segment, r.addr, serve.addr + 8192, 65536) == -hw.codes["timeout"]
    assert "kept" in hw.last_error()
    assert e.unreclaimed_batches() == 1
    serve.resume()
    assert eventually(lambda: e.unreclaimed_batches() == 0, 30)
    # The write was on the wire before the cancel: it landed once resumed.
    got = Region(65536)
    assert e.register_memory(got.addr, 65536) == 0
    assert e.transfer_sync_read(serve.segment, got.addr, serve.addr + 8192, 65536) == 0, hw.last_error()
    assert got.read() == r.read()


def test_async_batch_past_its_timeout_is_minus_two_in_check_status(serve, hw, monkeypatch):
    # Mooncake's transfer_check_status: 1 done, 0 running, -1 failed, -2 timed out.
    monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_MS", "200")
    monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_NS_PER_BYTE", "0")
    monkeypatch.setenv("HAWSER_PYTHON_CANCEL_WAIT_MS", "60000")
    monkeypatch.setenv("HAWSER_TCP_TIMEOUT_MS", "1000")
    e, r = _engine_with_region(hw, 65536)
    assert e.transfer_sync_write(serve.segment, r.addr, serve.addr, 4096) == 0, hw.last_error()
    serve.stop()
    bid = e.transfer_submit_write(serve.segment, r.addr, serve.addr, 65536)
    assert bid > 0, hw.last_error()
    rc = [0]

    def ended():
        rc[0] = e.transfer_check_status(bid)
        return rc[0] != 0

    assert eventually(ended, 30), f"batch {bid} still running"
    assert rc[0] == -2
    assert hw.last_error_code() == "timeout"
    assert e.transfer_check_status(bid) == -1  # canceled and freed: no longer a batch
    assert hw.last_error_code() == "invalid_batch"
    assert e.unreclaimed_batches() == 0
    serve.resume()


def test_sync_call_releases_the_gil_while_waiting(serve, hw, monkeypatch):
    monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_MS", "20000")
    monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_NS_PER_BYTE", "0")
    monkeypatch.setenv("HAWSER_TCP_TIMEOUT_MS", "600000")
    e, r = _engine_with_region(hw, 65536)
    assert e.transfer_sync_write(serve.segment, r.addr, serve.addr, 4096) == 0, hw.last_error()
    serve.stop()
    state = {"entered": threading.Event(), "returned": False, "rc": None}

    def blocked():
        state["entered"].set()
        state["rc"] = e.transfer_sync_write(serve.segment, r.addr, serve.addr, 65536)
        state["returned"] = True

    t = threading.Thread(target=blocked)
    t.start()
    assert state["entered"].wait(30)
    # The other thread is inside the call: its Python frame stands at the
    # call's line (a C function has no frame of its own).
    call_line = _line_of(blocked, "e.transfer_sync_write(")
    assert eventually(lambda: _frame_line(t) == call_line), "the other thread never entered the call"
    # While it waits there (it cannot return before the peer resumes, or
    # 20 s), this thread runs Python code: a loop that counts for 0.3 s. Had
    # the call kept the GIL, this thread would stall until the call returned
    # and the loop would end after one turn.
    turns, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < 0.3:
        turns += 1
    elapsed = time.monotonic() - t0
    assert not state["returned"]
    assert _frame_line(t) == call_line
    assert elapsed < 5, f"this thread stalled {elapsed:.1f} s"
    assert turns > 1000, f"only {turns} turns of Python code ran while the call waited"
    serve.resume()
    t.join(60)
    assert state["returned"]
    assert state["rc"] == 0, hw.last_error()


def _line_of(fn, text):
    """Line number of the first line of fn's source holding text."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _frame_line(thread):
    frame = sys._current_frames().get(thread.ident)
    return frame.f_lineno if frame is not None else None


@pytest.mark.parametrize("mc_seconds, ours_ms, limit_ms", [("1", None, 1000), ("1", "300", 300)])
def test_sync_timeout_is_mc_transfer_timeout_unless_ours_is_set(serve, hw, monkeypatch, mc_seconds, ours_ms,
                                                                 limit_ms):
    # The limit a sync call applied is in its timeout message: Mooncake's
    # MC_TRANSFER_TIMEOUT (seconds) when python.sync_timeout_ms is not set,
    # ours when both are.
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", mc_seconds)
    if ours_ms is None:
        monkeypatch.delenv("HAWSER_PYTHON_SYNC_TIMEOUT_MS", raising=False)
    else:
        monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_MS", ours_ms)
    monkeypatch.setenv("HAWSER_PYTHON_SYNC_TIMEOUT_NS_PER_BYTE", "0")
    monkeypatch.setenv("HAWSER_PYTHON_CANCEL_WAIT_MS", "60000")
    monkeypatch.setenv("HAWSER_TCP_TIMEOUT_MS", "2500")  # the slice on the wire outlasts either limit
    e, r = _engine_with_region(hw, 65536)
    assert e.transfer_sync_write(serve.segment, r.addr, serve.addr, 4096) == 0, hw.last_error()
    serve.stop()
    assert e.transfer_sync_write(serve.segment, r.addr, serve.addr, 65536) == -hw.codes["timeout"]
    msg = hw.last_error()
    assert f"not finished after {limit_ms} ms" in msg, msg
    serve.resume()


UNSHARE_PID_MOUNT = ["/usr/bin/unshare", "--pid", "--mount", "--fork", "--kill-child"]


def test_a_fallback_shows_in_get_metrics_and_metrics_text_and_a_contract_forbids_it(hw, tmp_path):
    # A target in pid and mount namespaces of its own whose shm socket lies in
    # a directory hidden by a tmpfs of its mount namespace (two containers
    # sharing no volume): shm declines it (other_mount_namespace), tcp
    # serves; docs/routes.md.
    if not os.access(UNSHARE_PID_MOUNT[0], os.X_OK) or subprocess.run(
            UNSHARE_PID_MOUNT[:4] + ["true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --pid --mount is not permitted here (needs CAP_SYS_ADMIN or user namespaces)")
    hidden = str(tmp_path)
    s = Serve(prefix=UNSHARE_PID_MOUNT + [
        "/bin/sh", "-c", 'mount -t tmpfs hawser-test "$0" && exec env HAWSER_SHM_SOCKET_DIR="$0" "$@"', hidden])
    try:
        e = new_engine("")  # no protocol forced: shm would serve a process of this host
        r = Region(1 << 20)
        assert e.register_memory(r.addr, 1 << 20) == 0, hw.last_error()
        for _ in range(2):
            assert e.transfer_sync_read(s.segment, r.addr, s.addr, 65536) == 0, hw.last_error()
        family = e.get_metrics()["hawser_route_fallbacks_total"]
        want = {"from": "shm", "to": "tcp", "reason": "other_mount_namespace"}
        assert [x["value"] for x in family["samples"] if x["labels"] == want] == [2], family
        text = e.metrics_text()
        assert 'hawser_route_fallbacks_total{from="shm",to="tcp",reason="other_mount_namespace"} 2' in text, text
        assert e.set_route_contract("", "same_host") == 0
        assert e.transfer_sync_read(s.segment, r.addr, s.addr, 65536) == -hw.codes["no_transport"]
        err = hw.last_error()
        assert ("forbids the route this request would take, tcp; the expected route, shm, is unavailable: "
                "other_mount_namespace: segment '" + s.segment + "': the peer's socket " + hidden) in err, err
    finally:
        s.proc.kill()  # unshare ignores SIGTERM while it waits; --kill-child takes the target with it
        s.close()
