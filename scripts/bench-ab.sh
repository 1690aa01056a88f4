#!/usr/bin/env bash
# Compares two commits on one Go benchmark by alternating them: this machine's
# speed drifts by tens of percent within minutes, so runs of A and then of B
# measure the drift as much as the change. Builds the package's test binary
# at each commit (in temporary worktrees), then runs A, B, A, B, ... ROUNDS
# times each, the order swapped every round, and prints every result line and
# the median of each reported metric per commit.
#
# Usage: scripts/bench-ab.sh A B PKG BENCH ROUNDS [test binary flags]
#   scripts/bench-ab.sh main~1 main ./store 'PutDispatch$/keys=fixed/topics=1000$' 5 -test.benchtime 1000000x
# Environment variables (APOGEE_BENCH_WARM, ...) pass through to the runs.
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
a=$1 b=$2 pkg=$3 bench=$4 rounds=$5
shift 5
cd "$(dirname "$0")/.."
work=$(mktemp -d)
cleanup() {
  for ref in a b; do
    [ -d "$work/$ref" ] && git worktree remove --force "$work/$ref" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
for ref in a b; do
  commit=$a
  [ "$ref" = b ] && commit=$b
  git worktree add --quiet --detach "$work/$ref" "$commit"
  (cd "$work/$ref" && go test -c -o "$work/$ref.test" "$pkg")
  # The tests run in the package's directory of that commit, as go test does.
  (cd "$work/$ref" && go list -f '{{.Dir}}' "$pkg") >"$work/$ref.dir"
done
run() { # ref, then the test binary's flags
  local ref=$1 out
  shift
  out=$(cd "$(cat "$work/$ref.dir")" && "$work/$ref.test" -test.run '^$' -test.bench "$bench" "$@" 2>&1 | grep '^Benchmark' || true)
  [ -n "$out" ] || out="(no result)"
  sed "s/^/$ref /" <<<"$out" | tee -a "$work/results"
}
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then first=a second=b; else first=b second=a; fi
  run "$first" "$@"
  run "$second" "$@"
done
echo "medians (a = $a, b = $b):"
# Each result line: ref, name, iterations, then value/unit pairs.
awk '$3 ~ /^[0-9]+$/ {
    for (i = 4; i + 1 <= NF; i += 2) {
      k = $2 SUBSEP $(i + 1) SUBSEP $1
      if (!(k in n)) order[++keys] = k
      v[k, ++n[k]] = $i
    }
  }
  END {
    for (o = 1; o <= keys; o++) {
      k = order[o]; m = n[k]
      for (i = 1; i <= m; i++) s[i] = v[k, i]
      for (i = 2; i <= m; i++) { x = s[i]; j = i - 1; while (j > 0 && s[j] + 0 > x + 0) { s[j + 1] = s[j]; j-- } s[j + 1] = x }
      med = (m % 2) ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
      split(k, p, SUBSEP)
      printf "%s %s %s: %g (%d runs)\n", p[3], p[1], p[2], med, m
    }
  }' "$work/results" | sort
