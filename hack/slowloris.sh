#!/usr/bin/env bash
# Holds N (default 20000) half-open requests against a running node API
# (sandboxd, or a sandbox-dev node) and checks /healthz (timed on fresh
# connections), a claim and any extra URLs still answer, and every stalled
# request is answered or closed within the read timeout (bench/slowloris).
#
#   hack/slowloris.sh ADDR [N] [TOKEN] [TEMPLATE] [-- bench/slowloris flags]
#
#   hack/slowloris.sh 127.0.0.1:7070 20000 "$(cat token)" "" -- \
#     -probe http://127.0.0.1:3000/health
#
# The node keeps at most --max-connections-per-source of them (4,096 by
# default): the oldest stalled ones give way to newer connections, so
# /healthz answers at once. This side needs a descriptor per connection:
# the script raises `ulimit -n` above N when it may; under a lower hard
# limit (a container's) bench/slowloris holds the connections in child
# processes of itself.
set -euo pipefail
cd "$(dirname "$0")/.."
addr="${1:?usage: hack/slowloris.sh ADDR [N] [TOKEN] [TEMPLATE] [-- FLAGS]}"
n="${2:-20000}"
token="${3:-}"
template="${4:-}"
shift $(( $# < 4 ? $# : 4 ))
[ "${1:-}" = "--" ] && shift
ulimit -n "$(( n + 1024 ))" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
echo "slowloris: ulimit -n $(ulimit -n)"
bin="$(mktemp -d)/slowloris"
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./bench/slowloris
"$bin" -addr "$addr" -conns "$n" -token "$token" -template "$template" "$@"
