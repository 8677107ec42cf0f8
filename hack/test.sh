#!/usr/bin/env bash
# The project's test command (README): everything, on a fresh machine too.
# First the idempotent setup (hack/setup.sh: Debian packages, the built-in
# guest image, QEMU and its guest, kube-apiserver and etcd, helm; seconds
# when already done; HEARTH_SKIP_SETUP=1 skips it), then vet, the unit and
# integration tests — under the race detector for the concurrent packages,
# plainly for the rest, each package once — then the suites under
# hack/test.d (helm chart, fuzzing pass, e2b SDK, real sandboxes,
# lifecycle, e2e). Each stage prints the seconds it took.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
stage_start=$SECONDS
stage() { # name: closes the previous stage's timing, opens the next
  echo "== $1 (at ${SECONDS}s; previous stage took $((SECONDS - stage_start))s)"
  stage_start=$SECONDS
}
if [ "${HEARTH_SKIP_SETUP:-0}" != 1 ]; then
  bash hack/setup.sh
fi
export GOFLAGS="${GOFLAGS:-} -mod=readonly"
stage "go vet"
go vet ./...
# The concurrent packages run under the race detector; every other package
# runs plainly. No package runs twice. vmm/sim/seccomp runs plainly: its
# capability test needs a binary without cgo, as the agent is (-race links
# cgo).
race=(./node/... ./fleet/... ./inventory/... ./apiserver/... ./pool/... ./e2b/... ./agent/...
  ./devserver/... ./server/... ./vmm/sim ./fleetview/... ./sandboxclaim/... ./internal/serve/... ./egress/...)
mapfile -t plain < <(comm -23 <(go list ./... | sort) <(go list "${race[@]}" | sort))
stage "go test (${#plain[@]} packages)"
go test -count=1 -timeout 20m "${plain[@]}"
stage "go test -race (concurrent packages)"
go test -count=1 -race -timeout 20m "${race[@]}"
for s in hack/test.d/*.sh; do
  [ -e "$s" ] || continue
  stage "$s"
  bash "$s"
done
stage "done: every suite passed in $((SECONDS - t0))s"
