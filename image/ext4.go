package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// File is a file Ext4 writes into a disk image: Source's contents at Path
// (absolute, inside the guest), with Mode, owned by root. Missing parent
// directories are made (0755).
type File struct {
	Path   string
	Mode   fs.FileMode
	Source string // a file on the host
}

// Ext4 returns an ext4 disk image of rootfs with files written into it,
// building it once per (rootfs digest, size, files' paths, modes and
// contents) under ext4/ in the cache. sizeBytes 0 sizes it to the rootfs
// plus a quarter and 64 MiB of headroom. Callers must not write to the
// returned file: it is shared (boot it read-only, or copy-on-write it, e.g.
// a qcow2 overlay or -snapshot). Needs mke2fs and debugfs (e2fsprogs).
func (s *Store) Ext4(ctx context.Context, rootfs Rootfs, sizeBytes int64, files ...File) (string, error) {
	key := sha256.New()
	fmt.Fprintf(key, "%s\x00%d\x00", rootfs.Digest, sizeBytes)
	var extra int64
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || strings.ContainsAny(f.Path, "\"\n\\") {
			return "", fmt.Errorf("image ext4: bad path %q (absolute, clean, no quotes)", f.Path)
		}
		h, n, err := hashFile(f.Source)
		if err != nil {
			return "", fmt.Errorf("image ext4: %w", err)
		}
		extra += n
		fmt.Fprintf(key, "%s\x00%o\x00%s\x00", f.Path, f.Mode, h)
	}
	out := filepath.Join(s.Root, "ext4", strings.ReplaceAll(rootfs.Digest, ":", "-")+"-"+hex.EncodeToString(key.Sum(nil))[:16]+".ext4")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if sizeBytes == 0 {
		n, err := treeSize(rootfs.Dir)
		if err != nil {
			return "", fmt.Errorf("image ext4: %w", err)
		}
		sizeBytes = (n+extra)*5/4 + 64<<20
	}
	for _, d := range []string{"ext4", "tmp"} {
		if err := os.MkdirAll(filepath.Join(s.Root, d), 0o755); err != nil {
			return "", err
		}
	}
	tmp, err := os.CreateTemp(filepath.Join(s.Root, "tmp"), "disk-*.ext4")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	kib := (sizeBytes + 1023) / 1024
	if err := run(ctx, "mke2fs", "-q", "-F", "-t", "ext4", "-L", "hearth-root", "-m", "0",
		"-d", rootfs.Dir, tmp.Name(), fmt.Sprintf("%dk", kib)); err != nil {
		return "", fmt.Errorf("image ext4: %w", err)
	}
	if len(files) > 0 {
		if err := inject(ctx, tmp.Name(), files); err != nil {
			return "", fmt.Errorf("image ext4: %w", err)
		}
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// inject writes files into the ext4 image with one debugfs run.
func inject(ctx context.Context, img string, files []File) error {
	var b strings.Builder
	made := map[string]bool{}
	for _, f := range files {
		var dirs []string
		for d := path.Dir(f.Path); d != "/" && !made[d]; d = path.Dir(d) {
			dirs = append(dirs, d)
			made[d] = true
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			fmt.Fprintf(&b, "mkdir \"%s\"\n", dirs[i]) // fails harmlessly if it exists
		}
		fmt.Fprintf(&b, "rm \"%s\"\n", f.Path) // likewise when it does not
		fmt.Fprintf(&b, "write \"%s\" \"%s\"\n", f.Source, f.Path)
		fmt.Fprintf(&b, "sif \"%s\" mode 0%o\n", f.Path, 0o100000|uint32(f.Mode.Perm())|setBits(f.Mode))
		fmt.Fprintf(&b, "sif \"%s\" uid 0\nsif \"%s\" gid 0\n", f.Path, f.Path)
	}
	cmds := img + ".debugfs"
	if err := os.WriteFile(cmds, []byte(b.String()), 0o644); err != nil {
		return err
	}
	defer os.Remove(cmds)
	if err := run(ctx, "debugfs", "-w", "-f", cmds, img); err != nil {
		return err
	}
	// debugfs exits 0 even when a command fails: check every file landed.
	for _, f := range files {
		var out bytes.Buffer
		c := exec.CommandContext(ctx, "debugfs", "-R", fmt.Sprintf("stat \"%s\"", f.Path), img)
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil || !strings.Contains(out.String(), "Type: regular") {
			return fmt.Errorf("debugfs did not write %s: %s", f.Path, out.String())
		}
	}
	return nil
}

func setBits(m fs.FileMode) uint32 {
	var b uint32
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

func run(ctx context.Context, name string, args ...string) error {
	var out bytes.Buffer
	c := exec.CommandContext(ctx, name, args...)
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(out.String()))
	}
	return nil
}

func hashFile(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// treeSize sums the allocation (4 KiB blocks, one more per entry for its
// inode and directory slot) of the files under dir.
func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n += 4096
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += (fi.Size() + 4095) &^ 4095
		}
		return nil
	})
	return n, err
}
