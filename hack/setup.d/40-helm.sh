#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3, pinned below) from the Go module proxy for
# hack/test.d/40-helm.sh, which lints and renders deploy/helm/hearth. Debian
# packages no helm, and nothing else may be downloaded here, so it is
# `go install` of upstream's cmd/helm at a pinned tag. The binary is built
# into the machine's cache ($HEARTH_TOOLS_CACHE, default ~/.cache/hearth/bin)
# and linked into e2e/.cache/bin/ (gitignored) next to kube-apiserver and
# etcd; it is rebuilt only when missing or its stamp differs from the pin.
# Cold build: ~3-5 min of CPU on 2 cores (mostly the k8s client libraries;
# shared with the kube-apiserver build's module cache); warm: instant.
set -euo pipefail
cd "$(dirname "$0")/../.."
HELM_VERSION=v3.22.0
. hack/lib/tools-cache.sh
if cached helm "$HELM_VERSION"; then
  echo "helm $HELM_VERSION cached in $CACHE"
  link helm
  exit 0
fi
echo "building helm $HELM_VERSION ..."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Outside this module (its go.mod must not pick helm's dependencies), with
# helm's own go.mod and the checksum database verifying every module.
(cd "$tmp" && GOWORK=off GOFLAGS= GOBIN="$tmp/bin" \
  go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
mv "$tmp/bin/helm" "$CACHE/helm"
echo "$HELM_VERSION" > "$CACHE/helm.version"
link helm
"$BIN/helm" version --short
