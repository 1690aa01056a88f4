#!/usr/bin/env bash
# Runs the project's test command (./scripts/test.sh, the one README.md gives
# and CI runs) while a CPU hog shares the machine: the suite must be green on
# a busy machine, not only on a quiet one.
#
#   scripts/test-under-load.sh [--runs N] [--hogs N] [--log-dir DIR]
#
#   --runs N     run the suite N times in a row (default 1), stopping at the
#                first failure
#   --hogs N     CPU hogs beside it (default 1: one of two cores busy)
#   --log-dir D  where each run's output goes (default a new temporary
#                directory); the path is printed
#
# The hog is Debian's stress-ng (`stress-ng --cpu N`) when it is installed,
# else a shell busy loop per hog; both are stopped when the script exits,
# however it exits. Nothing is retried: a run that fails is reported as
# failed, with the last lines of its log. At the end a line per run gives
# its wall time and its result.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=1 hogs=1 logdir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --hogs) hogs=$2; shift 2 ;;
    --log-dir) logdir=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "test-under-load.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$logdir" ] || logdir=$(mktemp -d -t apogee-under-load.XXXXXX)
mkdir -p "$logdir"

hogpids=()
stopHogs() {
  local p
  for p in "${hogpids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${hogpids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  hogpids=()
}
trap stopHogs EXIT INT TERM

if command -v stress-ng >/dev/null; then
  stress-ng --cpu "$hogs" --timeout 0 --quiet &
  hogpids+=($!)
  hog="stress-ng --cpu $hogs"
else
  for _ in $(seq "$hogs"); do
    bash -c 'while :; do :; done' &
    hogpids+=($!)
  done
  hog="$hogs shell busy loop(s) (stress-ng is not installed)"
fi
echo "load: $hog on $(nproc) cores; logs in $logdir"

results=()
status=0
for i in $(seq "$runs"); do
  log="$logdir/run-$i.log"
  echo "=== run $i of $runs: ./scripts/test.sh > $log"
  start=$(date +%s)
  if ./scripts/test.sh >"$log" 2>&1; then
    result=passed
  else
    result=FAILED
    status=1
  fi
  secs=$(($(date +%s) - start))
  line="run $i: $result in $((secs / 60))m$((secs % 60))s"
  results+=("$line")
  echo "$line"
  if [ "$status" != 0 ]; then
    echo "--- the last 60 lines of $log:"
    tail -n 60 "$log"
    echo "--- failing tests:"
    grep -E '^(--- FAIL|FAIL|panic:)' "$log" | head -40 || true
    break
  fi
done

echo
echo "under load ($hog):"
printf '  %s\n' "${results[@]}"
exit "$status"
