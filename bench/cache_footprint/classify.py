"""bench/cache_footprint.sh's report: the distinct cache lines each batch touched
(from lines.cpp), by kind and by where they lie (/proc/PID/maps of the traced
process), medians over the batches of each batch size; and, across the batch
sizes, what a batch costs whatever its size and what each request adds.

Lines of 4 KiB pages the batch touched at least 60 of 64 lines of are the
blocks themselves (the bytes moved), counted apart: nothing of the engine's
fills a page in one batch. Then, for the largest batch size, the functions
whose instructions first wrote (or first read) each data line (the binary's
symbols, nm -C), means over its batches: where a leaner engine would start.

  classify.py MAPS BINARY B1:FILE1 [B2:FILE2 ...]
"""
import bisect
import os
import statistics
import subprocess
import sys


def load_maps(path):
    """Every mapping of every copy of the maps (they were read several times
    while the program ran), each with the one before it in its copy."""
    maps = set()
    prev = None
    for line in open(path):
        f = line.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        if prev and lo < prev[0]:
            prev = None  # the next copy
        name = f[5] if len(f) > 5 else ""
        maps.add((lo, hi, f[1], name, prev))
        prev = (lo, hi, f[1], name)
    return sorted(maps, key=lambda m: (m[0], m[1]))


def region(maps, binary, addr, kind):
    for lo, hi, perm, name, prev in maps:
        if lo <= addr < hi:
            break
    else:
        return "unmapped"
    if kind == "I":
        return "code: hawser" if os.path.basename(name) == os.path.basename(binary) else "code: libraries"
    if os.path.basename(name) == os.path.basename(binary):
        return "data: hawser's statics"
    if name.startswith("/memfd:"):
        return "data: shared memory (peer's table)"
    if name == "[stack]" or (prev and prev[2].startswith("---p") and prev[1] == lo and (hi - lo) >= (1 << 20)):
        return "data: stacks"
    if name and not name.startswith("["):
        return "data: libraries' statics"
    return "data: heap"


def read_batches(path):
    """lines.cpp's batches: each a list of (kind, line address, first
    instruction, whether the line is one of the blocks)."""
    batches = []
    for line in open(path):
        f = line.split()
        if f[0] == "batch":
            batches.append([])
        else:
            batches[-1].append((f[0], int(f[1], 16), int(f[2], 16) if len(f) > 2 else 0))
    out = []
    for lines in batches:
        pages = {}
        for k, a, _ in lines:
            if k != "I":
                pages[a >> 12] = pages.get(a >> 12, 0) + 1
        out.append([(k, a, ip, k != "I" and pages[a >> 12] >= 60) for k, a, ip in lines])
    return out


def main():
    maps = load_maps(sys.argv[1])
    binary = sys.argv[2]
    per_size = {}
    raw = {}
    for arg in sys.argv[3:]:
        b, path = arg.split(":", 1)
        batches = read_batches(path)
        rows = []
        for lines in batches:
            row = {"blocks": 0}
            for k, a, _, block in lines:
                if block:
                    row["blocks"] += 1
                    continue
                r = region(maps, binary, a, k)
                key = r if k == "I" else "%s (%s)" % (r, "written" if k == "W" else "read")
                row[key] = row.get(key, 0) + 1
                total = "code" if k == "I" else ("data written" if k == "W" else "data read")
                row["= " + total] = row.get("= " + total, 0) + 1
            rows.append(row)
        per_size[int(b)] = rows
        raw[int(b)] = batches
    sizes = sorted(per_size)
    keys = sorted({k for rows in per_size.values() for r in rows for k in r if k != "blocks"})
    med = {b: {k: statistics.median(r.get(k, 0) for r in per_size[b]) for k in keys + ["blocks"]} for b in sizes}
    print("distinct cache lines a batch touches (medians over %s batches)" %
          ", ".join("%d of %d requests" % (len(per_size[b]), b) for b in sizes))
    head = "%-48s" % "" + "".join("%10s" % ("B=%d" % b) for b in sizes)
    if len(sizes) > 1:
        head += "%12s%12s" % ("fixed", "a request")
    print(head)
    for k in [k for k in keys if not k.startswith("=")] + [k for k in keys if k.startswith("=")] + ["blocks"]:
        if not any(med[b][k] for b in sizes):
            continue
        line = "%-48s" % k + "".join("%10.0f" % med[b][k] for b in sizes)
        if len(sizes) > 1 and k != "blocks":
            lo, hi = sizes[0], sizes[-1]
            per = (med[hi][k] - med[lo][k]) / (hi - lo)
            line += "%12.0f%12.1f" % (med[lo][k] - per * lo, per)
        print(line)
    by_function(maps, binary, sizes[-1], raw[sizes[-1]])


def by_function(maps, binary, size, batches):
    """The data lines of batches of `size` by the function that first wrote
    (or read) them, means a batch."""
    base = next((lo for lo, hi, perm, name, prev in maps if os.path.basename(name) == os.path.basename(binary)), None)
    if base is None:
        return
    syms = []
    for line in subprocess.run(["nm", "-C", "--defined-only", binary], capture_output=True, text=True).stdout.splitlines():
        f = line.split(" ", 2)
        if len(f) == 3 and f[1] in "tTwW":
            syms.append((int(f[0], 16) + base, f[2]))
    syms.sort()
    starts = [a for a, _ in syms]
    hi = max(h for lo, h, perm, name, prev in maps if os.path.basename(name) == os.path.basename(binary))

    def name(ip):
        if not base <= ip < hi:
            return "(libraries)"
        i = bisect.bisect_right(starts, ip) - 1
        n = (syms[i][1] if i >= 0 else "?").replace("(anonymous namespace)", "{anon}")
        return n.split("(")[0][:70]

    for kind, what in (("W", "written"), ("R", "read")):
        count = {}
        for lines in batches:
            for k, a, ip, block in lines:
                if k == kind and not block:
                    n = name(ip)
                    count[n] = count.get(n, 0) + 1
        print()
        print("data lines %s a batch of %d, by the function that first %s them (means):" % (
            what, size, "wrote" if kind == "W" else "read"))
        for n, c in sorted(count.items(), key=lambda x: -x[1])[:14]:
            print("  %6.1f  %s" % (c / len(batches), n))


if __name__ == "__main__":
    main()
