"""What the child processes of the tests share: the command loop of their
side channel (one JSON object a line) and the digest of tensor blocks."""
import hashlib
import json
import sys


def blocks_digest(torch, t, ids):
    """sha256 of blocks `ids` (dim 0) of tensor t, as bytes, wherever t lives."""
    idx = torch.tensor(ids, dtype=torch.long, device=t.device)
    return hashlib.sha256(t[idx].contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def serve(handlers):
    """Answers commands from stdin until {"op": "quit"}: handlers[op](cmd) -> reply dict."""
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            return
        handler = handlers.get(cmd["op"])
        print(json.dumps(handler(cmd) if handler else {"error": f"unknown op {cmd['op']}"}), flush=True)
