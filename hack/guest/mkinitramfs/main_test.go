package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuild_IsReproducibleAndReadable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	initp, bash, bb, agent := write("init", "#!/bin/sh\n"), write("bash", "#!/bin/sh\n"), write("busybox", "BB"), write("agent", "AGENT1")
	mods := filepath.Join(dir, "mods")
	_ = os.Mkdir(mods, 0o755)
	_ = os.WriteFile(filepath.Join(mods, "virtio.ko"), []byte("ko"), 0o644)
	a, b := filepath.Join(dir, "a.cpio.gz"), filepath.Join(dir, "b.cpio.gz")
	for _, out := range []string{a, b} {
		if err := build(out, initp, initp, bash, bb, agent, mods); err != nil {
			t.Fatal(err)
		}
	}
	ab, _ := os.ReadFile(a)
	bb2, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb2) {
		t.Fatal("same inputs gave different archives")
	}
	zr, err := gzip.NewReader(bytes.NewReader(ab))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(zr)
	for _, name := range []string{"init\x00", "bin/sandbox-agent\x00", "bin/sh\x00", "lib/modules/virtio.ko\x00", "TRAILER!!!\x00"} {
		if !bytes.Contains(raw, []byte(name)) {
			t.Fatalf("archive lacks %q", name)
		}
	}
	if len(raw)%4 != 0 {
		t.Fatalf("archive length %d not 4-aligned", len(raw))
	}
	// When a cpio reader is around, it must list every entry.
	cpio, err := exec.LookPath("cpio")
	if err != nil {
		if cpio, err = exec.LookPath("busybox"); err != nil {
			return
		}
	}
	args := []string{"-t"}
	if filepath.Base(cpio) == "busybox" {
		args = []string{"cpio", "-t"}
	}
	cmd := exec.Command(cpio, args...)
	cmd.Stdin = bytes.NewReader(raw)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "bin/sandbox-agent") || !strings.Contains(string(out), "lib/modules/virtio.ko") {
		t.Fatalf("cpio -t listing: %s", out)
	}
}
