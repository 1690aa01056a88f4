# Shared by scripts/bench-peer.sh and scripts/bench-ab-broker.sh (sourced,
# not run): the workloads, waiting for a server's port, one run's line and
# the table of medians. The caller sets duration, warmup, drain, e2eRate and
# size, and has jq on PATH.

# bench_workload WORKLOAD: sets bench_args (apogee-bench's mode and flags for
# the workload) and bench_sync (1 when the server must flush synchronously);
# fails on an unknown workload.
bench_workload() {
  bench_sync=0
  case $1 in
    p64) bench_args=(produce --inflight 64) ;;
    p256) bench_args=(produce --inflight 256) ;;
    sync64) bench_args=(produce --inflight 64); bench_sync=1 ;;
    drain) bench_args=(consume --messages "$drain") ;;
    e2e) bench_args=(e2e --inflight 64 --rate "$e2eRate") ;;
    *) echo "unknown workload $1 (p64 p256 sync64 drain e2e)" >&2; return 2 ;;
  esac
  bench_args+=(--size "$size" --duration "$duration" --warmup "$warmup" --quiet --json)
}

# bench_wait_port PORT: waits (10 s at most) until something listens on
# 127.0.0.1:PORT.
bench_wait_port() {
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
      return 0
    fi
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  return 1
}

# bench_port_free PORT: fails when something already listens on it.
bench_port_free() {
  if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
    echo "something else listens on port $1; stop it or edit the ports at the top" >&2
    return 1
  fi
}

# bench_record OUT LABEL WORKLOAD ROUND RUNOUT OK: files a run whose server
# stayed up (OK 0) and whose output RUNOUT ends with a result: its JSON line
# appended to OUT/WORKLOAD.LABEL.jsonl and its line printed; otherwise says
# the run is not counted.
bench_record() {
  local out=$1 label=$2 wl=$3 round=$4 runout=$5 ok=$6
  if [ "$ok" != 0 ] || ! tail -n 1 "$runout" | jq -e .mode >/dev/null 2>&1; then
    echo "$wl round $round $label failed; not counted. Its output:" >&2
    tail -n 5 "$runout" >&2
    return 0
  fi
  tail -n 1 "$runout" >>"$out/$wl.$label.jsonl"
  bench_print_run "$label" "$wl" "$round" "$(tail -n 1 "$runout")"
}

# bench_alternate ROUNDS A B WORKLOAD...: calls run A WORKLOAD ROUND and
# run B WORKLOAD ROUND for each round and workload, the order swapped every
# round.
bench_alternate() {
  local rounds=$1 first=$2 second=$3 wl round
  shift 3
  for wl in "$@"; do
    for round in $(seq 1 "$rounds"); do
      if [ $((round % 2)) = 1 ]; then
        run "$first" "$wl" "$round"
        run "$second" "$wl" "$round"
      else
        run "$second" "$wl" "$round"
        run "$first" "$wl" "$round"
      fi
    done
  done
}

# bench_print_run LABEL WORKLOAD ROUND JSON: one run's line.
bench_print_run() {
  jq -r --arg s "$1" --arg w "$2" --arg r "$3" \
    '"\($w) round \($r) \($s): \(.msgs_per_sec|floor) msgs/s, broker \(.broker_cpu_us_per_msg*100|round/100) µs/msg, client \(.client_cpu_us_per_msg*100|round/100) µs/msg, send p50/p99/p99.9 \(.send_latency_us.p50)/\(.send_latency_us.p99)/\(.send_latency_us.p999) µs, e2e p50/p99/p99.9 \(.e2e_latency_us.p50)/\(.e2e_latency_us.p99)/\(.e2e_latency_us.p999) µs, errors \(.errors)"' <<<"$4"
}

# bench_medians OUT "LABEL..." WORKLOAD...: the medians of every
# OUT/WORKLOAD.LABEL.jsonl, a line per workload and label.
bench_medians() {
  local out=$1 labels=$2 wl label
  shift 2
  printf '%-7s %-7s %10s %8s %8s %8s %8s %8s %8s %8s %8s\n' workload run msgs/s broker client send50 send99 send999 e2e50 e2e99 e2e999
  for wl in "$@"; do
    for label in $labels; do
      [ -s "$out/$wl.$label.jsonl" ] || continue
      jq -s -r --arg s "$label" --arg w "$wl" '
        def med(f): map(f) | sort | .[(length-1)/2|floor];
        [$w, $s, (med(.msgs_per_sec)|floor), (med(.broker_cpu_us_per_msg)*100|round/100), (med(.client_cpu_us_per_msg)*100|round/100),
         med(.send_latency_us.p50), med(.send_latency_us.p99), med(.send_latency_us.p999),
         med(.e2e_latency_us.p50), med(.e2e_latency_us.p99), med(.e2e_latency_us.p999)] | @tsv' "$out/$wl.$label.jsonl" |
        awk -F'\t' '{printf "%-7s %-7s %10s %8s %8s %8s %8s %8s %8s %8s %8s\n", $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11}'
    done
  done
}
