// Package testagent builds the project's binaries for tests, once per test
// binary: Path returns a freshly built cmd/sandbox-agent, Binary any other
// command of the module. Packages that use it call Main from TestMain so the
// build directory is removed at the end.
package testagent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hearthvm/hearth/vmm/sim"
)

var (
	mu     sync.Mutex
	dir    string
	builds = map[string]result{}
)

type result struct {
	path string
	err  error
}

// Path returns the path of a sandbox-agent built from this module's source.
func Path(t testing.TB) string {
	t.Helper()
	return Binary(t, "./cmd/sandbox-agent")
}

// Binary builds the module's package pkg (e.g. "./cmd/sandboxd") once per
// test binary and returns the executable's path. It fails t on error.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	p, err := build(pkg)
	if err != nil {
		t.Fatalf("testagent: %v", err)
	}
	return p
}

func build(pkg string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if r, ok := builds[pkg]; ok {
		return r.path, r.err
	}
	r := result{}
	r.path, r.err = doBuild(pkg)
	builds[pkg] = r
	return r.path, r.err
}

func doBuild(pkg string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := sim.FindModuleRoot(wd)
	if err != nil {
		return "", err
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "hearth-testbin-"); err != nil {
			return "", err
		}
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	// Static: the sim backend runs the agent inside a template's root
	// filesystem, without the host's libc.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v: %s", pkg, err, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// Main runs the tests and removes the build directory.
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	mu.Unlock()
	os.Exit(code)
}
