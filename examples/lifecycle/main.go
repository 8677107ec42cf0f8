// Command lifecycle walks every sandbox verb on both Hearth surfaces and
// prints one line per step; it exits non-zero on the first failure.
//
//	Kubernetes (client-go dynamic client, agents.x-k8s.io/v1beta1 sandboxes):
//	  create, get, list, snapshot, fork, pause, resume, delete
//	e2b (plain net/http + JSON, X-API-Key):
//	  create, metrics, pause, pause again (409), connect, snapshot,
//	  list snapshots, timeout, kill
//
// Run it against sandbox-dev (hack/test.d/55-lifecycle.sh does) or a
// cluster:
//
//	go run ./examples/lifecycle -kubeconfig $KUBECONFIG -e2b-url http://127.0.0.1:3000 \
//	    -e2b-key $KEY -namespace default -template ghcr.io/example/python:3.12
//
// The template must have warm capacity (a SandboxWarmPool); the program
// creates one itself with -warm-pool (the default) when it is missing.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	sandboxes = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	templates = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	warmPools = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
)

const (
	annClaimID = "sandbox.cocoonstack.io/claim-id"
	labelPhase = "sandbox.cocoonstack.io/phase"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster (or sandbox-dev); empty skips the Kubernetes surface")
	e2bURL := flag.String("e2b-url", "", "base URL of the e2b API; empty skips the e2b surface")
	e2bKey := flag.String("e2b-key", "", "e2b API key (X-API-Key)")
	namespace := flag.String("namespace", "default", "namespace for Kubernetes sandboxes")
	template := flag.String("template", "ghcr.io/hearthvm/lifecycle-python:3.12", "template: container image (k8s) and templateID (e2b)")
	warmPool := flag.Bool("warm-pool", true, "create a SandboxTemplate + SandboxWarmPool for -template when missing")
	timeout := flag.Duration("timeout", 3*time.Minute, "overall deadline")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *kubeconfig == "" && *e2bURL == "" {
		fail("setup", errors.New("nothing to do: give -kubeconfig and/or -e2b-url"))
	}
	if *kubeconfig != "" {
		k := &k8s{ns: *namespace, template: *template}
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			fail("k8s setup", err)
		}
		if k.dyn, err = dynamic.NewForConfig(cfg); err != nil {
			fail("k8s setup", err)
		}
		if *warmPool {
			step("k8s warm-pool", func() (string, error) { return k.ensurePool(ctx) })
		}
		k.walk(ctx)
	} else {
		fmt.Println("k8s: skipped (no -kubeconfig)")
	}
	if *e2bURL != "" {
		e := &e2b{base: strings.TrimRight(*e2bURL, "/"), key: *e2bKey, template: *template, hc: &http.Client{Timeout: time.Minute}}
		e.walk(ctx)
	} else {
		fmt.Println("e2b: skipped (no -e2b-url)")
	}
	fmt.Println("all steps passed")
}

// step runs fn, prints "ok <name> <detail> (<duration>)" or fails the program.
func step(name string, fn func() (string, error)) {
	start := time.Now()
	detail, err := fn()
	if err != nil {
		fail(name, err)
	}
	fmt.Printf("ok   %-22s %s (%v)\n", name, detail, time.Since(start).Round(time.Millisecond))
}

func fail(name string, err error) {
	fmt.Printf("FAIL %-22s %v\n", name, err)
	os.Exit(1)
}

// retry calls fn until it returns done or ctx ends; a not-done error is the
// reason to wait (e.g. 503 while a warm pool refills).
func retry(ctx context.Context, fn func() (done bool, err error)) error {
	for {
		done, err := fn()
		if done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ---- Kubernetes surface ----

type k8s struct {
	dyn      dynamic.Interface
	ns       string
	template string
}

func (k *k8s) ensurePool(ctx context.Context) (string, error) {
	spec := map[string]any{"podTemplate": map[string]any{"spec": map[string]any{
		"containers": []any{map[string]any{"name": "main", "image": k.template}}}}}
	tpl := obj("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate", "lifecycle", spec)
	if _, err := k.dyn.Resource(templates).Namespace(k.ns).Create(ctx, tpl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	pool := obj("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool", "lifecycle",
		map[string]any{"replicas": int64(2), "sandboxTemplateRef": map[string]any{"name": "lifecycle"}})
	if _, err := k.dyn.Resource(warmPools).Namespace(k.ns).Create(ctx, pool, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return "SandboxWarmPool lifecycle (replicas 2)", nil
}

func obj(apiVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetName(name)
	return u
}

func (k *k8s) walk(ctx context.Context) {
	rc := k.dyn.Resource(sandboxes).Namespace(k.ns)
	name := fmt.Sprintf("lifecycle-%d", time.Now().UnixNano()%1_000_000)
	var created *unstructured.Unstructured
	step("k8s create", func() (string, error) {
		sb := obj("agents.x-k8s.io/v1beta1", "Sandbox", name, map[string]any{"podTemplate": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "main", "image": k.template}}}}})
		err := retry(ctx, func() (bool, error) {
			var err error
			created, err = rc.Create(ctx, sb, metav1.CreateOptions{})
			return !apierrors.IsServiceUnavailable(err), err // 503: no warm microVM yet
		})
		if err != nil {
			return "", err
		}
		node, _, _ := unstructured.NestedString(created.Object, "status", "nodeName")
		return fmt.Sprintf("%s/%s claim=%s node=%s", k.ns, name, created.GetAnnotations()[annClaimID], node), nil
	})
	step("k8s get", func() (string, error) {
		got, err := rc.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if a, b := got.GetAnnotations()[annClaimID], created.GetAnnotations()[annClaimID]; a != b {
			return "", fmt.Errorf("claim-id %q, created %q", a, b)
		}
		return "phase=" + got.GetLabels()[labelPhase], nil
	})
	step("k8s list", func() (string, error) {
		// List is derived from published node inventory: poll briefly.
		var n int
		err := retry(ctx, func() (bool, error) {
			l, err := rc.List(ctx, metav1.ListOptions{})
			if err != nil {
				return true, err
			}
			n = len(l.Items)
			for _, it := range l.Items {
				if it.GetName() == name {
					return true, nil
				}
			}
			return false, fmt.Errorf("%s not listed yet", name)
		})
		return fmt.Sprintf("%d sandboxes", n), err
	})
	step("k8s snapshot", func() (string, error) {
		res, err := k.action(ctx, name, "snapshot", map[string]any{"name": name + "-snap"})
		if err != nil {
			return "", err
		}
		id, _, _ := unstructured.NestedString(res.Object, "snapshotID")
		if id == "" {
			return "", fmt.Errorf("no snapshotID in %v", res.Object)
		}
		return "snapshotID=" + id, nil
	})
	step("k8s fork", func() (string, error) {
		res, err := k.action(ctx, name, "fork", map[string]any{"count": int64(1)})
		if err != nil {
			return "", err
		}
		children, _, _ := unstructured.NestedSlice(res.Object, "children")
		if len(children) != 1 {
			return "", fmt.Errorf("%d children, want 1", len(children))
		}
		c, _ := children[0].(map[string]any)
		child, _ := c["name"].(string)
		if child == "" {
			child, _ = c["sandboxID"].(string)
		}
		if err := rc.Delete(ctx, child, metav1.DeleteOptions{}); err != nil {
			return "", fmt.Errorf("delete fork child %s: %w", child, err)
		}
		return "child=" + child + " (deleted)", nil
	})
	for _, s := range []struct{ verb, phase string }{{"pause", "Paused"}, {"resume", "Running"}} {
		step("k8s "+s.verb, func() (string, error) {
			if _, err := k.action(ctx, name, s.verb, nil); err != nil {
				return "", err
			}
			got, err := rc.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			if p := got.GetLabels()[labelPhase]; p != s.phase {
				return "", fmt.Errorf("phase %q after %s, want %q", p, s.verb, s.phase)
			}
			return "phase=" + s.phase, nil
		})
	}
	step("k8s delete", func() (string, error) {
		if err := rc.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return "", err
		}
		err := retry(ctx, func() (bool, error) {
			_, err := rc.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, fmt.Errorf("still readable: %v", err)
		})
		return "gone", err
	})
}

// action POSTs a lifecycle payload to a sandbox subresource.
func (k *k8s) action(ctx context.Context, name, sub string, fields map[string]any) (*unstructured.Unstructured, error) {
	kinds := map[string]string{"pause": "SandboxPauseOptions", "resume": "SandboxResumeOptions",
		"fork": "SandboxForkOptions", "snapshot": "SandboxSnapshotOptions"}
	u := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range fields {
		u.Object[k] = v
	}
	u.SetAPIVersion("agents.x-k8s.io/v1beta1")
	u.SetKind(kinds[sub])
	u.SetName(name)
	return k.dyn.Resource(sandboxes).Namespace(k.ns).Create(ctx, u, metav1.CreateOptions{}, sub)
}

// ---- e2b surface ----

type e2b struct {
	base, key, template string
	hc                  *http.Client
}

// call sends one JSON request and checks the status; out, when non-nil,
// receives the decoded body.
func (e *e2b) call(ctx context.Context, method, path string, in any, want int, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.key != "" {
		req.Header.Set("X-API-Key", e.key)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != want {
		return &statusError{method: method, path: path, code: resp.StatusCode, body: strings.TrimSpace(string(b))}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decoding %q: %w", method, path, b, err)
		}
	}
	return nil
}

type statusError struct {
	method, path string
	code         int
	body         string
}

func (s *statusError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", s.method, s.path, s.code, s.body)
}

func (e *e2b) walk(ctx context.Context) {
	var id string
	step("e2b create", func() (string, error) {
		var sb struct {
			SandboxID   string `json:"sandboxID"`
			EnvdVersion string `json:"envdVersion"`
		}
		err := retry(ctx, func() (bool, error) {
			err := e.call(ctx, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": e.template, "timeout": 120}, http.StatusCreated, &sb)
			var se *statusError
			return !(errors.As(err, &se) && se.code == http.StatusServiceUnavailable), err
		})
		if err == nil && (sb.SandboxID == "" || sb.EnvdVersion == "") {
			err = fmt.Errorf("sandboxID %q envdVersion %q: both required", sb.SandboxID, sb.EnvdVersion)
		}
		id = sb.SandboxID
		return "sandboxID=" + id, err
	})
	p := "/sandboxes/" + url.PathEscape(id)
	step("e2b metrics", func() (string, error) {
		var m []map[string]any
		err := e.call(ctx, http.MethodGet, p+"/metrics", nil, http.StatusOK, &m)
		return fmt.Sprintf("%d samples", len(m)), err
	})
	step("e2b pause", func() (string, error) {
		return "204", e.call(ctx, http.MethodPost, p+"/pause", map[string]any{}, http.StatusNoContent, nil)
	})
	step("e2b pause again", func() (string, error) {
		return "409 (already paused)", e.call(ctx, http.MethodPost, p+"/pause", map[string]any{}, http.StatusConflict, nil)
	})
	step("e2b connect", func() (string, error) {
		// Connect resumes a paused sandbox: 201.
		return "201 (resumed)", e.call(ctx, http.MethodPost, "/v2"+p+"/connect", map[string]any{"timeout": 120}, http.StatusCreated, nil)
	})
	var snap string
	step("e2b snapshot", func() (string, error) {
		var s struct {
			SnapshotID string   `json:"snapshotID"`
			Names      []string `json:"names"`
		}
		err := e.call(ctx, http.MethodPost, p+"/snapshots", map[string]any{"name": "lifecycle"}, http.StatusCreated, &s)
		if err == nil && s.SnapshotID == "" {
			err = errors.New("no snapshotID")
		}
		snap = s.SnapshotID
		return "snapshotID=" + snap, err
	})
	step("e2b list snapshots", func() (string, error) {
		var l []struct {
			SnapshotID string `json:"snapshotID"`
		}
		if err := e.call(ctx, http.MethodGet, "/snapshots?sandboxID="+url.QueryEscape(id), nil, http.StatusOK, &l); err != nil {
			return "", err
		}
		for _, s := range l {
			if s.SnapshotID == snap {
				return fmt.Sprintf("%d snapshots, %s among them", len(l), snap), nil
			}
		}
		return "", fmt.Errorf("snapshot %s not in %+v", snap, l)
	})
	step("e2b timeout", func() (string, error) {
		return "204", e.call(ctx, http.MethodPost, p+"/timeout", map[string]any{"timeout": 60}, http.StatusNoContent, nil)
	})
	step("e2b kill", func() (string, error) {
		if err := e.call(ctx, http.MethodDelete, p, nil, http.StatusNoContent, nil); err != nil {
			return "", err
		}
		// Gone once its node drops it (a read may race the release).
		err := retry(ctx, func() (bool, error) {
			err := e.call(ctx, http.MethodGet, p, nil, http.StatusNotFound, nil)
			return err == nil, err
		})
		return "204; GET then 404", err
	})
}
