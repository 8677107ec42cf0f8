package deps

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/hearthvm/hearth"

// forbidden reports the dependencies of pkgs whose import path equals or
// starts with one of bad (a prefix ending in "/" matches a whole tree).
func forbidden(t *testing.T, pkgs []string, bad ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	out, err := exec.Command(goBin, append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var hits []string
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range bad {
			if dep == strings.TrimSuffix(b, "/") || strings.HasSuffix(b, "/") && strings.HasPrefix(dep, b) {
				hits = append(hits, dep)
			}
		}
	}
	return hits
}

// The node API's clients link its wire package, never the daemon.
func TestClientsDoNotLinkTheNodeDaemon(t *testing.T) {
	clients := []string{
		module + "/nodeapi",
		module + "/fleet",
		module + "/e2b",
		module + "/pool/controller",
		module + "/apiserver",
		module + "/apiserver/registry",
		module + "/apiserver/registry/sandbox",
	}
	if hits := forbidden(t, clients, module+"/node", module+"/node/", module+"/vmm", module+"/vmm/", "go.etcd.io/bbolt", "go.etcd.io/bbolt/"); len(hits) > 0 {
		t.Fatalf("%v link %v", clients, hits)
	}
}

// Outside the Kubernetes server (where k8s.io/apiserver brings its own
// metrics), a node API client links no prometheus either.
func TestPlainClientsLinkNoPrometheus(t *testing.T) {
	clients := []string{module + "/nodeapi", module + "/fleet", module + "/e2b", module + "/pool/controller"}
	if hits := forbidden(t, clients, "github.com/prometheus/"); len(hits) > 0 {
		t.Fatalf("%v link %v", clients, hits)
	}
}

// importGraph maps each of the module's packages (tests not included) to
// the packages it links.
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	out, err := exec.Command(goBin, "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		graph[f[0]] = f[1:]
	}
	return graph
}

// linkers returns the packages of graph that link target, but for target
// itself and the allowed ones.
func linkers(graph map[string][]string, target string, allowed ...string) []string {
	var out []string
	for pkg, deps := range graph {
		if pkg == target || slices.Contains(allowed, pkg) || !slices.Contains(deps, target) {
			continue
		}
		out = append(out, pkg)
	}
	slices.Sort(out)
	return out
}

func TestLinkers(t *testing.T) {
	graph := map[string][]string{
		"m/agent":      {"m/agentapi", "os"},
		"m/agentapi":   {"net/http"},
		"m/cmd/agent":  {"m/agent", "m/agentapi"},
		"m/e2b":        {"m/agentapi", "m/x", "m/agent"},
		"m/x":          {"m/agent"},
		"m/node":       {"m/agentapi"},
		"m/agent/fake": {"m/agent"},
	}
	for _, tc := range []struct {
		allowed []string
		want    []string
	}{
		{nil, []string{"m/agent/fake", "m/cmd/agent", "m/e2b", "m/x"}},
		{[]string{"m/cmd/agent", "m/agent/fake"}, []string{"m/e2b", "m/x"}},
		{[]string{"m/cmd/agent", "m/agent/fake", "m/e2b", "m/x"}, nil},
	} {
		if got := linkers(graph, "m/agent", tc.allowed...); !slices.Equal(got, tc.want) {
			t.Errorf("linkers(allowed %v) = %v, want %v", tc.allowed, got, tc.want)
		}
	}
}

// The in-guest agent (its interpreter, pty and process code) is linked
// by its command alone, and by the test machinery that runs it in-process
// as a fake guest behind the Firecracker and Cloud Hypervisor fakes; every
// other component speaks to it through its wire package, agentapi. (A
// package's tests may link it: go list's Deps leave tests out.)
func TestOnlyTheAgentCommandLinksTheAgent(t *testing.T) {
	allowed := []string{
		module + "/cmd/sandbox-agent",
		module + "/vmm/internal/uds/fakeguest",
		module + "/vmm/firecracker/fcfake",
		module + "/vmm/cloudhypervisor/chfake",
	}
	graph := importGraph(t)
	if _, ok := graph[module+"/agent"]; !ok {
		t.Fatalf("go list found no %s/agent among %d packages", module, len(graph))
	}
	if hits := linkers(graph, module+"/agent", allowed...); len(hits) > 0 {
		t.Fatalf("%v link %s/agent: speak to the agent through agentapi", hits, module)
	}
}

// The agent's wire package links the standard library and golang.org/x
// only, and of this module only internal/httpjson (the wire clients' one
// JSON round trip), which links the standard library alone: whoever
// speaks to the agent (the e2b gateway, the node, the VMM drivers) gets
// nothing else through it.
func TestAgentWireLinksOnlyTheStandardLibrary(t *testing.T) {
	graph := importGraph(t)
	for _, pkg := range []string{module + "/agentapi", module + "/internal/httpjson"} {
		deps, ok := graph[pkg]
		if !ok {
			t.Fatalf("go list found no %s", pkg)
		}
		var hits []string
		for _, d := range deps {
			if d == module+"/internal/httpjson" && pkg == module+"/agentapi" {
				continue
			}
			if first, _, _ := strings.Cut(d, "/"); strings.Contains(first, ".") && (pkg != module+"/agentapi" || !strings.HasPrefix(d, "golang.org/x/")) {
				hits = append(hits, d)
			}
		}
		if len(hits) > 0 {
			t.Errorf("%s links %v", pkg, hits)
		}
	}
}
