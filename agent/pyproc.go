package agent

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"unicode/utf8"
)

// driverEvent is one line the driver writes on fd 4 (interpreter.py), or
// a chunk of its stdout/stderr pipes ("out"/"err"), or a marker seen on
// one of them ("sync").
type driverEvent struct {
	Type           string `json:"type"`
	Text           string `json:"text"`
	Name           string `json:"name"`
	Value          string `json:"value"`
	Traceback      string `json:"traceback"`
	ExecutionCount int    `json:"execution_count"`
	Sync           []bool `json:"sync"`
	raw            []byte
	chunk          []byte
}

// pyProc is one python3 process running the driver.
type pyProc struct {
	cmd    *exec.Cmd
	req    *os.File // fd 3 of the driver (write end)
	files  []*os.File
	events chan driverEvent
	exited chan struct{} // closed once reaped
	evDone chan struct{} // closed when the event reader stops
	dead   chan struct{} // closed when killed (readers stop)
	once   sync.Once
	// why is what killed it (error name and value for a running execution).
	mu        sync.Mutex
	why, what string
}

// startPyProc starts python3 with the driver for c.
func startPyProc(a *agent, c *codeContext) (*pyProc, error) {
	python := a.o.Python
	if python == "" {
		python = "python3"
	}
	path, err := exec.LookPath(python)
	if err != nil {
		return nil, fmt.Errorf("%s is not installed in this sandbox: %v", python, err)
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	child := []*os.File{reqR, evW, outW, errW}
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	if outR == nil || errR == nil {
		closeAll(append(child, reqW, evR, outR, errR))
		return nil, errors.New("no pipes for the python process")
	}
	cmd := exec.Command(path, "-c", interpreterBootstrap)
	cmd.Dir = c.cwd
	cmd.Env = a.environ(map[string]string{"PYTHONIOENCODING": "utf-8"}, c.acct)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = []*os.File{reqR, evW} // fds 3 and 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.acct != nil {
		cmd.SysProcAttr.Credential = c.acct.credential()
	}
	if err := cmd.Start(); err != nil {
		closeAll(append(child, reqW, evR, outR, errR))
		return nil, fmt.Errorf("starting %s: %v", python, err)
	}
	closeAll(child)
	p := &pyProc{cmd: cmd, req: reqW, files: []*os.File{reqW, evR, outR, errR},
		events: make(chan driverEvent, 256), exited: make(chan struct{}), dead: make(chan struct{}),
		evDone: make(chan struct{})}
	nonce := make([]byte, 12)
	_, _ = rand.Read(nonce)
	marker := []byte("\x00hearth-sync:" + hex.EncodeToString(nonce) + "\x00")
	go p.readEvents(evR)
	go p.readOutput(outR, "out", marker)
	go p.readOutput(errR, "err", marker)
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	var boot bytes.Buffer
	boot.WriteString(strconv.Itoa(len(interpreterDriver)) + "\n")
	boot.Write(interpreterDriver)
	boot.Write(encodeLine(map[string]string{"nonce": hex.EncodeToString(nonce)}))
	if _, err := p.req.Write(boot.Bytes()); err != nil {
		p.kill("UnexpectedEndOfExecution", "the python process did not start")
		<-p.exited
		return nil, fmt.Errorf("starting the python driver: %v", err)
	}
	return p, nil
}

// kill records why and kills p's process group; the readers stop.
func (p *pyProc) kill(name, value string) {
	p.once.Do(func() {
		p.mu.Lock()
		p.why, p.what = name, value
		p.mu.Unlock()
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_ = p.cmd.Process.Kill()
		close(p.dead)
		go func() {
			<-p.exited
			for _, f := range p.files {
				f.Close()
			}
		}()
	})
}

// interrupt sends SIGINT to the driver (not its children: Python's
// KeyboardInterrupt handling ends those it waits for).
func (p *pyProc) interrupt() { _ = p.cmd.Process.Signal(syscall.SIGINT) }

func (p *pyProc) deliver(ev driverEvent) bool {
	select {
	case p.events <- ev:
		return true
	case <-p.dead:
		return false
	}
}

// readEvents reads the driver's event lines.
func (p *pyProc) readEvents(f *os.File) {
	defer close(p.evDone)
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := readLine(br, maxDriverLine)
		if len(line) > 0 {
			var ev driverEvent
			if json.Unmarshal(line, &ev) == nil && ev.Type != "" {
				ev.raw = line
				if !p.deliver(ev) {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line without its newline; a line longer than max is
// consumed and dropped (returned empty).
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	over := false
	for {
		part, err := br.ReadSlice('\n')
		if !over {
			if len(buf)+len(part) > max+1 {
				over, buf = true, nil
			} else {
				buf = append(buf, part...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if over {
			return nil, err
		}
		return bytes.TrimSuffix(buf, []byte("\n")), err
	}
}

// readOutput reads the driver's stdout or stderr pipe: chunks, and a
// "sync" event where the marker was.
func (p *pyProc) readOutput(f *os.File, kind string, marker []byte) {
	s := markerScanner{marker: marker}
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			for _, pc := range s.feed(buf[:n]) {
				ev := driverEvent{Type: kind, chunk: pc.data}
				if pc.marker {
					ev = driverEvent{Type: "sync"}
				}
				if !p.deliver(ev) {
					return
				}
			}
		}
		if err != nil {
			if rest := s.rest(); len(rest) > 0 {
				p.deliver(driverEvent{Type: kind, chunk: rest})
			}
			return
		}
	}
}

// piece is part of an output stream: data, or the marker.
type piece struct {
	data   []byte
	marker bool
}

// markerScanner splits a byte stream, fed in arbitrary chunks, at each
// occurrence of marker; it holds back a trailing partial marker and a
// trailing incomplete UTF-8 sequence until the next chunk.
type markerScanner struct {
	marker  []byte
	pending []byte
}

func (s *markerScanner) feed(chunk []byte) []piece {
	buf := append(s.pending, chunk...) // a fresh slice: pieces may keep it
	s.pending = nil
	var out []piece
	for {
		i := bytes.Index(buf, s.marker)
		if i < 0 {
			break
		}
		if i > 0 {
			out = append(out, piece{data: buf[:i:i]})
		}
		out = append(out, piece{marker: true})
		buf = buf[i+len(s.marker):]
	}
	keep := partialSuffix(buf, s.marker)
	if keep == 0 {
		keep = incompleteUTF8(buf)
	}
	if emit := buf[: len(buf)-keep : len(buf)-keep]; len(emit) > 0 {
		out = append(out, piece{data: emit})
	}
	if keep > 0 {
		s.pending = bytes.Clone(buf[len(buf)-keep:])
	}
	return out
}

// rest returns what feed held back.
func (s *markerScanner) rest() []byte {
	r := s.pending
	s.pending = nil
	return r
}

// partialSuffix is the length of the longest suffix of b that is a proper
// prefix of m.
func partialSuffix(b, m []byte) int {
	for k := min(len(m)-1, len(b)); k > 0; k-- {
		if bytes.Equal(b[len(b)-k:], m[:k]) {
			return k
		}
	}
	return 0
}

// incompleteUTF8 is the length of a trailing UTF-8 sequence of b that
// more bytes could complete (0 to 3).
func incompleteUTF8(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return 0
		}
		if c >= 0xC0 { // a leading byte
			if utf8.FullRune(b[len(b)-k:]) {
				return 0
			}
			return k
		}
	}
	return 0
}
