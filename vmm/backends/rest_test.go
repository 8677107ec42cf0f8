package backends

import "testing"

func TestOpen_RESTBackends(t *testing.T) {
	for _, name := range []string{"firecracker", "cloud-hypervisor"} {
		d, err := Open(name, Options{RootDir: t.TempDir(), Extra: map[string]string{"kernel": "/boot/vmlinux"}})
		if err != nil || d.Name() != name {
			t.Fatalf("Open(%s) = %v, %v", name, d, err)
		}
		if _, err := Open(name, Options{}); err == nil {
			t.Errorf("%s opened without a root", name)
		}
	}
}
