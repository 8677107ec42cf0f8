#!/usr/bin/env bash
# Runs examples/lifecycle (every verb on the Kubernetes and e2b surfaces)
# against a fresh sandbox-dev: builds and starts it in the background on
# loopback, waits for its ready line (kubeconfig, e2b URL and key), runs the
# example, and stops sandbox-dev by PID on exit (trap). Skips, saying so,
# while cmd/sandbox-dev does not exist.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -f cmd/sandbox-dev/main.go ]; then
  echo "SKIP lifecycle example: cmd/sandbox-dev does not exist yet"
  exit 0
fi
tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  # Racy by nature (the port is released before use); good enough on loopback.
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null ||
    echo $((20000 + RANDOM % 20000))
}

go build -o "$tmp/bin/sandbox-dev" ./cmd/sandbox-dev
go build -o "$tmp/bin/sandbox-agent" ./cmd/sandbox-agent
go build -o "$tmp/bin/lifecycle" ./examples/lifecycle

"$tmp/bin/sandbox-dev" --data-dir "$tmp/data" --secure-port "$(free_port)" \
  --e2b-bind-address "127.0.0.1:$(free_port)" >"$tmp/sandbox-dev.log" 2>&1 &
pid=$!

# sandbox-dev prints one ready line naming the kubeconfig, the e2b URL and
# the file holding the generated e2b API key:
#   sandbox-dev ready in 1.6s: export KUBECONFIG=<path>; ...; e2b: E2B_API_URL=<url> E2B_API_KEY=$(cat <file>)
ready=""
for _ in $(seq 1 600); do
  kill -0 "$pid" 2>/dev/null || { echo "sandbox-dev exited:"; tail -50 "$tmp/sandbox-dev.log"; exit 1; }
  ready=$(grep -m1 'sandbox-dev ready' "$tmp/sandbox-dev.log" 2>/dev/null || true)
  [ -n "$ready" ] && break
  sleep 0.2
done
if [ -z "$ready" ]; then
  echo "sandbox-dev printed no ready line within 120s:"; tail -50 "$tmp/sandbox-dev.log"; exit 1
fi
echo "$ready"
kubeconfig=$(sed -n 's/.*KUBECONFIG=\([^;[:space:]]*\).*/\1/p' <<<"$ready")
e2b_url=$(sed -n 's/.*E2B_API_URL=\([^;[:space:]]*\).*/\1/p' <<<"$ready")
key_file=$(sed -n 's/.*E2B_API_KEY=\$(cat \([^)]*\)).*/\1/p' <<<"$ready")
key=""
if [ -n "$key_file" ]; then key=$(cat "$key_file"); fi
[ -n "$kubeconfig" ] || { echo "no KUBECONFIG in the ready line"; exit 1; }
[ -n "$e2b_url" ] || echo "NOTE: no E2B_API_URL in the ready line; running the Kubernetes surface only"

"$tmp/bin/lifecycle" -kubeconfig "$kubeconfig" -e2b-url "$e2b_url" -e2b-key "$key" \
  -namespace default -template ghcr.io/hearthvm/lifecycle-python:3.12 || {
  echo "---- sandbox-dev log tail ----"; tail -80 "$tmp/sandbox-dev.log"; exit 1; }
