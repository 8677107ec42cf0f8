package sim

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestResolveAgent(t *testing.T) {
	t.Setenv(AgentEnv, "")
	if _, err := ResolveAgent("/nonexistent/agent", ""); err == nil {
		t.Fatal("a missing explicit agent was accepted")
	}
	got, err := ResolveAgent("/bin/true", "")
	if err != nil || len(got) != 1 || got[0] != "/bin/true" {
		t.Fatalf("explicit: %v %v", got, err)
	}
	t.Setenv(AgentEnv, "/bin/true")
	if got, err := FindAgent(""); err != nil || got[0] != "/bin/true" {
		t.Fatalf("from $%s: %v %v", AgentEnv, got, err)
	}
}

// From the module source, with no agent installed, FindAgent builds
// the agent into <dataDir>/bin.
func TestFindAgent_BuildsFromSource(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool")
	}
	if _, err := exec.LookPath(AgentBinary); err == nil {
		t.Skip("a sandbox-agent on PATH would be chosen first")
	}
	t.Setenv(AgentEnv, "")
	buildMu.Lock()
	clear(built)
	buildMu.Unlock()
	dataDir := t.TempDir()
	got, err := FindAgent(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dataDir, "bin", AgentBinary)
	if len(got) != 1 || got[0] != want || !isExecutable(want) {
		t.Fatalf("FindAgent = %v, want %s", got, want)
	}
	if _, err := os.Stat(want + ".build"); !os.IsNotExist(err) {
		t.Fatal("the temporary build output was left behind")
	}
	root, err := FindModuleRoot(".")
	if err != nil || modName(filepath.Join(root, "go.mod")) != modulePath {
		t.Fatalf("FindModuleRoot: %s %v", root, err)
	}
	if _, err := FindModuleRoot(t.TempDir()); err == nil {
		t.Fatal("found a module root outside the module")
	}
}
