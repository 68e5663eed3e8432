"""vLLM's NixlConnector (pull: decode READs from prefill; push: prefill
WRITEs into decode) and SGLang's NIXL backend (prefill WRITEs into decode),
call for call, across two processes: this one plays one side with
hawser.nixl, nixl_peer.py the other. Metadata, block ids and notifications
travel as the connectors send them; every block's bytes are checked on the
receiving side. CPU tensors here (CI); CUDA tensors on the GPU machine."""
import base64
import contextlib
import json
import threading
import time
import uuid

import pytest

from conftest import JsonPeer, eventually, require_cuda, require_hawser, require_torch
from peer_loop import blocks_digest

np = pytest.importorskip("numpy")

LAYERS, BLOCKS, SHAPE = 2, 32, (16, 2, 32)


def torch_for(device):
    return require_cuda() if device.startswith("cuda") else require_torch()


DEVICES = ["cpu", "cuda:0"]


class Side:
    """This process's KV cache, registered as the connector registers it."""

    def __init__(self, agent, torch, device, fill, flavour):
        self.agent, self.torch, self.device = agent, torch, device
        g = torch.Generator().manual_seed(99)
        self.regions = [(torch.randint(-100, 100, (BLOCKS, *SHAPE), generator=g, dtype=torch.int16)
                         .to(torch.bfloat16) if fill else torch.zeros((BLOCKS, *SHAPE), dtype=torch.bfloat16))
                        .to(device) for _ in range(2 * LAYERS)]
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        self.dev = torch.device(device).index or 0
        self.mem = "VRAM" if device.startswith("cuda") else "DRAM"
        self.block_len = self.regions[0][0].numel() * self.regions[0].element_size()
        caches = [(t.data_ptr(), t.numel() * t.element_size(), self.dev, "") for t in self.regions]
        if flavour == "vllm":
            self.reg = agent.register_memory(agent.get_reg_descs(caches, self.mem), backends=["UCX"])
        else:
            self.reg = agent.register_memory(caches, self.mem)
        assert self.reg

    def blocks_data(self, bases=None, dev=None):
        """Region-major Nx3 uint64 rows: one per block per region (vLLM's and SGLang's layout)."""
        bases = bases or [t.data_ptr() for t in self.regions]
        dev = self.dev if dev is None else dev
        return np.array([[b + i * self.block_len, self.block_len, dev] for b in bases for i in range(BLOCKS)],
                        dtype=np.uint64)

    def digests(self, ids):
        return [blocks_digest(self.torch, t, ids) for t in self.regions]


def vllm_worker(nx, torch, device, peer, fill):
    """NixlBaseConnectorWorker as vLLM sets it up: the agent, the KV caches
    registered (register_kv_caches), the local handle
    (register_local_xfer_handler), then the peer's metadata from the
    handshake loaded and its handle prepared (add_remote_agent)."""
    agent = nx.nixl_agent(str(uuid.uuid4()), nx.nixl_agent_config(num_threads=4, capture_telemetry=True))
    me = Side(agent, torch, device, fill=fill, flavour="vllm")
    local_h = agent.prep_xfer_dlist("NIXL_INIT_AGENT", agent.get_xfer_descs(me.blocks_data(), me.mem))
    meta = peer.meta
    remote_name = agent.add_remote_agent(base64.b64decode(meta["md"]))
    assert remote_name == meta["name"].encode()
    remote_h = agent.prep_xfer_dlist(remote_name, agent.get_xfer_descs(
        me.blocks_data(meta["base_addrs"], meta["dev"]), meta["mem"]))
    return agent, me, local_h, remote_name, remote_h


def vllm_cleanup(agent, me, local_h, remote_name, remote_h):
    """_cleanup_remote_engine and shutdown."""
    agent.release_dlist_handle(remote_h)
    agent.remove_remote_agent(remote_name)
    agent.release_dlist_handle(local_h)
    agent.deregister_memory(me.reg)


def desc_ids(block_ids, dtype=np.int64):
    """vLLM's _compute_desc_ids: region * num_blocks + block, for every region."""
    ids = np.asarray(block_ids, dtype=np.int64)
    return np.concatenate([r * BLOCKS + ids for r in range(2 * LAYERS)]).astype(dtype)


@contextlib.contextmanager
def peer_process(flavour, device):
    """(hawser.nixl, torch, the other side in a child process), which must exit 0."""
    torch = torch_for(device)
    peer = JsonPeer("nixl_peer.py", flavour, device)
    try:
        yield require_hawser().nixl, torch, peer
    finally:
        assert peer.close() == 0


def wait_done(agent, handle):
    assert eventually(lambda: agent.check_xfer_state(handle) == "DONE")


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_pull_decode_reads_blocks_from_prefill(device):
    with peer_process("vllm", device) as (nx, torch, prefill):
        # The decode worker; the prefill's NixlAgentMetadata came in the handshake.
        agent, me, local_h, remote_name, remote_h = vllm_worker(nx, torch, device, prefill, fill=False)
        # _read_blocks for two requests: block ids differ on each side.
        reqs = {"req-a": ([3, 4, 5, 6], [10, 11, 12, 30]), "req-b": ([0, 31], [1, 2])}
        handles = {}
        for req, (local_blocks, remote_blocks) in reqs.items():
            h = agent.make_prepped_xfer("READ", local_h, desc_ids(local_blocks), remote_h, desc_ids(remote_blocks),
                                        notif_msg=f"{req}:1".encode())
            agent.transfer(h)
            handles[req] = h
        # _pop_done_transfers: DONE -> telemetry -> release.
        for req, h in handles.items():
            wait_done(agent, h)
            t = agent.get_xfer_telemetry(h)
            assert t.totalBytes == len(reqs[req][0]) * 2 * LAYERS * me.block_len and t.descCount >= 1
            agent.release_xfer_handle(h)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        for req, (local_blocks, remote_blocks) in reqs.items():
            assert me.digests(local_blocks) == prefill.ask({"op": "digest", "blocks": remote_blocks})["digests"], req
        # Full prefix-cache hit: a notification alone; heartbeats.
        agent.send_notif(remote_name, notif_msg=b"req-c:1")
        agent.send_notif(remote_name, notif_msg=b"HB:req-a,req-b")
        # The prefill learns each request is read (its blocks can be freed).
        got = prefill.ask({"op": "notifs", "count": 4})["notifs"]
        assert sorted(got[agent.name]) == sorted(["req-a:1", "req-b:1", "req-c:1", "HB:req-a,req-b"])
        vllm_cleanup(agent, me, local_h, remote_name, remote_h)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_push_prefill_writes_blocks_into_decode(device):
    with peer_process("vllm", device) as (nx, torch, decode):
        # The prefill worker; the decode's metadata came in the handshake.
        agent, me, local_h, remote_name, remote_h = vllm_worker(nx, torch, device, decode, fill=True)
        # _add_notif_only_remote_agent: the decode loads the prefill's metadata to notify it.
        assert decode.ask({"op": "load", "md": base64.b64encode(agent.get_agent_metadata()).decode()})["name"] == \
            agent.name
        # The nixl-push-writer thread: PUSH_REG notifications name the decode's blocks.
        src_blocks = {"r1": [7, 8, 9], "r2": [20, 21, 22, 23, 24]}
        errors, done = [], threading.Event()

        def writer():
            try:
                seen = 0
                while seen < 2:
                    for msgs in agent.get_new_notifs().values():
                        for m in msgs:
                            text = m.decode("utf-8")
                            assert text.startswith("PUSH_REG:"), text
                            reg = json.loads(text[len("PUSH_REG:"):])
                            h = agent.make_prepped_xfer("WRITE", local_h, desc_ids(src_blocks[reg["req"]]), remote_h,
                                                        desc_ids(reg["blocks"]), notif_msg=f"{reg['req']}:1".encode())
                            agent.transfer(h)
                            wait_done(agent, h)
                            agent.get_xfer_telemetry(h)
                            agent.release_xfer_handle(h)
                            seen += 1
                    time.sleep(0.001)
            except Exception as exc:  # reported by the test
                errors.append(repr(exc))
            finally:
                done.set()
        t = threading.Thread(target=writer, name="nixl-push-writer")
        t.start()
        dst_blocks = {"r1": [0, 1, 2], "r2": list(range(25, 30))}
        big = list(range(BLOCKS)) * 400  # a long prompt's block list: tens of kB
        for req in ("r1", "r2"):
            msg = "PUSH_REG:" + json.dumps({"req": req, "blocks": dst_blocks[req], "pad": big if req == "r2" else []})
            decode.ask({"op": "send_notif", "to": agent.name, "msg": msg})
        assert done.wait(60) and errors == []
        t.join()
        got = decode.ask({"op": "notifs", "count": 2})["notifs"]
        assert sorted(got[agent.name]) == ["r1:1", "r2:1"]
        for req in ("r1", "r2"):
            assert decode.ask({"op": "digest", "blocks": dst_blocks[req]})["digests"] == me.digests(src_blocks[req])
        vllm_cleanup(agent, me, local_h, remote_name, remote_h)


@pytest.mark.parametrize("device", DEVICES)
def test_sglang_prefill_writes_kv_and_aux_into_decode(device):
    with peer_process("sglang", device) as (nx, torch, decode):
        # NixlKVManager.__init__ (prefill).
        agent = nx.nixl_agent(str(uuid.uuid4()), nx.nixl_agent_config(backends=[], num_threads=8))
        agent.create_backend("UCX", {"num_threads": "8"})
        assert "UCX" in agent.get_plugin_list()
        me = Side(agent, torch, device, fill=True, flavour="sglang")
        # Decode's _register_kv_args: its agent name and metadata; _add_remote_peer.
        peer_name = decode.meta["name"]
        agent.add_remote_agent(base64.b64decode(decode.meta["md"]))
        # _init_equal_tp_prep_handle.
        per_region = [me.blocks_data([b], decode.meta["dev"]) for b in decode.meta["base_addrs"]]
        dst_prep = agent.prep_xfer_dlist(peer_name, np.vstack(per_region), decode.meta["mem"])
        src_prep = agent.prep_xfer_dlist("", me.blocks_data(), me.mem)
        assert dst_prep is not None and src_prep is not None
        room, src_blocks, dst_blocks = 4711, [1, 2, 3, 17], [30, 29, 0, 5]
        handles = []
        # _send_kvcache_generic: int32 indices, notification positional.
        h = agent.make_prepped_xfer("WRITE", src_prep, desc_ids(src_blocks, np.int32), dst_prep,
                                    desc_ids(dst_blocks, np.int32), f"{room}_kv_0_1_0".encode("ascii"))
        if not h:
            raise RuntimeError("make_prepped_xfer")
        if agent.transfer(h) == "ERR":
            raise RuntimeError("transfer")
        handles.append(h)
        # send_kvcache_staged-like window: initialize_xfer with int64 rows and no notification.
        src = np.array([[me.regions[0][8].data_ptr(), me.block_len, me.dev]], dtype=np.int64)
        dst = np.array([[decode.meta["base_addrs"][0] + 9 * me.block_len, me.block_len, decode.meta["dev"]]],
                       dtype=np.int64)
        h2 = agent.initialize_xfer("WRITE", agent.get_xfer_descs(src, me.mem),
                                   agent.get_xfer_descs(dst, decode.meta["mem"]), peer_name, b"")
        if not h2 or agent.transfer(h2) == "ERR":
            raise RuntimeError("transfer")
        handles.append(h2)
        # transfer_worker threads polling the same handles at once.
        states, errors = {}, []

        def worker(k):
            try:
                while True:
                    s = [agent.check_xfer_state(x) for x in handles]
                    if "ERR" in s:
                        raise RuntimeError("ERR")
                    if all(x == "DONE" for x in s):
                        states[k] = s
                        return
                    time.sleep(0)
            except Exception as exc:
                errors.append(repr(exc))
        workers = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert errors == [] and len(states) == 3
        # Non-owner PP ranks: the aux notification alone.
        agent.send_notif(peer_name, f"{room}_aux".encode("ascii"))
        got = decode.ask({"op": "notifs", "count": 2})["notifs"][agent.name]
        assert got == [f"{room}_kv_0_1_0", f"{room}_aux"]
        assert got[0].split("_", 8) == [str(room), "kv", "0", "1", "0"]
        assert decode.ask({"op": "digest", "blocks": dst_blocks})["digests"] == me.digests(src_blocks)
        d9 = decode.ask({"op": "digest", "blocks": [9]})["digests"][0]
        assert d9 == me.digests([8])[0]
        release = getattr(agent, "release_xfer_handle", None)
        for x in handles:
            release(x)
