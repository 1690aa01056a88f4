#!/usr/bin/env bash
# Builds Apogee's container image: the static binaries apogee-broker,
# apogee-namesrv, apogee-controller and apogee-admin (scripts/build.sh:
# CGO_ENABLED=0, -trimpath, version and commit linked in) on FROM scratch
# (deploy/container/Containerfile), so no base image is pulled and nothing
# but the binaries, /etc/passwd and /etc/group (user apogee, 65532), /data
# and /tmp is in it.
#
# The image is built by the first of podman, buildah and docker that works
# here (docker needs its daemon), or by CONTAINER_TOOL when set. The tag is
# apogee:VERSION (the version scripts/build.sh links in; "devel" off a tag)
# unless -t gives one; -o FILE also writes the image as an OCI archive
# (to load into a cluster's nodes: `kind load image-archive FILE`,
# `ctr -n k8s.io images import FILE`).
#
# Usage: scripts/build-image.sh [-t TAG] [-o FILE]
# Prints the tag on the last line of its standard output.
set -euo pipefail
cd "$(dirname "$0")/.."

tag=""
archive=""
while getopts "t:o:h" opt; do
  case $opt in
    t) tag=$OPTARG ;;
    o) archive=$OPTARG ;;
    h) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: scripts/build-image.sh [-t TAG] [-o FILE]" >&2; exit 2 ;;
  esac
done

tool=${CONTAINER_TOOL:-}
if [ -z "$tool" ]; then
  for t in podman buildah docker; do
    if command -v "$t" >/dev/null 2>&1 && "$t" info >/dev/null 2>&1; then
      tool=$t
      break
    fi
  done
fi
if [ -z "$tool" ]; then
  echo "build-image.sh: no container tool works here: install podman or buildah (Debian: apt-get install podman), or start docker's daemon; or set CONTAINER_TOOL" >&2
  exit 3
fi

version=$(git describe --tags --dirty 2>/dev/null || echo devel)
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
tag=${tag:-apogee:$version}

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
scripts/build.sh "$ctx/bin" apogee-broker apogee-namesrv apogee-controller apogee-admin
# The few files besides the binaries, as archives ADD unpacks with their
# modes and owners (numeric: no user of this machine is involved).
root=$ctx/rootfs
mkdir -p "$root/etc" "$root/data" "$root/tmp"
chmod 0755 "$root/etc" "$root/data"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/:/nonexistent\napogee:x:65532:65532:apogee:/data:/nonexistent\n' > "$root/etc/passwd"
printf 'root:x:0:\napogee:x:65532:\n' > "$root/etc/group"
chmod 0644 "$root/etc/passwd" "$root/etc/group"
tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$ctx/base.tar" etc tmp
tar -C "$root" --numeric-owner --owner=65532 --group=65532 -cf "$ctx/data.tar" data
cp deploy/container/Containerfile "$ctx/Containerfile"

args=(-f "$ctx/Containerfile" -t "$tag" --build-arg "VERSION=$version" --build-arg "COMMIT=$commit")
case $tool in
  buildah) buildah build "${args[@]}" "$ctx" ;;
  *) "$tool" build "${args[@]}" "$ctx" ;;
esac

if [ -n "$archive" ]; then
  case $tool in
    buildah) buildah push "$tag" "oci-archive:$archive:$tag" ;;
    docker) docker save -o "$archive" "$tag" ;;
    *) "$tool" save --format oci-archive -o "$archive" "$tag" ;;
  esac
  echo "wrote $archive"
fi
echo "built $tag with $tool"
echo "$tag"
