#!/usr/bin/env bash
# Measures the broker's memory under load, as docs/benchmarks.md reports it:
# starts apogee-broker as its own process, drives it with apogee-bench (e2e,
# 1 KiB, at the rate given, default 150000 msgs/s), and samples the broker's
# /proc/PID/status every second: VmRSS, RssFile (mapped file pages: the commit
# log and consume queues, i.e. page cache) and RssAnon (heap, stacks: what the
# broker itself holds). "RSS minus mapped file pages" = RssAnon + RssShmem.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
rate=${1:-150000}
tmp=$(mktemp -d)
work=$tmp
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; [ -n "$pid" ] && wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/apogee-broker" ./cmd/apogee-broker
go build -o "$tmp/apogee-bench" ./cmd/apogee-bench
# Every listener from :0 (the HA one too; no name server, no gRPC), the
# address read from the ready file.
bench_start broker "$tmp/apogee-broker" --listen 127.0.0.1:0 --ha-listen 127.0.0.1:0 --namesrv-listen "" --grpc-listen "" \
  --data-dir "$tmp/data"
pid=$bench_pid
addr=$(bench_addr broker listen)
( for _ in $(seq 14); do
    sleep 1
    awk '/^(VmRSS|RssAnon|RssFile|RssShmem):/ {printf "%s %s MiB  ", $1, int($2/1024)} END {print ""}' /proc/$pid/status
  done ) &
sampler=$!
"$tmp/apogee-bench" e2e --addr "$addr" --rate "$rate" --duration 10s --warmup 2s --quiet
wait $sampler
