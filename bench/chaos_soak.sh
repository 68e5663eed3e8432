#!/usr/bin/env bash
# Chaos soak: NODES engines (bench/chaos_node.cpp), each on a host of its own
# (a network namespace, one veth to a shared bridge), with etcd for
# metadata, move verified data to each other continuously while this script
# SIGKILLs and restarts them, SIGSTOPs them, takes their links down and
# restarts etcd, one fault after another at random. It samples every
# process's RSS and open descriptors, and prints: bytes verified, rounds
# failed by an injected fault (and any failure no fault explains), hangs,
# corrupted bytes, and RSS and descriptors over time.
#
# Exit status 0 only when: hangs = 0, corrupted bytes = 0, every failure
# falls in or just after a fault on its node, its peer or etcd, every engine
# verified data again after the last fault, and each engine's RSS and
# descriptors stayed flat (docs/faults.md: what flat means here).
#
# Usage: bench/chaos_soak.sh [SECONDS]        (default 60; needs root)
# Exits 77 (skipped, with the reason) where it cannot run: not root, no
# network namespaces.
# Env:   NODES (3), SEED (random), KEEP=1 (keep the logs; their folder is
#        printed), CHAOS_NODE (the driver; default build/bin/chaos_node),
#        HAWSER_ETCD_BIN (default: etcd on PATH; without one, metadata is
#        p2p and etcd is not restarted), SAMPLE_S (sampling period: 2 s, or
#        5 s for runs over 10 minutes), RATE (rounds per second per engine at
#        most; default 0: as fast as they go).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

duration=${1:-60}
nodes=${NODES:-3}
seed=${SEED:-$(( $(date +%s) % 32768 ))}
RANDOM=$seed
[ "$(id -u)" -eq 0 ] || { echo "chaos soak: SKIPPED: needs root (network namespaces)" >&2; exit 77; }
command -v ip >/dev/null || { echo "chaos soak: SKIPPED: ip (iproute2) is not installed" >&2; exit 77; }
node_bin=${CHAOS_NODE:-$(find_bin chaos_node)}
[ -x "$node_bin" ] || { echo "chaos soak: chaos_node not built (cmake --build build --target chaos_node)" >&2; exit 2; }
etcd_bin=${HAWSER_ETCD_BIN:-$(command -v etcd || true)}
if [ "$duration" -gt 600 ]; then sample_s=${SAMPLE_S:-5}; else sample_s=${SAMPLE_S:-2}; fi
warmup=8                                            # seconds before the first fault
quiet=$(( duration >= 300 ? 25 : 15 ))              # no fault in the last seconds: all must recover
(( nodes >= 2 && duration >= warmup + quiet + 10 )) || { echo "chaos soak: NODES >= 2 and SECONDS >= $(( warmup + quiet + 10 ))" >&2; exit 2; }

dir=$(mktemp -d /tmp/hawser-chaos-XXXXXX)
mkdir -p "$dir/pids"
tag=$$
sw=hcs${tag}s
etcd_ip=10.215.0.254
declare -a ns pid inc
for (( i = 0; i < nodes; i++ )); do ns[$i]=hcs${tag}n$i; inc[$i]=0; done
etcd_pid=""
sampler=""

cleanup() {
  set +e
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  for (( i = 0; i < nodes; i++ )); do
    [ -n "${pid[$i]:-}" ] && { kill -CONT "${pid[$i]}"; kill -KILL "${pid[$i]}"; } 2>/dev/null
    ip netns del "${ns[$i]}" 2>/dev/null
  done
  [ -n "$etcd_pid" ] && kill -KILL "$etcd_pid" 2>/dev/null
  wait 2>/dev/null
  ip netns del "$sw" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then echo "chaos soak: logs kept in $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

now_ms() { date +%s%3N; }
pick() { echo $(( RANDOM % ($2 - $1 + 1) + $1 )); }  # an integer in [$1, $2]
record() { echo "{\"kind\":\"$1\",\"target\":\"$2\",\"start\":$3,\"end\":$4,\"detail\":\"$5\"}" >> "$dir/faults.jsonl"; }

# ---- the hosts: a bridge in namespace $sw, one veth per node -----------------
if ! err=$(ip netns add "$sw" 2>&1); then
  echo "chaos soak: SKIPPED: cannot create a network namespace here: $err" >&2
  exit 77
fi
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" addr add "$etcd_ip/24" dev br0
ip -n "$sw" link set br0 up
for (( i = 0; i < nodes; i++ )); do
  ip netns add "${ns[$i]}"
  ip -n "$sw" link add "p$i" type veth peer name eth0 netns "${ns[$i]}"
  ip -n "$sw" link set "p$i" master br0 up
  ip -n "${ns[$i]}" addr add "10.215.0.$(( i + 1 ))/24" dev eth0
  ip -n "${ns[$i]}" link set eth0 up
  ip -n "${ns[$i]}" link set lo up
done

# ---- etcd (in the bridge's namespace) -----------------------------------------
start_etcd() {
  ip netns exec "$sw" "$etcd_bin" --name soak --data-dir "$dir/etcd" \
    --listen-client-urls "http://$etcd_ip:2379" --advertise-client-urls "http://$etcd_ip:2379" \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster soak=http://127.0.0.1:2380 --initial-cluster-state new \
    --logger zap --log-level error >> "$dir/etcd.log" 2>&1 &
  etcd_pid=$!
  etcd_inc=$(( ${etcd_inc:-0} + 1 ))
  echo "$etcd_pid $etcd_inc" > "$dir/pids/etcd"
  local t=0
  until ip netns exec "$sw" bash -c "exec 3<>/dev/tcp/$etcd_ip/2379" 2>/dev/null; do
    sleep 0.2; t=$(( t + 1 ))
    (( t < 150 )) || { echo "chaos soak: etcd did not start: $(tail -3 "$dir/etcd.log")" >&2; exit 1; }
  done
}
if [ -n "$etcd_bin" ]; then
  meta="etcd://$etcd_ip:2379"
  start_etcd
  metadata_note="etcd ($etcd_bin), restarted as a fault"
else
  meta=p2p
  metadata_note="p2p (no etcd binary found: etcd is not restarted)"
fi

# ---- the engines ------------------------------------------------------------------
peers_of() {
  local i=$1 j out=""
  for (( j = 0; j < nodes; j++ )); do
    (( j == i )) && continue
    if [ "$meta" = p2p ]; then out+="${out:+,}10.215.0.$(( j + 1 )):7000"; else out+="${out:+,}node-$j"; fi
  done
  echo "$out"
}
start_node() {
  local i=$1
  inc[$i]=$(( inc[$i] + 1 ))
  ip netns exec "${ns[$i]}" "$node_bin" --name "node-$i" --index "$i" --nodes "$nodes" \
    --host "10.215.0.$(( i + 1 ))" --port 7000 --metadata "$meta" --peers "$(peers_of "$i")" --rate "${RATE:-0}" \
    > "$dir/node-$i.${inc[$i]}.log" 2>&1 &
  pid[$i]=$!
  echo "${pid[$i]} ${inc[$i]}" > "$dir/pids/node-$i"
}
wait_ready() {
  local i=$1 t=0
  until grep -q '"ev":"ready"' "$dir/node-$i.${inc[$i]}.log" 2>/dev/null; do
    sleep 0.1; t=$(( t + 1 ))
    (( t < 600 )) || { echo "chaos soak: node-$i did not start: $(tail -3 "$dir/node-$i.${inc[$i]}.log")" >&2; exit 1; }
  done
}
for (( i = 0; i < nodes; i++ )); do start_node "$i"; done
for (( i = 0; i < nodes; i++ )); do wait_ready "$i"; done

# ---- RSS and descriptors, sampled in the background ---------------------------------
(
  # Not errexit: a process that exits between reading its RSS and listing its
  # descriptors (a fault's kill) must not end the sampling (it once did: no
  # process then had enough samples to judge).
  set +e
  while true; do
    t=$(now_ms)
    for f in "$dir"/pids/*; do
      read -r p n < "$f" || continue
      rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
      [ -n "$rss" ] || continue
      fds=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
      echo "$t $(basename "$f") $n $p $rss $fds"
    done
    sleep "$sample_s"
  done
) > "$dir/samples.txt" &
sampler=$!

echo "chaos soak: $duration s, $nodes engines, metadata $metadata_note, seed $seed"
start=$(date +%s)
end_faults=$(( start + duration - quiet ))
sleep "$warmup"

# ---- faults, one after another -------------------------------------------------------
kinds=(kill stop link)
[ "$meta" != p2p ] && kinds+=(etcd)
order=()
while (( $(date +%s) < end_faults )); do
  if (( ${#order[@]} == 0 )); then  # every kind once per cycle, in a random order
    order=("${kinds[@]}")
    for (( k = ${#order[@]} - 1; k > 0; k-- )); do
      j=$(pick 0 "$k"); tmp=${order[$k]}; order[$k]=${order[$j]}; order[$j]=$tmp
    done
  fi
  kind=${order[0]}
  order=("${order[@]:1}")
  left=$(( end_faults - $(date +%s) ))
  (( left >= 2 )) || break
  hold=$(pick 1 8)
  (( hold < left )) || hold=$(( left - 1 ))
  case $kind in
    kill)  # node-0 is never killed: one engine lives through the whole run
      i=$(pick 1 $(( nodes - 1 )))
      t0=$(now_ms)
      kill -KILL "${pid[$i]}" 2>/dev/null || true
      wait "${pid[$i]}" 2>/dev/null || true
      sleep 1
      start_node "$i"
      wait_ready "$i"
      record kill "node-$i" "$t0" "$(now_ms)" "SIGKILL, restarted"
      ;;
    stop)
      i=$(pick 0 $(( nodes - 1 )))
      t0=$(now_ms)
      kill -STOP "${pid[$i]}"
      sleep "$hold"
      kill -CONT "${pid[$i]}"
      record stop "node-$i" "$t0" "$(now_ms)" "SIGSTOP ${hold} s"
      ;;
    link)
      i=$(pick 0 $(( nodes - 1 )))
      t0=$(now_ms)
      ip -n "${ns[$i]}" link set eth0 down
      sleep "$hold"
      ip -n "${ns[$i]}" link set eth0 up
      record link "node-$i" "$t0" "$(now_ms)" "link down ${hold} s"
      ;;
    etcd)
      sig=$([ $(( RANDOM % 2 )) -eq 0 ] && echo TERM || echo KILL)
      t0=$(now_ms)
      kill "-$sig" "$etcd_pid" 2>/dev/null || true
      wait "$etcd_pid" 2>/dev/null || true
      sleep "$(pick 1 3)"
      start_etcd
      record etcd etcd "$t0" "$(now_ms)" "SIG$sig, restarted"
      ;;
  esac
  sleep "$(pick 1 3)"
done

# ---- the quiet tail, then stop everything ------------------------------------------------
while (( $(date +%s) < start + duration )); do sleep 0.5; done
sampler_ran=1 end_ms=$(now_ms)
kill -0 "$sampler" 2>/dev/null || sampler_ran=0
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=""
stuck=0
for (( i = 0; i < nodes; i++ )); do
  kill -TERM "${pid[$i]}" 2>/dev/null || true
done
for (( i = 0; i < nodes; i++ )); do
  t=0
  while kill -0 "${pid[$i]}" 2>/dev/null && (( t < 150 )); do sleep 0.1; t=$(( t + 1 )); done
  if kill -0 "${pid[$i]}" 2>/dev/null; then
    echo "chaos soak: node-$i did not exit within 15 s of SIGTERM" >&2
    stuck=$(( stuck + 1 ))
    kill -KILL "${pid[$i]}" 2>/dev/null || true
  fi
  wait "${pid[$i]}" 2>/dev/null || true
  pid[$i]=""
done

rc=0
python3 "$here/chaos_summary.py" "$dir" "$duration" "$quiet" "$stuck" || rc=$?
if (( ! sampler_ran )); then
  echo "chaos soak: FAIL: the RSS and descriptor sampler stopped before the run's end (last sample at" \
    "$(tail -1 "$dir/samples.txt" | cut -d' ' -f1) ms; the run ended at $end_ms ms)" >&2
  rc=1
fi
exit "$rc"
