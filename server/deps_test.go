package server_test

import (
	"os/exec"
	"strings"
	"testing"
)

// No binary links examples/: they are for users to read and apply. The
// embedded default carries its own copy of the default pool.
func TestDeps_BinariesImportNoExamples(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/hearthvm/hearth/cmd/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/hearthvm/hearth/examples") {
			t.Errorf("a binary depends on %s", p)
		}
	}
}
