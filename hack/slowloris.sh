#!/usr/bin/env bash
# Holds N (default 20000) half-open requests against a running node API
# (sandboxd, or a sandbox-dev node) and checks /healthz and a claim still
# answer and every stalled request is answered within the read timeout
# (bench/slowloris).
#
#   hack/slowloris.sh ADDR [N] [TOKEN] [TEMPLATE]
#
# Needs a descriptor per connection on this side; the node needs one too
# (its --max-connections defaults to its descriptor limit minus 1024, so
# raise the node's `ulimit -n` above N + 1024 for all N to be accepted at
# once; beyond the cap they wait in the accept queue).
set -euo pipefail
cd "$(dirname "$0")/.."
addr="${1:?usage: hack/slowloris.sh ADDR [N] [TOKEN] [TEMPLATE]}"
n="${2:-20000}"
ulimit -n "$(( n + 1024 ))" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
echo "slowloris: ulimit -n $(ulimit -n)"
exec go run ./bench/slowloris -addr "$addr" -conns "$n" -token "${3:-}" -template "${4:-}"
