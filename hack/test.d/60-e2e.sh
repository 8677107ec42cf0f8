#!/usr/bin/env bash
# End-to-end suite (its own module, e2e/): manifests rendered with kubectl
# kustomize, and the real-cluster run — etcd + kube-apiserver from
# e2e/.cache/bin (hack/setup.d/30-kube-binaries.sh), sandbox-apiserver and
# two sandboxd --vmm sim built from this checkout, driven with kubectl and
# client-go. Without the control-plane binaries the real-cluster test SKIPs
# and prints why. TestFault is the fault-injection suite (docs/FAULTS.md):
# concurrent creates while a node is killed, wedged, stopped or slowed and
# while sandbox-apiserver is killed; its table is repeated in the summary.
set -euo pipefail
cd "$(dirname "$0")/../../e2e"
export GOWORK=off
go vet ./...
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
go test -count=1 -timeout 30m -v ./... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
echo "== e2e summary"
grep -E -- '--- (PASS|FAIL|SKIP)|SKIP' "$log" || true
if grep -q 'fault-injection results' "$log"; then
  echo "== fault injection (docs/FAULTS.md)"
  grep -E '^ +\|[ -]' "$log" || true
fi
exit "$rc"
