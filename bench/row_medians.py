"""Medians of a bench script's rounds, grouped by their first two fields.

Each row is one round as a space-separated string: two key fields (block
size, op) then numbers. groups() yields, in first-seen order, each key and
a function m(k) giving the median of field k over that key's rounds.
"""
import statistics


def groups(rows):
    split = [r.split() for r in rows]
    keys = []
    for r in split:
        if (r[0], r[1]) not in keys:
            keys.append((r[0], r[1]))
    for key in keys:
        sel = [r for r in split if (r[0], r[1]) == key]
        yield key, (lambda k, sel=sel: statistics.median(float(r[k]) for r in sel))
