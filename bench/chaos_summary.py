#!/usr/bin/env python3
"""The summary of bench/chaos_soak.sh: reads its folder, prints the figures
and the verdict, exits 0 when the run passed.

Usage: chaos_summary.py DIR SECONDS QUIET_SECONDS STUCK_AT_EXIT

DIR holds faults.jsonl (one fault a line: kind, target, start, end in epoch
ms), samples.txt ("ms name incarnation pid rss_kb fds" per sample) and
node-N.K.log (incarnation K of node N: chaos_node's JSON lines).
"""
import glob
import json
import os
import statistics
import sys

GRACE_MS = 15000  # a failure this long after a fault ended is still its doing (timeouts + reconnect)
WARMUP_MS = 20000  # samples of a process's first 20 s are not judged (allocations settle)
RSS_GROWTH_KB = 8 * 1024  # flat: last third's mean RSS at most this much (or 10 %) over the first third's
# flat: last third's mean descriptor count at most this many over the first third's (the data
# connections to and from two peers, 2 x 2 x 2, come and go with the faults)
FD_GROWTH = 8


def load(path):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def signals(logs, faults, run_end):
    """Every write carries a signal its receiver waits on (chaos_node.cpp).
    A signal sent (sig_sent) is matched with the end of its receiver's wait
    (sig_end: the same sender, receiver incarnation and ticket). Unmatched,
    it is a stuck waiter, unless its receiver's incarnation ended or the run
    did within GRACE_MS (past any fault on either end) of it, or the ticket
    had ended before it was sent (read twice before its waiter moved on).
    Returns (sent, ended, stuck, latencies of FAILED waits in ms)."""
    seg_of, inc_of, life = {}, {}, {}
    for (name, k), evs in logs.items():
        for e in evs:
            if e.get("ev") == "ready":
                seg_of[e["segment"]] = name
                inc_of[e["inc"]] = (name, k)
        ts = [e["t"] for e in evs if "t" in e]
        if ts:
            life[(name, k)] = (min(ts), max(ts))
    sent, ends = [], {}
    for evs in logs.values():
        for e in evs:
            if e.get("ev") == "sig_sent":
                sent.append(e)
            elif e.get("ev") == "sig_end":
                ends.setdefault((seg_of.get(e["peer"], e["peer"]), e["node"], e["inc"], e["ticket"]), []).append(e)

    def fault_end(targets, t):
        """The end of the last fault on `targets` that overlaps [t, t + GRACE_MS], or t."""
        end = t
        for f in faults:
            if f["target"] in targets and f["start"] <= end + GRACE_MS and f["end"] >= t:
                end = max(end, f["end"])
        return end

    stuck, latencies, matched = [], [], 0
    for s in sent:
        receiver = seg_of.get(s["peer"], s["peer"])
        key = (s["node"], receiver, s["peer_inc"], s["ticket"])
        got = [e for e in ends.get(key, []) if e["t"] >= s["t_submit"]]
        if got:
            matched += 1
            e = got[0]
            if e["state"] == "FAILED":
                # Seen after: from what caused it (the initiator's own failure,
                # or the latest fault on either end), or from the wait's start.
                causes = [f["start"] for f in faults
                          if f["target"] in (s["node"], receiver) and f["start"] <= e["t"]]
                cause = max([s["t"]] + [c for c in causes if c >= s["t_submit"] - 1000]) \
                    if e["reason"] != "PEER_LOST" or not causes else max(max(causes), e["start"])
                latencies.append(max(0, e["t"] - min(cause, e["t"])))
            continue
        if any(e["t"] < s["t_submit"] for e in ends.get(key, [])):
            continue  # the ticket had ended already: nobody waits for this one
        bound = fault_end({s["node"], receiver, "etcd"}, s["t"]) + GRACE_MS
        r = inc_of.get(s["peer_inc"])
        if r is None or life.get(r, (0, 0))[1] < bound or run_end < bound:
            continue  # its receiver (this incarnation) or the run ended first
        stuck.append(s)
    return len(sent), matched, stuck, latencies


def main():
    d, seconds, quiet, stuck = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    faults = load(os.path.join(d, "faults.jsonl")) if os.path.exists(os.path.join(d, "faults.jsonl")) else []
    logs = {}
    for p in sorted(glob.glob(os.path.join(d, "node-*.log"))):
        name, inc = os.path.basename(p)[:-4].rsplit(".", 1)
        logs[(name, int(inc))] = load(p)

    bytes_verified = rounds = disturbed = 0
    hangs, mismatches, fails, inits = [], [], [], []
    last_stats = {}
    for (name, inc), evs in logs.items():
        final = None
        for e in evs:
            ev = e.get("ev")
            if ev == "stats":
                final = e
                last_stats.setdefault(name, []).append(e)
            elif ev == "fail":
                fails.append(e)
            elif ev == "hang":
                hangs.append(e)
            elif ev == "mismatch":
                mismatches.append(e)
            elif ev == "init_failed":
                inits.append(e)
        if final:
            bytes_verified += final["bytes_verified"]
            rounds += final["rounds"]
            disturbed += final["disturbed"]
    late = sum(m["late_bytes"] for m in mismatches)

    # The engines start together but publish one by one: until an engine's
    # first incarnation is ready, peers may not find it. Its start is a
    # window like a fault's (not counted as one).
    run_start = min((e["t"] for evs in logs.values() for e in evs if "t" in e), default=0)
    starts = []
    for (name, inc), evs in logs.items():
        ready = [e["t"] for e in evs if e.get("ev") == "ready"]
        if inc == 1 and ready:
            starts.append({"kind": "start", "target": name, "start": run_start, "end": ready[0]})
    corrupt = sum(m["corrupt_bytes"] for m in mismatches)

    # Every failure should fall in (or just after) a fault on its node, its peer, or etcd.
    def explained(e, targets):
        t = e["t"]
        return any(f["target"] in targets and f["start"] - 500 <= t <= f["end"] + GRACE_MS for f in faults + starts)

    unexplained = [e for e in fails if not explained(e, {e["node"], e.get("peer"), "etcd"})]
    unexplained_inits = [e for e in inits if not explained(e, {e["node"], "etcd"})]
    by_code, by_step = {}, {}
    for e in fails:
        by_code[e["code"]] = by_code.get(e["code"], 0) + 1
        by_step[e["step"]] = by_step.get(e["step"], 0) + 1
    by_kind = {}
    for f in faults:
        by_kind[f["kind"]] = by_kind.get(f["kind"], 0) + 1

    # Every engine verified data again at the end of the run (the quiet tail
    # follows the last fault): its rounds grew over its last 5 s of reports.
    run_end = max((e["t"] for st in last_stats.values() for e in st), default=0)
    recovered = {}
    for name, stats in last_stats.items():
        stats.sort(key=lambda e: e["t"])
        tail = [e for e in stats if e["t"] >= run_end - 6000 and e["pid"] == stats[-1]["pid"]]
        recovered[name] = len(tail) >= 2 and tail[-1]["rounds"] > tail[0]["rounds"]

    # RSS and descriptors per process incarnation.
    series = {}
    with open(os.path.join(d, "samples.txt")) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 6:
                continue
            t, name, inc, pid, rss, fds = int(parts[0]), parts[1], int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5])
            series.setdefault((name, inc, pid), []).append((t, rss, fds))
    judged, not_flat = [], []
    for key, s in sorted(series.items()):
        name = key[0]
        if name == "etcd":
            continue  # shown, not judged: not ours
        t0 = s[0][0]
        post = [x for x in s if x[0] - t0 >= WARMUP_MS]
        if len(post) < 9:
            continue
        k = len(post) // 3
        first, last = post[:k], post[-k:]
        rss_a, rss_b = statistics.mean(x[1] for x in first), statistics.mean(x[1] for x in last)
        fd_a, fd_b = statistics.mean(x[2] for x in first), statistics.mean(x[2] for x in last)
        ok = rss_b - rss_a <= max(RSS_GROWTH_KB, 0.10 * rss_a) and fd_b - fd_a <= FD_GROWTH
        span = (post[-1][0] - post[0][0]) / 1000
        judged.append((key, span, rss_a, rss_b, fd_a, fd_b, ok))
        if not ok:
            not_flat.append(key)

    print()
    print("== chaos soak summary ==")
    print(f"run: {seconds} s, faults: {len(faults)} ({', '.join(f'{k} {v}' for k, v in sorted(by_kind.items()))}), "
          f"last {quiet} s without faults")
    print(f"bytes verified: {bytes_verified} ({bytes_verified / 1e9:.2f} GB) in {rounds} verified rounds")
    print(f"rounds failed by an injected fault: {len(fails) - len(unexplained)} "
          f"(by code: {', '.join(f'{k} {v}' for k, v in sorted(by_code.items())) or 'none'}; "
          f"by step: {', '.join(f'{k} {v}' for k, v in sorted(by_step.items())) or 'none'})")
    print(f"failures no fault explains: {len(unexplained)}")
    for e in unexplained[:10]:
        print(f"  {e['node']} -> {e.get('peer')} {e['step']} {e['code']} at {e['t']}: {e['msg']}")
    print(f"engine starts that waited for etcd: {len(inits)} (unexplained: {len(unexplained_inits)})")
    print(f"rounds disturbed by a peer restart (not judged): {disturbed}")
    print(f"hangs: {len(hangs) + stuck}")
    for e in hangs[:10]:
        print(f"  {e['node']} at {e['t']}: {e['msg']}")
    print(f"corrupted bytes: {corrupt}")
    print(f"late bytes (a failed write landing later): {late}")
    rec = ", ".join(n + (" yes" if r else " NO") for n, r in sorted(recovered.items()))
    print(f"verified data in the last 5 s (recovered from every fault): {rec}")

    print("RSS (MiB) / open descriptors over time, per process incarnation (seconds since its first sample):")
    for key, s in sorted(series.items()):
        if len(s) < 3:
            continue
        n = min(10, len(s))
        idx = [round(i * (len(s) - 1) / (n - 1)) for i in range(n)] if n > 1 else [0]
        t_start = s[0][0]
        cells = "  ".join(f"{(s[i][0] - t_start) / 1000:.0f}s {s[i][1] / 1024:.1f}/{s[i][2]}" for i in idx)
        print(f"  {key[0]}#{key[1]} pid {key[2]}: {cells}")
    print("flat (last third's mean vs first third's, after warm-up; "
          f"bound +{RSS_GROWTH_KB // 1024} MiB or 10 % RSS, +{FD_GROWTH} descriptors):")
    for key, span, rss_a, rss_b, fd_a, fd_b, ok in judged:
        print(f"  {key[0]}#{key[1]} over {span:.0f} s: RSS {rss_a / 1024:.1f} -> {rss_b / 1024:.1f} MiB, "
              f"descriptors {fd_a:.1f} -> {fd_b:.1f}: {'flat' if ok else 'GROWING'}")
    if not judged:
        print("  (no process lived long enough to judge)")

    sig_sent, sig_matched, sig_stuck, sig_lat = signals(logs, faults, run_end)
    sig_failed = len(sig_lat)
    print(f"signals (one per write, waited on by its receiver): {sig_sent} sent, {sig_matched} waits ended "
          f"({sig_matched - sig_failed} COMPLETED, {sig_failed} FAILED)")
    print(f"stuck waiters: {len(sig_stuck)}")
    for e in sig_stuck[:10]:
        print(f"  {e['node']} -> {e['peer']} ticket {e['ticket']} sent at {e['t_submit']}")
    if sig_lat:
        print(f"failures seen by the receiver after (ms): p50 {percentile(sig_lat, 0.5)}, "
              f"p99 {percentile(sig_lat, 0.99)}, max {max(sig_lat)} ({len(sig_lat)} failed waits)")

    problems = []
    if sig_stuck:
        problems.append("stuck waiters")
    if hangs or stuck:
        problems.append("hangs")
    if corrupt:
        problems.append("corrupted bytes")
    if late:
        problems.append("late bytes")
    if unexplained or unexplained_inits:
        problems.append("failures no fault explains")
    if not all(recovered.values()) or not recovered:
        problems.append("an engine did not recover after the last fault")
    if not_flat:
        problems.append("RSS or descriptors growing")
    if not judged:
        problems.append("nothing lived long enough to judge RSS and descriptors")
    if bytes_verified == 0:
        problems.append("no byte verified")
    print("RESULT:", "PASS" if not problems else "FAIL (" + "; ".join(problems) + ")")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
