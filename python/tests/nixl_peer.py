"""The other process of test_connectors_nixl.py: one side of a disaggregated
deployment speaking NIXL's Python API through hawser.nixl, set up the way the
connector does it (argv[1] = "vllm" or "sglang"): an agent named by a uuid,
a paged KV cache (LAYERS x (K, V) regions of [BLOCKS, 16, 2, 32] bfloat16 on
argv[2], "cpu" or "cuda:N") filled with a known pattern and registered from
a list of (addr, len, dev, "") tuples. The side channel (ZMQ/HTTP in the
connectors) is stdin/stdout, one JSON object a line; metadata travels base64.

First line: {"name", "md", "base_addrs", "num_blocks", "block_len", "dev", "mem"}
Commands:   {"op": "load", "md"}                  -> {"name"}      add_remote_agent
            {"op": "digest", "blocks": [ids]}     -> {"digests"}  per region, those blocks' bytes
            {"op": "notifs", "count": n}          -> {"notifs": {name: [str]}}  waits for n (get_new_notifs)
            {"op": "send_notif", "to", "msg"}     -> {"ok"}
            {"op": "quit"}
"""
import base64
import json
import sys
import time
import uuid

import torch

from hawser.nixl import nixl_agent, nixl_agent_config  # was: from nixl._api import ...
from peer_loop import blocks_digest, serve

LAYERS, BLOCKS, SHAPE = 2, 32, (16, 2, 32)


def main():
    flavour, device = sys.argv[1], sys.argv[2]
    if flavour == "vllm":
        # NixlBaseConnectorWorker.__init__
        agent = nixl_agent(str(uuid.uuid4()), nixl_agent_config(num_threads=4, capture_telemetry=True))
    else:
        # NixlKVManager.__init__: no backend in the config, then create_backend and a plugin check
        agent = nixl_agent(str(uuid.uuid4()), nixl_agent_config(backends=[], num_threads=8))
        agent.create_backend("UCX", {"num_threads": "8"})
        if "UCX" not in agent.get_plugin_list():
            raise RuntimeError("UCX backend missing")
    g = torch.Generator().manual_seed(1234)
    regions = [torch.randint(-100, 100, (BLOCKS, *SHAPE), generator=g, dtype=torch.int16).to(torch.bfloat16)
               .to(device) for _ in range(2 * LAYERS)]
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    dev = torch.device(device).index or 0
    mem = "VRAM" if device.startswith("cuda") else "DRAM"
    block_len = regions[0][0].numel() * regions[0].element_size()
    caches = [(t.data_ptr(), t.numel() * t.element_size(), dev, "") for t in regions]
    if flavour == "vllm":
        agent.register_memory(agent.get_reg_descs(caches, mem), backends=["UCX"])
    else:
        if not agent.register_memory(caches, mem):
            raise RuntimeError("register_memory failed")
    print(json.dumps({"name": agent.name, "md": base64.b64encode(agent.get_agent_metadata()).decode(),
                      "base_addrs": [t.data_ptr() for t in regions], "num_blocks": BLOCKS,
                      "block_len": block_len, "dev": dev, "mem": mem}), flush=True)
    pending = {}

    def notifs(cmd):
        nonlocal pending
        deadline = time.monotonic() + 30
        while sum(len(v) for v in pending.values()) < cmd["count"] and time.monotonic() < deadline:
            for name, msgs in agent.get_new_notifs().items():
                pending.setdefault(name, []).extend(m.decode("utf-8") for m in msgs)
            time.sleep(0.001)
        out, pending = {"notifs": pending}, {}
        return out

    def send_notif(cmd):
        agent.send_notif(cmd["to"], notif_msg=cmd["msg"].encode())
        return {"ok": True}
    serve({"load": lambda cmd: {"name": agent.add_remote_agent(base64.b64decode(cmd["md"])).decode()},
           "digest": lambda cmd: {"digests": [blocks_digest(torch, t, cmd["blocks"]) for t in regions]},
           "notifs": notifs, "send_notif": send_notif})
    return 0


if __name__ == "__main__":
    sys.exit(main())
