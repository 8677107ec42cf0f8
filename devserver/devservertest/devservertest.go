// Package devservertest runs sandbox-dev (devserver.Run) in-process for a
// test: the API server, its etcd, the nodes, the warm-pool driver and the
// e2b gateway on loopback ports picked free, sandboxes on sim's busybox
// root (these tests are about the control plane), the warm-pool driver
// and the nodes' publishing every second. Start returns once sandbox-dev
// is ready (its Ready: kubeconfigs, node addresses, the e2b URL and key);
// it stops at Stop or at the test's end, whichever is first.
package devservertest

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hearthvm/hearth/devserver"
)

// Dev is one sandbox-dev running in-process.
type Dev struct {
	devserver.Ready
	out    lockedBuffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// Options are the options Start begins from, with dataDir as the data
// directory.
func Options(dataDir string) *devserver.Options {
	o := devserver.NewOptions()
	o.DataDir = dataDir
	o.SecurePort = 0
	o.E2BBindAddress = "127.0.0.1:0"
	o.WarmPoolSyncInterval = time.Second
	o.PublishInterval = time.Second
	o.ImageCache = "" // sim's busybox root
	return o
}

// Start runs sandbox-dev with Options(t.TempDir()) changed by mut, in
// order, and waits (up to 3 minutes: the first start builds the agent)
// until it is ready.
func Start(t testing.TB, mut ...func(*devserver.Options)) *Dev {
	t.Helper()
	o := Options(t.TempDir())
	for _, m := range mut {
		m(o)
	}
	d := &Dev{done: make(chan error, 1)}
	readyCh := make(chan devserver.Ready, 1)
	o.OnReady = func(r devserver.Ready) { readyCh <- r }
	o.Out = &d.out
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.done <- devserver.Run(ctx, o) }()
	t.Cleanup(func() { d.Stop(t) })
	select {
	case d.Ready = <-readyCh:
		t.Logf("sandbox-dev ready in %s", d.Startup)
	case err := <-d.done:
		d.done <- err // for Stop
		t.Fatalf("sandbox-dev stopped before it was ready: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("sandbox-dev not ready within 3 minutes")
	}
	return d
}

// Stop stops sandbox-dev and waits (up to 2 minutes) for it to end; an
// error it ended with fails the test. Later calls do nothing.
func (d *Dev) Stop(t testing.TB) {
	t.Helper()
	d.once.Do(func() {
		d.cancel()
		select {
		case err := <-d.done:
			if err != nil {
				t.Errorf("sandbox-dev: %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Error("sandbox-dev did not stop within 2 minutes")
		}
	})
}

// Out is what sandbox-dev printed (its ready line).
func (d *Dev) Out() string { return d.out.String() }

// lockedBuffer is a bytes.Buffer sandbox-dev writes while a test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
