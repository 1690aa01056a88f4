#!/usr/bin/env bash
# Counts a server's system calls per message under an apogee-bench workload:
# starts apogee-broker (or nats-server with JetStream) afresh as its own
# process, runs the workload for 12 s after a 2 s warm-up, counts the
# server's system calls with perf over 8 s of it, and divides by the
# messages the per-second lines report for those 8 s. Prints the calls per
# message, total and by kind, and the run's CPU per message.
#
# Usage: scripts/bench-syscalls.sh apogee|nats WORKLOAD-FLAGS...
#   scripts/bench-syscalls.sh apogee produce
#   scripts/bench-syscalls.sh nats e2e --rate 30000
# BROKER_FLAGS passes flags to apogee-broker (for example "--flush sync").
# BIN=DIR runs the apogee-broker and apogee-bench already built in DIR
# instead of building this tree's (to alternate two builds: build each into
# a directory of its own, then run the script with one and the other).
# Needs perf (tracepoints readable: root), and nats-server for nats.
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,16p' "$0" >&2
  exit 2
fi
sys=$1
shift
for a in "$@"; do
  if [ "$a" = --quiet ]; then
    echo "bench-syscalls: no $a: the messages of perf's window are counted from the per-second lines" >&2
    exit 2
  fi
done
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
work=$(mktemp -d)
srv=""
cleanup() {
  if [ -n "$srv" ]; then
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
if [ -n "${BIN:-}" ]; then
  mkdir -p "$work/bin"
  ln -s "$(cd "$BIN" && pwd)"/* "$work/bin/"
else
  go build -o "$work/bin/" ./cmd/apogee-broker ./cmd/apogee-bench
fi
if [ "$sys" = nats ] && [ ! -e "$work/bin/apogee-bench-nats" ]; then
  (cd benchmark/natsdriver && go build -o "$work/bin/" ./cmd/apogee-bench-nats)
fi
ev=raw_syscalls:sys_enter,context-switches
for s in read write writev pwrite64 futex epoll_pwait madvise nanosleep fdatasync msync sched_yield; do
  ev="$ev,syscalls:sys_enter_$s"
done
mkdir -p "$work/data"
if [ "$sys" = apogee ]; then
  bench_broker_flags "$work/bin/apogee-broker"
  # shellcheck disable=SC2086
  bench_start server "$work/bin/apogee-broker" --data-dir "$work/data" "${bench_listeners[@]}" \
    --log-level error ${BROKER_FLAGS:-}
  srv=$bench_pid
  "$work/bin/apogee-bench" "$@" --addr "$(bench_addr server listen)" --broker-pid "$srv" --duration 12s --warmup 2s >"$work/bench.out" &
else
  nats=$(command -v nats-server || echo "$(go env GOPATH)/bin/nats-server")
  bench_start_nats server "$nats" -js -sd "$work/data"
  srv=$bench_pid
  "$work/bin/apogee-bench-nats" "$@" --addr "nats://$bench_nats_addr" --broker-pid "$srv" --duration 12s --warmup 2s >"$work/bench.out" &
fi
bench=$!
sleep 5
perf stat -x, -e "$ev" -p "$srv" -- sleep 8 2>"$work/perf.out"
wait "$bench"
# The perf window is seconds 5 to 13 of the bench's run: its lines 6s..13s.
msgs=$(awk '$1 ~ /^[0-9]+s$/ { t = $1 + 0; if (t >= 6 && t <= 13) n += $2 } END { print n + 0 }' "$work/bench.out")
echo "messages in the counted 8 s: $msgs"
awk -F, -v m="$msgs" '$1 ~ /^[0-9]+$/ && $1 > 0 { name = $3; sub(/.*:(sys_enter_)?/, "", name); printf "%-14s %8.3f per message\n", name, $1 / m }' "$work/perf.out"
grep -E "^(send-to-ack|end-to-end) |CPU per|system calls per|context switches per" "$work/bench.out"
