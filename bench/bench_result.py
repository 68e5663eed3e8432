"""Fields of one `hawser bench --json` run, for the bench scripts.

Usage: bench_result.py FILE TRANSPORT FIELD[:DIGITS]...

FILE is the bench's stdout (the JSON summary is its last line). The run must
have verified its data, and TRANSPORT ("-": any) must be the one transport
that carried it; otherwise this exits non-zero saying why. Prints the
fields on one line, space-separated, each with DIGITS decimals (default 3):
  any top-level key        gbps, p50_us, p99_us, ops_per_s, ...
  cores                    CPU seconds per second, bench + --cpu-pid process
  cpu_per_gb               CPU seconds per 10^9 bytes, the same two
  stats.TRANSPORT.COUNTER  a transport counter (0 when absent)
"""
import json
import sys


def value(d, name):
    cpu = d.get("cpu_s", 0.0) + d.get("peer_cpu_s", 0.0)
    if name == "cores":
        return cpu / d["seconds"]
    if name == "cpu_per_gb":
        return cpu / (d["gbps"] * d["seconds"])
    if name.startswith("stats."):
        _, transport, counter = name.split(".", 2)
        return d["stats"].get(transport, {}).get(counter, 0)
    return d[name]


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    path, transport, fields = argv[0], argv[1], argv[2:]
    lines = [l for l in open(path).read().splitlines() if l.strip()]
    if not lines:
        sys.exit(f"hawser bench printed nothing to {path}")
    d = json.loads(lines[-1])
    if not d.get("verified", False):
        sys.exit(f"hawser bench: data not verified: {d}")
    if transport != "-" and d.get("transports") != [transport]:
        sys.exit(f"hawser bench: carried by {d.get('transports')}, not {transport}")
    out = []
    for f in fields:
        name, _, digits = f.partition(":")
        out.append("%.*f" % (int(digits or 3), value(d, name)))
    print(" ".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
