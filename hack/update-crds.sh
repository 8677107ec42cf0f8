#!/usr/bin/env bash
# Copies the CRDs Hearth installs into deploy/base/crds/ so the pin is
# explicit: SandboxTemplate, SandboxWarmPool and SandboxClaim from
# sigs.k8s.io/agent-sandbox at the version go.mod requires (v1.0.3), and NodeInventory from
# inventory/crd.yaml. The Sandbox CRD (agents.x-k8s.io/v1beta1) is NOT
# installed: that group-version is served by sandbox-apiserver through an
# APIService. Run after bumping agent-sandbox; the deploy test fails when the
# copies drift. The Helm chart's crds/ are symbolic links to these files.
set -euo pipefail
cd "$(dirname "$0")/.."
ver=$(go list -m -f '{{.Version}}' sigs.k8s.io/agent-sandbox)
src=$(go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)/k8s/crds
dst=deploy/base/crds
mkdir -p "$dst"
for kind in sandboxtemplates sandboxwarmpools sandboxclaims; do
  f=extensions.agents.x-k8s.io_$kind.yaml
  # Upstream's files open with a document separator; Helm's crds/ rendering
  # would turn it into an empty document.
  sed '1{/^---$/d}' "$src/$f" >"$dst/$f"
  chmod 0644 "$dst/$f"
done
install -m 0644 inventory/crd.yaml "$dst/sandbox.cocoonstack.io_nodeinventories.yaml"
echo "$ver" > "$dst/AGENT_SANDBOX_VERSION"
echo "copied CRDs from sigs.k8s.io/agent-sandbox@$ver into $dst"
