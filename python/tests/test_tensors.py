"""Tensors as transfer operands (hawser.tensors): PyTorch tensors of any
dtype, __cuda_array_interface__, DLPack and buffer-protocol objects are
registered and moved without the caller computing an address: whole, as
slices (the same index on both sides), and as block lists given by index
tensors (a paged KV cache's block table). Every byte is checked. CPU cases
run in CI; CUDA cases run on the GPU machine (scripts/gpu_python.sh), where a
missing GPU fails them."""
import array
import ctypes

import pytest

from conftest import JsonPeer, new_engine, require_cuda, require_torch
from peer_loop import blocks_digest

DTYPES = ["float32", "bfloat16", "float16", "int8", "int64", "float64"]


def filled(torch, shape, dtype, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 120, shape, generator=g, dtype=torch.int16).to(getattr(torch, dtype)).to(device)


def engines(hw, protocol="tcp"):
    return new_engine(protocol), new_engine(protocol)


# ---- what an object is ---------------------------------------------------------------------


def test_describe_reads_every_kind_of_object(hw):
    torch = require_torch()
    import numpy as np
    t = torch.zeros((4, 6), dtype=torch.bfloat16)
    d = hw.tensor_desc(t)
    assert (d["addr"], d["nbytes"], d["itemsize"], d["shape"], d["strides"], d["location"], d["contiguous"]) == \
        (t.data_ptr(), 48, 2, (4, 6), (12, 2), "cpu", True)
    col = hw.tensor_desc(t[:, 2:4])
    assert (col["addr"], col["nbytes"], col["contiguous"]) == (t.data_ptr() + 4, 40, False)
    a = np.zeros((3, 5), dtype=np.float64)
    assert hw.tensor_desc(a)["addr"] == a.ctypes.data and hw.tensor_desc(a)["nbytes"] == 120
    ro = b"read-only bytes"
    assert hw.tensor_desc(ro)["addr"] == ctypes.cast(ro, ctypes.c_void_p).value
    q = array.array("Q", range(8))
    assert hw.tensor_desc(q)["addr"] == q.buffer_info()[0] and hw.tensor_desc(q)["nbytes"] == 64

    class Cai:  # what CuPy or Numba expose, here over host memory
        def __init__(self, arr):
            self.arr = arr
            self.__cuda_array_interface__ = {"shape": arr.shape, "typestr": arr.dtype.str, "strides": None,
                                             "data": (arr.ctypes.data, False), "version": 3}
    assert hw.tensor_desc(Cai(a)) == dict(hw.tensor_desc(a), location="*")

    class DlpackOnly:  # an object that offers DLPack and nothing else
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__()

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()
    assert hw.tensor_desc(DlpackOnly(t[1:3])) == hw.tensor_desc(t[1:3])
    with pytest.raises(TypeError, match="exposes no memory"):
        hw.tensor_desc(object())
    with pytest.raises(ValueError, match="negative strides"):
        hw.tensor_desc(np.arange(10)[::-1])


def test_runs_of_a_view_are_its_contiguous_pieces(hw):
    torch = require_torch()
    t = torch.zeros((4, 8, 2), dtype=torch.float32)
    offsets, run = hw.tensors.runs(t)
    assert (list(offsets), run) == ([0], 256)
    offsets, run = hw.tensors.runs(t[:, 2:5])
    assert (list(offsets), run) == ([0, 64, 128, 192], 24)
    offsets, run = hw.tensors.runs(t[1:3, :, 1])
    assert (list(offsets)[:3], run, len(offsets)) == ([0, 8, 16], 4, 16)


# ---- registration --------------------------------------------------------------------------


def test_register_tensor_keeps_it_and_unregisters(hw):
    torch = require_torch()
    e = new_engine()
    t = torch.zeros(1024, dtype=torch.float16)
    assert e.register_tensor(t) == 0, hw.last_error()
    assert [b[:2] for b in e.get_segment_buffers(e.get_segment_name())] == [(t.data_ptr(), 2048)]
    assert e.register_tensor(t) == -hw.codes["address_overlapped"]
    assert e.unregister_tensor(t) == 0
    assert e.get_segment_buffers(e.get_segment_name()) == []
    assert e.unregister_tensor(t) == -hw.codes["not_registered"]


# ---- moving tensors ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_whole_tensor_write_and_read_any_dtype(hw, dtype):
    torch = require_torch()
    a, b = engines(hw)
    src = filled(torch, (64, 33), dtype, 1)
    dst = torch.zeros((64, 33), dtype=getattr(torch, dtype))
    back = torch.zeros_like(src)
    for e, t in ((a, src), (a, back), (b, dst)):
        assert e.register_tensor(t) == 0, hw.last_error()
    assert a.transfer_tensor(b.get_segment_name(), src, hw.tensor_desc(dst), hw.TransferOpcode.Write) == 0, \
        hw.last_error()
    assert torch.equal(dst, src)
    assert a.transfer_tensor(b.get_segment_name(), back, hw.tensor_desc(dst), hw.TransferOpcode.Read) == 0
    assert torch.equal(back, src)


def test_slices_land_in_the_same_slice_at_the_peer(hw):
    torch = require_torch()
    a, b = engines(hw)
    src = filled(torch, (16, 8, 4), "float32", 2)
    dst = torch.zeros_like(src)
    assert a.register_tensor(src) == 0 and b.register_tensor(dst) == 0
    peer = b.get_segment_name()
    # Rows 3..6: one contiguous run.
    assert a.transfer_tensor(peer, src, hw.tensor_desc(dst), hw.Write, index=(slice(3, 7),)) == 0, hw.last_error()
    expect = torch.zeros_like(src)
    expect[3:7] = src[3:7]
    assert torch.equal(dst, expect)
    # Columns 2..4 of rows 10..15: a strided view, moved as its runs.
    idx = (slice(10, 16), slice(2, 5))
    assert a.transfer_tensor(peer, src, hw.tensor_desc(dst), hw.Write, index=idx) == 0, hw.last_error()
    expect[idx] = src[idx]
    assert torch.equal(dst, expect)
    # A view of a different layout at the peer is refused before any byte moves.
    with pytest.raises(ValueError, match="shape"):
        a.transfer_tensor(peer, src, hw.tensor_desc(dst[:8]), hw.Write, index=idx)
    # With a notification: it arrives once the bytes are there.
    assert a.transfer_tensor(peer, src, hw.tensor_desc(dst), hw.Write, index=(slice(0, 2),),
                             notify=hw.TransferNotify("slice", "rows 0-1")) == 0, hw.last_error()
    expect[0:2] = src[0:2]
    assert torch.equal(dst, expect)
    got = b.get_notifies()
    assert [(n.name, n.msg) for n in got] == [("slice", "rows 0-1")]
    with pytest.raises(ValueError, match="notify= needs sync=True"):
        a.transfer_tensor(peer, src, hw.tensor_desc(dst), hw.Write, sync=False, notify=("x", "y"))
    # Async: a batch id.
    batch = a.transfer_tensor(peer, src, hw.tensor_desc(dst), hw.Write, sync=False)
    assert batch > 0 and a.get_batch_transfer_status([batch]) == 0
    assert torch.equal(dst, src)


def test_numpy_bytearray_and_array_objects_move_too(hw):
    import numpy as np
    a, b = engines(hw)
    src = np.arange(4096, dtype=np.uint32)
    dst = bytearray(src.nbytes)
    assert a.register_tensor(src) == 0 and b.register_tensor(dst) == 0
    assert a.transfer_tensor(b.get_segment_name(), src, hw.tensor_desc(dst), hw.Write) == 0, hw.last_error()
    assert bytes(dst) == src.tobytes()
    q = array.array("Q", [0] * 16)
    assert a.register_tensor(q) == 0
    assert a.transfer_tensor(b.get_segment_name(), q, hw.tensor_desc(dst)["addr"] + 64, hw.Read) == 0
    assert q.tobytes() == src.tobytes()[64:192]


def paged(torch, layers, blocks, dtype="bfloat16", device="cpu", seed=None):
    shape = (blocks, 16, 2, 32)  # [block, tokens per block, heads, head dim]
    if seed is None:
        return [torch.zeros(shape, dtype=getattr(torch, dtype), device=device) for _ in range(layers)]
    return [filled(torch, shape, dtype, seed + k, device) for k in range(layers)]


def test_block_table_moves_blocks_between_two_paged_caches(hw):
    torch = require_torch()
    a, b = engines(hw)
    prefill = paged(torch, 3, 20, seed=10)
    decode = paged(torch, 3, 30)
    for t in prefill:
        assert a.register_tensor(t) == 0
    for t in decode:
        assert b.register_tensor(t) == 0
    # One request's block table on each side (index tensors, as a scheduler keeps them).
    src_table = torch.tensor([4, 5, 6, 11, 0], dtype=torch.int32)
    dst_table = torch.tensor([29, 2, 3, 17, 8], dtype=torch.int64)
    rc = a.transfer_tensor_blocks(b.get_segment_name(), prefill, src_table, [hw.tensor_desc(t) for t in decode],
                                  dst_table, hw.Write)
    assert rc == 0, hw.last_error()
    for k in range(3):
        expect = torch.zeros_like(decode[k])
        expect[dst_table.long()] = prefill[k][src_table.long()]
        assert torch.equal(decode[k], expect), f"layer {k}"
    # Read them back into other blocks, asynchronously.
    back = paged(torch, 3, 20)
    for t in back:
        assert a.register_tensor(t) == 0
    batch = a.transfer_tensor_blocks(b.get_segment_name(), back, [0, 1, 2, 3, 4],
                                     [hw.tensor_desc(t) for t in decode], dst_table, hw.Read, sync=False)
    assert batch > 0 and a.get_batch_transfer_status([batch]) == 0, hw.last_error()
    for k in range(3):
        assert torch.equal(back[k][:5], prefill[k][src_table.long()])


def test_block_table_errors_name_the_bad_entry(hw):
    torch = require_torch()
    a, b = engines(hw)
    src, dst = paged(torch, 1, 4, seed=1), paged(torch, 1, 4)
    assert a.register_tensor(src[0]) == 0 and b.register_tensor(dst[0]) == 0
    peer, rd = b.get_segment_name(), [hw.tensor_desc(dst[0])]
    with pytest.raises(IndexError, match=r"remote_block_ids\[1\] = 4 is outside 0..3"):
        a.transfer_tensor_blocks(peer, src, [0, 1], rd, [0, 4], hw.Write)
    with pytest.raises(ValueError, match="2 block ids, 1 remote"):
        a.transfer_tensor_blocks(peer, src, [0, 1], rd, [0], hw.Write)
    with pytest.raises(TypeError, match="integer block ids"):
        a.transfer_tensor_blocks(peer, src, torch.tensor([0.5]), rd, [0], hw.Write)
    with pytest.raises(ValueError, match="each block"):
        a.transfer_tensor_blocks(peer, [src[0][:, :, 0]], [0], rd, [0], hw.Write)
    # A peer range that is not registered there: the engine's code, not an exception.
    unregistered = dict(rd[0], addr=rd[0]["addr"] + (1 << 40))
    assert a.transfer_tensor_blocks(peer, src, [0], [unregistered], [0], hw.Write) < 0
    assert hw.last_error_code() in ("out_of_range", "not_registered"), hw.last_error()
    assert torch.count_nonzero(dst[0]) == 0


# ---- two processes (CPU here, CUDA on the GPU machine) ----------------------------------------


def _two_process_blocks(hw, torch, device, blocks=24, env=None, check=None):
    """Blocks both ways between this process and a tensor_peer.py (its
    environment plus `env`), digests checked; check(engine) at the end."""
    layers = 2
    peer = JsonPeer("tensor_peer.py", device, "bfloat16", layers, blocks, 16, 2, 32, env=env)
    try:
        e = hw.TransferEngine()
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "", "") == 0, hw.last_error()
        mine = paged(torch, layers, blocks, device=device, seed=40)
        for t in mine:
            assert e.register_tensor(t) == 0, hw.last_error()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        src_ids = torch.tensor([3, 4, 5, 9, blocks - 4, blocks - 3], device=device)
        dst_ids = torch.tensor([0, 1, 2, blocks - 1, 12, 7], device=device)
        assert e.transfer_tensor_blocks(peer.meta["segment"], mine, src_ids, peer.meta["layers"], dst_ids,
                                        hw.Write) == 0, hw.last_error()
        for k in range(layers):
            got = peer.ask({"op": "digest", "layer": k, "blocks": dst_ids.tolist()})["digest"]
            assert got == blocks_digest(torch, mine[k], src_ids.tolist()), f"layer {k}"
        # And the other way: the peer fills its cache, we read two blocks of it.
        far = blocks - 2
        assert peer.ask({"op": "fill", "seed": 77})["ok"]
        assert e.transfer_tensor_blocks(peer.meta["segment"], mine, [0, 1], peer.meta["layers"], [5, far],
                                        hw.Read) == 0, hw.last_error()
        for k in range(layers):
            assert peer.ask({"op": "digest", "layer": k, "blocks": [5, far]})["digest"] == \
                blocks_digest(torch, mine[k], [0, 1])
        if check:
            check(e)
        del e
    finally:
        assert peer.close() == 0


def test_two_processes_move_cpu_tensor_blocks(hw):
    _two_process_blocks(hw, require_torch(), "cpu")


# ---- CUDA (the GPU machine) ------------------------------------------------------------------


def test_cuda_tensors_register_as_gpu_memory(hw):
    torch = require_cuda()
    e = new_engine("")
    t = torch.zeros((8, 1024), dtype=torch.float16, device="cuda")
    assert hw.tensor_desc(t)["location"] == "cuda:0"
    assert e.register_tensor(t) == 0, hw.last_error()
    (addr, length, location), = e.get_segment_buffers(e.get_segment_name())
    assert (addr, length) == (t.data_ptr(), t.numel() * 2) and location.startswith("cuda"), location
    pinned = torch.zeros(4096, dtype=torch.uint8).pin_memory()
    assert e.register_tensor(pinned) == 0, hw.last_error()


@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_whole_tensors_and_slices_in_one_process(hw, dtype):
    torch = require_cuda()
    a, b = new_engine(""), new_engine("")
    src = filled(torch, (32, 64), dtype, 5, "cuda")
    dst = torch.zeros_like(src)
    pinned = torch.zeros(src.shape, dtype=src.dtype).pin_memory()
    assert a.register_tensor(src) == 0 and b.register_tensor(dst) == 0 and a.register_tensor(pinned) == 0
    torch.cuda.synchronize()
    peer = b.get_segment_name()
    assert a.transfer_tensor(peer, src, hw.tensor_desc(dst), hw.Write, index=(slice(4, 9),)) == 0, hw.last_error()
    torch.cuda.synchronize()
    assert torch.equal(dst[4:9], src[4:9]) and torch.count_nonzero(dst[:4]) == 0
    assert a.transfer_tensor(peer, src, hw.tensor_desc(dst), hw.Write) == 0, hw.last_error()
    assert a.transfer_tensor(peer, pinned, hw.tensor_desc(dst), hw.Read) == 0, hw.last_error()
    torch.cuda.synchronize()
    assert torch.equal(pinned.cuda(), src)


def test_two_processes_move_cuda_tensor_blocks(hw):
    _two_process_blocks(hw, require_cuda(), "cuda:0")
