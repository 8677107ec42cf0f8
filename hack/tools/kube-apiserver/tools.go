//go:build tools

// Package tools pins the kube-apiserver build used by the e2e harness.
// It is its own module so the main go.mod stays lean; see
// hack/setup.d/30-kube-binaries.sh.
package tools

import (
	_ "k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
)
