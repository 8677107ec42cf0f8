#!/usr/bin/env bash
# What the sim backend (vmm/sim: the confined process sandbox) needs on the
# node: slirp4netns (the egress lane's user-mode network), iproute2 (`ip`,
# for the egress lane's unreachable routes) and a static busybox (the
# built-in root filesystem). Overlayfs, namespaces and cgroups come with the
# kernel. Idempotent: installs only what is missing.
set -euo pipefail

need=()
command -v slirp4netns >/dev/null || need+=(slirp4netns)
command -v ip >/dev/null || need+=(iproute2)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
    apt-get update >/dev/null
    apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

# Overlayfs must be available (built in or as a module).
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || {
  echo "12-sim.sh: overlayfs is not available; the sim backend cannot run" >&2
  exit 1
}
