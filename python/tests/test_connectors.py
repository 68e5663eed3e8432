"""vLLM's and SGLang's Mooncake connectors, call for call, across two
processes: this one is the prefill worker (the sender), connector_peer.py the
decode worker whose KV pool receives the blocks. Both import
`hawser.mooncake`, the one line a connector changes; the rest is the calls
the connectors make, with the defaults they pass (protocol "rdma", which a
host without an RDMA NIC turns into tcp), and every byte checked on the
receiving side."""
import hashlib

import pytest

from conftest import JsonPeer, Region, eventually, pattern

LAYERS, BLOCKS, BLOCK_LEN = 4, 16, 8192


class DecodePeer(JsonPeer):
    """The decode worker in a child process; ask() is the connectors' side channel."""

    def __init__(self):
        super().__init__("connector_peer.py", LAYERS, BLOCKS, BLOCK_LEN)
        self.session = f"{self.meta['remote_hostname']}:{self.meta['remote_port']}"

    def digests(self, ranges):
        return self.ask({"op": "digest", "ranges": [list(r) for r in ranges]})["digests"]


@pytest.fixture
def decode(hw):
    p = DecodePeer()
    yield p
    p.close()


def sha(data):
    return hashlib.sha256(data).hexdigest()


def prefill_kv_pool(engine):
    """The prefill worker's KV cache: one region per layer, each block distinct."""
    kv = [Region(BLOCKS * BLOCK_LEN, pattern(BLOCKS * BLOCK_LEN, 40 + layer)) for layer in range(LAYERS)]
    assert engine.batch_register_memory([r.addr for r in kv], [r.size for r in kv]) == 0
    return kv


def block_copies(kv, remote_bases, local_blocks, remote_blocks):
    """vLLM's grouping: runs of consecutive blocks on both sides become one copy per layer."""
    runs, start = [], 0
    for i in range(1, len(local_blocks) + 1):
        if i == len(local_blocks) or local_blocks[i] != local_blocks[i - 1] + 1 or \
                remote_blocks[i] != remote_blocks[i - 1] + 1:
            runs.append((local_blocks[start], remote_blocks[start], i - start))
            start = i
    src, dst, lens = [], [], []
    for layer, region in enumerate(kv):
        for lb, rb, n in runs:
            src.append(region.addr + lb * BLOCK_LEN)
            dst.append(remote_bases[layer] + rb * BLOCK_LEN)
            lens.append(n * BLOCK_LEN)
    return src, dst, lens


def expected(kv, src, lens):
    by_addr = {r.addr: r for r in kv}
    out = []
    for s, n in zip(src, lens):
        base = max(a for a in by_addr if a <= s)
        out.append(sha(by_addr[base].read(s - base, n)))
    return out


def test_vllm_mooncake_connector_sequence(hw, decode):
    from hawser.mooncake import TransferEngine

    # MooncakeConnectorWorker.__init__: TransferEngine(), initialize with the
    # connector's defaults, get_rpc_port() for the side channel.
    engine = TransferEngine()
    ret_value = engine.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "")
    assert ret_value == 0, hw.last_error()
    assert engine.get_rpc_port() > 0
    # register_kv_caches: batch_register_memory(kv_data_ptrs, kv_data_lens).
    kv = prefill_kv_pool(engine)
    # The decode side's MooncakeXferMetadata: remote_hostname, remote_port,
    # kv_caches_base_addr; the sender addresses it as host:rpc_port.
    meta = decode.meta
    remote_session = f"{meta['remote_hostname']}:{meta['remote_port']}"
    assert meta["block_len"] == BLOCK_LEN and len(meta["kv_caches_base_addr"]) == LAYERS
    # send_kv: the request's blocks, grouped into contiguous runs.
    src, dst, lens = block_copies(kv, meta["kv_caches_base_addr"], [1, 2, 3, 9, 10], [4, 5, 6, 0, 1])
    ret_value = engine.batch_transfer_sync_write(remote_session, src, dst, lens)
    assert ret_value == 0, hw.last_error()
    # A request whose whole prompt hit the decode side's prefix cache: no block to send.
    assert engine.batch_transfer_sync_write(remote_session, [], [], []) == 0
    assert decode.digests(zip(dst, lens)) == expected(kv, src, lens)
    # Blocks the request did not name are untouched on the decode side.
    untouched = [(meta["kv_caches_base_addr"][layer] + 2 * BLOCK_LEN, 2 * BLOCK_LEN) for layer in range(LAYERS)]
    assert decode.digests(untouched) == [sha(bytes(2 * BLOCK_LEN))] * LAYERS
    assert engine.batch_unregister_memory([r.addr for r in kv]) == 0


def test_sglang_mooncake_connector_sequence(hw, decode):
    from hawser.mooncake import TransferEngine

    # MooncakeTransferEngine.__init__/initialize: protocol "rdma" (MOONCAKE_PROTOCOL's
    # default), device_name "" when no IB device is configured; session_id = host:rpc_port.
    engine = TransferEngine()
    ib_device = None
    assert engine.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", ib_device if ib_device is not None else "") == 0, \
        hw.last_error()
    session_id = f"127.0.0.1:{engine.get_rpc_port()}"
    assert engine.get_engine() is engine
    kv = prefill_kv_pool(engine)  # batch_register(ptrs, lengths)
    aux = Region(BLOCK_LEN, pattern(BLOCK_LEN, 99))  # output ids, logprobs: register(ptr, length)
    assert engine.register_memory(aux.addr, aux.size) == 0
    meta = decode.meta
    peer = decode.session
    assert peer != session_id
    # The failed-session probe: the peer answers.
    assert engine.send_probe(peer) == 0, hw.last_error()
    # KV blocks: batch_transfer_sync (batch_transfer_sync_write underneath).
    src, dst, lens = block_copies(kv, meta["kv_caches_base_addr"], [0, 5, 6, 7], [8, 12, 13, 14])
    assert engine.batch_transfer_sync_write(peer, src, dst, lens) == 0, hw.last_error()
    # Aux data: one async write per aux item, then status polls until done.
    aux_dst = meta["kv_caches_base_addr"][LAYERS - 1] + (BLOCKS - 1) * BLOCK_LEN
    batch_ids = [engine.transfer_submit_write(peer, aux.addr + i * 1024, aux_dst + i * 1024, 1024) for i in range(8)]
    assert all(b > 0 for b in batch_ids), hw.last_error()
    for bid in batch_ids:
        status = [0]

        def done(bid=bid):
            status[0] = engine.transfer_check_status(bid)
            return status[0] != 0

        assert eventually(done, timeout=60.0), f"batch {bid} still running after 60 s"
        assert status[0] == 1, hw.last_error()
    # The async batch path: submit, then one status call for the batch ids.
    src2, dst2, lens2 = block_copies(kv, meta["kv_caches_base_addr"], [11], [3])
    bid = engine.batch_transfer_async_write(peer, src2, dst2, lens2)
    assert bid != 0, hw.last_error()
    assert engine.get_batch_transfer_status([bid]) == 0, hw.last_error()
    assert decode.digests(zip(dst + dst2, lens + lens2)) == expected(kv, src + src2, lens + lens2)
    assert decode.digests([(aux_dst, BLOCK_LEN)]) == [sha(aux.read())]
    # The decode worker dies: transfers to it fail (< 0) and the probe says so.
    decode.proc.kill()
    decode.proc.wait()
    assert engine.transfer_sync_write(peer, aux.addr, aux_dst, 64) < 0
    assert engine.send_probe(peer) != 0
