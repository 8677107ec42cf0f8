#!/usr/bin/env bash
# Builds the real control plane the e2e suite runs against and caches it:
#   kube-apiserver  k8s.io/kubernetes v1.36.3 (hack/tools/kube-apiserver)
#   etcd            go.etcd.io/etcd/server/v3 v3.6.16 (hack/tools/etcd)
# Both come from the Go module proxy. The binaries land in e2e/.cache/bin/
# (gitignored). A binary is rebuilt only when it is missing or its version
# stamp differs from the pin below. Cold build: ~6-10 min of CPU; warm: seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
KUBE_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
BIN=${HEARTH_E2E_BIN:-$ROOT/e2e/.cache/bin}
mkdir -p "$BIN"
export GOWORK=off GOFLAGS=-mod=readonly

stamp_ok() { # name version
  [ -x "$BIN/$1" ] && [ -f "$BIN/$1.version" ] && [ "$(cat "$BIN/$1.version")" = "$2" ]
}

if stamp_ok etcd "$ETCD_VERSION"; then
  echo "etcd $ETCD_VERSION cached in $BIN"
else
  echo "building etcd $ETCD_VERSION ..."
  (cd hack/tools/etcd && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" .)
  mv "$BIN/etcd.tmp" "$BIN/etcd"
  echo "$ETCD_VERSION" > "$BIN/etcd.version"
fi

if stamp_ok kube-apiserver "$KUBE_VERSION"; then
  echo "kube-apiserver $KUBE_VERSION cached in $BIN"
else
  echo "building kube-apiserver $KUBE_VERSION (several minutes) ..."
  minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  (cd hack/tools/kube-apiserver && go build -trimpath -o "$BIN/kube-apiserver.tmp" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
      -X k8s.io/component-base/version.gitTreeState=clean" \
    k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
  echo "$KUBE_VERSION" > "$BIN/kube-apiserver.version"
fi
"$BIN/etcd" --version | head -1
"$BIN/kube-apiserver" --version
