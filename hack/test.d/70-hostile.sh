#!/usr/bin/env bash
# The attack suite (docs/SECURITY.md): e2e/e2b/hostile.test.mjs runs every
# attack an outsider, a hostile tenant (root in its own sandbox) and a
# read-only Kubernetes user tried, each as a test that passes only while
# the attack is refused — through the unmodified e2b SDK, raw HTTP with
# hand-set headers, kubectl with the read-only kubeconfig, and commands run
# as root inside the sandbox — against a fresh sandbox-dev on sim, then the
# attacks that apply to a VM on qemu.
#
# HEARTH_HOSTILE_VMMS (default "sim qemu") picks the backends;
# HEARTH_HOSTILE_ONLY is a --test-name-pattern for one attack. On qemu the
# attacks whose outcome the backend decides run (the agent's API behind
# the data plane and router, the disk bound, snapshot copies:
# HEARTH_HOSTILE_QEMU); the rest are the gateway's and the API's, and the
# sim run already covers them.
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/lib/sandbox-dev.sh
(cd e2e/e2b && npm ci --no-audit --no-fund --loglevel=error)
sandbox_dev_build

# The half-open connection attack holds 20,000 sockets in this test's node
# process and as many in sandbox-dev's; and a node under systemd has a
# high descriptor limit: the guests' own bound must not come from ours.
ulimit -Hn 1048576 2>/dev/null || true
ulimit -Sn "$(ulimit -Hn)" 2>/dev/null || true

hostile_run() { # vmm [sandbox-dev flags...]
  local vmm=$1; shift
  # The sandboxes' disk: sim's is the writable layer alone, qemu's the
  # root disk, which also holds the template image (about 600 MiB).
  local disk_mib=256
  [ "$vmm" = qemu ] && disk_mib=1024
  # Two e2b keys: the first is the default namespace's, the second belongs
  # to namespace "other" (key file: one key a line, an optional namespace
  # after it).
  mkdir -p "$data"
  local k1 k2
  k1="e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  k2="e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  printf '%s\n%s other\n' "$k1" "$k2" >"$data/e2b-api-key"
  chmod 600 "$data/e2b-api-key"
  sandbox_dev_start --e2b-domain hearth.test --disk-size "${disk_mib}Mi" "$@"
  e2b_key=$k1
  local want=2 limit=600
  [ "$vmm" = qemu ] && limit=900
  sandbox_dev_wait_warm "$want" "$limit"
  local only=() pattern=${HEARTH_HOSTILE_ONLY:-}
  if [ "$vmm" = qemu ] && [ -z "$pattern" ]; then
    pattern=${HEARTH_HOSTILE_QEMU:-Connection|traffic token|client-sent|re-key|read-only kubeconfig gets|sparse|hard links|filling the disk}
  fi
  [ -n "$pattern" ] && only=(--test-name-pattern "$pattern")
  (cd e2e/e2b && E2B_API_URL="$e2b_url" E2B_SANDBOX_URL="$e2b_url" E2B_API_KEY="$k1" HEARTH_E2B_KEY_OTHER="$k2" \
    HEARTH_E2B_DOMAIN=hearth.test HEARTH_TEMPLATE=ghcr.io/cocoonstack/sandbox/rt:24.04 HEARTH_DATA_DIR="$data" \
    HEARTH_KUBECONFIG="$kubeconfig" HEARTH_KUBECONFIG_READONLY="$(dirname "$kubeconfig")/kubeconfig-readonly" \
    HEARTH_DISK_MIB="$disk_mib" HEARTH_VMM="$vmm" \
    node --test --test-concurrency=1 --test-reporter=spec "${only[@]}" hostile.test.mjs) ||
    { echo "---- sandbox-dev log tail ----"; tail -80 "$tmp/sandbox-dev.log"; exit 1; }
  echo "70-hostile ($vmm): every attack refused"
}

for vmm in ${HEARTH_HOSTILE_VMMS:-sim qemu}; do
  case $vmm in
  sim) hostile_run sim ;;
  qemu)
    sandbox_dev_cleanup
    trap - EXIT
    . hack/lib/sandbox-dev.sh
    sandbox_dev_build
    hostile_run qemu --vmm qemu --nodes 1
    ;;
  esac
done
