package sim

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, which is 100 on every Linux architecture Go targets.
const clockTicks = 100

// statFields returns the fields of /proc/<pid>/stat after the command name
// (index 0 is the state), or nil when the process does not exist.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil
	}
	return strings.Fields(string(b[i+2:]))
}

// procState returns the state letter of pid ('R', 'S', 'T', 'Z', ...) or 0
// when there is no such process.
func procState(pid int) byte {
	f := statFields(pid)
	if len(f) == 0 || f[0] == "" {
		return 0
	}
	return f[0][0]
}

func procExists(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// groupMembers returns the live processes of process group pgid.
func groupMembers(pgid int) []int {
	out := []int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return []int{pgid}
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := statFields(pid)
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

func cpuSeconds(pid int) float64 {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return float64(u+s) / clockTicks
}

type memFigures struct{ rss, private, shared int64 }

// readSmapsRollup sums the Rss, Private_* and Shared_* lines of
// /proc/<pid>/smaps_rollup (values are in kB).
func readSmapsRollup(pid int) (memFigures, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return memFigures{}, false
	}
	defer f.Close()
	return parseSmapsRollup(f)
}

func parseSmapsRollup(r io.Reader) (memFigures, bool) {
	var m memFigures
	found := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "Rss":
			m.rss += kb << 10
			found = true
		case "Private_Clean", "Private_Dirty":
			m.private += kb << 10
		case "Shared_Clean", "Shared_Dirty":
			m.shared += kb << 10
		}
	}
	return m, found
}

// copyTree copies the directory src to dst (which must not exist): regular
// files, directories and symlinks, with their permission bits. Other file
// types (sockets, fifos, devices) are skipped. It returns the number of
// regular files and bytes copied.
func copyTree(src, dst string) (files int, n int64, err error) {
	err = filepath.WalkDir(src, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := de.Info()
		if err != nil {
			return err
		}
		switch {
		case de.IsDir():
			// Owner rwx is kept so the copy can be filled (and removed).
			return os.Mkdir(target, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			c, err := copyFile(path, target, info.Mode().Perm())
			files++
			n += c
			return err
		}
		return nil
	})
	return files, n, err
}

func copyFile(src, dst string, perm fs.FileMode) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
