// Command mkinitramfs builds the Hearth QEMU guest's initramfs: a
// reproducible gzip'd cpio (newc) archive holding /init, busybox, the static
// sandbox-agent, /bin/bash (a busybox sh wrapper), /lib/hearth/stage2 (the
// script that runs as PID 1 of the final root) and the kernel modules /init
// loads. Every entry has owner 0:0 and mtime 0 and entries are
// written in a fixed order, so the same inputs give the same bytes.
//
// Usage (see hack/setup.d/20-qemu-guest.sh):
//
//	mkinitramfs -o initrd.cpio.gz -init hack/guest/init -stage2 hack/guest/stage2 \
//	    -bash hack/guest/bash -busybox /bin/busybox -agent out/sandbox-agent \
//	    -modules out/modules
package main

import (
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type entry struct {
	name string // archive path without leading slash
	mode uint32 // full st_mode (type | perm)
	data []byte // file contents or symlink target
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
)

func main() {
	out := flag.String("o", "", "output file (.cpio.gz)")
	initPath := flag.String("init", "", "the /init script")
	stage2 := flag.String("stage2", "", "the stage-2 script (/lib/hearth/stage2)")
	bashPath := flag.String("bash", "", "the /bin/bash wrapper")
	busybox := flag.String("busybox", "/bin/busybox", "static busybox binary")
	agent := flag.String("agent", "", "static sandbox-agent binary")
	modules := flag.String("modules", "", "directory of .ko files to place in /lib/modules")
	flag.Parse()
	if *out == "" || *initPath == "" || *stage2 == "" || *bashPath == "" || *agent == "" {
		fmt.Fprintln(os.Stderr, "mkinitramfs: -o, -init, -stage2, -bash and -agent are required")
		os.Exit(2)
	}
	if err := build(*out, *initPath, *stage2, *bashPath, *busybox, *agent, *modules); err != nil {
		fmt.Fprintln(os.Stderr, "mkinitramfs:", err)
		os.Exit(1)
	}
}

func build(out, initPath, stage2, bashPath, busybox, agent, modules string) error {
	var es []entry
	for _, d := range []string{"bin", "dev", "etc", "lib", "lib/hearth", "lib/modules", "proc", "root", "run", "sbin", "sys", "tmp", "usr", "usr/bin", "usr/sbin"} {
		perm := uint32(0o755)
		if d == "tmp" {
			perm = 0o1777
		}
		es = append(es, entry{name: d, mode: modeDir | perm})
	}
	files := []struct{ name, src string }{
		{"init", initPath},
		{"lib/hearth/stage2", stage2},
		{"bin/busybox", busybox},
		{"bin/bash", bashPath},
		{"bin/sandbox-agent", agent},
	}
	if modules != "" {
		kos, err := filepath.Glob(filepath.Join(modules, "*.ko"))
		if err != nil {
			return err
		}
		sort.Strings(kos)
		for _, k := range kos {
			files = append(files, struct{ name, src string }{"lib/modules/" + filepath.Base(k), k})
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f.src)
		if err != nil {
			return err
		}
		perm := uint32(0o755)
		if strings.HasSuffix(f.name, ".ko") {
			perm = 0o644
		}
		es = append(es, entry{name: f.name, mode: modeFile | perm, data: b})
	}
	es = append(es, entry{name: "bin/sh", mode: modeLink | 0o777, data: []byte("busybox")})

	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err := writeCPIO(zw, es); err != nil {
		f.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// writeCPIO writes es as a newc archive followed by the trailer.
func writeCPIO(w io.Writer, es []entry) error {
	ino := uint32(1)
	for _, e := range es {
		if err := writeEntry(w, ino, e); err != nil {
			return err
		}
		ino++
	}
	return writeEntry(w, 0, entry{name: "TRAILER!!!"})
}

func writeEntry(w io.Writer, ino uint32, e entry) error {
	nlink := uint32(1)
	if e.mode&modeDir == modeDir && e.mode&modeFile == 0 {
		nlink = 2
	}
	name := e.name + "\x00"
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0, 0, 0, len(name), 0)
	if _, err := io.WriteString(w, hdr+name+pad(len(hdr)+len(name))); err != nil {
		return err
	}
	if _, err := w.Write(e.data); err != nil {
		return err
	}
	_, err := io.WriteString(w, pad(len(e.data)))
	return err
}

// pad returns the NULs that align n bytes to 4.
func pad(n int) string { return strings.Repeat("\x00", (4-n%4)%4) }
