"""CUDA virtual memory over nvlink (issue 29): a peer process whose PyTorch
allocates with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMemCreate
with the POSIX fd handle type, mapped with cuMemMap: no legacy IPC handle)
registers its KV cache; this process moves blocks to and from it, every
byte checked by digest, over nvlink (the memory shared by file descriptor),
not a fallback. Runs on the GPU machine (scripts/gpu_python.sh); elsewhere
skipped with the reason, failed where HAWSER_TEST_REQUIRE_GPU=1."""
from conftest import JsonPeer, require_cuda
from test_tensors import paged
from peer_loop import blocks_digest


def test_expandable_segments_memory_of_another_process_moves_over_nvlink(hw):
    torch = require_cuda()
    # 2 layers of 16384 blocks x 16 tokens x 2 heads x 32 (bf16): 32 MiB each,
    # more than one of PyTorch's 20 MiB expandable-segment pages.
    layers, blocks = 2, 16384
    peer = JsonPeer("tensor_peer.py", "cuda:0", "bfloat16", layers, blocks, 16, 2, 32,
                    env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    try:
        e = hw.TransferEngine()
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "", "") == 0, hw.last_error()
        mine = paged(torch, layers, blocks, device="cuda:0", seed=41)
        for t in mine:
            assert e.register_tensor(t) == 0, hw.last_error()
        torch.cuda.synchronize()
        src_ids = torch.tensor([0, 3, 10239, 10240, 12000, 16383], device="cuda:0")
        dst_ids = torch.tensor([16383, 10240, 0, 1, 333, 10239], device="cuda:0")
        assert e.transfer_tensor_blocks(peer.meta["segment"], mine, src_ids, peer.meta["layers"], dst_ids,
                                        hw.Write) == 0, hw.last_error()
        for k in range(layers):
            got = peer.ask({"op": "digest", "layer": k, "blocks": dst_ids.tolist()})["digest"]
            assert got == blocks_digest(torch, mine[k], src_ids.tolist()), f"layer {k}"
        assert peer.ask({"op": "fill", "seed": 78})["ok"]
        assert e.transfer_tensor_blocks(peer.meta["segment"], mine, [2, 16000], peer.meta["layers"], [10, 10241],
                                        hw.Read) == 0, hw.last_error()
        torch.cuda.synchronize()
        for k in range(layers):
            assert peer.ask({"op": "digest", "layer": k, "blocks": [10, 10241]})["digest"] == \
                blocks_digest(torch, mine[k], [2, 16000]), f"layer {k}"
        nvlink = e.get_stats()["transports"]["nvlink"]
        assert nvlink["vmm_imported"] >= 1, nvlink
        assert nvlink["slices_completed"] > 0, nvlink
        del e
    finally:
        assert peer.close() == 0
