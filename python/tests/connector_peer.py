"""The other side of test_connectors.py, run as a child process: the decode
worker of a disaggregated deployment, doing what vLLM's and SGLang's Mooncake
connectors do on that side (initialize with their defaults, register a KV
pool, publish host:rpc_port and the pool's addresses), then answering the
test's questions about its memory. The side channel (ZMQ in the connectors)
is this process's stdin/stdout, one JSON object per line.

Commands: {"op": "digest", "ranges": [[addr, len], ...]} -> {"digests": [...]}
          {"op": "notifies"} -> {"notifies": [[name, msg], ...]}
          {"op": "quit"}
"""
import ctypes
import hashlib
import json
import sys

from hawser.mooncake import TransferEngine  # the one line a Mooncake connector changes


def main():
    layers, blocks, block_len = (int(x) for x in sys.argv[1:4])
    engine = TransferEngine()
    # vLLM: initialize(self.hostname, "P2PHANDSHAKE", protocol="rdma" by default, "")
    if engine.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") != 0:
        print(json.dumps({"error": "initialize failed"}), flush=True)
        return 1
    # One region per layer: the KV cache tensors the connector registers.
    pool = [ctypes.create_string_buffer(blocks * block_len) for _ in range(layers)]
    addrs = [ctypes.addressof(p) for p in pool]
    if engine.batch_register_memory(addrs, [blocks * block_len] * layers) != 0:
        print(json.dumps({"error": "batch_register_memory failed"}), flush=True)
        return 1
    print(json.dumps({"remote_hostname": "127.0.0.1", "remote_port": engine.get_rpc_port(),
                      "kv_caches_base_addr": addrs, "block_len": block_len}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "digest":
            out = {"digests": [hashlib.sha256(ctypes.string_at(a, n)).hexdigest() for a, n in cmd["ranges"]]}
        elif cmd["op"] == "notifies":
            out = {"notifies": [[n.name, n.msg] for n in engine.get_notifies()]}
        elif cmd["op"] == "quit":
            break
        else:
            out = {"error": f"unknown op {cmd['op']}"}
        print(json.dumps(out), flush=True)
    engine.batch_unregister_memory(addrs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
