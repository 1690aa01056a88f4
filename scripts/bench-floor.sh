#!/usr/bin/env bash
# Measures apogee-broker (its own process) against its floor, floorbroker
# (benchmark/floorbroker: the same remoting server code answering every
# send at once, storing nothing), with the same apogee-bench in the same
# minutes: for each workload and each of ROUNDS rounds it runs both, the
# order swapped every round, each server started afresh and stopped after
# its run, and prints every run's figures and the medians (CPU per message
# of server and client, the server's read-like and write-like system calls
# and voluntary and involuntary context switches per message, latencies).
# What apogee-broker costs above floorbroker is the broker's own work; the
# floor is what any Go remoting server costs on this machine at that rate.
#
# Usage: scripts/bench-floor.sh ROUNDS WORKLOAD...
#   workloads: fixed (produce at a fixed $RATE msgs/s, 64 in flight),
#              p64 (produce, closed loop, 4 producers x 64 in flight)
#   scripts/bench-floor.sh 3 fixed p64
# Environment: RATE (default 30000), DURATION (default 10s), WARMUP (2s),
# SIZE (1024), OUT (directory of the JSON lines; default a temporary one,
# kept).
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,20p' "$0" >&2
  exit 2
fi
rounds=$1
shift
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
duration=${DURATION:-10s} warmup=${WARMUP:-2s} rate=${RATE:-30000} size=${SIZE:-1024}
out=${OUT:-$(mktemp -d /tmp/bench-floor.XXXXXX)}
mkdir -p "$out"
work=$(mktemp -d)
server=""
trap bench_cleanup EXIT

echo "building apogee-broker, floorbroker and apogee-bench..."
go build -o "$work/bin/" ./cmd/apogee-broker ./cmd/apogee-bench ./benchmark/floorbroker
echo "results: $out"

# run SYSTEM WORKLOAD ROUND: one run, its JSON line appended to $out/WORKLOAD.SYSTEM.jsonl
run() {
  local sys=$1 wl=$2 round=$3 args
  case $wl in
    fixed) args=(produce --inflight 64 --rate "$rate") ;;
    p64) args=(produce --inflight 64) ;;
    *) echo "unknown workload $wl (fixed p64)" >&2; exit 2 ;;
  esac
  args+=(--size "$size" --duration "$duration" --warmup "$warmup" --quiet --json)
  mkdir -p "$work/data"
  if [ "$sys" = apogee ]; then
    bench_broker_flags "$work/bin/apogee-broker"
    bench_start server "$work/bin/apogee-broker" --data-dir "$work/data" "${bench_listeners[@]}" \
      --flush async --log-level error
  else
    bench_start server "$work/bin/floorbroker" --listen 127.0.0.1:0
  fi
  server=$bench_pid
  "$work/bin/apogee-bench" "${args[@]}" --addr "$(bench_addr server listen)" --broker-pid "$server" >"$work/run.out" || true
  local ok=0
  bench_stop_server bench-floor || ok=1
  bench_record "$out" "$sys" "$wl" "$round" "$work/run.out" $ok
}

bench_alternate "$rounds" apogee floor "$@"

echo
echo "medians of $rounds alternating runs (µs for CPU per message and latencies)"
bench_medians "$out" "apogee floor" "$@"
