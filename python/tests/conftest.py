"""Shared fixtures for the hawser Python binding tests.

Run: PYTHONPATH=build/python python3 -m pytest -q python/tests
The tests skip (with the reason) only when no hawser*.so is on the path; a
module that is built but fails to import is an error.
"""
import ctypes
import glob
import os
import sys
import time

import pytest

try:
    import hawser  # noqa: F401
    HAWSER_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - depends on the build
    built = [p for d in sys.path for p in glob.glob(os.path.join(d or ".", "hawser*.so"))]
    if built:
        raise ImportError(f"hawser is built ({built[0]}) but does not import: {exc}") from exc
    HAWSER_IMPORT_ERROR = f"the hawser module is not built (no hawser*.so on PYTHONPATH): {exc}"
    hawser = None


def require_hawser():
    if hawser is None:
        pytest.skip(HAWSER_IMPORT_ERROR)
    return hawser


class Region:
    """A ctypes buffer and its address (kept alive with the object)."""

    def __init__(self, size, fill=None):
        self.size = size
        self.buf = ctypes.create_string_buffer(size)
        self.addr = ctypes.addressof(self.buf)
        if fill is not None:
            self.buf.raw = fill

    def read(self, offset=0, length=None):
        length = self.size - offset if length is None else length
        return ctypes.string_at(self.addr + offset, length)

    def write(self, offset, data):
        ctypes.memmove(self.addr + offset, data, len(data))


class EnginePair:
    """Unpacks as (a, ra, b, rb); when released, the engines stop before the
    regions are freed (a tuple would release its items last to first, freeing
    a region under an engine that may still be writing into it)."""

    def __init__(self, a, ra, b, rb):
        self._items = [a, ra, b, rb]

    def __iter__(self):
        return iter(self._items)

    def __del__(self):
        items, self._items = self._items, None
        a, ra, b, rb = items
        del items
        del a, b  # the engines go first: each stops and waits for its work
        del ra, rb


def pattern(n, seed):
    """n deterministic, non-repeating-looking bytes."""
    return bytes(((i * 131 + seed * 17 + (i >> 8)) & 0xFF) for i in range(n))


def new_engine(protocol="tcp", raise_on_error=False):
    hw = require_hawser()
    e = hw.TransferEngine(raise_on_error)
    rc = e.initialize("127.0.0.1", "P2PHANDSHAKE", protocol, "")
    assert rc == 0, hw.last_error()
    return e


REGION = 1 << 20


@pytest.fixture
def hw():
    return require_hawser()


@pytest.fixture
def pair(hw):
    """Two engines in this process, each with one registered 1 MiB region."""
    a, b = new_engine(), new_engine()
    ra, rb = Region(REGION), Region(REGION)
    assert a.register_memory(ra.addr, REGION) == 0, hw.last_error()
    assert b.register_memory(rb.addr, REGION) == 0, hw.last_error()
    return EnginePair(a, ra, b, rb)


HAWSER_BIN_CANDIDATES = ("../bin/hawser",)
SOFTVERBS_CANDIDATES = ("../lib/libhawser_softverbs.so",)


def _next_to_module(candidates, ok):
    hw = require_hawser()
    here = os.path.dirname(os.path.abspath(hw.__file__))
    for rel in candidates:
        p = os.path.normpath(os.path.join(here, rel))
        if ok(p):
            return p
    return None


def softverbs_lib():
    """The software verbs provider of this build (built with the rdma
    transport), or None when this build has no rdma transport."""
    return os.environ.get("HAWSER_SOFTVERBS_LIB") or _next_to_module(SOFTVERBS_CANDIDATES, os.path.isfile)


def use_softverbs(monkeypatch, tmp_path, devices):
    """Engines created from now on get the software RDMA NICs `devices`
    ("sv0,sv1"; the provider the C++ rdma tests use, its registry in
    tmp_path); skips when this build has no rdma transport."""
    lib = softverbs_lib()
    if lib is None:
        pytest.skip("this build has no rdma transport (no libhawser_softverbs.so next to the module)")
    monkeypatch.setenv("HAWSER_RDMA_VERBS_LIB", lib)
    monkeypatch.setenv("HAWSER_SOFTVERBS_DEVICES", devices)
    monkeypatch.setenv("HAWSER_SOFTVERBS_DIR", str(tmp_path))


def hawser_bin():
    require_hawser()
    env = os.environ.get("HAWSER_BIN")
    if env:
        return env
    return _next_to_module(HAWSER_BIN_CANDIDATES, lambda p: os.access(p, os.X_OK))


def eventually(pred, timeout=20.0):
    """Polls pred (short, growing pauses) until it is true or timeout seconds
    pass; returns whether it held."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    return bool(pred())


# ---- PyTorch and GPUs --------------------------------------------------------------------


def require_torch():
    """torch, or a skip with the reason (Debian: python3-torch)."""
    try:
        import torch
    except ImportError as exc:
        pytest.skip(f"PyTorch is not installed ({exc}); Debian: apt-get install python3-torch")
    return torch


def require_cuda():
    """torch with a usable CUDA device. Where HAWSER_TEST_REQUIRE_GPU=1 (the
    GPU machine, scripts/gpu_python.sh) a missing GPU fails the test instead
    of skipping it."""
    required = os.environ.get("HAWSER_TEST_REQUIRE_GPU") == "1"
    try:
        import torch
    except ImportError as exc:
        if required:
            pytest.fail(f"HAWSER_TEST_REQUIRE_GPU=1 but PyTorch does not import: {exc}")
        pytest.skip(f"PyTorch is not installed ({exc})")
    if not torch.cuda.is_available():
        if required:
            pytest.fail("HAWSER_TEST_REQUIRE_GPU=1 but torch.cuda.is_available() is False")
        pytest.skip("no CUDA device (these cases run on the GPU machine: scripts/gpu_python.sh)")
    return torch


class JsonPeer:
    """A child Python process speaking one JSON object a line: its first line
    is what it publishes (.meta); ask() sends a command and reads the answer."""

    def __init__(self, script, *args, env=None):
        import json
        import subprocess
        self._json = json
        hw = require_hawser()
        child_env = dict(os.environ)
        child_env.update(env or {})
        module_dir = os.path.dirname(os.path.abspath(hw.__file__))
        child_env["PYTHONPATH"] = os.pathsep.join([module_dir, child_env.get("PYTHONPATH", "")])
        here = os.path.dirname(os.path.abspath(__file__))
        self.proc = subprocess.Popen([sys.executable, os.path.join(here, script), *map(str, args)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=child_env)
        self.meta = self.read()
        if "error" in self.meta:
            self.close()
            pytest.fail(f"{script}: {self.meta['error']}")

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=60)
            pytest.fail(f"peer exited ({self.proc.returncode}): {self.proc.stderr.read()}")
        return self._json.loads(line)

    def ask(self, cmd):
        self.proc.stdin.write(self._json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        """Asks the child to quit (kills it when it does not); its exit status."""
        import subprocess
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(self._json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()
        return self.proc.returncode
