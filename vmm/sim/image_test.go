package sim_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/image"
	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim"
)

// The built-in Debian image (package image), when it is already in the
// image cache: the guest sees its files owned as the image says, `user`
// (uid 1000) owns /home/user, python3 runs, and sudo works from user to
// the guest's root, which is no host root.
func TestImage_BuiltinDebian(t *testing.T) {
	if testing.Short() {
		t.Skip("copies a Debian root filesystem")
	}
	dirs, _ := filepath.Glob(filepath.Join(image.DefaultRoot(), "rootfs", "builtin-*"))
	if len(dirs) == 0 {
		t.Skip("the built-in image is not cached (sandbox-image build)")
	}
	rootfs := dirs[0]
	d, err := sim.New(sim.Options{Root: t.TempDir(), AgentCommand: []string{testagent.Path(t)}, BootTimeout: 60 * time.Second,
		Rootfs: func(context.Context, string) (string, error) { return rootfs, nil }})
	if err != nil {
		t.Fatal(err)
	}
	h := boot(t, d, vmm.Spec{ID: "deb", Template: image.BuiltinRef, Net: "none"})
	r := run(t, h, `stat -c '%U %a' /home/user /etc/shadow; python3 -c 'print(6*7)'; su user -c 'id -u; sudo -n id -u'; cat /proc/self/uid_map`)
	want := []string{"user 755", "root 640", "42", "1000", "0"}
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.exit != 0 || len(got) < len(want) {
		t.Fatalf("probe: %v", r)
	}
	for i, w := range want {
		if strings.TrimSpace(got[i]) != w {
			t.Errorf("line %d = %q, want %q (%v)", i, got[i], w, r)
		}
	}
	if m := strings.Fields(got[len(got)-1]); len(m) != 3 || m[1] != "1879048192" {
		t.Errorf("uid_map %q", got[len(got)-1])
	}
	// A request that names no user runs as the image's "user" in its home,
	// as e2b's base template does.
	if r := runAs(t, h, "", "id -un; pwd"); r.exit != 0 || strings.Fields(r.stdout)[0] != "user" || !strings.Contains(r.stdout, "/home/user") {
		t.Errorf("default user: %v", r)
	}
}
