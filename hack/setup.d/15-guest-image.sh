#!/usr/bin/env bash
# Builds Hearth's built-in guest image (Debian bookworm by mmdebstrap, see
# image/build-rootfs.sh and image.BuiltinPackages) into the image cache that
# tests, sandbox-dev and sandboxd share:
#   ${HEARTH_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/images}
# Idempotent: the image is cached under a hash of its recipe and rebuilt
# only when the package list or the build script changed (cold: ~1.5-3 min and
# Debian's mirror; warm: a few seconds, mostly `go build`). Needs
# 10-packages.sh (mmdebstrap) first. HEARTH_SKIP_GUEST_IMAGE=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${HEARTH_SKIP_GUEST_IMAGE:-}" = 1 ]; then
  echo "15-guest-image: skipped (HEARTH_SKIP_GUEST_IMAGE=1)"
  exit 0
fi
go build -o /tmp/hearth-sandbox-image.$$ ./cmd/sandbox-image
trap 'rm -f /tmp/hearth-sandbox-image.$$' EXIT
# One retry: a mirror hiccup should not fail a fresh machine's setup.
dir=$(/tmp/hearth-sandbox-image.$$ build) || dir=$(/tmp/hearth-sandbox-image.$$ build)
echo "15-guest-image: $dir ($(du -sh "$dir" 2>/dev/null | cut -f1))"
