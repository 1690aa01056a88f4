#!/usr/bin/env bash
# Measures the broker's memory under load, as docs/benchmarks.md reports it:
# starts apogee-broker as its own process, drives it with apogee-bench (e2e,
# 1 KiB, at the rate given, default 150000 msgs/s), and samples the broker's
# /proc/PID/status every second: VmRSS, RssFile (mapped file pages: the commit
# log and consume queues, i.e. page cache) and RssAnon (heap, stacks: what the
# broker itself holds). "RSS minus mapped file pages" = RssAnon + RssShmem.
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-150000}
tmp=$(mktemp -d)
go build -o "$tmp/apogee-broker" ./cmd/apogee-broker
go build -o "$tmp/apogee-bench" ./cmd/apogee-bench
"$tmp/apogee-broker" --listen 127.0.0.1:0 --namesrv-listen "" --data-dir "$tmp/data" > "$tmp/broker.out" 2> "$tmp/broker.err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do grep -q listening "$tmp/broker.out" && break; sleep 0.1; done
addr=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$tmp/broker.out")
( for _ in $(seq 14); do
    sleep 1
    awk '/^(VmRSS|RssAnon|RssFile|RssShmem):/ {printf "%s %s MiB  ", $1, int($2/1024)} END {print ""}' /proc/$pid/status
  done ) &
sampler=$!
"$tmp/apogee-bench" e2e --addr "$addr" --rate "$rate" --duration 10s --warmup 2s --quiet
wait $sampler
