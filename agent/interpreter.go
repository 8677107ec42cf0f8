package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The code interpreter: what e2b's @e2b/code-interpreter SDK reaches on
// port agentapi.InterpreterPort (its "Jupyter" port), served by the agent itself —
// no Jupyter, no IPython. A request the gateway forwards to that port
// (agentapi.ForwardPortHeader: 49999) is answered in-process, after the same
// X-Access-Token check as every other request, instead of going to the
// guest's loopback (the forward-only credential, agentapi.ForwardTokenHeader, opens
// only the calls that run no code: /health and the context calls, never
// /execute):
//
//	POST   /execute {"code","context_id"?,"language"?,"env_vars"?}
//	       → 200 NDJSON stream: {"type":"number_of_executions","execution_count"},
//	         {"type":"stdout"|"stderr","text","timestamp"}, {"type":"result","text",
//	         "html"?,"markdown"?,…,"is_main_result"}, {"type":"error","name","value",
//	         "traceback"}, then {"type":"end_of_execution"}
//	POST   /contexts {"language"?,"cwd"?} → {"id","language","cwd"}
//	GET    /contexts                      → [{"id","language","cwd"}]
//	POST   /contexts/{id}/restart         → 204 (a fresh process, state gone)
//	DELETE /contexts/{id}                 → 204
//	GET    /health                        → 200 "OK"
//
// A code context is one long-lived python3 process (started when the
// context is created — the default one on its first use — as the account
// processes run as by default) running the
// embedded driver interpreter.py: code runs with exec() in one persistent
// __main__ namespace; a trailing expression statement is evaluated and
// its repr() is the main result's text (plus _repr_html_, _repr_markdown_,
// _repr_json_, … when the object has them; display(obj) adds results that
// are not the main one); errors come back as name, value and a traceback
// of the cell's frames; env_vars are set in os.environ for that execution
// only. Executions on one context run one at a time, in arrival order. A
// client that goes away (the SDK's timeoutMs, an abort) interrupts its
// execution with SIGINT (KeyboardInterrupt); code that ignores that for
// interruptGrace is killed, and the context restarts with empty state.
//
// matplotlib figures come back as PNG results, as with IPython's inline
// backend: the driver is matplotlib's default backend (MPLBACKEND
// module://hearth_inline), plt.show() sends the open figures and the end of
// each execution sends the rest, each closed once sent.
//
// Not served: languages other than python (400), Jupyter's messaging and
// kernels, IPython syntax (magics, !shell), charts (the "chart" field),
// any package the image lacks, stdin (input() sees EOF).
// An execution of a context whose process dies (os._exit, a crash) ends
// with an error named "UnexpectedEndOfExecution"; the next one starts a
// fresh process.

//go:embed interpreter.py
var interpreterDriver []byte

// interpreterBootstrap is python3's -c program: it reads the driver's
// length and source from fd 3 and runs it with that stream as REQ.
const interpreterBootstrap = `import sys;f=open(3,"rb");n=int(f.readline());exec(compile(f.read(n),"<hearth-interpreter>","exec"),{"__name__":"__hearth__","REQ":f})`

const (
	// maxCodeBody bounds an interpreter request body (413 above it).
	maxCodeBody = 4 << 20
	// defaultMaxCodeContexts bounds an agent's code contexts (429 above).
	defaultMaxCodeContexts = 16
	// maxDriverLine bounds one event line of the driver; a longer one is
	// dropped (the driver cuts its strings well below this).
	maxDriverLine = 16 << 20
	// interruptGrace is how long an interrupted execution may take to
	// end before its process is killed.
	interruptGrace = 5 * time.Second
	// syncWait bounds the wait for the end-of-execution markers on the
	// process's stdout and stderr pipes.
	syncWait = time.Second
	// maxEnvVars bounds env_vars of one execution.
	maxEnvVars = 256
)

// interpreter holds the code contexts.
type interpreter struct {
	a         *agent
	mu        sync.Mutex
	ctxs      map[string]*codeContext
	defaultID string
	closed    bool
}

// codeContext is one code context; its process starts on first use.
type codeContext struct {
	id, language, cwd string
	acct              *account
	// turn is held by the execution in progress (a semaphore a waiting
	// request can give up on).
	turn chan struct{}
	mu   sync.Mutex
	proc *pyProc
	gone bool
}

// contextJSON is a context on the wire.
type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func newInterpreter(a *agent) *interpreter {
	return &interpreter{a: a, ctxs: map[string]*codeContext{}}
}

func (a *agent) maxCodeContexts() int {
	if a.o.MaxCodeContexts > 0 {
		return a.o.MaxCodeContexts
	}
	return defaultMaxCodeContexts
}

// interpreterContextCall reports whether r is one of the interpreter's
// calls that run no code — GET /health and the context calls (create,
// list, restart, remove), which @e2b/code-interpreter sends with the
// traffic token alone — the only ones the forward-only credential opens.
func interpreterContextCall(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/health":
		return r.Method == http.MethodGet
	case p == "/contexts":
		return r.Method == http.MethodGet || r.Method == http.MethodPost
	case strings.HasPrefix(p, "/contexts/"):
		_, op, _ := strings.Cut(strings.TrimPrefix(p, "/contexts/"), "/")
		return op == "" && r.Method == http.MethodDelete || op == "restart" && r.Method == http.MethodPost
	}
	return false
}

// ServeHTTP serves an (already authenticated) interpreter request.
func (in *interpreter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxCodeBody)
	p := r.URL.Path
	switch {
	case p == "/health" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "OK")
	case p == "/execute" && r.Method == http.MethodPost:
		in.handleExecute(w, r)
	case p == "/contexts" && r.Method == http.MethodPost:
		in.handleCreateContext(w, r)
	case p == "/contexts" && r.Method == http.MethodGet:
		in.handleListContexts(w, r)
	case strings.HasPrefix(p, "/contexts/"):
		id, op, _ := strings.Cut(strings.TrimPrefix(p, "/contexts/"), "/")
		switch {
		case op == "" && r.Method == http.MethodDelete:
			in.handleRemoveContext(w, id)
		case op == "restart" && r.Method == http.MethodPost:
			in.handleRestartContext(w, id)
		default:
			writeRESTError(w, http.StatusNotFound, "no interpreter route for "+r.Method+" "+p)
		}
	default:
		writeRESTError(w, http.StatusNotFound, "no interpreter route for "+r.Method+" "+p)
	}
}

// runCodeRequest is POST /execute's body.
type runCodeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// createContextRequest is POST /contexts's body.
type createContextRequest struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// errTooLarge marks a body over maxCodeBody.
var errTooLarge = errors.New("request body too large")

// decodeInterpreterJSON decodes exactly one JSON object from b into v
// (unknown fields are ignored, like e2b's server; an empty body is {}).
func decodeInterpreterJSON(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("invalid JSON body: trailing data after the object")
	}
	return nil
}

// readBody reads r's body (bounded by the MaxBytesReader of ServeHTTP).
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errTooLarge
	}
	return b, err
}

// decodeRunCode decodes and validates a POST /execute body.
func decodeRunCode(b []byte) (runCodeRequest, error) {
	var req runCodeRequest
	if err := decodeInterpreterJSON(b, &req); err != nil {
		return req, err
	}
	if req.ContextID != "" && req.Language != "" {
		return req, errors.New("only one of context_id or language can be provided")
	}
	if req.Language != "" {
		if _, err := normalizeLanguage(req.Language); err != nil {
			return req, err
		}
	}
	if len(req.EnvVars) > maxEnvVars {
		return req, fmt.Errorf("env_vars has %d entries (at most %d)", len(req.EnvVars), maxEnvVars)
	}
	for k, v := range req.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) || !utf8.ValidString(k) {
			return req, fmt.Errorf("env_vars: %.64q is not a valid variable", k)
		}
	}
	return req, nil
}

// decodeCreateContext decodes and validates a POST /contexts body.
func decodeCreateContext(b []byte) (createContextRequest, error) {
	var req createContextRequest
	if err := decodeInterpreterJSON(b, &req); err != nil {
		return req, err
	}
	lang, err := normalizeLanguage(req.Language)
	if err != nil {
		return req, err
	}
	req.Language = lang
	if strings.ContainsRune(req.Cwd, 0) || len(req.Cwd) > 4096 {
		return req, errors.New("cwd is not a valid path")
	}
	return req, nil
}

// normalizeLanguage maps e2b's language names onto the one served.
func normalizeLanguage(l string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(l)) {
	case "", "python", "python3":
		return "python", nil
	}
	return "", fmt.Errorf("language %.32q is not supported: this sandbox's code interpreter runs python only (no Jupyter kernels)", l)
}

func writeBadRequest(w http.ResponseWriter, err error) {
	if errors.Is(err, errTooLarge) {
		writeRESTError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", maxCodeBody))
		return
	}
	writeRESTError(w, http.StatusBadRequest, err.Error())
}

func newContextID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// newContext adds a context (no process yet); cwd "" is the account's
// home, else Options.Root.
func (in *interpreter) newContext(acct *account, cwd string) (*codeContext, int, error) {
	if cwd == "" {
		cwd = in.a.homeOf(acct)
	} else {
		cwd = in.a.resolve(cwd, acct)
		if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
			return nil, http.StatusBadRequest, fmt.Errorf("cwd %q is not a directory", cwd)
		}
	}
	c := &codeContext{id: newContextID(), language: "python", cwd: cwd, acct: acct, turn: make(chan struct{}, 1)}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, http.StatusServiceUnavailable, errors.New("the agent is shutting down")
	}
	if n := len(in.ctxs); n >= in.a.maxCodeContexts() {
		return nil, http.StatusTooManyRequests, fmt.Errorf("this sandbox has %d code contexts (at most %d); remove one first", n, in.a.maxCodeContexts())
	}
	in.ctxs[c.id] = c
	return c, 0, nil
}

// defaultContext returns the default python context, creating it.
func (in *interpreter) defaultContext(r *http.Request) (*codeContext, int, error) {
	in.mu.Lock()
	if c := in.ctxs[in.defaultID]; c != nil {
		in.mu.Unlock()
		return c, 0, nil
	}
	in.mu.Unlock()
	acct, err := in.a.processAccount(r)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	c, status, err := in.newContext(acct, "")
	if err != nil {
		return nil, status, err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if d := in.ctxs[in.defaultID]; d != nil { // lost a race: keep the first
		delete(in.ctxs, c.id)
		return d, 0, nil
	}
	in.defaultID = c.id
	return c, 0, nil
}

func (in *interpreter) lookup(id string) *codeContext {
	in.mu.Lock()
	defer in.mu.Unlock()
	if id == "default" {
		id = in.defaultID
	}
	return in.ctxs[id]
}

func (in *interpreter) handleCreateContext(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	if err != nil {
		writeBadRequest(w, err)
		return
	}
	req, err := decodeCreateContext(b)
	if err != nil {
		writeBadRequest(w, err)
		return
	}
	acct, err := in.a.processAccount(r)
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, err.Error())
		return
	}
	c, status, err := in.newContext(acct, req.Cwd)
	if err != nil {
		writeRESTError(w, status, err.Error())
		return
	}
	// Start its python now: a created context is about to be used.
	go func() { _, _ = c.process(in.a) }()
	writeJSONStatus(w, http.StatusOK, contextJSON{ID: c.id, Language: c.language, Cwd: c.cwd})
}

func (in *interpreter) handleListContexts(w http.ResponseWriter, r *http.Request) {
	if _, status, err := in.defaultContext(r); err != nil {
		writeRESTError(w, status, err.Error())
		return
	}
	in.mu.Lock()
	out := make([]contextJSON, 0, len(in.ctxs))
	for _, c := range in.ctxs {
		out = append(out, contextJSON{ID: c.id, Language: c.language, Cwd: c.cwd})
	}
	in.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	writeJSONStatus(w, http.StatusOK, out)
}

func (in *interpreter) handleRemoveContext(w http.ResponseWriter, id string) {
	in.mu.Lock()
	if id == "default" {
		id = in.defaultID
	}
	c := in.ctxs[id]
	delete(in.ctxs, id)
	if id == in.defaultID {
		in.defaultID = ""
	}
	in.mu.Unlock()
	if c == nil {
		writeRESTError(w, http.StatusNotFound, fmt.Sprintf("context %.64q not found", id))
		return
	}
	c.stop("ContextRemoved", "the context was removed", true)
	w.WriteHeader(http.StatusNoContent)
}

func (in *interpreter) handleRestartContext(w http.ResponseWriter, id string) {
	c := in.lookup(id)
	if c == nil {
		writeRESTError(w, http.StatusNotFound, fmt.Sprintf("context %.64q not found", id))
		return
	}
	c.stop("ContextRestarting", "the context was restarted", false)
	w.WriteHeader(http.StatusNoContent)
}

// closeAll kills every context's process and refuses new contexts.
func (in *interpreter) closeAll() {
	in.mu.Lock()
	in.closed = true
	cs := make([]*codeContext, 0, len(in.ctxs))
	for _, c := range in.ctxs {
		cs = append(cs, c)
	}
	in.mu.Unlock()
	for _, c := range cs {
		c.stop("ContextRemoved", "the agent is shutting down", true)
	}
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// stop kills c's process (its whole process group) and waits for it;
// gone refuses later executions (a removed context).
func (c *codeContext) stop(name, value string, gone bool) {
	c.mu.Lock()
	p := c.proc
	c.proc = nil
	if gone {
		c.gone = true
	}
	c.mu.Unlock()
	if p != nil {
		p.kill(name, value)
		<-p.exited
	}
}

func (in *interpreter) handleExecute(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	if err != nil {
		writeBadRequest(w, err)
		return
	}
	req, err := decodeRunCode(b)
	if err != nil {
		writeBadRequest(w, err)
		return
	}
	var c *codeContext
	if req.ContextID != "" {
		if c = in.lookup(req.ContextID); c == nil {
			writeRESTError(w, http.StatusNotFound, fmt.Sprintf("context %.64q not found", req.ContextID))
			return
		}
	} else {
		var status int
		if c, status, err = in.defaultContext(r); err != nil {
			writeRESTError(w, status, err.Error())
			return
		}
	}
	// One execution at a time per context; a client may give up waiting.
	select {
	case c.turn <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	defer func() { <-c.turn }()
	p, err := c.process(in.a)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, errContextGone) {
			status = http.StatusNotFound
		}
		writeRESTError(w, status, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	out := &ndjsonWriter{w: w, rc: http.NewResponseController(w)}
	out.flush()
	if !c.execute(r.Context(), p, req, out) {
		// The process died or was killed: the next execution starts a new one.
		c.mu.Lock()
		if c.proc == p {
			c.proc = nil
		}
		c.mu.Unlock()
	}
}

// ndjsonWriter writes messages, one a line, flushing each; it stops
// writing after the first failure (the client is gone).
type ndjsonWriter struct {
	w      io.Writer
	rc     *http.ResponseController
	failed bool
}

func (o *ndjsonWriter) send(line []byte) {
	if o.failed {
		return
	}
	if _, err := o.w.Write(line); err != nil {
		o.failed = true
		return
	}
	o.flush()
}

func (o *ndjsonWriter) flush() {
	if err := o.rc.Flush(); err != nil {
		o.failed = true
	}
}

var errContextGone = errors.New("the context was removed")

// process returns c's running process, starting one.
func (c *codeContext) process(a *agent) (*pyProc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return nil, errContextGone
	}
	if c.proc != nil {
		select {
		case <-c.proc.exited:
			c.proc = nil
		default:
			return c.proc, nil
		}
	}
	p, err := startPyProc(a, c)
	if err != nil {
		return nil, err
	}
	c.proc = p
	return p, nil
}

// Wire messages of POST /execute (e2b's code-interpreter server's).

type streamMsg struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Timestamp string `json:"timestamp"`
}

type errorMsg struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

type countMsg struct {
	Type           string `json:"type"`
	ExecutionCount int    `json:"execution_count"`
}

type typeMsg struct {
	Type string `json:"type"`
}

// encodeLine is v as one JSON line, HTML characters left as they are.
func encodeLine(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil
	}
	return buf.Bytes()
}

func encodeStream(kind string, text []byte, at time.Time) []byte {
	return encodeLine(streamMsg{Type: kind, Text: string(text), Timestamp: at.UTC().Format(time.RFC3339Nano)})
}

func encodeError(name, value, traceback string) []byte {
	return encodeLine(errorMsg{Type: "error", Name: name, Value: value, Traceback: traceback})
}

func encodeCount(n int) []byte {
	return encodeLine(countMsg{Type: "number_of_executions", ExecutionCount: n})
}

func encodeEnd() []byte { return encodeLine(typeMsg{Type: "end_of_execution"}) }

// resultFields are the result keys passed on from the driver; the SDK
// files any other under "extra".
var resultFields = map[string]bool{
	"text": true, "html": true, "markdown": true, "svg": true, "png": true, "jpeg": true, "pdf": true,
	"latex": true, "json": true, "javascript": true, "data": true, "chart": true, "extra": true,
}

// encodeResult re-encodes a driver result event: type "result", the known
// formats, is_main_result a boolean. ok is false for something else.
func encodeResult(raw []byte) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	out := map[string]json.RawMessage{"type": json.RawMessage(`"result"`)}
	main := false
	if v, ok := m["is_main_result"]; ok && json.Unmarshal(v, &main) != nil {
		return nil, false
	}
	out["is_main_result"], _ = json.Marshal(main)
	for k, v := range m {
		if resultFields[k] && string(v) != "null" {
			out[k] = v
		}
	}
	b := encodeLine(out)
	return b, b != nil
}

// execute runs one request on p, streaming its messages to out. It
// returns false when p is no longer usable (died, killed).
func (c *codeContext) execute(ctx context.Context, p *pyProc, req runCodeRequest, out *ndjsonWriter) bool {
	// Output the process wrote while idle belongs to now.
	for drained := false; !drained; {
		select {
		case ev := <-p.events:
			if ev.Type == "out" || ev.Type == "err" {
				forwardChunk(out, ev)
			}
		default:
			drained = true
		}
	}
	line := encodeLine(map[string]any{"code": req.Code, "env": req.EnvVars})
	if _, err := p.req.Write(line); err != nil {
		p.kill("UnexpectedEndOfExecution", "the python process is gone")
		out.send(encodeError("UnexpectedEndOfExecution", "the context's python process exited before the execution", ""))
		out.send(encodeEnd())
		return false
	}
	done := ctx.Done()
	var grace <-chan time.Time
	var syncTimer <-chan time.Time
	waitSyncs, ended := 0, false
	for {
		if ended && waitSyncs <= 0 {
			out.send(encodeEnd())
			return true
		}
		select {
		case ev := <-p.events:
			switch ev.Type {
			case "out", "err", "stdout", "stderr":
				forwardChunk(out, ev)
			case "sync":
				waitSyncs--
			case "result":
				if b, ok := encodeResult(ev.raw); ok {
					out.send(b)
				}
			case "error":
				out.send(encodeError(ev.Name, ev.Value, ev.Traceback))
			case "number_of_executions":
				out.send(encodeCount(ev.ExecutionCount))
			case "end":
				ended = true
				for _, s := range ev.Sync {
					if s {
						waitSyncs++
					}
				}
				syncTimer = time.After(syncWait)
			}
		case <-syncTimer:
			waitSyncs = 0
		case <-done:
			// The client went away (its timeout, an abort): interrupt, and
			// finish the execution unseen so the context stays usable.
			done = nil
			out.failed = true
			p.interrupt()
			grace = time.After(interruptGrace)
		case <-grace:
			p.kill("Interrupted", "the execution ignored the interrupt and was killed")
		case <-p.exited:
			// Pass on what the process wrote before it went: the event
			// pipe's end (nothing else holds it), or a short wait.
			last := time.After(200 * time.Millisecond)
			for drained := false; !drained; {
				select {
				case ev := <-p.events:
					if ev.Type == "out" || ev.Type == "err" || ev.Type == "stdout" || ev.Type == "stderr" {
						forwardChunk(out, ev)
					}
				case <-p.evDone:
					select {
					case ev := <-p.events:
						if ev.Type == "out" || ev.Type == "err" || ev.Type == "stdout" || ev.Type == "stderr" {
							forwardChunk(out, ev)
						}
					default:
						drained = true
					}
				case <-last:
					drained = true
				}
			}
			p.mu.Lock()
			name, value := p.why, p.what
			p.mu.Unlock()
			if name == "" {
				name, value = "UnexpectedEndOfExecution", "the context's python process exited ("+p.cmd.ProcessState.String()+"); its state is lost"
			}
			out.send(encodeError(name, value, ""))
			out.send(encodeEnd())
			p.kill(name, value) // close the pipes
			return false
		}
	}
}

// forwardChunk sends a stdout/stderr event or pipe chunk.
func forwardChunk(out *ndjsonWriter, ev driverEvent) {
	kind, text := ev.Type, []byte(ev.Text)
	switch ev.Type {
	case "out":
		kind, text = "stdout", ev.chunk
	case "err":
		kind, text = "stderr", ev.chunk
	}
	if len(text) > 0 {
		out.send(encodeStream(kind, text, time.Now()))
	}
}
