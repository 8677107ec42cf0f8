package sim

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"k8s.io/klog/v2"
)

// AgentEnv names the environment variable FindAgent consults first: a path
// to a sandbox-agent binary.
const AgentEnv = "HEARTH_SANDBOX_AGENT"

// AgentBinary is the agent's executable name.
const AgentBinary = "sandbox-agent"

const modulePath = "github.com/hearthvm/hearth"

// FindAgent is ResolveAgent without an explicit path.
func FindAgent(dataDir string) ([]string, error) { return ResolveAgent("", dataDir) }

// ResolveAgent returns the agent command for Options.AgentCommand, trying in
// order:
//
//  1. explicit (a flag such as sandboxd --agent-bin), else $HEARTH_SANDBOX_AGENT;
//  2. sandbox-agent next to os.Executable();
//  3. sandbox-agent on $PATH;
//  4. when the go tool is available and the working directory (or a parent)
//     holds this module's source, `go build -o <dataDir>/bin/sandbox-agent
//     ./cmd/sandbox-agent`, so that `go run ./cmd/sandbox-dev` works on a
//     fresh clone. One build per module per process is reused.
//
// It logs which one it chose.
func ResolveAgent(explicit, dataDir string) ([]string, error) {
	source := "flag"
	if explicit == "" {
		explicit, source = os.Getenv(AgentEnv), "$"+AgentEnv
	}
	if explicit != "" {
		p, err := exec.LookPath(explicit)
		if err != nil {
			return nil, fmt.Errorf("sim: agent %q (from %s): %w", explicit, source, err)
		}
		p, _ = filepath.Abs(p)
		klog.InfoS("Using sandbox agent", "path", p, "source", source)
		return []string{p}, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), AgentBinary)
		if isExecutable(p) {
			klog.InfoS("Using sandbox agent", "path", p, "source", "next to executable")
			return []string{p}, nil
		}
	}
	if p, err := exec.LookPath(AgentBinary); err == nil {
		p, _ = filepath.Abs(p)
		klog.InfoS("Using sandbox agent", "path", p, "source", "PATH")
		return []string{p}, nil
	}
	p, err := buildAgent(dataDir)
	if err != nil {
		return nil, fmt.Errorf("sim: no %s found (set --agent-bin or $%s, put it on PATH, or run from the module source with the go tool): %w", AgentBinary, AgentEnv, err)
	}
	return []string{p}, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

var (
	buildMu sync.Mutex
	built   = map[string]string{} // module root → built agent path
)

func buildAgent(dataDir string) (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("the go tool is not on PATH")
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := FindModuleRoot(wd)
	if err != nil {
		return "", err
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[root]; ok && isExecutable(p) {
		klog.InfoS("Using sandbox agent", "path", p, "source", "built from source earlier in this process")
		return p, nil
	}
	if dataDir == "" {
		dataDir = os.TempDir()
	}
	binDir, err := filepath.Abs(filepath.Join(dataDir, "bin"))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(binDir, AgentBinary)
	tmp := out + ".build"
	cmd := exec.Command(gobin, "build", "-o", tmp, "./cmd/sandbox-agent")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // runs inside the template's root filesystem
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sandbox-agent in %s: %v: %s", root, err, strings.TrimSpace(string(b)))
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	built[root] = out
	klog.InfoS("Using sandbox agent", "path", out, "source", "go build", "module", root)
	return out, nil
}

// FindModuleRoot returns dir or its nearest parent holding the go.mod of
// module github.com/hearthvm/hearth.
func FindModuleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if modName(filepath.Join(dir, "go.mod")) == modulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod for %s in the working directory or its parents", modulePath)
		}
		dir = parent
	}
}

func modName(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}
