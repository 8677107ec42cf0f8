package uds

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a VMM child process started by Spawn.
type Process struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Spawn starts bin with args in its own process group (so it outlives the
// node and can be re-adopted), stdout and stderr appended to logPath, env
// added to the node's environment.
func Spawn(bin string, args, env []string, logPath string) (*Process, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// PID is the process id.
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Alive reports whether pid runs and its command line contains marker (the
// VM's API socket path), which guards against PID reuse.
func Alive(pid int, marker string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return false // gone, or a zombie (empty cmdline)
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if s := statState(string(st)); s == "Z" || s == "X" {
			return false
		}
	}
	return bytes.Contains(b, []byte(marker))
}

func statState(stat string) string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return ""
	}
	f := strings.Fields(stat[i+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// Kill SIGKILLs the process group of pid (only when pid still matches
// marker) and waits until it is gone. p, when non-nil, is the same process
// started by this node (then it is reaped here).
func Kill(ctx context.Context, p *Process, pid int, marker string) error {
	if p != nil {
		if !p.Exited() {
			_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
			_ = p.Cmd.Process.Kill()
		}
		select {
		case <-p.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !Alive(pid, marker) {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return Poll(ctx, func() error {
		if Alive(pid, marker) {
			return errors.New("still running")
		}
		return nil
	})
}

// ProcStats are one process's figures from /proc.
type ProcStats struct {
	RSS, Private, Shared int64
	CPUSeconds           float64
	MeasuredAt           time.Time
}

// ReadProcStats measures pid from /proc/<pid>/smaps_rollup and /proc/<pid>/stat.
func ReadProcStats(pid int) (ProcStats, error) {
	var s ProcStats
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return s, err
	}
	s.RSS, s.Private, s.Shared = ParseSmapsRollup(string(b))
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	s.CPUSeconds, err = ParseStatCPU(string(st), 100)
	s.MeasuredAt = time.Now()
	return s, err
}

// ParseSmapsRollup returns RSS, private and shared bytes from smaps_rollup text.
func ParseSmapsRollup(text string) (rss, private, shared int64) {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			rss = kb * 1024
		case "Private_Clean:", "Private_Dirty:":
			private += kb * 1024
		case "Shared_Clean:", "Shared_Dirty:":
			shared += kb * 1024
		}
	}
	return rss, private, shared
}

// ParseStatCPU returns utime+stime in seconds from /proc/<pid>/stat text,
// given the clock ticks per second.
func ParseStatCPU(stat string, hz int) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no command field")
	}
	f := strings.Fields(stat[i+1:])
	// After the command: state(0) ppid(1) ... utime is field 14 overall → index 11 here.
	if len(f) < 13 {
		return 0, errors.New("stat: too few fields")
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	stt, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("stat: bad cpu fields")
	}
	return float64(ut+stt) / float64(hz), nil
}
