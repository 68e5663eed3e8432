#!/usr/bin/env bash
# What registering memory costs, in ms per GiB, and how long after init() the
# first transfer from it completes: host memory of 1, 4 and 16 GiB, untouched
# (freshly mapped) and touched (every page written first), and GPU memory
# when a CUDA driver and a GPU are present (skipped with the reason
# otherwise). Each measurement is a fresh target engine in the helper
# bench/registration_rate.cpp (built by bench/CMakeLists.txt into bin/); the
# first transfer is a 4 KiB read of the region's last page by a second engine
# of the same process. Prints one line per measurement, then the worst
# ms/GiB of each kind against the limit of 5 ms/GiB, and exits 1 when host
# memory exceeds it.
#
# Usage: bench/registration.sh              (from the repository root)
# Environment (all optional):
#   SIZES     GiB to register            (default "1 4 16"; a size the machine cannot map is skipped)
#   REPEAT    measurements per case       (default 3; the median is reported)
#   LIMIT     ms per GiB allowed           (default 5)
#   REGISTRATION_RATE  path of the helper (default: build/bin/registration_rate, then build-*/bin/)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
SIZES=${SIZES:-"1 4 16"}
REPEAT=${REPEAT:-3}
LIMIT=${LIMIT:-5}
helper=${REGISTRATION_RATE:-$(find_bin registration_rate)}
[[ -x "$helper" ]] || { echo "registration_rate not built (cmake --build build --target registration_rate)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to read the results" >&2; exit 2; }

results=$(mktemp /tmp/hawser-registration-XXXXXX)
trap 'rm -f "$results"' EXIT

# One size at a time, so that a touched region is freed before the next.
for size in $SIZES; do
  for touched in 0 1; do
    for _ in $(seq "$REPEAT"); do
      "$helper" --kind host --touched "$touched" --sizes "$size" >>"$results" || true
    done
  done
done
gpu_sizes=$(echo "$SIZES" | tr ' ' ',')
for touched in 0 1; do
  "$helper" --kind gpu --touched "$touched" --sizes "$gpu_sizes" >>"$results" || true
done

python3 - "$results" "$LIMIT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
limit = float(sys.argv[2])
cases, skipped = {}, []
for r in rows:
    if "skipped" in r:
        skipped.append(r)
        continue
    cases.setdefault((r["kind"], r["touched"], r["gib"]), []).append(r)
print(f"{'memory':<6} {'pages':<9} {'GiB':>4} {'register ms':>12} {'ms/GiB':>8} {'first transfer ms':>18} transport")
worst = {}
for (kind, touched, gib), rs in sorted(cases.items()):
    med = lambda k: statistics.median(r[k] for r in rs)
    per = med("ms_per_gib")
    worst[kind] = max(worst.get(kind, 0), per)
    print(f"{kind:<6} {'touched' if touched else 'untouched':<9} {gib:>4g} {med('register_ms'):>12.3f} {per:>8.3f} "
          f"{med('first_transfer_ms'):>18.3f} {rs[0]['transport']}")
seen = set()
for s in skipped:
    why = s["skipped"]
    if (s["kind"], why) in seen:
        continue
    seen.add((s["kind"], why))
    print(f"{s['kind']}: skipped{' ' + str(s['gib']) + ' GiB' if 'gib' in s else ''}: {why}")
bad = False
for kind, w in sorted(worst.items()):
    print(f"{kind}: worst {w:.3f} ms/GiB, {w / limit:.4f} of the {limit:g} ms/GiB limit")
    bad |= kind == "host" and w > limit
sys.exit(1 if bad else 0)
EOF
