package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Proc is one child process of the harness, logging to its own file. It is
// stopped by its PID (SIGTERM, then SIGKILL after a grace period), never by
// name. A Proc that has exited may be started again with the same command
// line (Restart), appending to the same log: the fault-injection suite's
// kill -9 and restart of a daemon.
type Proc struct {
	Name string
	Log  string // path of the combined stdout/stderr log
	bin  string
	args []string
	env  []string

	mu   sync.Mutex // guards cmd, done, err across Restart
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit error; valid once done is closed
}

// Start runs bin with args, environment env (appended to os.Environ), and
// output to <logDir>/<name>.log.
func Start(name, logDir, bin string, args []string, env ...string) (*Proc, error) {
	p := &Proc{Name: name, Log: fmt.Sprintf("%s/%s.log", logDir, name), bin: bin, args: args, env: env}
	if err := p.start(os.O_CREATE | os.O_TRUNC | os.O_WRONLY); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Proc) start(flags int) error {
	f, err := os.OpenFile(p.Log, flags, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), p.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err = cmd, done, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		if p.done == done {
			p.err = err
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Restart starts the process again with the same command line, appending
// to its log. The previous run must have exited (ErrRunning otherwise).
func (p *Proc) Restart() error {
	if done, _ := p.Exited(); !done {
		return fmt.Errorf("%s (pid %d): %w", p.Name, p.PID(), ErrRunning)
	}
	if f, err := os.OpenFile(p.Log, os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
		fmt.Fprintf(f, "\n==== harness: restarting %s at %s ====\n", p.Name, time.Now().Format(time.RFC3339Nano))
		f.Close()
	}
	return p.start(os.O_CREATE | os.O_APPEND | os.O_WRONLY)
}

// ErrRunning is Restart's error for a process that has not exited.
var ErrRunning = errors.New("process still running")

// Signal sends sig to the process itself (not its group: helpers it
// started, and the guests a node daemon started in their own sessions,
// are left alone), as a crash (SIGKILL) or a stall (SIGSTOP, SIGCONT)
// of that one daemon would.
func (p *Proc) Signal(sig syscall.Signal) error {
	if done, _ := p.Exited(); done {
		return fmt.Errorf("%s: %w", p.Name, ErrExited)
	}
	return syscall.Kill(p.PID(), sig)
}

// Kill is kill -9 of the process alone (see Signal); it returns once the
// process has exited.
func (p *Proc) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.Done()
	return nil
}

// PID is the process id.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Done is closed when the process (its current run) has exited.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Exited reports whether the process has exited, and with what.
func (p *Proc) Exited() (bool, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
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
	pgid, done := p.PID(), p.Done()
	// A stopped process (SIGSTOP) would never see the SIGTERM.
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
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
