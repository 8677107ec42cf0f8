package deps

import (
	"os/exec"
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
		module + "/pool/driver",
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
	clients := []string{module + "/nodeapi", module + "/fleet", module + "/e2b", module + "/pool/driver"}
	if hits := forbidden(t, clients, "github.com/prometheus/"); len(hits) > 0 {
		t.Fatalf("%v link %v", clients, hits)
	}
}
