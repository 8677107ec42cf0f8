#!/usr/bin/env bash
# The e2b SDK acceptance test: installs the pinned e2b npm package
# (e2e/e2b/package-lock.json) and runs e2e/e2b/sdk.test.mjs with the real
# SDK against an in-process gateway (Go harness: e2b/sdk_test.go TestSDK).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "50-e2b-sdk: node and npm are required" >&2
  exit 1
fi
(cd e2e/e2b && npm ci --no-audit --no-fund --loglevel=error)
HEARTH_E2B_SDK_TEST=1 go test -count=1 -timeout 10m -run '^TestSDK$' -v ./e2b/
