package agent

import (
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Directory watches, as envd serves them: filesystem.Filesystem/WatchDir
// (a server stream: start{}, then filesystem{name, type, entry?} events
// and keepalives) and the polling form CreateWatcher / GetWatcherEvents /
// RemoveWatcher. Events come from inotify (fsnotify); a recursive watch
// also watches every directory below, including ones created later. An
// event's name is its path relative to the watched directory; type is
// one of EVENT_TYPE_CREATE, _WRITE, _REMOVE, _RENAME, _CHMOD; entry (with
// includeEntry) describes what is at the path now, when anything is.

const (
	eventCreate = "EVENT_TYPE_CREATE"
	eventWrite  = "EVENT_TYPE_WRITE"
	eventRemove = "EVENT_TYPE_REMOVE"
	eventRename = "EVENT_TYPE_RENAME"
	eventChmod  = "EVENT_TYPE_CHMOD"
)

// maxWatcherEvents bounds what a polled watcher holds between polls; the
// oldest events are dropped beyond it.
const maxWatcherEvents = 10000

type watchRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive"`
	IncludeEntry       bool   `json:"includeEntry"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts"`
}

func (r watchRequest) validate() error { return pathRequest{r.Path}.validate() }

type fsEvent struct {
	Name  string     `json:"name"`
	Type  string     `json:"type"`
	Entry *entryInfo `json:"entry,omitempty"`
}

type watchDirResponse struct {
	Start      *struct{} `json:"start,omitempty"`
	Filesystem *fsEvent  `json:"filesystem,omitempty"`
	Keepalive  *struct{} `json:"keepalive,omitempty"`
}

// dirWatcher watches one directory (and, recursive, every one below it).
type dirWatcher struct {
	root      string
	recursive bool
	entries   bool
	w         *fsnotify.Watcher
	out       chan fsEvent
	done      chan struct{}
	closeOnce sync.Once
}

// newDirWatcher starts watching req's directory (resolved by the agent).
func (a *agent) newDirWatcher(req watchRequest, acct *account) (*dirWatcher, error) {
	root := a.resolve(req.Path, acct)
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fsError(root, err)
	}
	if !fi.IsDir() {
		return nil, errorf(codeInvalidArgument, "path %s is not a directory", root)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, errorf(codeInternal, "starting a watch: %v", err)
	}
	dw := &dirWatcher{root: root, recursive: req.Recursive, entries: req.IncludeEntry, w: w,
		out: make(chan fsEvent, 256), done: make(chan struct{})}
	if err := dw.add(root); err != nil {
		w.Close()
		return nil, fsError(root, err)
	}
	go dw.run()
	return dw, nil
}

// add watches dir and, for a recursive watch, every directory below it.
func (dw *dirWatcher) add(dir string) error {
	if !dw.recursive {
		return dw.w.Add(dir)
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // a subdirectory that vanished or is unreadable
		}
		if d.IsDir() {
			if err := dw.w.Add(p); err != nil && p == dir {
				return err
			}
		}
		return nil
	})
}

// run turns inotify events into envd events until the watcher closes.
func (dw *dirWatcher) run() {
	defer close(dw.out)
	for {
		select {
		case <-dw.done:
			return
		case ev, ok := <-dw.w.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Create) && dw.recursive {
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					_ = dw.add(ev.Name)
				}
			}
			for _, e := range dw.convert(ev) {
				select {
				case dw.out <- e:
				case <-dw.done:
					return
				}
			}
		case _, ok := <-dw.w.Errors:
			if !ok {
				return
			}
		}
	}
}

// convert maps one inotify event to envd events, one per operation.
func (dw *dirWatcher) convert(ev fsnotify.Event) []fsEvent {
	name, err := filepath.Rel(dw.root, ev.Name)
	if err != nil {
		name = ev.Name
	}
	var entry *entryInfo
	if dw.entries {
		if e, err := entryOf(ev.Name); err == nil {
			entry = &e
		}
	}
	var out []fsEvent
	for _, m := range []struct {
		op fsnotify.Op
		t  string
	}{{fsnotify.Create, eventCreate}, {fsnotify.Write, eventWrite}, {fsnotify.Remove, eventRemove}, {fsnotify.Rename, eventRename}, {fsnotify.Chmod, eventChmod}} {
		if ev.Has(m.op) {
			e := fsEvent{Name: name, Type: m.t}
			if m.op != fsnotify.Remove && m.op != fsnotify.Rename {
				e.Entry = entry
			}
			out = append(out, e)
		}
	}
	return out
}

func (dw *dirWatcher) close() {
	dw.closeOnce.Do(func() {
		close(dw.done)
		dw.w.Close()
	})
}

func (a *agent) handleWatchDir(w http.ResponseWriter, r *http.Request) {
	defer drainBody(r)
	var req watchRequest
	st, ctx, cancel, ok := openStream(w, r, &req)
	if !ok {
		return
	}
	defer cancel()
	if err := req.validate(); err != nil {
		_ = st.end(err)
		return
	}
	acct, err := a.processAccount(r)
	if err != nil {
		_ = st.end(err)
		return
	}
	dw, err := a.newDirWatcher(req, acct)
	if err != nil {
		_ = st.end(err)
		return
	}
	defer dw.close()
	if err := st.send(watchDirResponse{Start: &struct{}{}}); err != nil {
		return
	}
	tick := time.NewTicker(a.keepaliveInterval(r))
	defer tick.Stop()
	for {
		select {
		case e, ok := <-dw.out:
			if !ok {
				_ = st.end(errorf(codeInternal, "the watch on %s ended", dw.root))
				return
			}
			if err := st.send(watchDirResponse{Filesystem: &e}); err != nil {
				return
			}
		case <-tick.C:
			if err := st.send(watchDirResponse{Keepalive: &struct{}{}}); err != nil {
				return
			}
		case <-ctx.Done():
			if r.Context().Err() != nil {
				return // the client went away
			}
			_ = st.end(nil) // the call's deadline: a clean end of the watch
			return
		}
	}
}

// polledWatcher is a CreateWatcher watcher: its events wait for the next
// GetWatcherEvents.
type polledWatcher struct {
	dw     *dirWatcher
	mu     sync.Mutex
	events []fsEvent
}

func (pw *polledWatcher) collect() {
	for e := range pw.dw.out {
		pw.mu.Lock()
		if len(pw.events) >= maxWatcherEvents {
			pw.events = pw.events[1:]
		}
		pw.events = append(pw.events, e)
		pw.mu.Unlock()
	}
}

// watcherSet is an agent's polled watchers by id; the zero value is empty.
type watcherSet struct {
	mu sync.Mutex
	m  map[string]*polledWatcher
}

func (a *agent) watcher(id string) (*polledWatcher, error) {
	a.watchers.mu.Lock()
	defer a.watchers.mu.Unlock()
	if pw, ok := a.watchers.m[id]; ok {
		return pw, nil
	}
	return nil, errorf(codeNotFound, "watcher %q not found", id)
}

type watcherIDRequest struct {
	WatcherID string `json:"watcherId"`
}

func (a *agent) handleCreateWatcher(w http.ResponseWriter, r *http.Request) {
	var req watchRequest
	acct, ok := a.decodeUnaryAs(w, r, &req)
	if !ok {
		return
	}
	dw, err := a.newDirWatcher(req, acct)
	if err != nil {
		writeUnaryError(w, err)
		return
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	pw := &polledWatcher{dw: dw}
	go pw.collect()
	a.watchers.mu.Lock()
	if a.watchers.m == nil {
		a.watchers.m = map[string]*polledWatcher{}
	}
	a.watchers.m[id] = pw
	a.watchers.mu.Unlock()
	writeUnary(w, struct {
		WatcherID string `json:"watcherId"`
	}{id})
}

func (a *agent) handleGetWatcherEvents(w http.ResponseWriter, r *http.Request) {
	var req watcherIDRequest
	if !decodeUnary(w, r, &req) {
		return
	}
	pw, err := a.watcher(req.WatcherID)
	if err != nil {
		writeUnaryError(w, err)
		return
	}
	pw.mu.Lock()
	evs := pw.events
	pw.events = nil
	pw.mu.Unlock()
	if evs == nil {
		evs = []fsEvent{}
	}
	writeUnary(w, struct {
		Events []fsEvent `json:"events"`
	}{evs})
}

// closeWatchers ends every polled watcher (agent shutdown).
func (a *agent) closeWatchers() {
	a.watchers.mu.Lock()
	ws := a.watchers.m
	a.watchers.m = nil
	a.watchers.mu.Unlock()
	for _, pw := range ws {
		pw.dw.close()
	}
}

func (a *agent) handleRemoveWatcher(w http.ResponseWriter, r *http.Request) {
	var req watcherIDRequest
	if !decodeUnary(w, r, &req) {
		return
	}
	a.watchers.mu.Lock()
	pw, ok := a.watchers.m[req.WatcherID]
	delete(a.watchers.m, req.WatcherID)
	a.watchers.mu.Unlock()
	if !ok {
		writeUnaryError(w, errorf(codeNotFound, "watcher %q not found", req.WatcherID))
		return
	}
	pw.dw.close()
	writeUnary(w, struct{}{})
}
