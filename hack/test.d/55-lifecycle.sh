#!/usr/bin/env bash
# Runs examples/lifecycle (every verb on the Kubernetes and e2b surfaces)
# against a fresh sandbox-dev: builds and starts it in the background on
# loopback, waits for its kubeconfig and readiness, runs the example, and
# stops sandbox-dev by PID on exit (trap). Skips, saying so, while
# cmd/sandbox-dev does not exist yet.
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
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null ||
    echo $((20000 + RANDOM % 20000))
}

go build -o "$tmp/bin/sandbox-dev" ./cmd/sandbox-dev
go build -o "$tmp/bin/lifecycle" ./examples/lifecycle
[ -f cmd/sandbox-agent/main.go ] && go build -o "$tmp/bin/sandbox-agent" ./cmd/sandbox-agent

port=$(free_port)
e2b_port=$(free_port)
key=lifecycle-e2e-key
echo "$key" > "$tmp/e2b-keys"
args=(--data-dir "$tmp/data" --secure-port "$port")
help=$("$tmp/bin/sandbox-dev" --help 2>&1 || true)
grep -q -- '--e2b-bind-address' <<<"$help" && args+=(--e2b-bind-address "127.0.0.1:$e2b_port")
grep -q -- '--e2b-api-key-file' <<<"$help" && args+=(--e2b-api-key-file "$tmp/e2b-keys")
grep -q -- '--enable-e2b-api' <<<"$help" && args+=(--enable-e2b-api)

"$tmp/bin/sandbox-dev" "${args[@]}" >"$tmp/sandbox-dev.log" 2>&1 &
pid=$!

# Ready when a kubeconfig exists under the data dir and /readyz answers.
kubeconfig=""
for _ in $(seq 1 600); do
  kill -0 "$pid" 2>/dev/null || { echo "sandbox-dev exited:"; tail -50 "$tmp/sandbox-dev.log"; exit 1; }
  [ -z "$kubeconfig" ] && kubeconfig=$(find "$tmp/data" -maxdepth 2 -name '*kubeconfig*' -type f 2>/dev/null | head -1)
  if [ -n "$kubeconfig" ] && kubectl --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; then
    break
  fi
  sleep 0.2
done
if [ -z "$kubeconfig" ]; then
  echo "sandbox-dev wrote no kubeconfig under $tmp/data within 120s:"; tail -50 "$tmp/sandbox-dev.log"; exit 1
fi

e2b_url=""
if grep -q -- '--e2b-bind-address' <<<"$help"; then
  e2b_url="http://127.0.0.1:$e2b_port"
  for _ in $(seq 1 300); do
    curl -fsS "$e2b_url/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
else
  echo "NOTE: sandbox-dev has no --e2b-bind-address; running the Kubernetes surface only"
fi

"$tmp/bin/lifecycle" -kubeconfig "$kubeconfig" -e2b-url "$e2b_url" -e2b-key "$key" \
  -namespace default -template ghcr.io/hearthvm/lifecycle-python:3.12 || {
  echo "---- sandbox-dev log tail ----"; tail -80 "$tmp/sandbox-dev.log"; exit 1; }
