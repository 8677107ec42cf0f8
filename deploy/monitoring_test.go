// Package deploy_test tests what deploy/ ships beyond manifests: the
// Helm chart's Grafana dashboard (deploy/helm/hearth/dashboards/hearth.json)
// and alerts (deploy/helm/hearth/alerts/hearth.rules.yaml) against a real
// Prometheus scraping a running sandbox-dev.
package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/hearthvm/hearth/devserver"
	"github.com/hearthvm/hearth/devserver/devservertest"
	"github.com/hearthvm/hearth/nodeapi"
)

const (
	chartDir      = "helm/hearth"
	dashboardFile = chartDir + "/dashboards/hearth.json"
	rulesFile     = chartDir + "/alerts/hearth.rules.yaml"
)

// query is one PromQL expression the chart ships, and where.
type query struct{ where, expr string }

// dashboardQueries are every panel target of the dashboard JSON (rows'
// nested panels included).
func dashboardQueries(t *testing.T, raw []byte) []query {
	t.Helper()
	type panel struct {
		Title   string  `json:"title"`
		Type    string  `json:"type"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				out = append(out, query{where: fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), expr: tg.Expr})
			}
		}
	}
	walk(d.Panels)
	if d.UID == "" || len(out) == 0 {
		t.Fatalf("dashboard: uid %q, %d queries", d.UID, len(out))
	}
	return out
}

// alertRule is one alerting rule of the rule file.
type alertRule struct {
	Alert string `json:"alert"`
	Expr  string `json:"expr"`
	For   string `json:"for"`
}

func alertRules(t *testing.T, raw []byte) []alertRule {
	t.Helper()
	var f struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	// Leniently (annotations and labels are not in alertRule): the strict
	// reader is Prometheus, which loads the file as a rule file.
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("rule file: %v", err)
	}
	var out []alertRule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Fatalf("group %s: a rule without alert or expr: %+v", g.Name, r)
			}
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatal("rule file: no alerts")
	}
	return out
}

// splitComparison splits an alert expression of the form
// "<signal> <op> <threshold>" at its one top-level comparison operator
// (outside parentheses, brackets, braces and strings). ok is false for an
// expression of another form (no top-level comparison, several, a bool
// modifier, or and/or/unless at the top level).
func splitComparison(expr string) (signal, op, threshold string, ok bool) {
	depth, at := 0, -1
	var quote byte
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case quote != 0:
			if c == '\\' && quote != '`' {
				i++
			} else if c == quote {
				quote = 0
			}
			continue
		case c == '"' || c == '\'' || c == '`':
			quote = c
			continue
		case c == '(' || c == '[' || c == '{':
			depth++
			continue
		case c == ')' || c == ']' || c == '}':
			depth--
			continue
		case depth != 0:
			continue
		}
		var o string
		switch {
		case strings.HasPrefix(expr[i:], "=="), strings.HasPrefix(expr[i:], "!="),
			strings.HasPrefix(expr[i:], ">="), strings.HasPrefix(expr[i:], "<="):
			o = expr[i : i+2]
		case c == '>' || c == '<':
			o = expr[i : i+1]
		default:
			continue
		}
		if at >= 0 {
			return "", "", "", false
		}
		at, op = i, o
		i += len(o) - 1
	}
	if at < 0 {
		return "", "", "", false
	}
	signal, threshold = strings.TrimSpace(expr[:at]), strings.TrimSpace(expr[at+len(op):])
	for _, w := range strings.Fields(signal + " " + threshold) {
		switch w {
		case "and", "or", "unless", "bool":
			// Inside parentheses these would be fine, but a top-level
			// field (outside any parentheses) breaks the form.
			if topLevelWord(expr, w) {
				return "", "", "", false
			}
		}
	}
	return signal, op, threshold, signal != "" && threshold != ""
}

// topLevelWord reports whether w occurs as a word outside any brackets.
func topLevelWord(expr, w string) bool {
	depth := 0
	var b strings.Builder
	for _, c := range expr {
		switch c {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		default:
			if depth == 0 {
				b.WriteRune(c)
			}
		}
	}
	for _, f := range strings.Fields(b.String()) {
		if f == w {
			return true
		}
	}
	return false
}

func TestSplitComparison(t *testing.T) {
	for _, tc := range []struct{ expr, signal, op, threshold string }{
		{`max(x) > 0`, `max(x)`, `>`, `0`},
		{`sum by (a) (x{l=~"a>b"}) < sum by (a) (y)`, `sum by (a) (x{l=~"a>b"})`, `<`, `sum by (a) (y)`},
		{`histogram_quantile(0.99, rate(x[5m])) >= 0.25`, `histogram_quantile(0.99, rate(x[5m]))`, `>=`, `0.25`},
		{`(x > 1) != 0`, `(x > 1)`, `!=`, `0`},
		{`x > 1 > 2`, "", "", ""},
		{`rate(x[5m])`, "", "", ""},
		{`x > bool 1`, "", "", ""},
		{`x > 1 and y`, "", "", ""},
	} {
		s, o, th, ok := splitComparison(tc.expr)
		if ok != (tc.op != "") || s != tc.signal || o != tc.op || th != tc.threshold {
			t.Errorf("splitComparison(%q) = %q %q %q %v, want %q %q %q", tc.expr, s, o, th, ok, tc.signal, tc.op, tc.threshold)
		}
	}
}

// The chart ships the dashboard and the rule file verbatim: the rendered
// ConfigMap's hearth.json is dashboards/hearth.json byte for byte, the
// rendered PrometheusRule's spec is alerts/hearth.rules.yaml. So what
// TestMonitoring_EveryPanelAndAlertQueryReturnsData runs is what the chart
// installs.
func TestChart_ShipsTheDashboardAndRulesVerbatim(t *testing.T) {
	helm := helmBinary(t)
	cmd := exec.Command(helm, "template", "hearth", chartDir, "-n", "sandbox-system", "--kube-version", "v1.36.3",
		"--set", "monitoring.dashboard.enabled=true,monitoring.prometheusRule.enabled=true", "-s", "templates/monitoring.yaml")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var wantSpec any
	if err := yaml.Unmarshal(rules, &wantSpec); err != nil {
		t.Fatal(err)
	}
	var sawCM, sawRule bool
	for _, doc := range strings.Split(string(out), "\n---") {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Data map[string]string `json:"data"`
			Spec any               `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered document: %v\n%s", err, doc)
		}
		switch o.Kind {
		case "ConfigMap":
			sawCM = true
			if o.Metadata.Labels["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap labels %v: want grafana_dashboard: \"1\"", o.Metadata.Labels)
			}
			if o.Data["hearth.json"] != strings.TrimSuffix(string(dash), "\n") {
				t.Errorf("the ConfigMap's hearth.json is not %s", dashboardFile)
			}
		case "PrometheusRule":
			sawRule = true
			a, _ := json.Marshal(o.Spec)
			b, _ := json.Marshal(wantSpec)
			if string(a) != string(b) {
				t.Errorf("the PrometheusRule's spec is not %s:\n%s\nwant\n%s", rulesFile, a, b)
			}
		}
	}
	if !sawCM || !sawRule {
		t.Fatalf("rendered: ConfigMap %v, PrometheusRule %v:\n%s", sawCM, sawRule, out)
	}
}

// requireTool finds a test tool: missing, the test skips, unless
// HEARTH_CI=1 (set by .ci/run, whose setup installs every tool).
func requireTool(t *testing.T, path, why string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err != nil {
		if os.Getenv("HEARTH_CI") == "1" {
			t.Fatalf("%s not found (HEARTH_CI=1): %s", path, why)
		}
		t.Skipf("%s not found (%s); HEARTH_CI=1 makes this a failure", path, why)
	}
	return p
}

func helmBinary(t *testing.T) string {
	if p, err := filepath.Abs("../e2e/.cache/bin/helm"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return requireTool(t, "helm", "bash hack/setup.d/40-helm.sh builds it")
}

// Every panel query of the dashboard and every alert expression runs
// through a real Prometheus (Debian's prometheus, started here with the
// rule file loaded) scraping a running sandbox-dev under a small workload:
// claims through the Kubernetes API, the e2b API and a node, and a fork
// refused by the node's quota.
//
// The rule: a panel query must return at least one series with a number
// (not NaN). An alert expression is "<signal> <op> <threshold>" (see
// splitComparison; any other form fails): the signal and the threshold
// must each return data, the whole expression must evaluate without error
// (it may be empty: a healthy system fires nothing), and Prometheus' own
// evaluation of the loaded rule must be healthy. HearthQuotaRefusals,
// which the workload provokes, must fire (its expression non-empty).
func TestMonitoring_EveryPanelAndAlertQueryReturnsData(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandbox-dev and Prometheus")
	}
	promBin := requireTool(t, "prometheus", "Debian's prometheus package, installed by hack/setup.d/10-packages.sh")
	dashRaw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	panels := dashboardQueries(t, dashRaw)
	rulesAbs, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	rulesRaw, err := os.ReadFile(rulesAbs)
	if err != nil {
		t.Fatal(err)
	}
	alerts := alertRules(t, rulesRaw)
	for _, q := range panels {
		if strings.Contains(q.expr, "$") {
			t.Errorf("%s: %q uses a Grafana variable; the test runs queries as written", q.where, q.expr)
		}
	}
	for _, a := range alerts {
		if _, _, _, ok := splitComparison(a.Expr); !ok {
			t.Errorf("alert %s: %q is not \"<signal> <op> <threshold>\"", a.Alert, a.Expr)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	dev := devservertest.Start(t).Ready
	prom := startPrometheus(t, promBin, dev, rulesAbs)
	prom.waitTargetsUp(t, 1+len(dev.Nodes), 30*time.Second)

	// The workload, in two rounds with a scrape between them, so every
	// counter and histogram has grown between two samples.
	w := newWorkload(t, dev)
	w.round(t, "a")
	prom.waitValue(t, `sum(hearth_node_claims_total{result="delivered"})`, 3, 30*time.Second)
	prom.waitValue(t, `sum(hearth_node_quota_refusals_total)`, 1, 30*time.Second)
	prom.waitValue(t, `sum(apiserver_request_total{group="agents.x-k8s.io", resource="sandboxes", verb="POST", code="201"})`, 1, 30*time.Second)
	w.round(t, "b")
	prom.waitValue(t, `sum(hearth_node_claims_total{result="delivered"})`, 6, 30*time.Second)
	prom.waitValue(t, `sum(apiserver_request_total{group="agents.x-k8s.io", resource="sandboxes", verb="POST", code="201"})`, 2, 30*time.Second)
	prom.waitValue(t, `sum(hearth_node_quota_refusals_total)`, 2, 30*time.Second)

	// Every check, polled until all pass: a scrape that failed once (a
	// slow /metrics on a loaded machine) leaves stale series until the next.
	check := func() (problems []string) {
		for _, q := range panels {
			res, err := prom.query(q.expr)
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("%s: %s: %v", q.where, q.expr, err))
			case len(res) == 0:
				problems = append(problems, fmt.Sprintf("%s: %s: no series", q.where, q.expr))
			case !anyNumber(res):
				problems = append(problems, fmt.Sprintf("%s: %s: only NaN: %v", q.where, q.expr, res))
			}
		}
		for _, a := range alerts {
			signal, _, threshold, _ := splitComparison(a.Expr)
			for _, part := range []string{signal, threshold} {
				if res, err := prom.query(part); err != nil || len(res) == 0 {
					problems = append(problems, fmt.Sprintf("alert %s: %s: %d series, %v", a.Alert, part, len(res), err))
				}
			}
			res, err := prom.query(a.Expr)
			if err != nil {
				problems = append(problems, fmt.Sprintf("alert %s: %s: %v", a.Alert, a.Expr, err))
			}
			if a.Alert == "HearthQuotaRefusals" && len(res) == 0 {
				problems = append(problems, fmt.Sprintf("alert %s: %s: empty after two quota refusals", a.Alert, a.Expr))
			}
		}
		return problems
	}
	var problems []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if problems = check(); len(problems) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	prom.checkRules(t, len(alerts), 20*time.Second)
	if t.Failed() {
		var d any
		_ = prom.get("/api/v1/targets", url.Values{"state": {"active"}}, &d)
		t.Logf("targets: %v", d)
	}
}

func anyNumber(res []sample) bool {
	for _, s := range res {
		if !math.IsNaN(s.value) {
			return true
		}
	}
	return false
}

// prometheus is a running Prometheus and its HTTP API.
type prometheus struct{ base string }

// startPrometheus starts bin scraping dev (the nodes' open /metrics every
// second; the API server's larger one, with its admin token, every two)
// with rules loaded, its
// data in a temporary directory, on a free loopback port.
func startPrometheus(t *testing.T, bin string, dev devserver.Ready, rules string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	api, err := url.Parse(dev.APIServer)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, a := range dev.Nodes {
		nodes = append(nodes, strconv.Quote(a))
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: sandboxd
    static_configs: [{targets: [%s]}]
  - job_name: sandbox-apiserver
    scrape_interval: 2s
    scrape_timeout: 2s
    scheme: https
    tls_config: {insecure_skip_verify: true}
    authorization: {credentials_file: %q}
    static_configs: [{targets: [%q]}]
`, rules, strings.Join(nodes, ", "), filepath.Join(filepath.Dir(dev.Kubeconfig), "admin-token"), api.Host)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// The port is free when picked, not necessarily when Prometheus
	// binds it: another try picks another.
	for try := 1; ; try++ {
		p, log := runPrometheus(t, bin, dir)
		if p != nil {
			return p
		}
		if try == 3 || !strings.Contains(log, "address already in use") {
			t.Fatalf("prometheus exited:\n%s", log)
		}
	}
}

// runPrometheus starts bin with dir's prometheus.yml on a free loopback
// port, stopped when the test ends. It answers nil and the log when
// Prometheus exits before it is ready.
func runPrometheus(t *testing.T, bin, dir string) (*prometheus, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.CreateTemp(dir, "prometheus-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
		logf.Close()
	})
	p := &prometheus{base: "http://" + addr}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, ""
			}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			return nil, string(b)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatal("prometheus not ready within 20s")
	return nil, ""
}

// get decodes the data of a Prometheus API answer.
func (p *prometheus) get(path string, q url.Values, into any) error {
	resp, err := http.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string          `json:"status"`
		Error     string          `json:"error"`
		ErrorType string          `json:"errorType"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %d: %v", path, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, body.ErrorType, body.Error)
	}
	return json.Unmarshal(body.Data, into)
}

type sample struct {
	metric map[string]string
	value  float64
}

func (s sample) String() string { return fmt.Sprintf("%v=%g", s.metric, s.value) }

// query runs an instant query: a vector's samples, or a scalar as one.
func (p *prometheus) query(expr string) ([]sample, error) {
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return nil, err
	}
	num := func(v [2]any) float64 {
		s, _ := v[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return math.NaN()
		}
		return f
	}
	switch d.ResultType {
	case "vector":
		var v []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return nil, err
		}
		out := make([]sample, 0, len(v))
		for _, s := range v {
			out = append(out, sample{metric: s.Metric, value: num(s.Value)})
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return nil, err
		}
		return []sample{{value: num(v)}}, nil
	}
	return nil, fmt.Errorf("result type %q", d.ResultType)
}

// waitTargetsUp waits until n targets are scraped and healthy.
func (p *prometheus) waitTargetsUp(t *testing.T, n int, within time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var d struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := p.get("/api/v1/targets", url.Values{"state": {"active"}}, &d); err != nil {
			last = err.Error()
			continue
		}
		up := 0
		var b strings.Builder
		for _, tg := range d.ActiveTargets {
			fmt.Fprintf(&b, "%s: %s %s; ", tg.ScrapeURL, tg.Health, tg.LastError)
			if tg.Health == "up" {
				up++
			}
		}
		last = b.String()
		if up == n && len(d.ActiveTargets) == n {
			return
		}
	}
	t.Fatalf("targets not all up within %s: %s", within, last)
}

// waitValue waits until expr's first sample is at least want.
func (p *prometheus) waitValue(t *testing.T, expr string, want float64, within time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		res, err := p.query(expr)
		last = fmt.Sprint(res, err)
		if err == nil && len(res) > 0 && res[0].value >= want {
			return
		}
	}
	t.Fatalf("%s: not %g within %s (last: %s)", expr, want, within, last)
}

// checkRules waits until Prometheus has evaluated all n loaded alerting
// rules, and requires each evaluation healthy.
func (p *prometheus) checkRules(t *testing.T, n int, within time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var d struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := p.get("/api/v1/rules", url.Values{"type": {"alert"}}, &d); err != nil {
			last = err.Error()
			continue
		}
		var count, ok int
		var b strings.Builder
		for _, g := range d.Groups {
			for _, r := range g.Rules {
				count++
				fmt.Fprintf(&b, "%s: %s %s; ", r.Name, r.Health, r.LastError)
				switch r.Health {
				case "ok":
					ok++
				case "err":
					t.Fatalf("alert %s: Prometheus evaluates it with an error: %s", r.Name, r.LastError)
				}
			}
		}
		last = b.String()
		if count == n && ok == n {
			return
		}
	}
	t.Fatalf("alerting rules not all evaluated within %s: %s", within, last)
}

// workload drives claims through every surface and one quota refusal.
type workload struct {
	dev devserver.Ready
	dyn dynamic.Interface
	e2b string
}

var sandboxes = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}

func newWorkload(t *testing.T, dev devserver.Ready) *workload {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", dev.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(dev.E2BKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &workload{dev: dev, dyn: dynamic.NewForConfigOrDie(cfg), e2b: strings.TrimSpace(string(key))}
}

// round claims one sandbox through the Kubernetes API, one through e2b
// and one on a node directly, has the node refuse a fork over its quota
// (9 children: DefaultQuota allows 8 per tree), and releases all three.
// The default pool's claims retry while it is still warming up.
func (w *workload) round(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// retry retries f while it fails for lack of a warm VM (429, 503).
	retry := func(what string, f func() (err error, again bool)) {
		t.Helper()
		var err error
		for ctx.Err() == nil {
			var again bool
			if err, again = f(); err == nil {
				return
			} else if !again {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s: %v", what, err)
	}

	sb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
		"metadata": map[string]any{"name": "mon-" + name, "namespace": "default"},
		"spec": map[string]any{"podTemplate": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
			"name": "main", "image": "ghcr.io/cocoonstack/sandbox/rt:24.04",
			"resources": map[string]any{"requests": map[string]any{"cpu": "500m", "memory": "512Mi"}}}}}}},
	}}
	retry("create Sandbox "+sb.GetName(), func() (error, bool) {
		_, err := w.dyn.Resource(sandboxes).Namespace("default").Create(ctx, sb, metav1.CreateOptions{})
		return err, apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err)
	})

	var e2bID string
	retry("e2b create", func() (error, bool) {
		req, _ := http.NewRequestWithContext(ctx, "POST", w.dev.E2B+"/sandboxes", strings.NewReader(`{"templateID":"base"}`))
		req.Header.Set("X-API-KEY", w.e2b)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err, false
		}
		defer resp.Body.Close()
		var out struct {
			SandboxID string `json:"sandboxID"`
			Message   string `json:"message"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("%d %s", resp.StatusCode, out.Message),
				resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests
		}
		e2bID = out.SandboxID
		return nil, false
	})

	var nc *nodeapi.Client
	var claimed nodeapi.Sandbox
	retry("node claim", func() (error, bool) {
		for _, addr := range w.dev.Nodes {
			c := nodeapi.NewClient(addr, w.dev.RootToken)
			info, err := c.Info(ctx)
			if err != nil {
				return err, false
			}
			for _, p := range info.Pools {
				if p.Warm == 0 {
					continue
				}
				if claimed, err = c.Claim(ctx, nodeapi.ClaimRequest{Template: p.Template, Net: p.Net, Size: p.Size, ClaimRef: "default/mon-node-" + name}); err == nil {
					nc = c
					return nil, false
				}
			}
		}
		return fmt.Errorf("no warm VM on any node"), true
	})
	if _, err := nc.Fork(ctx, claimed.ID, nodeapi.ForkRequest{Count: 9}); nodeapi.StatusOf(err) != http.StatusTooManyRequests {
		t.Fatalf("fork of 9: %v, want 429 (quota)", err)
	}

	if err := nc.Release(ctx, claimed.ID); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "DELETE", w.dev.E2B+"/sandboxes/"+e2bID, nil)
	req.Header.Set("X-API-KEY", w.e2b)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("e2b kill %s: %v %v", e2bID, resp, err)
	} else {
		resp.Body.Close()
	}
	if err := w.dyn.Resource(sandboxes).Namespace("default").Delete(ctx, sb.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
