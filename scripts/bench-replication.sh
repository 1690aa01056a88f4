#!/usr/bin/env bash
# Measures replication against separate processes (docs/benchmarks.md,
# "Replication"): per round, in an order rotated every round,
#   none   one unreplicated broker,
#   async  an ASYNC_MASTER and its SLAVE (and a standalone name server),
#   sync   a SYNC_MASTER (async flush) and its SLAVE,
# each loaded by apogee-bench produce closed loop (1 KiB, 4 producers, the
# defaults otherwise); then an ASYNC_MASTER group at half of that round's
# async rate with the slave-lag probe (--slave-addr); then a slave started
# empty against a master holding a backlog, timed from the master's log
# line "ha: slave caught up". It prints every result and the medians, with
# the ratios to the unreplicated broker of the same rounds (the catch-up's
# to the rate at which the unreplicated master took the same backlog), and
# each process's CPU time over the bench command (warm-up included).
#
# Usage: scripts/bench-replication.sh [ROUNDS] [DURATION] [BACKLOG_MESSAGES]
#   scripts/bench-replication.sh 6 10s 400000   (docs/benchmarks.md's run)
# Every listener takes a port from 127.0.0.1:0, read from the process's
# ready file (two runs side by side do not collide); data goes to a
# temporary directory under $TMPDIR (about 4 GB at the peak), removed at the
# end.
set -euo pipefail
rounds=${1:-5}
duration=${2:-15s}
backlog=${3:-400000}
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
for c in apogee-broker apogee-namesrv apogee-bench; do
  go build -o "$work/bin/$c" "./cmd/$c"
done
B=$work/bin
# The addresses of the running name server (ns), master (m) and slave (s),
# from their ready files.
ns="" m="" s=""

# start NAME BIN ARGS...: starts a process and waits for its ready file
# (bench_start).
start() {
  bench_start "$@"
  pids+=("$bench_pid")
}

# startNamesrv, startMaster ROLE: the name server and a master, every
# listener from :0.
startNamesrv() {
  start ns "$B/apogee-namesrv" --listen 127.0.0.1:0 --data-dir "$work/d/ns"
  ns=$(bench_addr ns listen)
}
startMaster() {
  local reg=()
  [ -n "$ns" ] && reg=(--namesrv "$ns")
  start master "$B/apogee-broker" --listen 127.0.0.1:0 --ha-listen 127.0.0.1:0 --namesrv-listen "" --grpc-listen "" \
    "${reg[@]}" --broker-role "$1" --data-dir "$work/d/master"
  m=$(bench_addr master advertise)
}
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# waitlog FILE TEXT WHAT: waits (30 s at most) until FILE holds TEXT.
waitlog() {
  for _ in $(seq 600); do
    grep -q "$2" "$1" && return 0
    sleep 0.05
  done
  echo "$3" >&2
  return 1
}

# slave: starts the slave once the master is registered with the name
# server (a slave learns its master from the answer to its registration,
# and registers again only every 30 s), and waits until it is connected.
slave() {
  waitlog "$work/ns.err" "broker registered.* id=0 " "the master did not register"
  start slave "$B/apogee-broker" --listen 127.0.0.1:0 --namesrv-listen "" --grpc-listen "" --namesrv "$ns" \
    --broker-role SLAVE --broker-id 1 --data-dir "$work/d/slave"
  s=$(bench_addr slave advertise)
  waitlog "$work/master.err" "ha: slave connected" "the slave did not connect"
}

# group ROLE: a standalone name server, a master of ROLE and its slave,
# the slave caught up and following.
group() {
  rm -rf "$work/d"
  startNamesrv
  startMaster "$1"
  slave
}

# bench CONFIG ARGS...: one apogee-bench run against the master; prints
# CONFIG, its msgs/s and each process's CPU µs per message; the JSON line
# goes to $work/CONFIG.json.
bench() {
  local config=$1
  shift
  local before=() after=() p
  for p in "${pids[@]}"; do before+=("$(cputicks "$p")"); done
  if ! "$B/apogee-bench" produce --addr "$m" --size 1024 --producers 4 --duration "$duration" --warmup 3s --quiet --json "$@" \
    >"$work/bench.out" 2>&1; then
    # One failed run does not end the measurement: it is reported, with
    # what the brokers said, and left out of the medians.
    echo "$config FAILED round=$r: $(tail -n 3 "$work/bench.out" | tr '\n' ' ')"
    for p in master slave; do [ -f "$work/$p.err" ] && tail -n 5 "$work/$p.err" | sed "s/^/  $p: /"; done
    rm -f "$work/$config.json"
    return 0
  fi
  for p in "${pids[@]}"; do after+=("$(cputicks "$p")"); done
  tail -n 1 "$work/bench.out" >"$work/$config.json"
  local cpu="" i
  for i in "${!pids[@]}"; do cpu+=" $(( (after[i] - before[i]) * 10 ))ms"; done
  python3 - "$work/$config.json" "$config" "$cpu" "$r" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
line = f"{sys.argv[2]:<8} {r['msgs_per_sec']:9.0f} msgs/s  send p99 {r['send_latency_us']['p99']} us"
if 'slave_lag_us' in r:
    l = r['slave_lag_us']
    line += f"  slave lag p50 {l['p50']} us p99 {l['p99']} us max {l['max']} us ({l['count']} samples, ±{r['lag_interval_us']} us, {r.get('slave_lag_pending', 0)} pending)"
line += f"  messages {r['messages']}  process CPU over the run (ns, masters, slave):{sys.argv[3]}  round={sys.argv[4]}"
print(line)
PY
}

for ((r = 1; r <= rounds; r++)); do
  order=(none async sync)
  for ((k = 1; k < r; k++)); do order=("${order[@]:1}" "${order[0]}"); done
  echo "== round $r: ${order[*]} (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  for config in "${order[@]}"; do
    case $config in
    none)
      rm -rf "$work/d"
      ns=""
      startMaster ASYNC_MASTER
      bench none | tee -a "$work/results"
      ;;
    async)
      group ASYNC_MASTER
      bench async --slave-addr "$s" | tee -a "$work/results"
      ;;
    sync)
      group SYNC_MASTER
      bench sync --slave-addr "$s" | tee -a "$work/results"
      ;;
    esac
    stopall
  done
  if [ -f "$work/async.json" ]; then
    half=$(python3 -c "import json; print(int(json.load(open('$work/async.json'))['msgs_per_sec'] / 2))")
    group ASYNC_MASTER
    bench lag --slave-addr "$s" --rate "$half" | tee -a "$work/results"
    stopall
  fi

  # Catch-up: the master alone takes a backlog; an empty slave then joins.
  rm -rf "$work/d"
  startNamesrv
  startMaster ASYNC_MASTER
  if "$B/apogee-bench" produce --addr "$m" --size 4096 --producers 4 --messages "$backlog" --warmup 0s --quiet --json \
    >"$work/bench.out" 2>&1; then
    ingest=$(tail -n 1 "$work/bench.out" | python3 -c "import json, sys; print(int(json.load(sys.stdin)['mib_per_sec'] * 1.048576))")
    slave
    for _ in $(seq 1200); do
      grep -q "ha: slave caught up" "$work/master.err" && break
      sleep 0.05
    done
    line=$(grep "ha: slave caught up" "$work/master.err" || echo "no catch-up line")
    echo "catchup  ingest=${ingest}MBps $line round=$r" | tee -a "$work/results"
  else
    echo "catchup FAILED round=$r: $(tail -n 3 "$work/bench.out" | tr '\n' ' ')"
  fi
  stopall
done

echo "== medians over $rounds rounds"
python3 - "$work/results" <<'PY'
import re, statistics, sys
runs = {}  # round → config → msgs/s
lags, catch, ingest = [], [], []
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 2 or f[0] not in ("none", "async", "sync", "lag", "catchup") or f[1] == "FAILED" or "round=" not in line:
        continue
    rnd = int(re.search(r"round=(\d+)", line).group(1))
    if f[0] in ("none", "async", "sync", "lag"):
        runs.setdefault(rnd, {})[f[0]] = float(f[1])
    if f[0] == "lag":
        lags.append(int(re.search(r"slave lag p50 \d+ us p99 (\d+) us", line).group(1)))
    if f[0] == "catchup":
        m = re.search(r" MBps=(\d+)", line)
        if m:
            catch.append(int(m.group(1)))
            ingest.append(int(re.search(r"ingest=(\d+)MBps", line).group(1)))
for k in ("none", "async", "sync", "lag"):
    v = [r[k] for r in runs.values() if k in r]
    if v:
        print(f"{k:<8} median {statistics.median(v):9.0f} msgs/s over {len(v)} runs")
for k in ("async", "sync"):
    per = [(n, r[k] / r["none"]) for n, r in sorted(runs.items()) if k in r and "none" in r]
    if per:
        print(f"{k}/none, same round: median {statistics.median(x for _, x in per):.2f}; rounds", " ".join(f"r{n} {x:.2f}" for n, x in per))
if lags:
    print(f"slave lag p99 at half the round's async rate: median {statistics.median(lags) / 1000:.1f} ms, rounds {[round(x / 1000, 1) for x in lags]}")
if catch:
    print(f"catch-up: median {statistics.median(catch)} MB/s, rounds {catch}")
    per = [c / i for c, i in zip(catch, ingest)]
    print(f"catch-up / the unreplicated master's ingest of the same backlog (MB/s {ingest}): median {statistics.median(per):.2f}, rounds", " ".join(f"{x:.2f}" for x in per))
PY
