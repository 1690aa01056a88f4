#!/usr/bin/env bash
# Runs the apogee-bench matrix recorded in docs/benchmarks.md: produce for
# 128 B, 1 KiB and 4 KiB messages x async and sync flush x 1 and 4 producers,
# then consume-from-backlog per size, each against a fresh embedded broker.
# Prints one JSON line per run (the contract's --json output), prefixed with
# the run's name. Usage: scripts/bench-matrix.sh [extra apogee-bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)/apogee-bench
go build -o "$bin" ./cmd/apogee-bench
for size in 128 1024 4096; do
  for flush in async sync; do
    for producers in 1 4; do
      printf 'produce size=%s flush=%s producers=%s ' "$size" "$flush" "$producers"
      "$bin" produce --size "$size" --flush "$flush" --producers "$producers" --inflight 64 \
        --duration 8s --warmup 2s --quiet --json "$@" | tail -n 1
    done
  done
  printf 'consume size=%s ' "$size"
  "$bin" consume --size "$size" --messages 1000000 --quiet --json "$@" | tail -n 1
done
