#!/usr/bin/env bash
# The main job: install what is missing, build, then move data between two
# local processes (a `hawser serve` target and a `hawser bench` initiator)
# over the engine, verified, and print the throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh release
bin=build/bin/hawser
out=$(mktemp)
trap 'kill $serve_pid 2>/dev/null || true; rm -f "$out"' EXIT
"$bin" serve --listen 127.0.0.1:0 --memory 1G >"$out" &
serve_pid=$!
for _ in $(seq 100); do grep -q '^ready' "$out" && break; sleep 0.1; done
seg=$(sed -n 's/^segment: //p' "$out")
[ -n "$seg" ] || { echo "hawser serve did not start" >&2; cat "$out" >&2; exit 1; }
echo "== target $seg: writing 2 GiB then reading 2 GiB, 1 MiB blocks, verified =="
"$bin" bench --target "$seg" --op write --block-size 1M --batch-size 32 --threads 2 --total 2G
"$bin" bench --target "$seg" --op read --block-size 1M --batch-size 32 --threads 2 --total 2G
