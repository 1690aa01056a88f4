#!/usr/bin/env bash
# Send throughput with metrics on against off, alternating (this machine's
# speed drifts by tens of percent within minutes; see bench-ab.sh). Two
# measurements:
#   1. the send handler alone (BenchmarkSendHandlerMetrics/off and /on in
#      ./broker: the request hook and its histogram, no network), ROUNDS
#      runs of each in alternating order;
#   2. apogee-bench produce against an apogee-broker process started fresh
#      for every run, with --metrics-listen (and /metrics scraped every
#      second during the run) or without, ROUNDS runs of each, alternating.
# It prints every result and the medians.
#
# Usage: scripts/bench-metrics.sh [ROUNDS] [DURATION]   (defaults 8, 10s)
set -euo pipefail
rounds=${1:-8}
duration=${2:-10s}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
work=$(mktemp -d)
broker_pid=""
scraper_pid=""
cleanup() {
  [ -n "$scraper_pid" ] && kill "$scraper_pid" 2>/dev/null || true
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
go test -c -o "$work/broker.test" ./broker
go build -o "$work/apogee-broker" ./cmd/apogee-broker
go build -o "$work/apogee-bench" ./cmd/apogee-bench

median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "== 1. send handler (ns/op), $rounds rounds"
for ((r = 0; r < rounds; r++)); do
  order="off on"
  ((r % 2)) && order="on off"
  for mode in $order; do
    ns=$(cd broker && "$work/broker.test" -test.run '^$' -test.bench "SendHandlerMetrics/$mode\$" -test.benchtime 200000x |
      awk '/^Benchmark/ {print $3}')
    echo "handler $mode $ns"
    echo "$ns" >>"$work/handler-$mode"
  done
done
for mode in off on; do
  echo "handler $mode median: $(median <"$work/handler-$mode") ns/op"
done

echo "== 2. apogee-bench produce against a broker process (msgs/s), $rounds rounds of $duration"
for ((r = 0; r < rounds; r++)); do
  order="off on"
  ((r % 2)) && order="on off"
  for mode in $order; do
    data="$work/data-$r-$mode"
    # Every listener from :0, read from the broker's ready file.
    args=(--listen 127.0.0.1:0 --namesrv-listen "" --grpc-listen "" --ha-listen 127.0.0.1:0 --data-dir "$data" --log-level warn)
    if [ "$mode" = on ]; then
      args+=(--metrics-listen 127.0.0.1:0)
    fi
    bench_start broker "$work/apogee-broker" "${args[@]}"
    broker_pid=$bench_pid
    if [ "$mode" = on ]; then
      metrics=$(bench_addr broker metrics)
      (while curl -s -o /dev/null "http://$metrics/metrics"; do sleep 1; done) &
      scraper_pid=$!
    fi
    rate=$("$work/apogee-bench" produce --addr "$(bench_addr broker listen)" --duration "$duration" --warmup 2s --json 2>"$work/bench.err" |
      tail -1 | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["msgs_per_sec"]))' 2>/dev/null || true)
    if [ -n "$rate" ]; then
      echo "bench $mode $rate"
      echo "$rate" >>"$work/bench-$mode"
    else
      echo "bench $mode failed: $(tail -q -n 3 "$work/bench.err" "$work/broker.err" | tr '\n' ' ')"
    fi
    [ -n "$scraper_pid" ] && { kill "$scraper_pid" 2>/dev/null || true; wait "$scraper_pid" 2>/dev/null || true; scraper_pid=""; }
    kill "$broker_pid"
    wait "$broker_pid" 2>/dev/null || true
    broker_pid=""
    rm -rf "$data" || true
  done
done
for mode in off on; do
  echo "bench $mode median: $(median <"$work/bench-$mode") msgs/s"
done
