package agent

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// PTY processes, as envd runs them: StartRequest.pty {size{cols,rows}}
// starts the process on a new pseudo-terminal (its own session, the
// terminal as its controlling tty, stdin/stdout/stderr all on it); what it
// writes streams as data events {pty: bytes}; SendInput {input{pty}} writes
// to the terminal; process.Process/Update {pty{size}} resizes it; kill is
// SendSignal like any process.

type ptyConfig struct {
	Size *ptySize `json:"size,omitempty"`
}

type ptySize struct {
	Cols flexUint `json:"cols"`
	Rows flexUint `json:"rows"`
}

type updateRequest struct {
	Process processSelector `json:"process"`
	Pty     *ptyConfig      `json:"pty,omitempty"`
}

func (r updateRequest) selector() processSelector { return r.Process }

// winsize converts a requested size; a zero or missing dimension becomes
// the classic 80x24.
func (s *ptySize) winsize() *unix.Winsize {
	ws := &unix.Winsize{Col: 80, Row: 24}
	if s == nil {
		return ws
	}
	if s.Cols > 0 && s.Cols <= 0xffff {
		ws.Col = uint16(s.Cols)
	}
	if s.Rows > 0 && s.Rows <= 0xffff {
		ws.Row = uint16(s.Rows)
	}
	return ws
}

// openPTY opens a new pseudo-terminal pair sized ws: the master (kept by
// the agent) and the slave (handed to the process).
func openPTY(ws *unix.Winsize) (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening /dev/ptmx: %w", err)
	}
	// Non-blocking, so the file is in the runtime's poller and Close
	// interrupts a pending Read.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlocking the pty: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("naming the pty: %w", err)
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("opening %s: %w", name, err)
	}
	slave = os.NewFile(uintptr(sfd), name)
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws); err != nil {
		master.Close()
		slave.Close()
		return nil, nil, fmt.Errorf("sizing the pty: %w", err)
	}
	return master, slave, nil
}

// pumpPTY publishes what the process writes to its terminal until the
// terminal is closed on every side (EIO) and then closes done.
func (p *process) pumpPTY(done chan<- struct{}) {
	defer close(done)
	<-p.started
	buf := make([]byte, 32<<10)
	for {
		n, err := p.pty.Read(buf)
		if n > 0 {
			p.publish(processEvent{Data: &dataEvent{Pty: append([]byte(nil), buf[:n]...)}})
		}
		if err != nil {
			return // EIO once the last holder of the slave side is gone
		}
	}
}

// resize sets p's terminal size.
func (p *process) resize(s *ptySize) error {
	if p.pty == nil {
		return errorf(codeFailedPrecondition, "process %d has no pty", p.pid)
	}
	// SyscallConn, not Fd: Fd would switch the file to blocking mode.
	rc, err := p.pty.SyscallConn()
	if err != nil {
		return errorf(codeInternal, "resizing the pty: %v", err)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) { ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, s.winsize()) }); err != nil {
		ierr = err
	}
	switch {
	case ierr == nil:
		return nil
	case errors.Is(ierr, syscall.EBADF), errors.Is(ierr, os.ErrClosed):
		return errorf(codeNotFound, "process %d has ended", p.pid)
	}
	return errorf(codeInternal, "resizing the pty: %v", ierr)
}

func (a *agent) handleUpdate(w http.ResponseWriter, r *http.Request) {
	var req updateRequest
	p, ok := a.processFor(w, r, &req)
	if !ok {
		return
	}
	if req.Pty != nil {
		if err := p.resize(req.Pty.Size); err != nil {
			writeUnaryError(w, err)
			return
		}
	}
	writeUnary(w, struct{}{})
}
