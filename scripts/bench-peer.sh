#!/usr/bin/env bash
# Measures Apogee (apogee-broker as its own process) and NATS JetStream
# (nats-server) with the same harness in the same minutes: for each workload
# and each of ROUNDS rounds it runs both, the order swapped every round, each
# server started afresh (empty data directory) for its run and stopped after
# it, and prints every run's figures and then the medians per workload and
# system (rate, CPU per message of broker and client, the server's read-like
# and write-like system calls and voluntary and involuntary context switches
# per message (rd wr vcs ivcs: syscr and syscw of /proc/PID/io, the switches
# of all its threads; docs/bench.md), latency percentiles).
#
# Usage: scripts/bench-peer.sh ROUNDS WORKLOAD...
#   workloads: p64 p256 (produce, 4 producers x 64 / x 256 in flight, async),
#              sync64 (produce x 64, Apogee --flush sync against NATS with
#              jetstream { sync_interval: always }), drain (consume mode,
#              a backlog of $DRAIN messages), e2e (fixed rate $E2E_RATE)
#   scripts/bench-peer.sh 3 p64 p256 sync64 drain e2e
# Needs nats-server on PATH or in $(go env GOPATH)/bin:
#   go install github.com/nats-io/nats-server/v2@v2.15.2
# Environment: DURATION (default 10s), WARMUP (2s), DRAIN (500000),
# E2E_RATE (30000), SIZE (1024), OUT (directory of the JSON lines; default a
# temporary one, kept).
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,22p' "$0" >&2
  exit 2
fi
rounds=$1
shift
cd "$(dirname "$0")/.."
root=$PWD
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
duration=${DURATION:-10s} warmup=${WARMUP:-2s} drain=${DRAIN:-500000} e2eRate=${E2E_RATE:-30000} size=${SIZE:-1024}
out=${OUT:-$(mktemp -d /tmp/bench-peer.XXXXXX)}
mkdir -p "$out"
work=$(mktemp -d)
server=""
trap bench_cleanup EXIT

nats=$(command -v nats-server || true)
[ -z "$nats" ] && nats="$(go env GOPATH)/bin/nats-server"
if [ ! -x "$nats" ]; then
  echo "bench-peer: no nats-server (go install github.com/nats-io/nats-server/v2@v2.15.2)" >&2
  exit 1
fi
echo "building apogee-broker, apogee-bench and apogee-bench-nats..."
go build -o "$work/bin/" ./cmd/apogee-broker ./cmd/apogee-bench
(cd benchmark/natsdriver && go build -o "$work/bin/" ./cmd/apogee-bench-nats)
echo "nats-server: $("$nats" --version)"
echo "results: $out"

cat >"$work/sync.conf" <<EOF
jetstream { sync_interval: always }
EOF

# run SYSTEM WORKLOAD ROUND: one run, its JSON line appended to $out/WORKLOAD.SYSTEM.jsonl
run() {
  local sys=$1 wl=$2 round=$3 natsConf=() flush=async
  bench_workload "$wl" || exit 2
  local args=("${bench_args[@]}")
  if [ "$bench_sync" = 1 ]; then
    flush=sync natsConf=(-c "$work/sync.conf")
  fi
  mkdir -p "$work/data"
  if [ "$sys" = apogee ]; then
    bench_broker_flags "$work/bin/apogee-broker"
    bench_start server "$work/bin/apogee-broker" --data-dir "$work/data" "${bench_listeners[@]}" \
      --flush "$flush" --log-level error
    server=$bench_pid
    "$work/bin/apogee-bench" "${args[@]}" --addr "$(bench_addr server listen)" --broker-pid "$server" >"$work/run.out" || true
  else
    bench_start_nats server "$nats" -js -sd "$work/data" "${natsConf[@]}"
    server=$bench_pid
    "$work/bin/apogee-bench-nats" "${args[@]}" --addr "nats://$bench_nats_addr" --broker-pid "$server" >"$work/run.out" || true
  fi
  local ok=0
  bench_stop_server bench-peer || ok=1
  bench_record "$out" "$sys" "$wl" "$round" "$work/run.out" $ok
}

bench_alternate "$rounds" apogee nats "$@"

echo
echo "medians of $rounds alternating runs (µs for CPU per message and latencies)"
bench_medians "$out" "apogee nats" "$@"
