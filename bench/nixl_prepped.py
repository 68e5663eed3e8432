"""What hawser.nixl costs per call on the host: prep_xfer_dlist of N
descriptors, make_prepped_xfer choosing K of them by index, and a
transfer() until "DONE" (two agents in one process; DRAM; the engine picks
the transport). Prints one JSON line of medians in microseconds.

    PYTHONPATH=build/python python3 bench/nixl_prepped.py [--rows 20000] [--pick 15000] [--block 4096] [--rounds 20]
    (--device cuda:0 puts both pools on a GPU)
"""
import argparse
import json
import statistics
import time

import numpy as np

from hawser.nixl import nixl_agent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--pick", type=int, default=15000)
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    size = args.rows * args.block
    if args.device == "cpu":
        pa, pb = np.ones(size, dtype=np.uint8), np.zeros(size, dtype=np.uint8)
        base_a, base_b, mem, dev = pa.ctypes.data, pb.ctypes.data, "DRAM", 0
    else:
        import torch
        pa = torch.ones(size, dtype=torch.uint8, device=args.device)
        pb = torch.zeros(size, dtype=torch.uint8, device=args.device)
        base_a, base_b, mem, dev = pa.data_ptr(), pb.data_ptr(), "VRAM", pa.device.index or 0
    a, b = nixl_agent("bench-a"), nixl_agent("bench-b")
    a.register_memory([(base_a, size, dev, "")], mem)
    b.register_memory([(base_b, size, dev, "")], mem)
    a.add_remote_agent(b.get_agent_metadata())
    offs = np.arange(args.rows, dtype=np.uint64) * args.block
    rows = lambda base: np.stack([offs + base, np.full(args.rows, args.block, np.uint64),
                                  np.full(args.rows, dev, np.uint64)], axis=1)
    prep, make, xfer = [], [], []
    rng = np.random.default_rng(1)
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        lh = a.prep_xfer_dlist("NIXL_INIT_AGENT", rows(base_a), mem)
        rh = a.prep_xfer_dlist("bench-b", rows(base_b), mem)
        t1 = time.perf_counter()
        li, ri = rng.permutation(args.rows)[:args.pick], rng.permutation(args.rows)[:args.pick]
        t2 = time.perf_counter()
        h = a.make_prepped_xfer("WRITE", lh, li, rh, ri, notif_msg=b"n")
        t3 = time.perf_counter()
        a.transfer(h)
        while a.check_xfer_state(h) != "DONE":
            pass
        t4 = time.perf_counter()
        prep.append((t1 - t0) / 2 * 1e6)
        make.append((t3 - t2) * 1e6)
        xfer.append((t4 - t3) * 1e6)
        a.release_xfer_handle(h)
    mb = args.pick * args.block / 1e6
    print(json.dumps({"rows": args.rows, "pick": args.pick, "block": args.block, "device": args.device,
                      "prep_xfer_dlist_us": round(statistics.median(prep)),
                      "make_prepped_xfer_us": round(statistics.median(make)),
                      "transfer_until_done_us": round(statistics.median(xfer)),
                      "GB_per_s": round(mb / statistics.median(xfer) * 1e6 / 1e3, 2)}))


if __name__ == "__main__":
    main()
