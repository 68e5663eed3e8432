#!/usr/bin/env bash
# `pip install .` from the source tree, offline, with Debian's setuptools and
# no build isolation, into a fresh virtual environment; then the installed
# module (not the build tree's) moves bytes between two engines.
# Usage: pip_check.sh SOURCE_DIR BUILD_DIR PYTHON
set -euo pipefail
src=$1 build=$2 py=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv --system-site-packages "$tmp/venv"
# The build directory of this test run is reused: the module is already built there.
HAWSER_CMAKE_BUILD_DIR=$build "$tmp/venv/bin/python" -m pip install --no-build-isolation --no-index \
  --disable-pip-version-check --quiet "$src"
cd "$tmp"  # away from the source tree and the build directory
PYTHONPATH= "$tmp/venv/bin/python" - "$tmp/venv" <<'PY'
import ctypes, os, sys
import hawser
from hawser.mooncake import TransferEngine, Write
venv = os.path.realpath(sys.argv[1])
where = os.path.realpath(hawser.__file__)
assert where.startswith(venv + os.sep), f"imported {where}, not the module installed in {venv}"
a, b = TransferEngine(), TransferEngine()
for e in (a, b):
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, hawser.last_error()
n = 1 << 20
src = ctypes.create_string_buffer(bytes((i * 13 + 5) & 0xFF for i in range(n)), n)
dst = ctypes.create_string_buffer(n)
assert a.register_memory(ctypes.addressof(src), n) == 0 and b.register_memory(ctypes.addressof(dst), n) == 0
rc = a.transfer_sync(b.get_segment_name(), ctypes.addressof(src), ctypes.addressof(dst), n, Write)
assert rc == 0, hawser.last_error()
assert dst.raw == src.raw
print(f"pip install: hawser {hawser.__version__} from {where}: 1 MiB moved and verified")
PY
# pip show's whole output first: grep -q would close the pipe under it.
shown=$("$tmp/venv/bin/python" -m pip show hawser 2>&1 || true)
grep -q "^Version: " <<<"$shown" || { echo "pip show hawser: not installed: $shown"; exit 1; }
