package node

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/nodeapi"
)

// principal is an authenticated caller: root (the node's own token or the
// operator's root token), or the holder of one sandbox's token.
type principal struct {
	root      bool
	sandboxID string
}

// authenticate resolves the bearer token. ok is false for a missing or
// unknown token (401).
func (n *Node) authenticate(r *http.Request) (principal, bool) {
	if n.cfg.RootToken == "" && n.cfg.NodeToken == "" {
		return principal{root: true}, true
	}
	tok, ok := bearer(r)
	if !ok {
		return principal{}, false
	}
	h := hashToken(tok)
	if n.cfg.NodeToken != "" && subtle.ConstantTimeCompare(h[:], n.nodeHash[:]) == 1 {
		return principal{root: true}, true
	}
	if n.cfg.RootToken != "" && subtle.ConstantTimeCompare(h[:], n.rootHash[:]) == 1 {
		return principal{root: true}, true
	}
	// The map is keyed by the token's hash, so the lookup's timing says
	// nothing useful about the token; the final compare is constant-time.
	n.mu.Lock()
	id, found := n.tab.byToken[h]
	var want string
	if sb := n.tab.byID[id]; found && sb != nil {
		want = sb.rec.Handle.Token
	}
	n.mu.Unlock()
	if found && subtle.ConstantTimeCompare([]byte(want), []byte(tok)) == 1 {
		return principal{sandboxID: id}, true
	}
	return principal{}, false
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// Handler returns the node HTTP API (docs/API.md#node-api). /healthz and
// /metrics need no token; every other route needs root (Config.NodeToken
// or Config.RootToken), except the per-sandbox routes, which also accept
// that sandbox's own token. Every request gets Config.Timeouts' read and
// write deadlines, but the change stream (GET /v1/watch) lifts them once
// root is authenticated; serve it with serve.NewServer and serve.Listen for
// the header and idle timeouts and the process's connection budget.
func (n *Node) Handler() http.Handler {
	return n.traced(serve.Deadlines(countRequests(n.mux(), n.metrics.requests), n.cfg.Timeouts, nil))
}

// countRequests counts each request h answers in c, by the route pattern
// the mux matched (r.Pattern, set once it routed) and the status code.
func countRequests(h http.Handler, c *prometheus.CounterVec) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		c.WithLabelValues(r.Pattern, strconv.Itoa(sw.code)).Inc()
	})
}

// statusWriter remembers the status code; Unwrap keeps
// http.ResponseController (deadlines, flushes, full duplex) working.
type statusWriter struct {
	http.ResponseWriter
	code    int
	written bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.written {
		w.code, w.written = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.written = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	w.written = true
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (n *Node) mux() http.Handler {
	mux := http.NewServeMux()
	methodless := map[string]bool{}
	route := func(pattern string, h http.HandlerFunc) {
		mux.HandleFunc(pattern, h)
		// The same path with any other method: a JSON 405.
		_, path, _ := strings.Cut(pattern, " ")
		if !methodless[path] {
			methodless[path] = true
			mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
				writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" is not allowed on "+path)
			})
		}
	}

	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))

	route("POST /v1/claim", n.rootOnly(n.handleClaim))
	route("GET /v1/sandboxes", n.rootOnly(n.handleList))
	route("PUT /v1/pools", n.rootOnly(n.handlePools))
	route("GET /v1/watch", n.rootOnly(func(w http.ResponseWriter, r *http.Request) {
		serve.Unbound(w) // root's change stream lasts as long as it needs
		n.handleWatch(w, r)
	}))
	route("GET /v1/info", n.rootOnly(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, n.info()) }))
	route("GET /v1/snapshots", n.rootOnly(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, nodeapi.SnapshotList{Snapshots: n.snapshotList()})
	}))
	route("DELETE /v1/snapshots/{id}", n.rootOnly(func(w http.ResponseWriter, r *http.Request) {
		if err := n.deleteSnapshot(r.PathValue("id")); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	route("POST /v1/snapshots/{id}/promote", n.rootOnly(func(w http.ResponseWriter, r *http.Request) {
		rec, err := n.promoteSnapshot(r.PathValue("id"))
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, rec.Snapshot)
	}))
	route("POST /v1/snapshots/{id}/claim", n.rootOnly(func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		req, err := parseSnapshotClaim(body)
		if err != nil {
			writeErr(w, err)
			return
		}
		res, err := n.claimSnapshot(r.Context(), r.PathValue("id"), req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}))

	route("GET /v1/sandboxes/{id}", n.sandboxRoute(func(w http.ResponseWriter, r *http.Request, p principal, id string) {
		n.mu.Lock()
		sb := n.tab.byID[id]
		var row nodeapi.Sandbox
		if sb != nil {
			row = n.wire(sb.rec, p.root)
			row.Events = events(&sb.rec)
		}
		n.mu.Unlock()
		if sb == nil {
			writeErr(w, errNotFound)
			return
		}
		writeJSON(w, http.StatusOK, row)
	}))
	route("POST /v1/sandboxes/{id}/release", n.sandboxRoute(func(w http.ResponseWriter, r *http.Request, _ principal, id string) {
		if err := n.remove(r.Context(), id, false); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	for verb, pause := range map[string]bool{"pause": true, "resume": false} {
		route("POST /v1/sandboxes/{id}/"+verb, n.sandboxRoute(func(w http.ResponseWriter, r *http.Request, _ principal, id string) {
			keepMemory := true
			if pause {
				body, ok := readBody(w, r)
				if !ok {
					return
				}
				var req nodeapi.PauseRequest
				if err := decodeBody(body, &req, true); err != nil {
					writeErr(w, err)
					return
				}
				keepMemory = req.Memory == nil || *req.Memory
			}
			if err := n.pause(r.Context(), id, pause, keepMemory); err != nil {
				writeErr(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
	}
	route("POST /v1/sandboxes/{id}/fork", n.sandboxRoute(func(w http.ResponseWriter, r *http.Request, _ principal, id string) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		count, ttl, err := parseFork(body)
		if err != nil {
			writeErr(w, err)
			return
		}
		children, err := n.fork(r.Context(), id, count, ttl)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, nodeapi.ForkResult{Children: children})
	}))
	route("POST /v1/sandboxes/{id}/snapshot", n.sandboxRoute(func(w http.ResponseWriter, r *http.Request, p principal, id string) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		name, keep, err := parseSnapshot(body)
		if err != nil {
			writeErr(w, err)
			return
		}
		// Root's snapshots are kept unless it says otherwise; a sandbox
		// token's go with its sandbox, and only root may keep one.
		kept := p.root
		if keep != nil {
			if *keep && !p.root {
				writeError(w, http.StatusForbidden, "only the root token may keep a snapshot after its sandbox's release")
				return
			}
			kept = *keep
		}
		snap, err := n.snapshot(r.Context(), id, name, kept)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, nodeapi.SnapshotResult{Snapshot: snap})
	}))
	route("POST /v1/sandboxes/{id}/renew", n.sandboxRoute(func(w http.ResponseWriter, r *http.Request, _ principal, id string) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		ttl, err := parseTTLBody(body, true)
		if err != nil {
			writeErr(w, err)
			return
		}
		dl, err := n.renew(id, ttl)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, nodeapi.RenewResult{Deadline: dl})
	}))
	route("PUT /v1/sandboxes/{id}/labels", n.sandboxRoute(func(w http.ResponseWriter, r *http.Request, _ principal, id string) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		req, err := parseLabels(body)
		if err != nil {
			writeErr(w, err)
			return
		}
		out, err := n.setLabels(id, req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}))
	route("GET /v1/sandboxes/{id}/logs", n.sandboxRoute(n.handleLogs))
	route("GET /v1/sandboxes/{id}/stats", n.sandboxRoute(func(w http.ResponseWriter, r *http.Request, _ principal, id string) {
		s, err := n.statsWithRate(r.Context(), id)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, s)
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route for "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// gate wraps an API operation: 503 once the node is closing.
func (n *Node) gate(w http.ResponseWriter) bool {
	if !n.enter() {
		writeErr(w, errClosing)
		return false
	}
	return true
}

// rootOnly admits the root token: 401 without a known token, 403 for a
// sandbox token.
func (n *Node) rootOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := n.authenticate(r)
		if !ok {
			writeError(w, http.StatusUnauthorized, "missing or unknown bearer token")
			return
		}
		if !p.root {
			writeError(w, http.StatusForbidden, "a sandbox token may only act on its own sandbox")
			return
		}
		if !n.gate(w) {
			return
		}
		defer n.leave()
		h(w, r)
	}
}

// sandboxRoute admits root and the sandbox's own token; another sandbox's
// token gets a 404 without anything being done.
func (n *Node) sandboxRoute(h func(http.ResponseWriter, *http.Request, principal, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := n.authenticate(r)
		if !ok {
			writeError(w, http.StatusUnauthorized, "missing or unknown bearer token")
			return
		}
		id := r.PathValue("id")
		if !p.root && p.sandboxID != id {
			writeErr(w, errNotFound)
			return
		}
		if !n.gate(w) {
			return
		}
		defer n.leave()
		h(w, r, p, id)
	}
}

func (n *Node) handleClaim(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	in, err := parseClaim(body)
	if err != nil {
		n.metrics.claims.WithLabelValues("invalid").Inc()
		writeErr(w, err)
		return
	}
	res, err := n.claim(r.Context(), in)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (n *Node) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	_, byRef := q["claim_ref"]
	ref := q.Get("claim_ref")
	n.mu.Lock()
	var sbs []*sandbox
	if byRef {
		sbs = n.tab.ref(ref)
	} else {
		sbs = n.tab.all()
	}
	out := nodeapi.SandboxList{Sandboxes: make([]nodeapi.Sandbox, len(sbs))}
	for i, sb := range sbs {
		out.Sandboxes[i] = n.wire(sb.rec, false)
		if byRef {
			out.Sandboxes[i].Events = events(&sb.rec)
		}
	}
	n.mu.Unlock()
	if byRef && len(out.Sandboxes) == 0 {
		writeError(w, http.StatusNotFound, "no sandbox recorded under claim_ref "+ref)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (n *Node) handlePools(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	ts, err := parsePools(body)
	if err != nil {
		writeErr(w, err)
		return
	}
	info, err := n.setPools(ts)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// readBody reads at most 1 MiB; larger bodies get a 413.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body exceeds 1 MiB")
		} else {
			writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		}
		return nil, false
	}
	return b, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, nodeapi.Error{Error: msg})
}

func writeErr(w http.ResponseWriter, err error) {
	writeError(w, statusOf(err), err.Error())
}
