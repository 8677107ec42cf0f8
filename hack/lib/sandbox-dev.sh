# Sourced by hack/test.d scripts that run a suite against a real sandbox-dev
# process: builds it (and the static in-guest agent) into $tmp/bin, starts it
# on free loopback ports, waits for its ready line, and stops it on exit.
#
# After sandbox_dev_start [flags...]: $pid, $tmp, $data, $kubeconfig,
# $e2b_url, $e2b_key, $ports (comma-separated loopback ports it listens on).
tmp=$(mktemp -d)
pid=""
data="$tmp/data"

sandbox_dev_stop() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  pid=""
}
sandbox_dev_cleanup() {
  sandbox_dev_stop
  rm -rf "$tmp"
}
trap sandbox_dev_cleanup EXIT

free_port() {
  # Racy by nature (the port is released before use); good enough on loopback.
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null ||
    echo $((20000 + RANDOM % 20000))
}

sandbox_dev_build() {
  go build -o "$tmp/bin/sandbox-dev" ./cmd/sandbox-dev
  CGO_ENABLED=0 go build -o "$tmp/bin/sandbox-agent" ./cmd/sandbox-agent  # static: sim runs it inside the template rootfs
}

# sandbox_dev_start [extra flags]: starts sandbox-dev on $data (kept across
# restarts) and waits up to 120 s for its ready line:
#   sandbox-dev ready in 1.6s: export KUBECONFIG=<path>; ...; e2b: E2B_API_URL=<url> E2B_API_KEY=$(cat <file>)
sandbox_dev_start() {
  : "${api_port:=$(free_port)}" "${e2b_port:=$(free_port)}"
  : >>"$tmp/sandbox-dev.log" # the background job opens it later: wc below must find it
  "$tmp/bin/sandbox-dev" --data-dir "$data" --secure-port "$api_port" \
    --e2b-bind-address "127.0.0.1:$e2b_port" "$@" >>"$tmp/sandbox-dev.log" 2>&1 &
  pid=$!
  local start_line ready=""
  start_line=$(wc -l <"$tmp/sandbox-dev.log")
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || { echo "sandbox-dev exited:"; tail -50 "$tmp/sandbox-dev.log"; return 1; }
    ready=$(tail -n +"$((start_line + 1))" "$tmp/sandbox-dev.log" | grep -m1 'sandbox-dev ready' || true)
    [ -n "$ready" ] && break
    sleep 0.2
  done
  if [ -z "$ready" ]; then
    echo "sandbox-dev printed no ready line within 120s:"; tail -50 "$tmp/sandbox-dev.log"; return 1
  fi
  echo "$ready"
  kubeconfig=$(sed -n 's/.*KUBECONFIG=\([^;[:space:]]*\).*/\1/p' <<<"$ready")
  e2b_url=$(sed -n 's/.*E2B_API_URL=\([^;[:space:]]*\).*/\1/p' <<<"$ready")
  local key_file
  key_file=$(sed -n 's/.*E2B_API_KEY=\$(cat \([^)]*\)).*/\1/p' <<<"$ready")
  e2b_key=""
  if [ -n "$key_file" ]; then e2b_key=$(cat "$key_file"); fi
  [ -n "$kubeconfig" ] || { echo "no KUBECONFIG in the ready line"; return 1; }
  ports=$(ss -Hltnp 2>/dev/null | grep "pid=$pid," | awk '{print $4}' | sed 's/.*://' | sort -un | paste -sd, || true)
}

# sandbox_dev_wait_warm N: waits up to $2 seconds (default 600) until the
# default warm pool reports N ready microVMs.
sandbox_dev_wait_warm() {
  local want=$1 limit=${2:-600} got=""
  for _ in $(seq 1 "$limit"); do
    got=$(KUBECONFIG=$kubeconfig kubectl get sandboxwarmpool rt -o jsonpath='{.status.readyReplicas}' 2>/dev/null || true)
    [ "${got:-0}" -ge "$want" ] && return 0
    kill -0 "$pid" 2>/dev/null || { echo "sandbox-dev exited:"; tail -50 "$tmp/sandbox-dev.log"; return 1; }
    sleep 1
  done
  echo "warm pool rt has ${got:-0} ready microVMs after ${limit}s, want $want:"; tail -50 "$tmp/sandbox-dev.log"; return 1
}
