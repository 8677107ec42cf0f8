#!/usr/bin/env bash
# Runs examples/lifecycle (every verb on the Kubernetes and e2b surfaces)
# against a fresh sandbox-dev (hack/lib/sandbox-dev.sh: built, started on
# loopback, stopped on exit).
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/lib/sandbox-dev.sh
sandbox_dev_build
go build -o "$tmp/bin/lifecycle" ./examples/lifecycle
sandbox_dev_start
[ -n "$e2b_url" ] || echo "NOTE: no E2B_API_URL in the ready line; running the Kubernetes surface only"
# The example's template is the built-in Debian image under its own name,
# so its pool needs no registry.
"$tmp/bin/lifecycle" -kubeconfig "$kubeconfig" -e2b-url "$e2b_url" -e2b-key "$e2b_key" \
  -namespace default -template hearth.local/debian:bookworm || {
  echo "---- sandbox-dev log tail ----"; tail -80 "$tmp/sandbox-dev.log"; exit 1; }
