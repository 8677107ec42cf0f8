package inventory

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The apply publisher sends one server-side apply PATCH per publish, with a
// forced field manager, to the cluster-scoped object named after the node.
func TestApplyPublisher_SendsForcedApply(t *testing.T) {
	type seen struct {
		method, path, ctype, manager, force string
		body                                map[string]any
	}
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.URL.Query().Get("fieldManager"), r.URL.Query().Get("force"), body})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	defer srv.Close()

	p, err := NewApplyPublisher(&rest.Config{Host: srv.URL}, "")
	if err != nil {
		t.Fatal(err)
	}
	dl := metav1.NewTime(time.Date(2026, 8, 17, 12, 0, 0, 0, time.UTC))
	inv := &NodeInventory{
		Node: "node-a", Address: "127.0.0.1:7070",
		Pools:   []Pool{{Template: "img", Net: "none", Size: "small", Warm: 2, Target: 3}},
		Entries: []Entry{{Name: "ns/a", ID: "sb_1", Phase: "Running", ClaimRef: "ns/a", Deadline: &dl}},
	}
	for i := 0; i < 2; i++ {
		if err := p.Publish(context.Background(), inv); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 {
		t.Fatalf("requests = %d", len(got))
	}
	s := got[0]
	if s.method != http.MethodPatch || s.path != "/apis/sandbox.cocoonstack.io/v1beta1/nodeinventories/node-a" ||
		s.ctype != "application/apply-patch+yaml" || s.manager != DefaultFieldManager || s.force != "true" {
		t.Fatalf("request = %+v", s)
	}
	if s.body["kind"] != "NodeInventory" || s.body["apiVersion"] != "sandbox.cocoonstack.io/v1beta1" || s.body["node"] != "node-a" {
		t.Fatalf("body = %v", s.body)
	}
	md := s.body["metadata"].(map[string]any)
	if md["name"] != "node-a" || len(md) != 1 {
		t.Fatalf("metadata = %v", md)
	}
	if e := s.body["entries"].([]any)[0].(map[string]any); e["deadline"] != "2026-08-17T12:00:00Z" {
		t.Fatalf("entry = %v", e)
	}
	if err := p.Publish(context.Background(), &NodeInventory{}); err == nil {
		t.Fatal("published an inventory without a node")
	}
}
