//go:build tools

// Package deps pins the modules the project builds on.
package deps

import (
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/stretchr/testify/require"
	_ "go.etcd.io/bbolt"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	_ "k8s.io/apimachinery/pkg/runtime"
	_ "k8s.io/apiserver/pkg/server"
	_ "k8s.io/apiserver/pkg/storage/storagebackend/factory"
	_ "k8s.io/client-go/dynamic"
	_ "k8s.io/component-base/logs"
	_ "k8s.io/kube-openapi/pkg/common"
	_ "sigs.k8s.io/agent-sandbox/api/v1beta1"
	_ "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)
