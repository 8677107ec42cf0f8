#!/usr/bin/env bash
# Runs every Hearth benchmark (bench/hearthbench) and prints its tables as
# Markdown; docs/PERFORMANCE.md is a copy of one run. Takes a few minutes on
# a 2-core machine.
#
#   hack/bench.sh                 # everything
#   hack/bench.sh -quick          # a smoke run with small sizes
#   hack/bench.sh apiclaim lookup # some benchmarks (see -list)
#
# Output also goes to $OUT (default _output/bench.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
out="${OUT:-_output/bench.md}"
mkdir -p "$(dirname "$out")"
# The sim backend's guest agent sits next to the benchmark binary, where
# vmm/sim.ResolveAgent finds it.
go build -o "$bin/hearthbench" ./bench/hearthbench
go build -o "$bin/sandbox-agent" ./cmd/sandbox-agent
{
  echo "# hearthbench run, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
  "$bin/hearthbench" "$@" 2> >(grep --line-buffered '^#' >&2)
} | tee "$out"
