"""examples/python runs as documented: the prefill -> decode KV handoff
(two processes, one block request and a notification) gives the decode
output of a single-process run. CPU here; CUDA on the GPU machine."""
import os
import subprocess
import sys

import pytest

from conftest import require_cuda, require_hawser, require_torch

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python", "kv_handoff.py")


def run_example(device):
    hw = require_hawser()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(hw.__file__)), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, EXAMPLE, "--device", device, "--tokens", "14"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "decode output matches the single-process run" in r.stdout, r.stdout
    assert "3 blocks x 4 tensors moved" in r.stdout, r.stdout


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_kv_handoff_example_matches_a_single_process_run(device):
    (require_cuda if device == "cuda" else require_torch)()
    run_example(device)
