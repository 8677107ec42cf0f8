#!/usr/bin/env bash
# The project's test command (README): everything, on a fresh machine too.
# First the idempotent setup (hack/setup.sh: Debian packages, the built-in
# guest image, QEMU and its guest, kube-apiserver and etcd, helm; seconds
# when already done; HEARTH_SKIP_SETUP=1 skips it), then vet, unit and
# integration tests, race tests on the concurrent packages, then the suites
# under hack/test.d (e2b SDK, lifecycle, helm chart, e2e).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${HEARTH_SKIP_SETUP:-0}" != 1 ]; then
  bash hack/setup.sh
fi
export GOFLAGS="${GOFLAGS:-} -mod=readonly"
echo "== go vet"
go vet ./...
echo "== go test"
go test -count=1 -timeout 20m ./...
echo "== go test -race (concurrent packages)"
go test -count=1 -race -timeout 20m ./node/... ./fleet/... ./inventory/... ./apiserver/... ./pool/... ./e2b/... ./agent/... ./devserver/... ./server/... ./vmm/sim/... ./fleetview/... ./sandboxclaim/... ./internal/serve/...
for s in hack/test.d/*.sh; do
  [ -e "$s" ] || continue
  echo "== $s"
  bash "$s"
done
