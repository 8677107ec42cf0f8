package apiserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/hearthvm/hearth/agent"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// runInAgent runs bash -c script through the agent at url (envd's
// process.Process/Start) and reads its stream to the end.
func runInAgent(t *testing.T, url, script string) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", script}}})
	body := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	resp, err := http.Post(url+"/process.Process/Start", "application/connect+json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("start: %d %v", resp.StatusCode, err)
	}
}

// TestLog_SubresourceServesTheSandboxLogAsText: GET .../sandboxes/NAME/log
// is the sandbox's log as text, as pods/log: tailLines, limitBytes and
// timestamps shape it, follow streams it, bad values are 400s, an
// unknown name a 404 — and the claim's env is not in it.
func TestLog_SubresourceServesTheSandboxLogAsText(t *testing.T) {
	ag := httptest.NewServer(agent.NewHandler(agent.Options{Root: t.TempDir()}))
	t.Cleanup(ag.Close)
	f := fleettest.StartWith(t, 1, vmmtest.Options{Addr: ag.Listener.Addr().String()})
	f.SetWarm(t, spec, 1)
	s := startServer(t, f)
	ctx := context.Background()
	obj := sandboxObj("logged", nil)
	containers := obj.Object["spec"].(map[string]any)["podTemplate"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
	containers[0].(map[string]any)["env"] = []any{map[string]any{"name": "KUBE_SECRET", "value": "kube-secret-value"}}
	if _, err := sandboxes(s, "default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runInAgent(t, ag.URL, "echo first; echo second >&2; echo third")

	hc, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string, params map[string]string) (int, string) {
		q := url.Values{}
		for k, v := range params {
			q.Set(k, v)
		}
		resp, err := hc.Get(s.URL + "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/" + name + "/log?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, all := get("logged", nil)
	if code != http.StatusOK {
		t.Fatalf("log: %d %s", code, all)
	}
	lines := strings.Split(strings.TrimSuffix(all, "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "[start pid ") || !strings.Contains(lines[4], "] exit status 0") || strings.Contains(all, "kube-secret-value") {
		t.Fatalf("log:\n%s", all)
	}
	if code, got := get("logged", map[string]string{"tailLines": "2"}); code != 200 || got != lines[3]+"\n"+lines[4]+"\n" {
		t.Fatalf("tailLines=2: %d %q", code, got)
	}
	if code, got := get("logged", map[string]string{"tailLines": "1", "timestamps": "true"}); code != 200 || !strings.HasSuffix(got, " "+lines[4]+"\n") || !strings.HasPrefix(got, "20") {
		t.Fatalf("timestamps: %d %q", code, got)
	}
	if code, got := get("logged", map[string]string{"limitBytes": "4"}); code != 200 || got != lines[0][:4] {
		t.Fatalf("limitBytes=4: %d %q", code, got)
	}
	for _, bad := range []map[string]string{{"follow": "maybe"}, {"tailLines": "-1"}, {"tailLines": "x"}, {"sinceSeconds": "5", "sinceTime": "2026-01-01T00:00:00Z"}} {
		if code, out := get("logged", bad); code != http.StatusBadRequest {
			t.Fatalf("%v: %d %s, want 400", bad, code, out)
		}
	}
	if code, out := get("nope", nil); code != http.StatusNotFound {
		t.Fatalf("unknown sandbox: %d %s", code, out)
	}
	if _, err := exec.LookPath("kubectl"); err == nil {
		out := mustKubectl(t, s, "get", "--raw", "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/logged/log?tailLines=1")
		if out != lines[4] {
			t.Fatalf("kubectl get --raw .../log: %q", out)
		}
	}
	// follow=true streams: with limitBytes it ends there; with tailLines=0
	// it prints only what is written once it began (its answer's headers
	// come once the agent follows), line by line as written.
	if code, got := get("logged", map[string]string{"follow": "true", "limitBytes": strconv.Itoa(len(all))}); code != 200 || got != all {
		t.Fatalf("follow with limitBytes: %d %q, want %q", code, got, all)
	}
	resp, err := hc.Get(s.URL + "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/logged/log?follow=true&tailLines=0")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("follow: %v %v", resp, err)
	}
	defer resp.Body.Close()
	runInAgent(t, ag.URL, "echo written-after")
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "[start pid ") || !sc.Scan() || sc.Text() != "written-after" {
		t.Fatalf("follow: %q %v", sc.Text(), sc.Err())
	}
	resp.Body.Close()
}
