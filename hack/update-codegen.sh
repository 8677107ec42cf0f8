#!/usr/bin/env bash
# Regenerates deepcopy functions for the packages that carry API types.
set -euo pipefail
cd "$(dirname "$0")/.."
go run k8s.io/code-generator/cmd/deepcopy-gen@v0.36.2 \
  --output-file zz_generated.deepcopy.go \
  --go-header-file hack/boilerplate.go.txt \
  ./sandbox ./inventory
