package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Proc is one child process of the harness, logging to its own file. It is
// stopped by its PID (SIGTERM, then SIGKILL after a grace period), never by
// name.
type Proc struct {
	Name string
	Log  string // path of the combined stdout/stderr log
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit error; valid once done is closed
}

// Start runs bin with args, environment env (appended to os.Environ), and
// output to <logDir>/<name>.log.
func Start(name, logDir, bin string, args []string, env ...string) (*Proc, error) {
	logPath := fmt.Sprintf("%s/%s.log", logDir, name)
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and with what.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group the process leads (so helpers it
// started go too), waits up to grace, then SIGKILLs it. Safe to call twice.
func (p *Proc) Stop(grace time.Duration) {
	if done, _ := p.Exited(); done {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// Tail returns the last n bytes of the process log, for failure messages.
func (p *Proc) Tail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is 127.0.0.1:port.
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// ErrExited is returned by Poll when the process being waited for exits.
var ErrExited = errors.New("process exited")

// Poll calls ready every interval until it returns true, the deadline
// passes, or p (when non-nil) exits. The error carries ready's last error.
func Poll(p *Proc, timeout, interval time.Duration, ready func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := ready()
		if ok {
			return nil
		}
		last = err
		if p != nil {
			if done, perr := p.Exited(); done {
				return fmt.Errorf("%s: %w (%v); log tail:\n%s", p.Name, ErrExited, perr, p.Tail(3000))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", timeout, last)
		}
		time.Sleep(interval)
	}
}
