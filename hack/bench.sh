#!/usr/bin/env bash
# Runs every Hearth benchmark (bench/hearthbench) and prints its tables as
# Markdown; docs/PERFORMANCE.md is a copy of one run. Takes a few minutes on
# a 2-core machine.
#
#   hack/bench.sh                 # everything
#   hack/bench.sh -quick          # a smoke run with small sizes
#   hack/bench.sh apiclaim lookup # some benchmarks (see -list)
#   hack/bench.sh nodescale       # claim CPU vs node size (100 / 1,000 / 10,000 VMs held)
#   hack/bench.sh live            # only the live fleet view's go test benchmarks
#   hack/bench.sh egress          # only the egress policy's go test benchmarks (root)
#
# With no arguments, the live fleet view's `go test` benchmarks (fleetview,
# fleet, the node's change stream) and the egress policy's follow
# hearthbench's tables.
#
# Output also goes to $OUT (default _output/bench.md).
set -euo pipefail
cd "$(dirname "$0")/.."

# live_view runs the go test benchmarks beside the live view's code: the
# 200 × 5k store (heap, one change, lookups, join/leave, resync, churn at
# 1,000 changes/s with 10 watchers, claim → watcher end to end), the
# router's nodes View, the fleet's lookups, and the node's change stream (one change; the periodic consistency check).
live_view() {
  echo "## Live fleet view (go test benchmarks), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
  echo '```'
  go test -run XXX -bench . -benchtime 5x ./fleetview/ | grep -E '^(Benchmark|goos|cpu)'
  go test -run XXX -bench 'ClaimToWatcher|Lookup|NodesView|ApplyOneChange' -benchtime 200x ./fleetview/ | grep -E '^Benchmark'
  go test -run XXX -bench . -benchtime 200x ./fleet/ | grep -E '^Benchmark'
  go test -run XXX -bench Hub_ -benchtime 200x ./node/ | grep -E '^Benchmark'
  echo '```'
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
}
# egress runs the egress policy's go test benchmarks (root: network
# namespaces and the sim driver): a 50-rule policy's Apply on a prepared
# namespace, a node's claim with no policy against one with 50 rules,
# alternating in one run, and a resume's time to its first allowed
# connection.
egress_policy() {
  echo "## Egress policy (go test benchmarks), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
  echo '```'
  go test -run XXX -bench 'Apply_(50Rules|OneRule)' -benchtime 300x ./egress/nft/ | grep -E '^Benchmark'
  go test -run XXX -bench Claim_SimEgressPolicy -benchtime 60x ./node/ | grep -E '^Benchmark'
  go test -run XXX -bench Resume_SimEgress -benchtime 10x ./node/ | grep -E '^Benchmark'
  echo '```'
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
}
if [ "${1:-}" = egress ]; then
  out="${OUT:-_output/bench-egress.md}"
  mkdir -p "$(dirname "$out")"
  egress_policy | tee "$out"
  exit 0
fi
if [ "${1:-}" = live ]; then
  out="${OUT:-_output/bench-live.md}"
  mkdir -p "$(dirname "$out")"
  live_view | tee "$out"
  exit 0
fi
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
out="${OUT:-_output/bench.md}"
mkdir -p "$(dirname "$out")"
# The sim backend's guest agent sits next to the benchmark binary, where
# vmm/sim.ResolveAgent finds it.
go build -o "$bin/hearthbench" ./bench/hearthbench
CGO_ENABLED=0 go build -o "$bin/sandbox-agent" ./cmd/sandbox-agent  # static: sim runs it inside the template rootfs
{
  echo "# hearthbench run, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
  "$bin/hearthbench" "$@" 2> >(grep --line-buffered '^#' >&2)
  if [ $# -eq 0 ]; then
    echo
    live_view
    echo
    egress_policy
  fi
} | tee "$out"
