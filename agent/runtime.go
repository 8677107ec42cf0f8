package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hearthvm/hearth/agentapi"
)

// agent-sandbox's runtime API (the python runtime's routes, which
// sigs.k8s.io/agent-sandbox/clients/go/sandbox speaks; docs/API.md#router),
// served under agentapi.RuntimePrefix so it cannot shadow envd's routes; the
// gateway maps X-Sandbox-Port 8888 onto it:
//
//	POST /execute {"command"}        → {"stdout","stderr","exit_code"} (sh -c, whole output)
//	POST /upload  multipart "file"   → the part's filename is the guest path
//	GET  /download/{path}            → the file's bytes
//	GET  /list/{path}                → [{"name","size","type":"file"|"directory","mod_time"}]
//	GET  /exists/{path}              → {"exists"}
//
// {path} is one percent-encoded segment (slashes included); relative paths
// resolve against Options.Root, like envd's. The sandbox token guards it
// like every other route.

// maxRuntimeOutput bounds each of stdout and stderr of one /execute
// (the client refuses an answer over 16 MiB).
const maxRuntimeOutput = 7 << 20

// maxExecute bounds one /execute's run time.
const maxExecute = 10 * time.Minute

type executeRequest struct {
	Command string `json:"command"`
}

type executeResult struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

type runtimeEntry struct {
	Name    string  `json:"name"`
	Size    int64   `json:"size"`
	Type    string  `json:"type"`
	ModTime float64 `json:"mod_time"`
}

// serveRuntime dispatches a request under agentapi.RuntimePrefix.
func (a *agent) serveRuntime(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), agentapi.RuntimePrefix)
	op, arg, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	switch {
	case r.Method == http.MethodPost && op == "execute" && arg == "":
		a.runtimeExecute(w, r)
	case r.Method == http.MethodPost && op == "upload" && arg == "":
		a.runtimeUpload(w, r)
	case r.Method == http.MethodGet && (op == "download" || op == "list" || op == "exists"):
		p, err := url.PathUnescape(arg)
		if err != nil || p == "" || checkPath(p) != nil {
			writeRESTError(w, http.StatusBadRequest, "a percent-encoded path without NUL bytes is required")
			return
		}
		acct, err := a.processAccount(r)
		if err != nil {
			writeRESTError(w, http.StatusBadRequest, asRPCError(err).Message)
			return
		}
		p = a.resolve(p, acct)
		switch op {
		case "download":
			runtimeDownload(w, p)
		case "list":
			runtimeList(w, p)
		default:
			_, err := os.Lstat(p)
			writeJSONBody(w, map[string]bool{"exists": err == nil})
		}
	default:
		writeRESTError(w, http.StatusNotFound, fmt.Sprintf("no runtime route for %s %s", r.Method, rest))
	}
}

func (a *agent) runtimeExecute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || req.Command == "" {
		writeRESTError(w, http.StatusBadRequest, `the body must be {"command": "..."}`)
		return
	}
	acct, err := a.processAccount(r)
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), maxExecute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", req.Command)
	cmd.Dir = a.homeOf(acct)
	cmd.Env = a.environ(nil, acct)
	var stdout, stderr cappedBuffer
	stdout.max, stderr.max = maxRuntimeOutput, maxRuntimeOutput
	// The sandbox log gets the command, its output lines and its exit, as
	// for a process started through envd's API (never its environment).
	outLog := &logLines{log: a.log, event: agentapi.LogStdout}
	errLog := &logLines{log: a.log, event: agentapi.LogStderr}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&stdout, outLog), io.MultiWriter(&stderr, errLog)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if acct != nil {
		cmd.SysProcAttr.Credential = acct.credential()
	}
	// Kill the whole process group when the request ends or times out.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 200 * time.Millisecond
	res := executeResult{}
	// The output's copies start with the process: they wait on the log
	// writers' locks until the pid is known and the start is recorded.
	outLog.mu.Lock()
	errLog.mu.Lock()
	err = cmd.Start()
	pid := 0
	if err == nil {
		pid = cmd.Process.Pid
		outLog.pid, errLog.pid = pid, pid
		a.log.add(agentapi.LogStart, pid, commandLine("/bin/sh", []string{"-c", req.Command}), false)
	}
	errLog.mu.Unlock()
	outLog.mu.Unlock()
	if err != nil {
		a.log.add(agentapi.LogError, 0, "starting /bin/sh: "+err.Error(), false)
		writeRESTError(w, http.StatusInternalServerError, "starting /bin/sh: "+err.Error())
		return
	}
	err = cmd.Wait()
	outLog.flush()
	errLog.flush()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		}
	case cmd.ProcessState != nil: // WaitDelay expired with output held open
		res.ExitCode = cmd.ProcessState.ExitCode()
	default:
		a.log.add(agentapi.LogError, pid, "waiting for /bin/sh: "+err.Error(), false)
		writeRESTError(w, http.StatusInternalServerError, "waiting for /bin/sh: "+err.Error())
		return
	}
	if cmd.ProcessState != nil {
		a.log.add(agentapi.LogExit, pid, cmd.ProcessState.String(), false)
	}
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	writeJSONBody(w, res)
}

func (a *agent) runtimeUpload(w http.ResponseWriter, r *http.Request) {
	acct, err := a.processAccount(r)
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, asRPCError(err).Message)
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, "a multipart/form-data body is required: "+err.Error())
		return
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			writeRESTError(w, http.StatusBadRequest, `no "file" part`)
			return
		}
		if err != nil {
			writeRESTError(w, http.StatusBadRequest, err.Error())
			return
		}
		if part.FormName() != "file" {
			continue
		}
		// Part.FileName keeps only the base name; the client may send a path.
		_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		name := params["filename"]
		if name == "" {
			writeRESTError(w, http.StatusBadRequest, `the "file" part has no filename`)
			return
		}
		p := a.resolve(name, acct)
		if err := writeFile(p, part, acct); err != nil {
			writeRESTError(w, restStatus(err), asRPCError(err).Message)
			return
		}
		writeJSONBody(w, map[string]string{"message": fmt.Sprintf("File '%s' uploaded successfully", name)})
		return
	}
}

func runtimeDownload(w http.ResponseWriter, p string) {
	f, err := os.Open(p)
	if err != nil {
		writeRESTError(w, restStatus(fsError(p, err)), asRPCError(fsError(p, err)).Message)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.IsDir() {
		writeRESTError(w, http.StatusNotFound, "file not found: "+p)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f)
}

func runtimeList(w http.ResponseWriter, p string) {
	des, err := os.ReadDir(p)
	if err != nil {
		writeRESTError(w, restStatus(fsError(p, err)), asRPCError(fsError(p, err)).Message)
		return
	}
	out := make([]runtimeEntry, 0, len(des))
	for _, de := range des {
		fi, err := os.Stat(filepath.Join(p, de.Name())) // follow links, like os.path.isdir
		if err != nil {
			continue
		}
		t := "file"
		if fi.IsDir() {
			t = "directory"
		}
		out = append(out, runtimeEntry{Name: de.Name(), Size: fi.Size(), Type: t, ModTime: float64(fi.ModTime().UnixNano()) / 1e9})
	}
	writeJSONBody(w, out)
}

func writeJSONBody(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// cappedBuffer keeps the first max bytes written and discards the rest.
type cappedBuffer struct {
	bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
