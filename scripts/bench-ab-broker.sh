#!/usr/bin/env bash
# Compares two commits of apogee-broker run as its own process, by
# alternating them: for each workload and each of ROUNDS rounds it runs A and
# B (the order swapped every round), each broker started afresh in an empty
# data directory and stopped after its run, and prints every run's figures and
# then the medians per workload and commit. The load generator is the
# apogee-bench of the working tree, the same for both, so only the broker
# differs; with AB_BENCH=commit each side runs its own commit's apogee-bench
# too (for changes of the client, whose CPU per message the runs report).
# This is how docs/benchmarks.md measures what a change buys: this machine's
# speed drifts by tens of percent within minutes, so runs of A and then of B
# measure the drift as much as the change.
#
# Usage: scripts/bench-ab-broker.sh A B ROUNDS WORKLOAD...
#   workloads as scripts/bench-peer.sh: p64 p256 sync64 drain e2e
#   scripts/bench-ab-broker.sh main~1 main 5 p64 e2e
# Environment: DURATION (default 10s), WARMUP (2s), DRAIN (500000), E2E_RATE
# (30000), SIZE (1024), BROKER_FLAGS (added to both brokers' flags),
# AB_BENCH (above), OUT (directory of the JSON lines; default a temporary
# one, kept).
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,20p' "$0" >&2
  exit 2
fi
a=$1 b=$2 rounds=$3
shift 3
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
duration=${DURATION:-10s} warmup=${WARMUP:-2s} drain=${DRAIN:-500000} e2eRate=${E2E_RATE:-30000} size=${SIZE:-1024}
out=${OUT:-$(mktemp -d /tmp/bench-ab-broker.XXXXXX)}
mkdir -p "$out"
work=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  for ref in a b; do
    [ -d "$work/src-$ref" ] && git worktree remove --force "$work/src-$ref" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

echo "building apogee-broker at $a and $b, apogee-bench of ${AB_BENCH:-the working tree}..."
for ref in a b; do
  commit=$a
  [ "$ref" = b ] && commit=$b
  git worktree add --quiet --detach "$work/src-$ref" "$commit"
  (cd "$work/src-$ref" && go build -o "$work/$ref/" ./cmd/apogee-broker ./cmd/apogee-bench)
  if [ "${AB_BENCH:-}" != commit ]; then
    go build -o "$work/$ref/" ./cmd/apogee-bench
  fi
done
echo "results: $out"

# run REF WORKLOAD ROUND: one run, its JSON line appended to $out/WORKLOAD.REF.jsonl
run() {
  local ref=$1 wl=$2 round=$3 flush=async ok=0
  bench_workload "$wl" || exit 2
  [ "$bench_sync" = 1 ] && flush=sync
  mkdir -p "$work/data"
  bench_broker_flags "$work/$ref/apogee-broker"
  # shellcheck disable=SC2086 # BROKER_FLAGS is a list of flags
  bench_start server "$work/$ref/apogee-broker" --data-dir "$work/data" "${bench_listeners[@]}" \
    --flush "$flush" --log-level error ${BROKER_FLAGS:-}
  server=$bench_pid
  "$work/$ref/apogee-bench" "${bench_args[@]}" --addr "$(bench_addr server listen)" --broker-pid "$server" >"$work/run.out" || true
  bench_stop_server bench-ab-broker || ok=1
  bench_record "$out" "$ref" "$wl" "$round" "$work/run.out" $ok
}

bench_alternate "$rounds" a b "$@"

echo
echo "medians of $rounds alternating runs (a = $a, b = $b; µs for CPU per message and latencies)"
bench_medians "$out" "a b" "$@"
