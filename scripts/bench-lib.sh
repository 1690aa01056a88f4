# Shared by the scripts that run Apogee's processes (sourced, not run):
# starting a process and reading the addresses it bound from its ready
# file, the workloads, one run's line and the table of medians. The caller
# sets work (a directory of its own for the processes' files), and for the
# workloads duration, warmup, drain, e2eRate and size, and has jq on PATH.
#
# Every listener of a process started here takes a port from 127.0.0.1:0 and
# is read back from the process's --ready-file (docs/operations.md, "The
# ready file"): no port is fixed, guessed or derived, so two runs side by
# side do not collide.

# bench_start NAME BIN ARGS...: starts BIN ARGS... --ready-file in the
# background (standard output in $work/NAME.out, standard error in
# $work/NAME.err), sets bench_pid, and waits (60 s at most) until the ready
# file names that pid: every listener of the process is open then. A binary
# older than --ready-file (a commit compared by bench-ab-broker.sh) is
# started without it, and the ready file is made from its start line (the
# bound remoting address only).
bench_start() {
  local name=$1 bin=$2 ready="$work/$1.ready" knows=0 i
  shift 2
  rm -f "$ready"
  if "$bin" --help 2>&1 | grep -q -- --ready-file; then
    knows=1
    "$bin" "$@" --ready-file "$ready" >"$work/$name.out" 2>"$work/$name.err" &
  else
    "$bin" "$@" >"$work/$name.out" 2>"$work/$name.err" &
  fi
  bench_pid=$!
  for i in $(seq 1200); do
    if [ "$knows" = 0 ] && [ ! -s "$ready" ] && grep -q " listening on " "$work/$name.out" 2>/dev/null; then
      sed -n 's/.* listening on \([^ ,]*\).*/\1/p' "$work/$name.out" | head -n 1 |
        jq -R --argjson pid "$bench_pid" '{pid: $pid, listen: ., advertise: .}' >"$ready"
    fi
    if [ -s "$ready" ] && [ "$(jq -r .pid "$ready" 2>/dev/null)" = "$bench_pid" ]; then
      return 0
    fi
    if ! kill -0 "$bench_pid" 2>/dev/null; then
      echo "$name exited at start:" >&2
      tail -n 20 "$work/$name.err" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "$name was not ready in 60 s:" >&2
  tail -n 20 "$work/$name.err" >&2
  kill "$bench_pid" 2>/dev/null || true
  return 1
}

# bench_start_nats NAME BIN ARGS...: starts nats-server (BIN) with ARGS on
# 127.0.0.1 and a port of its choosing (-p -1; output in $work/NAME.out and
# .err), sets bench_pid, and sets bench_nats_addr from the line of its log
# that says where it listens for clients.
bench_start_nats() {
  local name=$1 bin=$2 i
  shift 2
  "$bin" "$@" -a 127.0.0.1 -p -1 >"$work/$name.out" 2>"$work/$name.err" &
  bench_pid=$!
  bench_nats_addr=""
  for i in $(seq 1200); do
    bench_nats_addr=$(sed -n 's/.*Listening for client connections on \([0-9.]*:[0-9]*\).*/\1/p' "$work/$name.err" | head -n 1)
    [ -n "$bench_nats_addr" ] && return 0
    kill -0 "$bench_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "nats-server did not start:" >&2
  tail -n 20 "$work/$name.err" >&2
  kill "$bench_pid" 2>/dev/null || true
  return 1
}

# bench_addr NAME KEY: the address NAME's ready file gives for KEY (listen,
# advertise, ha, namesrv, grpc, metrics, pprof, raft); empty when that
# listener is off.
bench_addr() {
  jq -r --arg k "$2" '.[$k] // empty' "$work/$1.ready"
}

# bench_broker_flags BIN: sets bench_listeners, the listener flags of a
# broker run by a benchmark: the remoting port from 127.0.0.1:0, its HA
# port too (flag permitting: older commits derive it, any port when the
# listen port is 0), no embedded name server and no gRPC front end.
bench_broker_flags() {
  local help
  help=$("$1" --help 2>&1 || true)
  bench_listeners=(--listen 127.0.0.1:0 --namesrv-listen "")
  if grep -q -- --grpc-listen <<<"$help"; then
    bench_listeners+=(--grpc-listen "")
  fi
  if grep -q -- --ha-listen <<<"$help"; then
    bench_listeners+=(--ha-listen 127.0.0.1:0)
  fi
}

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

# bench_print_run LABEL WORKLOAD ROUND JSON: one run's line. The broker's
# system calls per message are read-like + write-like (syscr + syscw of its
# /proc/PID/io), its context switches voluntary + involuntary (all threads);
# "-" where the run's apogee-bench did not report them (an older commit's).
bench_print_run() {
  jq -r --arg s "$1" --arg w "$2" --arg r "$3" '
    def r3: if . == null then "-" else (. * 1000 | round / 1000 | tostring) end;
    .broker_kernel_per_msg as $k |
    "\($w) round \($r) \($s): \(.msgs_per_sec|floor) msgs/s, broker \(.broker_cpu_us_per_msg*100|round/100) µs/msg, client \(.client_cpu_us_per_msg*100|round/100) µs/msg, broker syscalls r+w \($k.syscr|r3)+\($k.syscw|r3)/msg, switches v+n \($k.voluntary_ctxt_switches|r3)+\($k.nonvoluntary_ctxt_switches|r3)/msg, send p50/p99/p99.9 \(.send_latency_us.p50)/\(.send_latency_us.p99)/\(.send_latency_us.p999) µs, e2e p50/p99/p99.9 \(.e2e_latency_us.p50)/\(.e2e_latency_us.p99)/\(.e2e_latency_us.p999) µs, errors \(.errors)"' <<<"$4"
}

# bench_medians OUT "LABEL..." WORKLOAD...: the medians of every
# OUT/WORKLOAD.LABEL.jsonl, a line per workload and label. broker and client
# are CPU µs per message; rd, wr, vcs and ivcs the broker's read-like and
# write-like system calls (syscr, syscw) and voluntary and involuntary
# context switches per message ("-" when no run reported them).
bench_medians() {
  local out=$1 labels=$2 wl label
  shift 2
  printf '%-7s %-7s %10s %8s %8s %7s %7s %7s %7s %8s %8s %8s %8s %8s %8s\n' workload run msgs/s broker client rd wr vcs ivcs send50 send99 send999 e2e50 e2e99 e2e999
  for wl in "$@"; do
    for label in $labels; do
      [ -s "$out/$wl.$label.jsonl" ] || continue
      jq -s -r --arg s "$label" --arg w "$wl" '
        def med(f): map(f) | sort | .[(length-1)/2|floor];
        def medk(f): map(.broker_kernel_per_msg | if . == null then null else f end) | map(select(. != null)) |
          if length == 0 then "-" else sort | .[(length-1)/2|floor] * 1000 | round / 1000 end;
        [$w, $s, (med(.msgs_per_sec)|floor), (med(.broker_cpu_us_per_msg)*100|round/100), (med(.client_cpu_us_per_msg)*100|round/100),
         medk(.syscr), medk(.syscw), medk(.voluntary_ctxt_switches), medk(.nonvoluntary_ctxt_switches),
         med(.send_latency_us.p50), med(.send_latency_us.p99), med(.send_latency_us.p999),
         med(.e2e_latency_us.p50), med(.e2e_latency_us.p99), med(.e2e_latency_us.p999)] | @tsv' "$out/$wl.$label.jsonl" |
        awk -F'\t' '{printf "%-7s %-7s %10s %8s %8s %7s %7s %7s %7s %8s %8s %8s %8s %8s %8s\n", $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15}'
    done
  done
}

# bench_stop_server SCRIPT: stops the server of a run ($server), waits for
# it, clears $server and removes $work/data; it fails, saying so with the
# server's log ($work/server.err), when the server had already stopped:
# that run's figures are not the server's.
bench_stop_server() {
  local ok=0
  if ! kill "$server" 2>/dev/null; then
    echo "$1: the server (pid $server) stopped during the run; its log:" >&2
    tail -n 20 "$work/server.err" >&2
    ok=1
  fi
  wait "$server" 2>/dev/null || true
  server=""
  rm -rf "$work/data"
  return $ok
}

# bench_cleanup: the EXIT trap's part common to the scripts that run
# servers: stops the one still running ($server), if any, and removes $work.
bench_cleanup() {
  if [ -n "${server:-}" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$work"
}
