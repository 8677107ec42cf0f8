package sim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// clockTicks is USER_HZ, which is 100 on every Linux architecture Go targets.
const clockTicks = 100

// statFields returns the fields of /proc/<pid>/stat after the command name
// (index 0 is the state), or nil when the process does not exist.
func statFields(pid int) []string {
	f, _ := statFieldsErr(pid)
	return f
}

// statFieldsErr is statFields telling "no such process" (nil, nil) from a
// failure to read (an error: EMFILE, ENOMEM... prove nothing).
func statFieldsErr(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if gone(err) {
			return nil, nil
		}
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil, nil
	}
	return strings.Fields(string(b[i+2:])), nil
}

// gone reports a /proc read that failed because the process is gone.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// procState returns the state letter of pid ('R', 'S', 'T', 'Z', ...) or 0
// when there is no such process.
func procState(pid int) byte {
	st, _ := procStateErr(pid)
	return st
}

// procStateErr is procState failing when /proc cannot be read (rather
// than reporting the process gone).
func procStateErr(pid int) (byte, error) {
	f, err := statFieldsErr(pid)
	if err != nil || len(f) == 0 || f[0] == "" {
		return 0, err
	}
	return f[0][0], nil
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

// procPPid returns pid's parent pid (0 if unknown).
func procPPid(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
