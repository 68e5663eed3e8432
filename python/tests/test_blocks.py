"""Block requests and transfer plans from Python: numpy arrays of addresses and
lengths taken without a Python loop (buffer protocol), strided layouts, plans
prepared once and posted many times, and each bad block's exact code with its
index in the message. Two engines in this process over TCP (and shm)."""
import array

import numpy as np
import pytest

from conftest import REGION, EnginePair, Region, new_engine, pattern


def neg(hw, name):
    return -hw.codes[name]


@pytest.fixture(params=["tcp", "shm"])
def blocks_pair(hw, request):
    """Initiator a (1 MiB local region ra) and target b (region rb filled with a pattern)."""
    a, b = new_engine(request.param), new_engine(request.param)
    ra, rb = Region(REGION), Region(REGION, fill=pattern(REGION, 9))
    assert a.register_memory(ra.addr, REGION) == 0, hw.last_error()
    assert b.register_memory(rb.addr, REGION) == 0, hw.last_error()
    return EnginePair(a, ra, b, rb)


def test_numpy_block_list_read_lands_each_block(blocks_pair, hw):
    a, ra, b, rb = blocks_pair
    n = 200
    # Block i: 1000 bytes from the target at (n-1-i)*4096+3 to local i*2048.
    local = ra.addr + np.arange(n, dtype=np.uint64) * 2048
    remote = rb.addr + (n - 1 - np.arange(n, dtype=np.uint64)) * 4096 + 3
    lengths = np.full(n, 1000, dtype=np.uint64)
    assert a.transfer_blocks_sync(b.get_segment_name(), local, remote, lengths, 0) == 0, hw.last_error()
    src = rb.read()
    for i in range(n):
        off = (n - 1 - i) * 4096 + 3
        assert ra.read(i * 2048, 1000) == src[off:off + 1000], i


def test_one_length_for_every_block_and_int64_and_array_q_inputs(blocks_pair, hw):
    a, ra, b, rb = blocks_pair
    n = 64
    local = np.arange(n, dtype=np.int64) * 512 + ra.addr  # int64 works too
    remote = array.array("Q", [rb.addr + 8192 + i * 512 for i in range(n)])
    ra.write(0, pattern(n * 512, 4))
    assert a.transfer_blocks_sync(b.get_segment_name(), local, remote, 512, 1) == 0, hw.last_error()
    assert rb.read(8192, n * 512) == pattern(n * 512, 4)


def test_strided_read_packs_a_paged_layout(blocks_pair, hw):
    a, ra, b, rb = blocks_pair
    seg = b.get_segment_name()
    # 100 blocks of 256 bytes, every 1 KiB at the target, packed locally.
    assert a.transfer_strided_sync(seg, ra.addr, rb.addr, 256, 256, 1024, 100, 0) == 0, hw.last_error()
    src = rb.read()
    assert ra.read(0, 256 * 100) == b"".join(src[i * 1024:i * 1024 + 256] for i in range(100))


def test_prepared_plan_posted_many_times(blocks_pair, hw):
    a, ra, b, rb = blocks_pair
    seg = b.get_segment_name()
    n = 300
    local = ra.addr + np.arange(n, dtype=np.uint64) * 1024
    remote = rb.addr + np.arange(n, dtype=np.uint64) * 2048 + 100
    plan = a.prepare_blocks(seg, local, remote, 1000, 1)
    assert plan > 0, hw.last_error()
    info = a.plan_info(plan)
    assert info == {"blocks": n, "runs": n, "bytes": n * 1000}
    for rnd in range(3):
        data = pattern(n * 1024, 20 + rnd)
        ra.write(0, data)
        if rnd == 0:
            assert a.transfer_plan_sync(plan) == 0, hw.last_error()
        else:
            bid = a.post_plan(plan)
            assert bid > 0, hw.last_error()
            assert a.get_batch_transfer_status([bid]) == 0, hw.last_error()
        for i in range(0, n, 7):
            assert rb.read(i * 2048 + 100, 1000) == data[i * 1024:i * 1024 + 1000], (rnd, i)
    assert a.release_plan(plan) == 0
    assert a.post_plan(plan) == neg(hw, "invalid_argument")
    assert "not prepared" in hw.last_error()
    assert a.plan_info(plan) is None


def test_contiguous_blocks_are_merged_into_one_run(blocks_pair, hw):
    a, ra, b, rb = blocks_pair
    n = 256
    local = ra.addr + np.arange(n, dtype=np.uint64) * 4096
    remote = rb.addr + np.arange(n, dtype=np.uint64) * 4096
    plan = a.prepare_blocks(b.get_segment_name(), local, remote, 4096, 0)
    assert plan > 0, hw.last_error()
    assert a.plan_info(plan) == {"blocks": n, "runs": 1, "bytes": REGION}
    assert a.transfer_plan_sync(plan) == 0, hw.last_error()
    assert ra.read() == rb.read()
    splan = a.prepare_strided(b.get_segment_name(), ra.addr, rb.addr, 4096, 4096, 4096, n, 0)
    assert a.plan_info(splan)["runs"] == 1
    assert a.release_plan(plan) == 0 and a.release_plan(splan) == 0


def test_bad_blocks_return_the_exact_code_naming_the_block(blocks_pair, hw):
    a, ra, b, rb = blocks_pair
    seg = b.get_segment_name()
    n = 10
    local = ra.addr + np.arange(n, dtype=np.uint64) * 8192
    remote = rb.addr + np.arange(n, dtype=np.uint64) * 8192

    bad = remote.copy()
    bad[7] = rb.addr + REGION - 10
    assert a.transfer_blocks_sync(seg, local, bad, 4096, 0) == neg(hw, "out_of_range")
    assert "blocks[7]" in hw.last_error()
    assert a.prepare_blocks(seg, local, bad, 4096, 0) == neg(hw, "out_of_range")
    assert "blocks[7]" in hw.last_error()

    bad = local.copy()
    bad[3] = 4096
    assert a.transfer_blocks_sync(seg, bad, remote, 4096, 0) == neg(hw, "not_registered")
    assert "blocks[3]" in hw.last_error()

    lengths = np.full(n, 4096, dtype=np.uint64)
    lengths[5] = 0
    assert a.transfer_blocks_sync(seg, local, remote, lengths, 0) == neg(hw, "invalid_argument")
    assert "blocks[5]: length is 0" in hw.last_error()

    bad = local.copy()
    bad[4] = bad[2] + 100  # a READ lands two blocks on the same local bytes
    assert a.transfer_blocks_sync(seg, bad, remote, 4096, 0) == neg(hw, "address_overlapped")
    assert "blocks[4]" in hw.last_error() and "blocks[2]" in hw.last_error()

    empty = np.zeros(0, dtype=np.uint64)
    assert a.transfer_blocks_sync(seg, empty, empty, 4096, 0) == neg(hw, "invalid_argument")
    assert "blocks is empty" in hw.last_error()
    assert a.transfer_strided_sync(seg, ra.addr, rb.addr, 4096, 4096, 4096, 0, 0) == neg(hw, "invalid_argument")
    assert "count is 0" in hw.last_error()
    assert a.transfer_strided_sync(seg, ra.addr, rb.addr, 4096, 1024, 4096, 4, 0) == neg(hw, "address_overlapped")
    assert "blocks[1]" in hw.last_error()

    assert a.transfer_blocks_sync(seg, local, remote[:5], 4096, 0) == neg(hw, "invalid_argument")
    assert "differ in length" in hw.last_error()
    assert a.transfer_blocks_sync(seg, local.astype(np.uint32), remote, 4096, 0) == neg(hw, "invalid_argument")
    assert "8-byte integers" in hw.last_error()
    assert a.transfer_blocks_sync(seg, local, remote, 4096, 7) == neg(hw, "invalid_argument")
    assert "opcode 7" in hw.last_error()


def test_raise_on_error_raises_with_the_block_index(hw):
    a, b = new_engine(raise_on_error=True), new_engine()
    ra, rb = Region(REGION), Region(REGION)
    a.register_memory(ra.addr, REGION)
    b.register_memory(rb.addr, REGION)
    local = np.array([ra.addr, ra.addr + 4096], dtype=np.uint64)
    remote = np.array([rb.addr, rb.addr + REGION], dtype=np.uint64)
    with pytest.raises(hw.Error) as err:
        a.prepare_blocks(b.get_segment_name(), local, remote, 4096, 0)
    assert err.value.code_name == "out_of_range"
    assert "blocks[1]" in str(err.value)


def test_block_requests_follow_the_route_contract(pair, hw):
    # The engines force tcp (new_engine's protocol): a contract allowing shm
    # only refuses block requests and plans too, naming tcp (docs/routes.md).
    a, ra, b, rb = pair
    seg = b.get_segment_name()
    local = ra.addr + np.arange(4, dtype=np.uint64) * 1024
    remote = rb.addr + np.arange(4, dtype=np.uint64) * 1024
    assert a.set_route_contract("shm") == 0, hw.last_error()
    assert a.transfer_blocks_sync(seg, local, remote, 512, 0) == neg(hw, "no_transport")
    assert "forbids the route this request would take, tcp" in hw.last_error(), hw.last_error()
    assert a.transfer_strided_sync(seg, ra.addr, rb.addr, 256, 256, 1024, 4, 0) == neg(hw, "no_transport")
    assert a.prepare_blocks(seg, local, remote, 512, 0) == neg(hw, "no_transport")
    assert a.prepare_strided(seg, ra.addr, rb.addr, 256, 256, 1024, 4, 0) == neg(hw, "no_transport")
    assert a.set_route_contract("tcp") == 0, hw.last_error()
    assert a.transfer_blocks_sync(seg, local, remote, 512, 0) == 0, hw.last_error()
