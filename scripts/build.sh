#!/usr/bin/env bash
# Builds the commands under cmd/ as static binaries into DIR (default
# ./bin): CGO_ENABLED=0, so the network resolver is Go's own and nothing links
# libc; -trimpath; the version and the commit linked in (what --version and
# the broker's start line print). The version is `git describe --tags` when
# the commit is tagged (or past a tag), else "devel"; the commit is
# `git rev-parse HEAD`, with "-dirty" when the work tree has changes.
# With COMMAND names after DIR (apogee-broker ...), only those are built.
#
# Usage: scripts/build.sh [DIR [COMMAND...]]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin}
shift || true
version=$(git describe --tags --dirty 2>/dev/null || echo devel)
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit-dirty"
fi
pkg=github.com/apogeemq/apogee/internal/version
if [ $# -gt 0 ]; then
  names=("$@")
else
  names=()
  for dir in cmd/*/; do names+=("$(basename "$dir")"); done
fi
mkdir -p "$out"
for name in "${names[@]}"; do
  if [ ! -d "cmd/$name" ]; then
    echo "build.sh: no command cmd/$name" >&2
    exit 2
  fi
  CGO_ENABLED=0 go build -trimpath -ldflags "-X $pkg.version=$version -X $pkg.commit=$commit" -o "$out/$name" "./cmd/$name"
  echo "built $out/$name ($version, commit $commit)"
done
