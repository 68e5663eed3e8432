"""CUDA virtual memory over nvlink (issue 29): a peer process whose PyTorch
allocates with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMemCreate
with the POSIX fd handle type, mapped with cuMemMap: no legacy IPC handle)
registers its KV cache; this process moves blocks to and from it, every
byte checked by digest, over nvlink (the memory shared by file descriptor),
not a fallback. Runs on the GPU machine (scripts/gpu_python.sh); elsewhere
skipped with the reason, failed where HAWSER_TEST_REQUIRE_GPU=1."""
from conftest import require_cuda
from test_tensors import _two_process_blocks


def test_expandable_segments_memory_of_another_process_moves_over_nvlink(hw):
    torch = require_cuda()

    def over_nvlink_by_fd(e):
        nvlink = e.get_stats()["transports"]["nvlink"]
        assert nvlink["vmm_imported"] >= 1, nvlink
        assert nvlink["slices_completed"] > 0, nvlink

    # 2 layers of 16384 blocks of 2 KiB: 32 MiB each, more than one of
    # PyTorch's 20 MiB expandable-segment pages, so blocks lie in several
    # physical allocations.
    _two_process_blocks(hw, torch, "cuda:0", blocks=16384,
                        env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, check=over_nvlink_by_fd)
