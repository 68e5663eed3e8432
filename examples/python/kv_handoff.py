"""Prefill -> decode KV handoff with PyTorch and hawser.

A small decoder-only transformer (random weights, fixed seed) serves one
request in two processes, as a disaggregated deployment does:

  prefill process   runs the prompt, writes its K/V into a paged KV cache
                    (blocks chosen by its own block table), then moves every
                    block of every layer to the decode process as ONE hawser
                    block request (transfer_tensor_blocks), and a notification
                    (request id, first token) that arrives after the bytes;
  decode process    has its own paged cache and its own block table, waits for
                    the notification, then generates the rest of the answer
                    from the received KV.

The decode output is checked against the same model run in one process.

    python3 examples/python/kv_handoff.py [--device cpu|cuda] [--tokens N]
    (PYTHONPATH=build/python from the source tree)

Exit 0 and "decode output matches" when the handoff is exact.
"""
import argparse
import json
import math
import multiprocessing as mp
import sys
import time

import torch

import hawser

VOCAB, D_MODEL, HEADS, LAYERS, BLOCK = 96, 64, 4, 2, 4   # BLOCK: tokens per KV block
HEAD_DIM = D_MODEL // HEADS
NUM_BLOCKS = 16                                          # blocks of each side's cache
PREFILL_BLOCKS = [5, 2, 7, 12, 1, 8, 15, 10]             # the blocks each side gives the request, in order
DECODE_BLOCKS = [9, 3, 14, 0, 6, 11, 4, 13]


class TinyLM(torch.nn.Module):
    """Pre-norm transformer decoder with a paged KV cache."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(2024)

        def w(*shape):
            return torch.nn.Parameter(torch.randn(*shape, generator=g) / math.sqrt(shape[-1]))
        self.embed = w(VOCAB, D_MODEL)
        self.pos = w(256, D_MODEL)
        self.qkv = torch.nn.ParameterList([w(3 * D_MODEL, D_MODEL) for _ in range(LAYERS)])
        self.out = torch.nn.ParameterList([w(D_MODEL, D_MODEL) for _ in range(LAYERS)])
        self.up = torch.nn.ParameterList([w(4 * D_MODEL, D_MODEL) for _ in range(LAYERS)])
        self.down = torch.nn.ParameterList([w(D_MODEL, 4 * D_MODEL) for _ in range(LAYERS)])

    def forward(self, tokens, start, cache, table):
        """tokens at positions start.. ; writes their K/V into `cache` (per
        layer a (K, V) pair of [NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM]) at the
        slots `table` (this request's blocks) gives; returns the logits."""
        n = tokens.shape[0]
        pos = torch.arange(start, start + n, device=tokens.device)
        x = self.embed[tokens] + self.pos[pos]
        for i in range(LAYERS):
            h = torch.nn.functional.layer_norm(x, (D_MODEL,))
            q, k, v = (h @ self.qkv[i].T).view(n, 3, HEADS, HEAD_DIM).unbind(1)
            kc, vc = cache[i]
            blocks, slots = table[pos // BLOCK], pos % BLOCK
            kc[blocks, slots], vc[blocks, slots] = k, v
            # Attend over every position so far, gathered through the block table.
            total = start + n
            allpos = torch.arange(total, device=tokens.device)
            keys = kc[table[allpos // BLOCK], allpos % BLOCK]      # [total, HEADS, HEAD_DIM]
            vals = vc[table[allpos // BLOCK], allpos % BLOCK]
            att = torch.einsum("qhd,khd->hqk", q, keys) / math.sqrt(HEAD_DIM)
            mask = allpos[None, :] > pos[:, None]
            att = att.masked_fill(mask[None], float("-inf")).softmax(-1)
            x = x + torch.einsum("hqk,khd->qhd", att, vals).reshape(n, D_MODEL) @ self.out[i].T
            h = torch.nn.functional.layer_norm(x, (D_MODEL,))
            x = x + torch.nn.functional.gelu(h @ self.up[i].T) @ self.down[i].T
        return torch.nn.functional.layer_norm(x, (D_MODEL,)) @ self.embed.T


def new_cache(device):
    return [(torch.zeros(NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM, device=device),
             torch.zeros(NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM, device=device)) for _ in range(LAYERS)]


def flat(cache):
    """The cache as the list of tensors hawser moves: layer 0 K, layer 0 V, layer 1 K, ..."""
    return [t for kv in cache for t in kv]


def engine_for(cache):
    """A hawser engine (p2p, the transport chosen per request) with `cache` registered."""
    engine = hawser.TransferEngine(raise_on_error=True)
    engine.initialize("127.0.0.1", "P2PHANDSHAKE", "", "")
    for t in flat(cache):
        engine.register_tensor(t)
    return engine


@torch.no_grad()
def generate(model, cache, table, prompt_len, first, tokens_wanted, device):
    """Greedy decoding from a cache holding the prompt's K/V; `first` is the
    token the prefill produced."""
    out = [first]
    while len(out) < tokens_wanted:
        logits = model(torch.tensor([out[-1]], device=device), prompt_len + len(out) - 1, cache, table)
        out.append(int(logits[-1].argmax()))
    return out


@torch.no_grad()
def single_process(prompt, tokens_wanted, device):
    model = TinyLM().to(device)
    cache, table = new_cache(device), torch.arange(NUM_BLOCKS, device=device)
    logits = model(prompt, 0, cache, table)
    return generate(model, cache, table, len(prompt), int(logits[-1].argmax()), tokens_wanted, device)


def decode_worker(conn, device, tokens_wanted):
    """The decode process: its cache and engine; publishes where its blocks
    are, waits for the notification, generates."""
    model = TinyLM().to(device)
    cache = new_cache(device)
    engine = engine_for(cache)
    # Its own block table for the request: blocks this side has free.
    conn.send({"segment": engine.get_segment_name(), "cache": [hawser.tensor_desc(t) for t in flat(cache)],
               "free_blocks": DECODE_BLOCKS})
    deadline = time.monotonic() + 60
    while True:
        got = engine.get_notifies()
        if got:
            break
        if time.monotonic() > deadline:
            conn.send({"error": "no notification from the prefill"})
            return
        time.sleep(0.001)
    note = json.loads(got[0].msg)
    # The request's table: the blocks the prompt's K/V arrived in, then more for the answer.
    table = torch.zeros(NUM_BLOCKS, dtype=torch.long, device=device)
    rest = [b for b in DECODE_BLOCKS if b not in note["blocks"]]
    table[: len(DECODE_BLOCKS)] = torch.tensor(note["blocks"] + rest, device=device)
    out = generate(model, cache, table, note["prompt_len"], note["first"], tokens_wanted, device)
    conn.send({"request": got[0].name, "tokens": out})
    for t in flat(cache):
        engine.unregister_tensor(t)


@torch.no_grad()
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=12, help="tokens to generate")
    ap.add_argument("--prompt-len", type=int, default=11)
    args = ap.parse_args(argv)
    if args.prompt_len + args.tokens > BLOCK * len(DECODE_BLOCKS) or args.prompt_len < 1:
        ap.error(f"prompt-len + tokens must be at most {BLOCK * len(DECODE_BLOCKS)}")
    device = args.device
    prompt = torch.randint(0, VOCAB, (args.prompt_len,), generator=torch.Generator().manual_seed(7)).to(device)
    expected = single_process(prompt, args.tokens, device)

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    decode = ctx.Process(target=decode_worker, args=(there, device, args.tokens))
    decode.start()
    peer = here.recv()

    # The prefill: its own block table (blocks 5, 2, 7 of its cache), the prompt's K/V written there.
    model = TinyLM().to(device)
    cache = new_cache(device)
    engine = engine_for(cache)
    n_blocks = -(-args.prompt_len // BLOCK)
    table = torch.zeros(NUM_BLOCKS, dtype=torch.long, device=device)
    table[:n_blocks] = torch.tensor(PREFILL_BLOCKS[:n_blocks], device=device)
    logits = model(prompt, 0, cache, table)
    first = int(logits[-1].argmax())
    if device.startswith("cuda"):
        torch.cuda.synchronize()  # the K/V are in memory before they are moved

    # One block request: every layer's K and V, this request's blocks -> the decode's blocks;
    # then the notification, which arrives after the bytes.
    dst_blocks = peer["free_blocks"][:n_blocks]
    note = json.dumps({"prompt_len": args.prompt_len, "first": first, "blocks": dst_blocks})
    engine.transfer_tensor_blocks(peer["segment"], flat(cache), table[:n_blocks], peer["cache"],
                                  torch.tensor(dst_blocks), hawser.Write,
                                  notify=hawser.TransferNotify("req-0", note))
    result = here.recv()
    decode.join(60)
    if "error" in result:
        print(f"kv_handoff: {result['error']}")
        return 1
    print(f"device {device}: prompt {args.prompt_len} tokens, {n_blocks} blocks x {2 * LAYERS} tensors moved")
    print(f"single process : {expected}")
    print(f"prefill/decode : {result['tokens']} (request {result['request']})")
    if result["tokens"] != expected:
        print("kv_handoff: decode output differs from the single-process run")
        return 1
    print("decode output matches the single-process run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
