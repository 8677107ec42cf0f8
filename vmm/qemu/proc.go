package qemu

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Smaps are the figures of /proc/PID/smaps_rollup the driver reports.
type Smaps struct {
	RSS, PSS, Private, Shared int64 // bytes
}

// ParseSmapsRollup reads Rss, Pss, Private_* and Shared_* (kB) from the
// content of /proc/PID/smaps_rollup.
func ParseSmapsRollup(b []byte) (Smaps, error) {
	var s Smaps
	seen := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 1 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		n *= 1024
		switch k {
		case "Rss":
			s.RSS, seen = n, true
		case "Pss":
			s.PSS = n
		case "Private_Clean", "Private_Dirty":
			s.Private += n
		case "Shared_Clean", "Shared_Dirty":
			s.Shared += n
		}
	}
	if !seen {
		return Smaps{}, fmt.Errorf("smaps_rollup: no Rss line")
	}
	return s, nil
}

// ProcStat is the part of /proc/PID/stat the driver reads.
type ProcStat struct {
	State byte
	// UTime and STime are in clock ticks.
	UTime, STime uint64
}

// ParseProcStat parses /proc/PID/stat (the comm field may hold spaces and
// parentheses; fields are counted after its last ')').
func ParseProcStat(b []byte) (ProcStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcStat{}, fmt.Errorf("proc stat: no comm")
	}
	f := strings.Fields(string(b[i+1:]))
	// After comm: state(0) ppid(1) ... utime(11) stime(12).
	if len(f) < 13 || len(f[0]) != 1 {
		return ProcStat{}, fmt.Errorf("proc stat: short line")
	}
	// The kernel's states are single ASCII letters (R, S, D, Z, T, t, I, ...).
	if c := f[0][0]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
		return ProcStat{}, fmt.Errorf("proc stat: bad state %q", f[0])
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return ProcStat{}, fmt.Errorf("proc stat: bad cpu times")
	}
	return ProcStat{State: f[0][0], UTime: u, STime: s}, nil
}

// clockTicks is USER_HZ, 100 on every Linux the project runs on.
const clockTicks = 100

func readProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, err
	}
	return ParseProcStat(b)
}

// pidAlive reports whether pid is a live (non-zombie) process whose
// command line contains marker (the VM's QMP socket path), which guards
// against PID reuse.
func pidAlive(pid int, marker string) bool {
	if pid <= 0 {
		return false
	}
	st, err := readProcStat(pid)
	if err != nil || st.State == 'Z' || st.State == 'X' {
		return false
	}
	cl, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return bytes.Contains(cl, []byte(marker))
}
