package backends

import "testing"

func TestOpen(t *testing.T) {
	d, err := Open("sim", Options{RootDir: t.TempDir(), AgentCommand: []string{"/bin/true"}})
	if err != nil || d.Name() != "sim" {
		t.Fatalf("Open(sim) = %v, %v", d, err)
	}
	if _, err := Open("nope", Options{}); err == nil {
		t.Fatal("Open accepted an unknown backend")
	}
	if _, err := Open("sim", Options{}); err == nil {
		t.Fatal("sim opened without a root")
	}
	if _, err := Open("sim", Options{RootDir: t.TempDir(), AgentCommand: []string{"/bin/true"}, DiskBytes: 1 << 20}); err == nil {
		t.Fatal("sim opened with a 1 MiB disk")
	}
}
