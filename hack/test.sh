#!/usr/bin/env bash
# The project's test command (README): vet, unit and integration tests,
# race tests on the concurrent packages, then the end-to-end suites.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:-} -mod=readonly"
echo "== go vet"
go vet ./...
echo "== go test"
go test -count=1 -timeout 20m ./...
echo "== go test -race (concurrent packages)"
go test -count=1 -race -timeout 20m ./node/... ./claim/... ./inventory/... ./apiserver/... ./pool/... ./e2b/... ./devserver/... ./vmm/sim/...
for s in hack/test.d/*.sh; do
  [ -e "$s" ] || continue
  echo "== $s"
  bash "$s"
done
