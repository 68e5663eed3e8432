#!/usr/bin/env python3
"""Runs commands side by side and reports the CPU time they and some running processes spent.

  run_timed.py [--watch PID[,PID...]] --out PREFIX -- CMD [CMD...]

Each CMD is one shell-quoted string, started at once with the others; its standard output goes
to PREFIX.<i> and its standard error to PREFIX.<i>.err (i counts from 0). --watch names processes
that are already running (a server): the CPU time they spend while the commands run is counted
as the other side's. Prints one JSON object:

  {"wall_s": ..., "cpu_s": ..., "watched_cpu_s": ..., "rc": [...]}

cpu_s is the user + system time of the commands and everything they started (getrusage of the
children); watched_cpu_s the growth of utime + stime in /proc/PID/stat of the watched processes.
Cores busy = cpu_s / wall_s. Used by the bench/*.sh scripts; exits 0 even when a command fails
(the caller reads rc).
"""
import json
import os
import resource
import shlex
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """utime + stime of a running process, all its threads (seconds); 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return 0.0
    fields = s[s.rindex(")") + 2:].split()
    # After the command name: state is field 3 of stat(5); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / TICK


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv):
    watch, out, cmds = [], None, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--watch":
            watch = [int(p) for p in argv[i + 1].split(",") if p]
            i += 2
        elif a == "--out":
            out = argv[i + 1]
            i += 2
        elif a == "--":
            cmds = argv[i + 1:]
            break
        else:
            sys.exit(f"run_timed.py: unknown argument {a!r}")
    if not out or not cmds:
        sys.exit(__doc__)
    w0 = [proc_cpu(p) for p in watch]
    c0 = children_cpu()
    t0 = time.monotonic()
    procs = []
    for k, c in enumerate(cmds):
        procs.append(subprocess.Popen(shlex.split(c), stdout=open(f"{out}.{k}", "w"),
                                      stderr=open(f"{out}.{k}.err", "w")))
    rcs = [p.wait() for p in procs]
    wall = time.monotonic() - t0
    cpu = children_cpu() - c0
    watched = sum(proc_cpu(p) for p in watch) - sum(w0)
    print(json.dumps({"wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "watched_cpu_s": round(watched, 4),
                      "rc": rcs}))


if __name__ == "__main__":
    main(sys.argv[1:])
