package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hearthvm/hearth/agentapi"
)

// process.Process service: Start, Connect (server streams), List,
// SendSignal, SendInput, CloseStdin (unary).
//
// A started process belongs to the agent, not to the request: a client that
// disconnects leaves it running (Connect reattaches); a Connect-Timeout-Ms
// deadline kills it (with its process group); agent shutdown kills all.

// ProcessConfig is the process to run.
type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type startRequest struct {
	Process processConfig `json:"process"`
	Pty     *ptyConfig    `json:"pty,omitempty"`
	Tag     *string       `json:"tag,omitempty"`
	Stdin   *bool         `json:"stdin,omitempty"`
}

type processSelector struct {
	Pid *flexUint `json:"pid,omitempty"`
	Tag *string   `json:"tag,omitempty"`
}

type connectRequest struct {
	Process processSelector `json:"process"`
}

type sendSignalRequest struct {
	Process processSelector `json:"process"`
	Signal  signalName      `json:"signal"`
}

type sendInputRequest struct {
	Process processSelector `json:"process"`
	Input   struct {
		Stdin []byte `json:"stdin,omitempty"`
		Pty   []byte `json:"pty,omitempty"`
	} `json:"input"`
}

type closeStdinRequest struct {
	Process processSelector `json:"process"`
}

func (r sendSignalRequest) validate() error {
	if r.Signal == 0 {
		return errorf(codeInvalidArgument, "signal is required")
	}
	return nil
}

// processRequest is a unary request naming one process.
type processRequest interface{ selector() processSelector }

func (r sendSignalRequest) selector() processSelector { return r.Process }
func (r sendInputRequest) selector() processSelector  { return r.Process }
func (r closeStdinRequest) selector() processSelector { return r.Process }

// signalName is the proto enum Signal: a name or a number.
type signalName syscall.Signal

func (s *signalName) UnmarshalJSON(b []byte) error {
	str := strings.Trim(string(b), `"`)
	switch str {
	case "SIGNAL_SIGKILL", "9":
		*s = signalName(syscall.SIGKILL)
	case "SIGNAL_SIGTERM", "15":
		*s = signalName(syscall.SIGTERM)
	default:
		return fmt.Errorf("unsupported signal %s", b)
	}
	return nil
}

// processEvent is the oneof ProcessEvent, wrapped as {"event":{...}}.
type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

type startEvent struct {
	Pid uint32 `json:"pid"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	Pty    []byte `json:"pty,omitempty"`
}

type endEvent struct {
	ExitCode int32  `json:"exitCode"`
	Exited   bool   `json:"exited"`
	Status   string `json:"status"`
	Error    string `json:"error,omitempty"`
}

type eventMessage struct {
	Event processEvent `json:"event"`
}

// process is one started process and its subscribers.
type process struct {
	pid     int
	tag     string
	cfg     processConfig
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	pty     *os.File      // the terminal's master side, for a pty process
	ptyDone chan struct{} // closed when the terminal's output is drained
	started chan struct{}

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	end  *endEvent

	// stdoutLog and stderrLog record its output in the sandbox log (nil
	// for a pty process, whose output is not recorded).
	stdoutLog, stderrLog *logLines
}

type subscriber struct {
	ch   chan processEvent
	gone chan struct{}
}

// subscribe adds a subscriber; ok is false when the process already ended.
func (p *process) subscribe() (*subscriber, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		return nil, false
	}
	s := &subscriber{ch: make(chan processEvent, 64), gone: make(chan struct{})}
	p.subs[s] = struct{}{}
	return s, true
}

func (p *process) unsubscribe(s *subscriber) {
	close(s.gone)
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

// publish delivers ev to every subscriber; a slow subscriber slows the
// process's output (backpressure) until it goes away.
func (p *process) publish(ev processEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.End != nil {
		p.end = ev.End
	}
	for s := range p.subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
			delete(p.subs, s)
		}
	}
}

// outputWriter publishes what the process writes to one stream.
type outputWriter struct {
	p      *process
	stderr bool
}

func (w outputWriter) Write(b []byte) (int, error) {
	<-w.p.started
	c := append([]byte(nil), b...)
	d := &dataEvent{Stdout: c}
	lines := w.p.stdoutLog
	if w.stderr {
		d = &dataEvent{Stderr: c}
		lines = w.p.stderrLog
	}
	if lines != nil {
		lines.write(b)
	}
	w.p.publish(processEvent{Data: d})
	return len(b), nil
}

// signal sends sig to the process group.
func (p *process) signal(sig syscall.Signal) error {
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// environ builds a process environment: the agent's, Options.Env,
// E2B_SANDBOX=true and E2B_SANDBOX_ID (agentapi.SandboxIDHeader), the /init env
// vars, HOME (and USER for another account), then the request's.
func (a *agent) environ(req map[string]string, acct *account) []string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, v := range a.o.Env {
		env[k] = v
	}
	env["E2B_SANDBOX"] = "true"
	a.mu.Lock()
	if a.sandboxID != "" {
		env["E2B_SANDBOX_ID"] = a.sandboxID
	}
	for k, v := range a.initEnv {
		env[k] = v
	}
	a.mu.Unlock()
	env["HOME"] = a.o.Root
	if acct != nil {
		env["HOME"], env["USER"], env["LOGNAME"] = acct.home, acct.name, acct.name
	}
	for k, v := range req {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// startProcess starts cfg as acct (nil: as the agent) and returns it with a
// first subscriber attached.
func (a *agent) startProcess(req startRequest, acct *account) (*process, *subscriber, error) {
	cfg := req.Process
	if cfg.Cmd == "" {
		return nil, nil, errorf(codeInvalidArgument, "process.cmd is required")
	}
	cwd := a.homeOf(acct)
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		cwd = a.resolve(*cfg.Cwd, acct)
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return nil, nil, errorf(codeInvalidArgument, "cwd %q is not a directory", cwd)
	}
	p := &process{cfg: cfg, started: make(chan struct{}), subs: map[*subscriber]struct{}{}}
	if req.Tag != nil {
		p.tag = *req.Tag
	}
	cmd := exec.Command(cfg.Cmd, cfg.Args...)
	cmd.Dir = cwd
	cmd.Env = a.environ(cfg.Envs, acct)
	cmd.Stdout = outputWriter{p: p}
	cmd.Stderr = outputWriter{p: p, stderr: true}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var slave *os.File
	if req.Pty != nil {
		master, s, err := openPTY(req.Pty.Size.winsize())
		if err != nil {
			return nil, nil, errorf(codeInternal, "%v", err)
		}
		slave, p.pty, p.ptyDone = s, master, make(chan struct{})
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		// Its own session with the terminal as controlling tty (fd 0);
		// the session leader's group is its pid, so signals still go to
		// -pid.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if acct != nil {
		cmd.SysProcAttr.Credential = acct.credential()
	}
	// Output held open by a background grandchild must not hold the end
	// event forever.
	cmd.WaitDelay = 200 * time.Millisecond
	if req.Stdin != nil && *req.Stdin && p.pty == nil {
		w, err := cmd.StdinPipe()
		if err != nil {
			return nil, nil, err
		}
		p.stdin = w
	}
	p.cmd = cmd
	sub, _ := p.subscribe()
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, nil, errorf(codeUnavailable, "agent is shutting down")
	}
	if err := cmd.Start(); err != nil {
		a.mu.Unlock()
		if p.pty != nil {
			p.pty.Close()
			slave.Close()
		}
		rerr := errorf(codeInvalidArgument, "starting %q: %v", cfg.Cmd, err)
		a.log.add(agentapi.LogError, 0, rerr.Message, false)
		return nil, nil, rerr
	}
	p.pid = cmd.Process.Pid
	a.procs[p.pid] = p
	a.mu.Unlock()
	// Recorded: the command line, never the environment (log.go).
	a.log.add(agentapi.LogStart, p.pid, commandLine(cfg.Cmd, cfg.Args), false)
	if p.pty == nil {
		p.stdoutLog = &logLines{log: a.log, event: agentapi.LogStdout, pid: p.pid}
		p.stderrLog = &logLines{log: a.log, event: agentapi.LogStderr, pid: p.pid}
	}
	if p.pty != nil {
		slave.Close() // the process holds its own copies
		go p.pumpPTY(p.ptyDone)
	}
	p.publish(processEvent{Start: &startEvent{Pid: uint32(p.pid)}})
	close(p.started)
	go a.wait(p)
	return p, sub, nil
}

// wait reaps p and publishes its end event.
func (a *agent) wait(p *process) {
	err := p.cmd.Wait()
	if p.pty != nil {
		// Publish the terminal's last output before the end event; a
		// background child keeping the terminal open must not hold the end
		// forever.
		select {
		case <-p.ptyDone:
		case <-time.After(200 * time.Millisecond):
		}
		p.pty.Close()
	}
	st := p.cmd.ProcessState
	ev := &endEvent{ExitCode: -1}
	if st != nil {
		ev.ExitCode = int32(st.ExitCode())
		ev.Exited = st.Exited()
		ev.Status = st.String()
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		ev.Error = exitErr.Error()
	case errors.Is(err, exec.ErrWaitDelay):
		// The process exited; a background child still holds its output.
	default:
		ev.Error = err.Error()
	}
	a.mu.Lock()
	delete(a.procs, p.pid)
	a.mu.Unlock()
	if p.stdoutLog != nil {
		p.stdoutLog.flush()
		p.stderrLog.flush()
	}
	status := ev.Status
	if status == "" {
		status = fmt.Sprintf("exit code %d", ev.ExitCode)
	}
	a.log.add(agentapi.LogExit, p.pid, status, false)
	if ev.Error != "" && !errors.As(err, &exitErr) {
		a.log.add(agentapi.LogError, p.pid, "waiting for the process: "+ev.Error, false)
	}
	p.publish(processEvent{End: ev})
}

// find resolves a selector to a running process.
func (a *agent) find(sel processSelector) (*process, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case sel.Pid != nil:
		if p, ok := a.procs[int(*sel.Pid)]; ok {
			return p, nil
		}
		return nil, errorf(codeNotFound, "process with pid %d not found", *sel.Pid)
	case sel.Tag != nil:
		for _, p := range a.procs {
			if p.tag == *sel.Tag {
				return p, nil
			}
		}
		return nil, errorf(codeNotFound, "process with tag %q not found", *sel.Tag)
	}
	return nil, errorf(codeInvalidArgument, "process selector needs pid or tag")
}

// processFor decodes (and validates) a unary request into req and finds the
// process it names; on failure it writes the Connect error and returns false.
func (a *agent) processFor(w http.ResponseWriter, r *http.Request, req processRequest) (*process, bool) {
	if !decodeUnary(w, r, req) {
		return nil, false
	}
	p, err := a.find(req.selector())
	if err != nil {
		writeUnaryError(w, err)
		return nil, false
	}
	return p, true
}

// keepaliveInterval is the keepalive period for a stream request.
func (a *agent) keepaliveInterval(r *http.Request) time.Duration {
	d := a.o.KeepaliveInterval
	if d <= 0 {
		d = 30 * time.Second
	}
	if s, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && s > 0 {
		if hd := time.Duration(s) * time.Second; hd < d {
			d = hd
		}
	}
	return d
}

// streamContext applies Connect-Timeout-Ms to the request context.
func streamContext(r *http.Request) (context.Context, context.CancelFunc, error) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		ctx, cancel := context.WithCancel(r.Context())
		return ctx, cancel, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || len(v) > 10 {
		return nil, nil, errorf(codeInvalidArgument, "invalid Connect-Timeout-Ms %q", v)
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(ms)*time.Millisecond)
	return ctx, cancel, nil
}

// serveEvents forwards p's events to the stream until its end event.
// killOnDeadline kills the process when the call's deadline passes.
func (a *agent) serveEvents(ctx context.Context, r *http.Request, st *stream, p *process, sub *subscriber, killOnDeadline bool) {
	defer p.unsubscribe(sub)
	tick := time.NewTicker(a.keepaliveInterval(r))
	defer tick.Stop()
	for {
		select {
		case ev := <-sub.ch:
			if err := st.send(eventMessage{Event: ev}); err != nil {
				return
			}
			if ev.End != nil {
				_ = st.end(nil)
				return
			}
		case <-tick.C:
			if err := st.send(eventMessage{Event: processEvent{Keepalive: &struct{}{}}}); err != nil {
				return
			}
		case <-ctx.Done():
			if r.Context().Err() != nil {
				return // the client went away; the process keeps running
			}
			if killOnDeadline {
				_ = p.signal(syscall.SIGKILL)
				a.log.add(agentapi.LogError, p.pid, "killed: its Connect-Timeout-Ms deadline ("+r.Header.Get("Connect-Timeout-Ms")+" ms) passed", false)
			}
			_ = st.end(errorf(codeDeadlineExceeded, "deadline exceeded after Connect-Timeout-Ms=%s", r.Header.Get("Connect-Timeout-Ms")))
			return
		}
	}
}

func (a *agent) handleStart(w http.ResponseWriter, r *http.Request) {
	defer drainBody(r)
	var req startRequest
	st, ctx, cancel, ok := openStream(w, r, &req)
	if !ok {
		return
	}
	defer cancel()
	acct, err := a.processAccount(r)
	if err != nil {
		_ = st.end(err)
		return
	}
	p, sub, err := a.startProcess(req, acct)
	if err != nil {
		_ = st.end(err)
		return
	}
	a.serveEvents(ctx, r, st, p, sub, true)
}

func (a *agent) handleConnect(w http.ResponseWriter, r *http.Request) {
	defer drainBody(r)
	var req connectRequest
	st, ctx, cancel, ok := openStream(w, r, &req)
	if !ok {
		return
	}
	defer cancel()
	p, err := a.find(req.Process)
	if err != nil {
		_ = st.end(err)
		return
	}
	sub, ok := p.subscribe()
	if !ok {
		_ = st.end(errorf(codeNotFound, "process %d already ended", p.pid))
		return
	}
	if err := st.send(eventMessage{Event: processEvent{Start: &startEvent{Pid: uint32(p.pid)}}}); err != nil {
		p.unsubscribe(sub)
		return
	}
	a.serveEvents(ctx, r, st, p, sub, false)
}

type processInfo struct {
	Config processConfig `json:"config"`
	Pid    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

func (a *agent) handleList(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	if !decodeUnary(w, r, &req) {
		return
	}
	a.mu.Lock()
	list := make([]processInfo, 0, len(a.procs))
	for _, p := range a.procs {
		pi := processInfo{Config: p.cfg, Pid: uint32(p.pid)}
		if p.tag != "" {
			t := p.tag
			pi.Tag = &t
		}
		list = append(list, pi)
	}
	a.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].Pid < list[j].Pid })
	writeUnary(w, struct {
		Processes []processInfo `json:"processes"`
	}{list})
}

func (a *agent) handleSendSignal(w http.ResponseWriter, r *http.Request) {
	var req sendSignalRequest
	p, ok := a.processFor(w, r, &req)
	if !ok {
		return
	}
	if err := p.signal(syscall.Signal(req.Signal)); err != nil {
		writeUnaryError(w, err)
		return
	}
	writeUnary(w, struct{}{})
}

func (a *agent) handleSendInput(w http.ResponseWriter, r *http.Request) {
	var req sendInputRequest
	p, ok := a.processFor(w, r, &req)
	if !ok {
		return
	}
	var in io.Writer
	switch {
	case p.pty != nil:
		in = p.pty // stdin and pty input both go to the terminal
	case p.stdin != nil:
		in = p.stdin
	default:
		writeUnaryError(w, errorf(codeFailedPrecondition, "process %d was started without stdin", p.pid))
		return
	}
	if _, err := in.Write(append(req.Input.Stdin, req.Input.Pty...)); err != nil {
		writeUnaryError(w, errorf(codeFailedPrecondition, "writing stdin: %v", err))
		return
	}
	writeUnary(w, struct{}{})
}

func (a *agent) handleCloseStdin(w http.ResponseWriter, r *http.Request) {
	var req closeStdinRequest
	p, ok := a.processFor(w, r, &req)
	if !ok {
		return
	}
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
	writeUnary(w, struct{}{})
}

// killAll kills every process and refuses new ones.
func (a *agent) killAll() {
	a.mu.Lock()
	a.closed = true
	procs := make([]*process, 0, len(a.procs))
	for _, p := range a.procs {
		procs = append(procs, p)
	}
	a.mu.Unlock()
	for _, p := range procs {
		_ = p.signal(syscall.SIGKILL)
	}
	a.closeWatchers()
	a.interp.closeAll()
}
