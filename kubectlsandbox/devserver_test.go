package kubectlsandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/hearthvm/hearth/devserver/devservertest"
	"github.com/hearthvm/hearth/kubectlsandbox"
	"github.com/hearthvm/hearth/sandbox"
)

// pluginEnv makes this test binary kubectl-sandbox itself (TestMain).
const pluginEnv = "KUBECTLSANDBOX_TEST_AS_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(pluginEnv) == "1" {
		os.Exit(kubectlsandbox.Run())
	}
	os.Exit(m.Run())
}

// poll calls f every 100 ms until it returns nil or within passes.
func poll(t *testing.T, within time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// plugin is a Plugin on kubeconfig, as the flags would make it.
func plugin(kubeconfig, router string) *kubectlsandbox.Plugin {
	f := genericclioptions.NewConfigFlags(true)
	f.KubeConfig = &kubeconfig
	return &kubectlsandbox.Plugin{Flags: f, RouterURL: router, IOStreams: genericiooptions.NewTestIOStreamsDiscard()}
}

const demo = `apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: demo, namespace: default}
spec:
  podTemplate:
    spec:
      containers:
      - name: main
        image: ghcr.io/cocoonstack/sandbox/rt:24.04
        resources: {requests: {cpu: 500m, memory: 512Mi}}
`

// Every command of kubectl-sandbox against one real sandbox-dev: exec, cp
// and port-forward through the router with the admin kubeconfig, refused
// (403) with the read-only one, which cannot pause either; pause, resume,
// fork and snapshot through the aggregated API; and the built binary,
// found by kubectl as a plugin.
func TestPlugin_AgainstSandboxDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the dev system")
	}
	ready := devservertest.Start(t).Ready
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cfg, err := clientcmd.BuildConfigFromFlags("", ready.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var obj unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(demo), &obj.Object); err != nil {
		t.Fatal(err)
	}
	sandboxes := dynamic.NewForConfigOrDie(cfg).Resource(sandbox.SchemeGroupVersion.WithResource("sandboxes")).Namespace("default")
	poll(t, 90*time.Second, "a warm claim", func() error { // 503 until the pool is warm
		_, err := sandboxes.Create(ctx, &obj, metav1.CreateOptions{})
		return err
	})

	admin := plugin(ready.Kubeconfig, ready.E2B)
	readonly := plugin(ready.ReadOnlyKubeconfig, ready.E2B)

	t.Run("exec", func(t *testing.T) {
		res, err := admin.Exec(ctx, "demo", []string{"sh", "-c", "echo out; echo err >&2; exit 3"})
		if err != nil {
			t.Fatal(err)
		}
		if res != (kubectlsandbox.Result{Stdout: "out\n", Stderr: "err\n", ExitCode: 3}) {
			t.Errorf("exec: %+v", res)
		}
		res, err = admin.Exec(ctx, "demo", []string{"echo", "a  b", "$HOME", "it's"})
		if err != nil || res.Stdout != "a  b $HOME it's\n" {
			t.Errorf("exec of quoted words: %+v, %v", res, err)
		}
		_, err = readonly.Exec(ctx, "demo", []string{"id"})
		var se *kubectlsandbox.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusForbidden || !strings.Contains(se.Message, "sandboxes/exec") {
			t.Errorf("read-only exec: %v, want a 403 naming sandboxes/exec", err)
		}
		_, err = admin.Exec(ctx, "missing", []string{"id"})
		if !errors.As(err, &se) || se.Code != http.StatusNotFound {
			t.Errorf("exec in a missing sandbox: %v, want 404", err)
		}
	})

	t.Run("cp", func(t *testing.T) {
		dir := t.TempDir()
		src := filepath.Join(dir, "in.bin")
		data := bytes.Repeat([]byte("hearth\x00\xff"), 40000) // 320 KB, binary
		if err := os.WriteFile(src, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := admin.CopyTo(ctx, src, "demo", "sub dir/in.bin"); err != nil {
			t.Fatal(err)
		}
		if err := admin.CopyFrom(ctx, "demo", "sub dir/in.bin", dir+"/out.bin"); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(dir + "/out.bin"); !bytes.Equal(got, data) {
			t.Errorf("round trip: %d bytes back, want %d", len(got), len(data))
		}
		// Into a directory: under the file's base name.
		into := t.TempDir()
		if err := admin.CopyFrom(ctx, "demo", "sub dir/in.bin", into); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(into, "in.bin")); !bytes.Equal(got, data) {
			t.Errorf("copy into a directory: %d bytes", len(got))
		}
		// A missing file is the router's 404, and nothing is written.
		var se *kubectlsandbox.StatusError
		if err := admin.CopyFrom(ctx, "demo", "missing.txt", into+"/missing.txt"); !errors.As(err, &se) || se.Code != http.StatusNotFound {
			t.Errorf("missing file: %v, want 404", err)
		}
		if ents, _ := os.ReadDir(into); len(ents) != 1 {
			t.Errorf("after a failed copy the directory holds %d entries, want 1 (no partial file)", len(ents))
		}
		// The refusal comes back as such, not as a connection reset while
		// the body is still being sent (the gateway reads none of a
		// refused request's body): cp asks to continue first.
		big := filepath.Join(dir, "big.bin")
		if err := os.WriteFile(big, make([]byte, 4<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := readonly.CopyTo(ctx, big, "demo", "ro.bin"); !errors.As(err, &se) || se.Code != http.StatusForbidden {
			t.Errorf("read-only cp: %v, want 403", err)
		}
	})

	t.Run("port-forward", func(t *testing.T) {
		if _, err := admin.Exec(ctx, "demo", []string{"sh", "-c", "mkdir -p www && echo forwarded > www/index.html && httpd -p 127.0.0.1:8000 -h www"}); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- admin.PortForward(fctx, ln, "demo", 8000) }()
		var body string
		poll(t, 10*time.Second, "the guest's httpd through the forward", func() error {
			resp, err := http.Get("http://" + ln.Addr().String() + "/index.html")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if body = string(b); resp.StatusCode != http.StatusOK {
				return errors.New(resp.Status + ": " + body)
			}
			return nil
		})
		if body != "forwarded\n" {
			t.Errorf("forwarded body %q", body)
		}
		stop()
		if err := <-done; err != nil {
			t.Errorf("port-forward: %v", err)
		}

		// The read-only kubeconfig's forward answers the router's 403.
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fctx, stop = context.WithCancel(ctx)
		go func() { done <- readonly.PortForward(fctx, ln, "demo", 8000) }()
		resp, err := http.Get("http://" + ln.Addr().String() + "/index.html")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("read-only forward: %d, want 403", resp.StatusCode)
		}
		stop()
		<-done
	})

	t.Run("pause-resume", func(t *testing.T) {
		if _, err := readonly.Verb(ctx, "demo", "pause", &sandbox.SandboxPauseOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("read-only pause: %v, want 403", err)
		}
		obj, err := admin.Verb(ctx, "demo", "pause", &sandbox.SandboxPauseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if phase := obj.GetLabels()[sandbox.LabelPhase]; phase != sandbox.PhasePaused {
			t.Errorf("after pause: phase %q", phase)
		}
		// The router answers 409 for a paused sandbox once its cached
		// route (2 s) has expired; until then a request waits for the
		// resume, so each try here has its own deadline.
		poll(t, 10*time.Second, "409 from exec in a paused sandbox", func() error {
			tctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			var se *kubectlsandbox.StatusError
			if _, err := admin.Exec(tctx, "demo", []string{"true"}); !errors.As(err, &se) || se.Code != http.StatusConflict {
				return fmt.Errorf("%v, want 409", err)
			}
			return nil
		})
		if _, err := admin.Verb(ctx, "demo", "resume", &sandbox.SandboxResumeOptions{}); err != nil {
			t.Fatal(err)
		}
		if res, err := admin.Exec(ctx, "demo", []string{"echo", "back"}); err != nil || res.Stdout != "back\n" {
			t.Errorf("exec after resume: %+v, %v", res, err)
		}
	})

	t.Run("fork-snapshot", func(t *testing.T) {
		obj, err := admin.Verb(ctx, "demo", "fork", &sandbox.SandboxForkOptions{Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		children, _, _ := unstructured.NestedSlice(obj.Object, "children")
		if len(children) != 1 || children[0].(map[string]any)["name"] != "demo-fork-1" {
			t.Fatalf("fork: %v", obj.Object)
		}
		// The child has the parent's files.
		if res, err := admin.Exec(ctx, "demo-fork-1", []string{"cat", "www/index.html"}); err != nil || res.Stdout != "forwarded\n" {
			t.Errorf("exec in the child: %+v, %v", res, err)
		}
		obj, err = admin.Verb(ctx, "demo", "snapshot", &sandbox.SandboxSnapshotOptions{Name: "before"})
		if err != nil {
			t.Fatal(err)
		}
		if id, _, _ := unstructured.NestedString(obj.Object, "snapshotID"); !strings.HasPrefix(id, "sn_") {
			t.Errorf("snapshot: %v", obj.Object)
		}
	})

	t.Run("logs", func(t *testing.T) {
		var buf bytes.Buffer
		tail := int64(5)
		if err := admin.Logs(ctx, "demo", sandbox.SandboxLogOptions{TailLines: &tail, Timestamps: true}, &buf); err != nil {
			t.Fatalf("logs: %v", err)
		}
		if err := admin.Logs(ctx, "missing", sandbox.SandboxLogOptions{}, &buf); !apierrors.IsNotFound(err) {
			t.Errorf("logs of a missing sandbox: %v, want 404", err)
		}
		bad := int64(-1)
		if err := admin.Logs(ctx, "demo", sandbox.SandboxLogOptions{SinceSeconds: &bad}, &buf); !apierrors.IsBadRequest(err) {
			t.Errorf("logs with a negative sinceSeconds: %v, want 400", err)
		}
	})

	t.Run("logs-follow", func(t *testing.T) {
		// kubectl sandbox logs -f: once the stream has begun (its first
		// line, from the earlier subtests' processes, arrived), a line
		// written after it arrives too; cancelling ends it.
		fctx, fcancel := context.WithCancel(ctx)
		defer fcancel()
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			err := admin.Logs(fctx, "demo", sandbox.SandboxLogOptions{Follow: true}, pw)
			pw.Close()
			done <- err
		}()
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		next := func(what string) string {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the follow ended before %s", what)
				}
				return l
			case <-time.After(30 * time.Second):
				t.Fatalf("no line within 30s: %s", what)
			}
			return ""
		}
		next("the first line")
		if res, err := admin.Exec(ctx, "demo", []string{"echo", "followed-marker"}); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v %v", res, err)
		}
		for next("followed-marker") != "followed-marker" {
		}
		fcancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the follow did not end when its context did")
		}
	})

	t.Run("top", func(t *testing.T) {
		// The read-only kubeconfig reads stats (get sandboxes/stats, as
		// view's); a paused sandbox is a row that says so.
		if _, err := admin.Verb(ctx, "demo-fork-1", "pause", &sandbox.SandboxPauseOptions{}); err != nil {
			t.Fatal(err)
		}
		stats, err := readonly.Top(ctx, "")
		if err != nil {
			t.Fatalf("read-only top: %v", err)
		}
		byName := map[string]sandbox.SandboxStats{}
		for _, st := range stats {
			byName[st.Name] = st
		}
		if d, ok := byName["demo"]; !ok || d.Paused || d.CPUCount < 1 || d.MemoryLimitBytes <= 0 || d.Namespace != "default" {
			t.Errorf("top: demo %+v", d)
		}
		// A running sandbox's CPU is a rate over a window of at least a
		// second (top asked again when its node had no earlier
		// measurement), beside the CPU time.
		if d := byName["demo"]; d.CPUUsageCoreNanoSeconds == nil || d.CPUUsageNanoCores == nil || *d.CPUUsageNanoCores < 0 ||
			d.Window == nil || d.Window.Duration < time.Second || d.Window.Duration > time.Minute {
			t.Errorf("top: demo's CPU: time %v, rate %v over %v; want both, over 1 s to 1 min", d.CPUUsageCoreNanoSeconds, d.CPUUsageNanoCores, d.Window)
		}
		if f := byName["demo-fork-1"]; f.CPUUsageNanoCores != nil {
			t.Errorf("top: paused demo-fork-1 has a CPU rate %v", *f.CPUUsageNanoCores)
		}
		if f, ok := byName["demo-fork-1"]; !ok || !f.Paused {
			t.Errorf("top: paused demo-fork-1 %+v", f)
		}
		if _, err := readonly.Top(ctx, "missing"); !apierrors.IsNotFound(err) {
			t.Errorf("top of a missing sandbox: %v, want 404", err)
		}
	})

	// The binary, as kubectl runs it: `kubectl sandbox` finds
	// kubectl-sandbox on PATH — this test binary, which is Run (all of
	// cmd/kubectl-sandbox's main) when pluginEnv is set; its flags are
	// kubectl's.
	t.Run("binary", func(t *testing.T) {
		if _, err := exec.LookPath("kubectl"); err != nil {
			t.Skip("kubectl not on PATH")
		}
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := t.TempDir()
		if err := os.Symlink(self, filepath.Join(bin, "kubectl-sandbox")); err != nil {
			t.Fatal(err)
		}
		run := func(args ...string) (string, string, int) {
			cmd := exec.CommandContext(ctx, "kubectl", args...)
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+ready.Kubeconfig, pluginEnv+"=1", kubectlsandbox.RouterEnv+"="+ready.E2B)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
		}
		if o, e, code := run("sandbox", "exec", "demo", "--", "sh", "-c", "echo hi; echo oops >&2; exit 7"); o != "hi\n" || e != "oops\n" || code != 7 {
			t.Errorf("kubectl sandbox exec: %q %q exit %d", o, e, code)
		}
		if o, e, code := run("sandbox", "--kubeconfig", ready.ReadOnlyKubeconfig, "-n", "default", "exec", "demo", "--", "id"); code != 1 || o != "" || !strings.Contains(e, "403") {
			t.Errorf("read-only kubectl sandbox exec: %q %q exit %d, want a 403 and exit 1", o, e, code)
		}
		o, e, code := run("sandbox", "pause", "demo", "-o", "json")
		if code != 0 || !strings.Contains(o, `"`+sandbox.LabelPhase+`": "Paused"`) {
			t.Errorf("kubectl sandbox pause -o json: %q %q exit %d", o, e, code)
		}
		if o, e, code := run("sandbox", "resume", "demo"); code != 0 || o != "sandbox.agents.x-k8s.io/demo resumed\n" {
			t.Errorf("kubectl sandbox resume: %q %q exit %d", o, e, code)
		}
		if o, e, code := run("sandbox", "logs", "demo", "--tail", "3", "--since", "1h"); code != 0 {
			t.Errorf("kubectl sandbox logs: %q %q exit %d", o, e, code)
		}
		if o, e, code := run("sandbox", "top"); code != 0 || !strings.HasPrefix(o, "NAME ") || !regexp.MustCompile(`\ndemo +Running +\d+ +\d+m `).MatchString(o) || !strings.Contains(o, "Paused") {
			t.Errorf("kubectl sandbox top: %q %q exit %d; want demo's CPU in millicores", o, e, code)
		}
		if o, e, code := run("sandbox", "--kubeconfig", ready.ReadOnlyKubeconfig, "top", "demo", "-o", "json"); code != 0 || !strings.Contains(o, `"kind": "SandboxStats"`) ||
			!strings.Contains(o, `"cpuUsageCoreNanoSeconds"`) || !strings.Contains(o, `"cpuUsageNanoCores"`) || !strings.Contains(o, `"window"`) {
			t.Errorf("read-only kubectl sandbox top demo -o json: %q %q exit %d; want the raw figures", o, e, code)
		}
		if _, e, code := run("sandbox", "-n", "nowhere", "resume", "demo"); code != 1 || !strings.Contains(e, "not found") {
			t.Errorf("resume in another namespace: %q exit %d, want not found", e, code)
		}
	})
}
