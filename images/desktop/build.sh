#!/usr/bin/env bash
# make image: builds the desktop image (IMAGE, default localhost/cubepod/desktop:dev)
# with podman or docker. deskd and panelgw are built here (static) and copied
# in (BINARIES=prebuilt), so no Go or Node image is needed; the Debian base
# is the registry's debian:bookworm-slim when it can be had, else one made
# here with debootstrap (minbase bookworm, from apt's own mirror).
set -euo pipefail
cd "$(dirname "$0")/../.."
. images/desktop/engine.sh
IMAGE=${IMAGE:-localhost/cubepod/desktop:dev}
GO=${GO:-go}
LOCAL_BASE=localhost/debian:bookworm-slim

base=${BASE_IMAGE:-}
if [ -z "$base" ]; then
  if engine image inspect docker.io/library/debian:bookworm-slim >/dev/null 2>&1 ||
     timeout 60 "$ENGINE" pull -q docker.io/library/debian:bookworm-slim >/dev/null 2>&1; then
    base=docker.io/library/debian:bookworm-slim
  else
    base=$LOCAL_BASE
    if ! engine image inspect "$base" >/dev/null 2>&1; then
      command -v debootstrap >/dev/null || { echo "make image: no registry and no debootstrap (apt-get install debootstrap)" >&2; exit 1; }
      mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
      [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
      mirror=${mirror:-http://deb.debian.org/debian}
      root=$(mktemp -d -t deskd-base-XXXXXX)
      trap 'rm -rf "$root"' EXIT
      echo "make image: no registry here; making $base with debootstrap from $mirror"
      debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
      tar -C "$root" -c . | engine import - "$base" >/dev/null
    fi
  fi
fi

make -s assets
mkdir -p bin/image
CGO_ENABLED=0 "$GO" build -trimpath -ldflags="-s -w" -o bin/image/ ./cmd/deskd ./cmd/panelgw
build=(build -f images/desktop/Dockerfile --build-arg BASE_IMAGE="$base" --build-arg BINARIES=prebuilt -t "$IMAGE")
[ "$(basename "$ENGINE")" = podman ] && build+=(--network host)
engine "${build[@]}" .
echo "make image: $IMAGE ($(engine image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f MiB", $1 / 1048576 }'), base $base)"
