#!/usr/bin/env bash
# A real, confined sandbox, checked from outside: the unmodified e2b SDK
# against a fresh sandbox-dev on its default backend and image
# (e2e/e2b/sandbox.test.mjs: python3 in the image, user and home, sudo, no
# host paths or loopback services reachable, no survivors, no token in ps;
# e2e/e2b/interpreter.test.mjs: the unmodified @e2b/code-interpreter SDK,
# runCode and code contexts on port 49999 served by the agent),
# then kill -9 of sandbox-dev with warm microVMs up, a restart on the same
# data dir and a stop: no guest process may survive that the node does not own;
# then the same acceptance on the qemu backend (real microVMs, TCG here).
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/lib/sandbox-dev.sh
(cd e2e/e2b && npm ci --no-audit --no-fund --loglevel=error)
sandbox_dev_build
sandbox_dev_start --e2b-domain hearth.test
sandbox_dev_wait_warm 2
(cd e2e/e2b && E2B_API_URL="$e2b_url" E2B_SANDBOX_URL="$e2b_url" E2B_API_KEY="$e2b_key" HEARTH_E2B_DOMAIN=hearth.test \
  HEARTH_TEMPLATE=ghcr.io/cocoonstack/sandbox/rt:24.04 HEARTH_DATA_DIR="$data" HEARTH_HOST_PORTS="$ports" \
  node --test sandbox.test.mjs interpreter.test.mjs) || { echo "---- sandbox-dev log tail ----"; tail -80 "$tmp/sandbox-dev.log"; exit 1; }

# Guest processes of this sandbox-dev: those in its sim VMs' cgroups,
# hearth-sim/<key>-<vm>, where key is the first 8 hex digits of the SHA-256
# of a node's VM root directory (vmm/sim). Other guests on the host (another
# run's) do not count.
guests() {
  local n=0 p i keys=()
  for i in 0 1; do
    keys+=("$(printf '%s' "$data/nodes/node-$i/vms" | sha256sum | cut -c1-8)")
  done
  for p in /proc/[0-9]*; do
    for k in "${keys[@]}"; do
      grep -qs "hearth-sim/$k-" "$p/cgroup" && { n=$((n + 1)); break; }
    done
  done
  echo "$n"
}
echo "guest processes before kill -9: $(guests)"
kill -KILL "$pid"; wait "$pid" 2>/dev/null || true; pid=""
sandbox_dev_start
sandbox_dev_wait_warm 2
sandbox_dev_stop
left=$(guests)
echo "guest processes after kill -9, restart and stop: $left"
[ "$left" = 0 ] || { echo "FAIL: $left guest processes survived"; ps -eo pid,args | grep -v grep | grep -i 'hearth\|agent' | head; exit 1; }
echo "52-real-sandbox (sim): 1 passed, 0 failed"

# The same acceptance on the qemu backend: real microVMs (TCG here) booting
# the same image as a root disk.
sandbox_dev_cleanup
trap - EXIT
. hack/lib/sandbox-dev.sh
sandbox_dev_build
sandbox_dev_start --vmm qemu --nodes 1
sandbox_dev_wait_warm 2 900
(cd e2e/e2b && HEARTH_VMM=qemu E2B_API_URL="$e2b_url" E2B_SANDBOX_URL="$e2b_url" E2B_API_KEY="$e2b_key" \
  HEARTH_TEMPLATE=ghcr.io/cocoonstack/sandbox/rt:24.04 HEARTH_DATA_DIR="$data" HEARTH_HOST_PORTS="$ports" \
  node --test sandbox.test.mjs) || { echo "---- sandbox-dev log tail ----"; tail -80 "$tmp/sandbox-dev.log"; exit 1; }
echo "52-real-sandbox (qemu): 1 passed, 0 failed"
