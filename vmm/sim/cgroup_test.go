package sim

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The v2 code paths (freeze, kill, membership) on a hybrid host's unified
// hierarchy, which has the core files (cgroup.procs, cgroup.freeze,
// cgroup.kill) even with every controller bound to v1.
func TestCgroupV2_FreezeKill(t *testing.T) {
	root := cgroupRoot
	if !cgroupV2() {
		root = filepath.Join(cgroupRoot, "unified")
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			t.Skip("no cgroup v2 hierarchy")
		}
	}
	c := vmCgroup{rel: DefaultCgroupParent + "/test-" + randHex(4), v2: true, root: root}
	if err := os.MkdirAll(c.ctl(""), 0o755); err != nil {
		t.Skip("cannot create a v2 cgroup:", err)
	}
	defer c.remove()
	var cmds []*exec.Cmd
	for i := 0; i < 3; i++ {
		cmd := exec.Command("sleep", "1000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		if err := c.add(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	if got := c.procs(); len(got) != 3 || !c.contains(cmds[0].Process.Pid) || c.contains(os.Getpid()) {
		t.Fatalf("procs %v", got)
	}
	if err := c.freeze(true); err != nil {
		t.Fatal(err)
	}
	if err := c.freeze(false); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for _, cmd := range cmds {
			_ = cmd.Wait()
		}
		close(done)
	}()
	if err := c.kill(); err != nil {
		t.Fatal(err)
	}
	<-done
	if got := c.procs(); len(got) != 0 {
		t.Fatalf("left %v", got)
	}
}
