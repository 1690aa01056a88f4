#!/usr/bin/env bash
# Measures a broker group in controller mode against the same group run the
# classic way (docs/benchmarks.md, "Controller mode"; issue 18's target:
# within 10% of the replication figures, the controller being off the data
# path). Per round, in an order rotated every round:
#   classic   an ASYNC_MASTER and its SLAVE behind a standalone name server,
#   ctrl      three apogee-controller processes, the name server, and two
#             brokers in controller mode (the first elected master, the
#             other its slave, in the SyncStateSet before the load starts),
# each loaded by apogee-bench produce closed loop (1 KiB, 4 producers) for
# DURATION after a 3 s warm-up; then the medians and the ratio ctrl/classic
# of each round.
#
# Usage: scripts/bench-controller.sh [ROUNDS] [DURATION]
# Every listener takes a port from 127.0.0.1:0, read from the process's
# ready file (the controllers form their group by --join); data goes to a
# temporary directory, removed at the end.
set -euo pipefail
rounds=${1:-3}
duration=${2:-10s}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
work=$(mktemp -d)
pids=()
stopall() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
cleanup() { stopall; rm -rf "$work"; }
trap cleanup EXIT
for c in apogee-broker apogee-namesrv apogee-controller apogee-bench; do
  go build -o "$work/bin/$c" "./cmd/$c"
done
B=$work/bin
# The name server's and the controllers' addresses, from their ready files.
ns="" ctl=""

# launch NAME BIN ARGS...: starts a process and waits for its ready file
# (bench_start).
launch() {
  bench_start "$@"
  pids+=("$bench_pid")
}

# namesrv: the standalone name server.
namesrv() {
  launch ns "$B/apogee-namesrv" --listen 127.0.0.1:0 --data-dir "$work/d/ns"
  ns=$(bench_addr ns listen)
}

# until_logged FILE TEXT WHAT: waits (60 s at most) until FILE holds TEXT.
until_logged() {
  for _ in $(seq 1200); do
    grep -q "$2" "$1" && return 0
    sleep 0.05
  done
  echo "$3" >&2
  tail -n 20 "$1" >&2
  return 1
}

classic() {
  namesrv
  launch b1 "$B/apogee-broker" --listen 127.0.0.1:0 --namesrv-listen "" --grpc-listen "" --namesrv "$ns" \
    --ha-listen 127.0.0.1:0 --broker-role ASYNC_MASTER --data-dir "$work/d/b1"
  until_logged "$work/ns.err" "broker registered.* id=0 " "the master did not register"
  launch b2 "$B/apogee-broker" --listen 127.0.0.1:0 --namesrv-listen "" --grpc-listen "" --namesrv "$ns" \
    --broker-role SLAVE --broker-id 1 --data-dir "$work/d/b2"
  until_logged "$work/b1.err" "ha: slave connected" "the slave did not connect"
}

ctrl() {
  local i
  # c1 starts a group of its own; c2 and c3 join it (docs/failover.md,
  # "Members on any port").
  launch c1 "$B/apogee-controller" --id c1 --peers c1=127.0.0.1:0 --listen 127.0.0.1:0 --data-dir "$work/d/c1"
  ctl=$(bench_addr c1 listen)
  for i in 2 3; do
    launch "c$i" "$B/apogee-controller" --id "c$i" --join "$ctl" --raft-listen 127.0.0.1:0 --listen 127.0.0.1:0 \
      --data-dir "$work/d/c$i"
    until_logged "$work/c$i.err" "controller: joined the group" "c$i did not join the controller group"
    ctl+=";$(bench_addr "c$i" listen)"
  done
  namesrv
  launch b1 "$B/apogee-broker" --listen 127.0.0.1:0 --ha-listen 127.0.0.1:0 --namesrv-listen "" --grpc-listen "" --namesrv "$ns" \
    --enable-controller-mode --controller-addr "$ctl" --data-dir "$work/d/b1"
  until_logged "$work/b1.err" "ctrlmode: master" "the first broker was not elected"
  launch b2 "$B/apogee-broker" --listen 127.0.0.1:0 --ha-listen 127.0.0.1:0 --namesrv-listen "" --grpc-listen "" --namesrv "$ns" \
    --enable-controller-mode --controller-addr "$ctl" --data-dir "$work/d/b2"
  until_logged "$work/b1.err" "SyncStateSet grown" "the slave did not join the SyncStateSet"
}

for ((r = 1; r <= rounds; r++)); do
  order=(classic ctrl)
  ((r % 2 == 0)) && order=(ctrl classic)
  echo "== round $r: ${order[*]} (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  for config in "${order[@]}"; do
    rm -rf "$work/d"
    "$config"
    if "$B/apogee-bench" produce --addr "$ns" --size 1024 --producers 4 --duration "$duration" --warmup 3s \
      --quiet --json >"$work/bench.out" 2>&1; then
      python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(sys.argv[2], sys.argv[3], round(r["msgs_per_sec"]), r["send_latency_us"]["p99"])' \
        "$work/bench.out" "$config" "$r" | tee -a "$work/results"
    else
      echo "$config round $r FAILED: $(tail -n 3 "$work/bench.out" | tr '\n' ' ')"
    fi
    stopall
  done
done

python3 - "$work/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
rate = {}
for config, rnd, msgs, p99 in rows:
    rate.setdefault(rnd, {})[config] = int(msgs)
for config in ("classic", "ctrl"):
    v = [r[config] for r in rate.values() if config in r]
    if v:
        print(f"{config:8} median {statistics.median(v):9.0f} msgs/s over {len(v)} runs: {v}")
ratios = [r["ctrl"] / r["classic"] for r in rate.values() if "ctrl" in r and "classic" in r]
if ratios:
    print(f"ctrl/classic per round: {[round(x, 2) for x in ratios]}, median {statistics.median(ratios):.2f}")
PY
