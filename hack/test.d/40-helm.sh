#!/usr/bin/env bash
# The Helm chart (deploy/helm/hearth): `helm lint --strict`, then `helm
# template` with the defaults, with each switch, and with every switch on,
# each rendering checked by hack/helmcheck: every document parses, has
# apiVersion, kind and name, the kinds are the expected ones, and the
# objects are those of deploy/base or of the overlay the switch stands for. helm comes from
# hack/setup.d/40-helm.sh (e2e/.cache/bin), else from PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${HEARTH_E2E_BIN:-$PWD/e2e/.cache/bin}
HELM_BIN=$BIN/helm
[ -x "$HELM_BIN" ] || HELM_BIN=$(command -v helm || true)
if [ -z "$HELM_BIN" ]; then
  echo "40-helm: helm not found: run bash hack/setup.d/40-helm.sh" >&2
  exit 1
fi
# helm notes each symbolic link it follows (crds/ links to deploy/base/crds);
# that is by design, so keep it out of the log.
HELM() { "$HELM_BIN" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }
CHART=deploy/helm/hearth
# The kube-apiserver version the e2e suite runs (hack/setup.d/30-kube-binaries.sh).
KUBE_VERSION=v1.36.3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export GOFLAGS="${GOFLAGS:-} -mod=readonly"
go build -o "$out/helmcheck" ./hack/helmcheck

HELM lint --strict "$CHART"
HELM lint --strict "$CHART" --set e2b.enabled=true,webhook.enabled=true,certManager.enabled=true
HELM lint --strict "$CHART" --set monitoring.dashboard.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.podMonitors.enabled=true

render() { HELM template hearth "$CHART" -n sandbox-system --kube-version "$KUBE_VERSION" --include-crds "$@"; }
base=CustomResourceDefinition=4,APIService=1,ValidatingAdmissionPolicy=1,ValidatingAdmissionPolicyBinding=1,Deployment=1,DaemonSet=1,Service=1,ServiceAccount=2,ClusterRole=4,ClusterRoleBinding=3,Role=1,RoleBinding=2

# With its defaults the chart is deploy/base; with a switch on, the overlay
# that switch stands for (same objects; RBAC, Services, APIService, webhook
# and certificate equal apart from metadata).
echo "== helm template (defaults) vs deploy/base"
render >"$out/default.yaml"
"$out/helmcheck" -expect "$base" -base deploy/base <"$out/default.yaml"
# sandboxd: its own node token from the init container, never the fleet
# secret; NodeInventory published with its ServiceAccount.
for flag in --write-node-token=/run/hearth/node-token/token --fleet-secret-file=/etc/hearth/fleet/token \
  '--node-name=$(NODE_NAME)' --node-token-file=/run/hearth/node-token/token --publish-in-cluster; do
  grep -qF -- "- $flag" "$out/default.yaml" || { echo "40-helm: sandboxd $flag not rendered" >&2; exit 1; }
done
if grep -q -- '- --token-file=' "$out/default.yaml"; then
  echo "40-helm: sandboxd is given the fleet secret (--token-file)" >&2; exit 1
fi
echo "== helm template (webhook) vs deploy/overlays/pod-runtime-webhook"
render --set webhook.enabled=true >"$out/webhook.yaml"
"$out/helmcheck" -base deploy/overlays/pod-runtime-webhook <"$out/webhook.yaml" >/dev/null
grep -q -- '--enable-pod-runtime-webhook' "$out/webhook.yaml"
echo "== helm template (cert-manager) vs deploy/overlays/cert-manager"
render --set certManager.enabled=true >"$out/cm.yaml"
"$out/helmcheck" -base deploy/overlays/cert-manager <"$out/cm.yaml" >/dev/null
grep -q 'cert-manager.io/inject-ca-from: sandbox-system/sandbox-apiserver' "$out/cm.yaml"

echo "== helm template (e2b, webhook, cert-manager on; warm-pool driver off)"
render --set e2b.enabled=true,webhook.enabled=true,certManager.enabled=true,apiserver.warmPoolDriver.enabled=false >"$out/all.yaml"
"$out/helmcheck" -expect "CustomResourceDefinition=4,APIService=1,ValidatingAdmissionPolicy=1,ValidatingAdmissionPolicyBinding=1,Deployment=1,DaemonSet=1,Service=2,ServiceAccount=2,ClusterRole=4,ClusterRoleBinding=3,MutatingWebhookConfiguration=1,Issuer=1,Certificate=1,RoleBinding=1" <"$out/all.yaml" >/dev/null
for flag in --enable-e2b-api --e2b-api-key-file=/etc/hearth/e2b/keys --enable-pod-runtime-webhook --enable-warm-pool-driver=false; do
  grep -q -- "- $flag\$" "$out/all.yaml" || { echo "40-helm: $flag not rendered" >&2; exit 1; }
done

echo "== helm template (monitoring: dashboard ConfigMap, PrometheusRule, PodMonitors)"
# Their content (the chart's dashboards/hearth.json and alerts/hearth.rules.yaml,
# shipped verbatim) is tested by deploy/monitoring_test.go against a real Prometheus.
on=monitoring.dashboard.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.podMonitors.enabled=true
HELM template hearth "$CHART" -n sandbox-system --kube-version "$KUBE_VERSION" --set "$on" -s templates/monitoring.yaml >"$out/monitoring.yaml"
"$out/helmcheck" -expect "ConfigMap=1,PrometheusRule=1,PodMonitor=2,ServiceAccount=1,Secret=1,ClusterRole=1,ClusterRoleBinding=1" <"$out/monitoring.yaml" >/dev/null
# Off by default: the default rendering has none of it (checked above).
grep -q '^    grafana_dashboard: "1"$' "$out/monitoring.yaml" || { echo "40-helm: dashboard ConfigMap without grafana_dashboard: \"1\"" >&2; exit 1; }

# The chart's CRDs are deploy/base's (symbolic links: one copy to keep).
for f in deploy/base/crds/*.yaml; do
  [ "$(readlink -f "$CHART/crds/$(basename "$f")")" = "$(readlink -f "$f")" ] ||
    { echo "40-helm: $CHART/crds/$(basename "$f") is not a link to $f" >&2; exit 1; }
done
echo "40-helm: ok"
