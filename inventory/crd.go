package inventory

import _ "embed"

// CRD is the CustomResourceDefinition manifest for NodeInventory, for
// clusters where a kube-apiserver stores it.
//
//go:embed crd.yaml
var CRD []byte
