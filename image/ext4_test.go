package image

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func debugfs(t *testing.T, img, req string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", req, img).Output() // banner on stderr
	if err != nil {
		t.Fatalf("debugfs %s: %v", req, err)
	}
	return string(out)
}

func TestExt4_HoldsTheRootfsAndInjectedFilesAndIsCached(t *testing.T) {
	for _, tool := range []string{"mke2fs", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (hack/setup.d/10-packages.sh installs e2fsprogs)", tool)
		}
	}
	ref, _ := push(t, testImage(t), "test/rt:v1")
	s := &Store{Root: t.TempDir()}
	ctx := context.Background()
	r, err := s.Resolve(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\necho agent\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := []File{{Path: "/usr/local/bin/sandbox-agent", Mode: 0o755, Source: agent}}
	img, err := s.Ext4(ctx, r, 0, files...)
	if err != nil {
		t.Fatal(err)
	}
	if got := debugfs(t, img, "cat /usr/local/bin/sandbox-agent"); !strings.Contains(got, "echo agent") {
		t.Errorf("agent contents = %q", got)
	}
	if got := debugfs(t, img, "stat /usr/local/bin/sandbox-agent"); !strings.Contains(got, "Mode:  0755") || !strings.Contains(got, "User:     0") {
		t.Errorf("agent inode:\n%s", got)
	}
	if got := debugfs(t, img, "cat /etc/hostname"); got != "upper\n" {
		t.Errorf("etc/hostname = %q", got)
	}
	if got := debugfs(t, img, "stat /bin/su"); !strings.Contains(got, "Mode:  04755") {
		t.Errorf("bin/su inode:\n%s", got)
	}
	again, err := s.Ext4(ctx, r, 0, files...)
	if err != nil || again != img {
		t.Errorf("second Ext4 = %s, %v; want the cached %s", again, err, img)
	}
	if err := os.WriteFile(agent, []byte("#!/bin/sh\necho agent v2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := s.Ext4(ctx, r, 0, files...)
	if err != nil || other == img {
		t.Errorf("Ext4 after the agent changed = %s, %v; want a new disk", other, err)
	}
	if _, err := s.Ext4(ctx, r, 0, File{Path: "relative", Mode: 0o644, Source: agent}); err == nil {
		t.Error("relative path accepted")
	}
}
