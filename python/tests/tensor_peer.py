"""The peer process of test_tensors.py and test_nixl.py's CUDA cases: holds a
paged KV cache (LAYERS tensors of [BLOCKS, BLOCK_TOKENS, HEADS, DIM]) on the
device given, registers it with hawser.tensors, prints one JSON line with its
segment name and the tensors' descriptions, then answers commands, one JSON
object a line on stdin:

  {"op": "digest", "layer": k, "blocks": [ids]} -> {"digest": sha256 of those blocks' bytes}
  {"op": "fill", "seed": s}                      -> {"ok": true}   (every layer: a known pattern)
  {"op": "quit"}
"""
import json
import sys

import torch

import hawser
from peer_loop import blocks_digest, serve


def pattern(shape, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 120, shape, generator=g, dtype=torch.int16).to(dtype).to(device)


def main():
    device, dtype_name, layers, blocks, tokens, heads, dim = sys.argv[1:8]
    dtype = getattr(torch, dtype_name)
    shape = (int(blocks), int(tokens), int(heads), int(dim))
    cache = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(int(layers))]
    engine = hawser.TransferEngine()
    if engine.initialize("127.0.0.1", "P2PHANDSHAKE", "", "") != 0:
        print(json.dumps({"error": hawser.last_error()}), flush=True)
        return 1
    for t in cache:
        if engine.register_tensor(t) != 0:
            print(json.dumps({"error": hawser.last_error()}), flush=True)
            return 1
    print(json.dumps({"segment": engine.get_segment_name(),
                      "layers": [hawser.tensor_desc(t) for t in cache]}), flush=True)
    def fill(cmd):
        for k, t in enumerate(cache):
            t.copy_(pattern(shape, dtype, device, cmd["seed"] + k))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return {"ok": True}
    serve({"digest": lambda cmd: {"digest": blocks_digest(torch, cache[cmd["layer"]], cmd["blocks"])},
           "fill": fill})
    for t in cache:
        engine.unregister_tensor(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
