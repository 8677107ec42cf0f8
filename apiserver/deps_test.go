package apiserver_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The API package serves the API and nothing else: the gateways, the
// webhook and the drivers are composed around it by package server.
func TestDeps_APIServerImportsNoComponentOrWiring(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	const mod = "github.com/hearthvm/hearth/"
	for _, p := range []string{"e2b", "webhook", "pool/controller", "server", "devserver"} {
		if deps[mod+p] {
			t.Errorf("apiserver depends on %s%s", mod, p)
		}
	}
	for p := range deps {
		if strings.HasPrefix(p, mod+"examples/") {
			t.Errorf("apiserver depends on %s", p)
		}
	}
}
