#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine (idempotent).
# Each step is a script of its own under hack/setup.d/, run in name order.
set -euo pipefail
cd "$(dirname "$0")/.."
for s in hack/setup.d/*.sh; do
  [ -e "$s" ] || continue
  echo "== setup: $s"
  bash "$s"
done
