#!/usr/bin/env bash
# Builds the real control plane the e2e suite runs against and caches it:
#   kube-apiserver  k8s.io/kubernetes v1.36.3 (hack/tools/kube-apiserver)
#   etcd            go.etcd.io/etcd/server/v3 v3.6.16 (hack/tools/etcd)
# Both come from the Go module proxy. They are built into the machine's cache
# ($HEARTH_TOOLS_CACHE, default ~/.cache/hearth/bin, shared by every clone)
# and linked into e2e/.cache/bin/ (gitignored), where the suites look. A
# binary is rebuilt only when it is missing or its version stamp differs
# from the pin below. Cold build: ~6-10 min of CPU; cached: instant.
set -euo pipefail
cd "$(dirname "$0")/../.."
KUBE_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
export GOWORK=off GOFLAGS=-mod=readonly
. hack/lib/tools-cache.sh

if cached etcd "$ETCD_VERSION"; then
  echo "etcd $ETCD_VERSION cached in $CACHE"
else
  echo "building etcd $ETCD_VERSION ..."
  (cd hack/tools/etcd && go build -trimpath -ldflags "-s -w" -o "$CACHE/etcd.tmp" .)
  mv "$CACHE/etcd.tmp" "$CACHE/etcd"
  echo "$ETCD_VERSION" > "$CACHE/etcd.version"
fi
link etcd

if cached kube-apiserver "$KUBE_VERSION"; then
  echo "kube-apiserver $KUBE_VERSION cached in $CACHE"
else
  echo "building kube-apiserver $KUBE_VERSION (several minutes) ..."
  minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  (cd hack/tools/kube-apiserver && go build -trimpath -o "$CACHE/kube-apiserver.tmp" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
      -X k8s.io/component-base/version.gitTreeState=clean" \
    k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$CACHE/kube-apiserver.tmp" "$CACHE/kube-apiserver"
  echo "$KUBE_VERSION" > "$CACHE/kube-apiserver.version"
fi
link kube-apiserver
"$BIN/etcd" --version | sed -n 1p # sed reads it all: head could leave etcd a SIGPIPE (exit 141 under pipefail)
"$BIN/kube-apiserver" --version
