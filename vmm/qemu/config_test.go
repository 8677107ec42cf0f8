package qemu

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLoadConfig_ResolvesRelativePaths(t *testing.T) {
	c, err := LoadConfig(filepath.Join("testdata", "config", "full.json"))
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(filepath.Join("testdata", "config"))
	tests := []struct {
		template, size string
		want           Guest
		wantSize       Size
	}{
		{"python:3.12", "small", Guest{Kernel: "/k", Initrd: "/i", Cmdline: "console=ttyS0"}, Size{VCPUs: 1, MemoryMiB: 128}},
		{"anything", "medium", Guest{Kernel: filepath.Join(abs, "vmlinuz"), Initrd: filepath.Join(abs, "initrd.cpio.gz"), Cmdline: DefaultCmdline}, DefaultSizes["medium"]},
	}
	for _, tt := range tests {
		g, s, err := c.Resolve(tt.template, tt.size)
		if err != nil || g != tt.want || s != tt.wantSize {
			t.Errorf("Resolve(%q,%q) = %+v %+v %v; want %+v %+v", tt.template, tt.size, g, s, err, tt.want, tt.wantSize)
		}
	}
	if _, _, err := c.Resolve("x", "huge"); err == nil {
		t.Error("unknown size resolved")
	}
}

func TestParseConfig_Rejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":     "{",
		"no templates": `{"templates": {}}`,
		"no initrd":    `{"templates": {"*": {"kernel": "k"}}}`,
		"bad size":     `{"templates": {"*": {"kernel": "k", "initrd": "i"}}, "sizes": {"small": {"vcpus": 0, "memory_mib": 256}}}`,
	} {
		if _, err := ParseConfig([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestResolve_NoDefaultTemplate(t *testing.T) {
	c := Config{Templates: map[string]Guest{"a": {Kernel: "k", Initrd: "i"}}}
	if _, _, err := c.Resolve("b", "small"); err == nil {
		t.Fatal("resolved a template with no entry and no *")
	}
}

func TestDefaultGuestDir_Env(t *testing.T) {
	t.Setenv("HEARTH_QEMU_GUEST_DIR", "/some/dir")
	if got := DefaultGuestDir(); got != "/some/dir" {
		t.Fatalf("got %q", got)
	}
	t.Setenv("HEARTH_QEMU_GUEST_DIR", "")
	wd, _ := os.Getwd()
	if got := DefaultGuestDir(); got != "" && filepath.Base(got) != "out" {
		t.Fatalf("walking up from %s found %q", wd, got)
	}
}
