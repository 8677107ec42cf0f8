package devserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hearthvm/hearth/devserver"
	"github.com/hearthvm/hearth/nodeapi"
)

var sandboxesGVR = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}

// startWith is start without the e2b gateway, with the options adjusted
// by mut.
func startWith(t *testing.T, dataDir string, mut func(*devserver.Options)) *dev {
	t.Helper()
	return start(t, dataDir, func(o *devserver.Options) { o.E2BBindAddress = "" }, mut)
}

func sandboxObject(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{"podTemplate": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
			"name": "main", "image": "ghcr.io/cocoonstack/sandbox/rt:24.04",
			"resources": map[string]any{"requests": map[string]any{"cpu": "500m", "memory": "512Mi"}},
		}}}}},
	}}
}

// nextEvent waits up to within for the next event on w that is not a BOOKMARK.
func nextEvent(t *testing.T, w watch.Interface, within time.Duration) (watch.Event, time.Duration) {
	t.Helper()
	start := time.Now()
	timeout := time.After(within)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			return ev, time.Since(start)
		case <-timeout:
			t.Fatalf("no watch event within %v", within)
		}
	}
}

// With a production-like publish cadence (--inventory-interval 30s, no
// publish-on-change), sandbox-dev routes on live warm counts, shows a claim
// made directly on a node in an open watch within a second (and its
// release), and writes no NodeInventory per claim.
func TestDevServer_LiveViewWithProductionCadence(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole dev system")
	}
	d := startWith(t, t.TempDir(), func(o *devserver.Options) { o.PublishInterval = 30 * time.Second })
	readyAt := time.Now()
	cfg, err := clientcmd.BuildConfigFromFlags("", d.ready.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sbs := dynamic.NewForConfigOrDie(cfg).Resource(sandboxesGVR).Namespace("default")
	ctx := context.Background()

	// Creates succeed as soon as a node holds a warm VM: the published
	// objects (30 s old at worst) are not what routing reads.
	deadline := time.Now().Add(2 * time.Minute)
	for d.nodesWarm(t) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no warm VM within 2m")
		}
		time.Sleep(20 * time.Millisecond)
	}
	created, err := sbs.Create(ctx, sandboxObject("first"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create as soon as a node holds a warm VM: %v", err)
	}
	t.Logf("first create %v after ready", time.Since(readyAt))

	// N claims through the API write no NodeInventory.
	etcd := etcdClient(t, d.ready)
	defer etcd.Close()
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	writes := etcd.Watch(wctx, "/hearth/sandbox.cocoonstack.io/nodeinventories/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if ev := <-writes; !ev.Created { // the etcd watch is established
		t.Fatalf("etcd watch not created: %v", ev.Err())
	}
	const claims = 12
	for i := 0; i < claims; i++ {
		for {
			_, err := sbs.Create(ctx, sandboxObject(fmt.Sprintf("claim-%d", i)), metav1.CreateOptions{})
			if err == nil {
				break
			}
			if !strings.Contains(err.Error(), "no warm sandbox") || time.Now().After(deadline) {
				t.Fatalf("claim %d: %v", i, err)
			}
			time.Sleep(50 * time.Millisecond) // refilling
		}
	}
	window := time.Since(readyAt)
	wcancel()
	n := 0
	for resp := range writes {
		n += len(resp.Events)
	}
	// The nodes' first cadence publish comes 30 s after they started
	// (before ready): a window shorter than that must see no write.
	if window < 25*time.Second && n != 0 {
		t.Fatalf("%d NodeInventory writes during %d claims", n, claims)
	}
	t.Logf("NodeInventory writes during %d claims: %d (window %v after ready)", claims, n, window)

	// A claim made directly on a node's API shows in an open watch.
	list, err := sbs.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != claims+1 {
		t.Fatalf("list: %d items, want %d", len(list.Items), claims+1)
	}
	w, err := sbs.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var nodeAddr string
	var key nodeapi.PoolInfo
	for deadline := time.Now().Add(time.Minute); nodeAddr == ""; {
		for _, addr := range d.ready.Nodes {
			info, err := nodeapi.NewClient(addr, d.ready.RootToken).Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range info.Pools {
				if p.Warm > 0 {
					nodeAddr, key = addr, p
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no warm VM for a direct claim")
		}
		time.Sleep(20 * time.Millisecond)
	}
	nc := nodeapi.NewClient(nodeAddr, d.ready.RootToken)
	direct, err := nc.Claim(ctx, nodeapi.ClaimRequest{Template: key.Template, Net: key.Net, Size: key.Size, ClaimRef: "default/direct"})
	if err != nil {
		t.Fatal(err)
	}
	ev, took := nextEvent(t, w, 10*time.Second) // freshness is measured (bench/, the log below), not asserted
	if obj, ok := ev.Object.(*unstructured.Unstructured); !ok || ev.Type != watch.Added || obj.GetName() != "direct" {
		t.Fatalf("after a direct claim: %s %v", ev.Type, ev.Object)
	}
	t.Logf("direct claim in the watch after %v", took)
	if err := nc.Release(ctx, direct.ID); err != nil {
		t.Fatal(err)
	}
	ev, took = nextEvent(t, w, 10*time.Second)
	if obj, ok := ev.Object.(*unstructured.Unstructured); !ok || ev.Type != watch.Deleted || obj.GetName() != "direct" {
		t.Fatalf("after its release: %s %v", ev.Type, ev.Object)
	}
	t.Logf("direct release in the watch after %v", took)
	_ = created
}
