package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hearthvm/hearth/e2e/cluster"
)

// repoRoot is the main module, one level up from this module.
const repoRoot = ".."

// binDir holds etcd and kube-apiserver (hack/setup.d/30-kube-binaries.sh);
// $HEARTH_E2E_BIN overrides it.
func binDir(t *testing.T) string {
	if d := os.Getenv("HEARTH_E2E_BIN"); d != "" {
		return d
	}
	d, err := filepath.Abs(".cache/bin")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var (
	buildOnce sync.Once
	built     map[string]string // cmd name -> binary path, for those that built
	buildErrs map[string]string // cmd name -> why it is unavailable
)

// needHearth returns the repo's commands (hearthBinaries), skipping t
// ("SKIP <what>: why") when one of names is unavailable.
func needHearth(t *testing.T, what string, names ...string) map[string]string {
	t.Helper()
	bin, why := hearthBinaries(t)
	for _, name := range names {
		if bin[name] == "" {
			t.Skipf("SKIP %s: %s", what, why[name])
		}
	}
	return bin
}

// hearthBinaries builds the repo's commands the harness runs, once per test
// binary, into .cache/bin/hearth (sandbox-agent next to sandboxd, where the
// sim VMM looks for it). A command whose main package does not exist yet is
// reported as unavailable rather than failing the suite.
func hearthBinaries(t *testing.T) (map[string]string, map[string]string) {
	buildOnce.Do(func() {
		built, buildErrs = map[string]string{}, map[string]string{}
		out, err := filepath.Abs(".cache/bin/hearth")
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"sandbox-agent", "sandboxd", "sandbox-apiserver"} {
			if _, err := os.Stat(filepath.Join(repoRoot, "cmd", name, "main.go")); err != nil {
				buildErrs[name] = fmt.Sprintf("cmd/%s does not exist yet", name)
				continue
			}
			cmd := exec.Command("go", "build", "-o", filepath.Join(out, name), "./cmd/"+name)
			cmd.Dir = repoRoot
			cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0") // the sim backend runs sandbox-agent inside the template root: static
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErrs[name] = fmt.Sprintf("go build ./cmd/%s: %v\n%s", name, err, b)
				continue
			}
			built[name] = filepath.Join(out, name)
		}
	})
	return built, buildErrs
}

// kubectl runs the unmodified kubectl binary with a kubeconfig; stdin may be
// empty. It returns stdout, and stderr folded into the error.
func kubectl(ctx context.Context, kubeconfig, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// mustKubectl fails the test on a kubectl error.
func mustKubectl(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := kubectl(ctx, kubeconfig, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// serviceAccountKubeconfig mints a token for namespace/name through the
// TokenRequest API and writes a kubeconfig using it, so a component runs
// with exactly the RBAC deploy/base grants its ServiceAccount.
func serviceAccountKubeconfig(t *testing.T, cp *cluster.ControlPlane, cs kubernetes.Interface, namespace, name string) string {
	t.Helper()
	exp := int64(2 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, name, err)
	}
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	if err := cp.WriteKubeconfig(path, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path
}

// podBoundKubeconfig mints a token for namespace/sa bound to a Pod on
// nodeName, as kubelet mounts one: kube-apiserver puts the node's name
// into the user's extra authentication.kubernetes.io/node-name. The Pod
// (never run: there is no kubelet) lives until the test cluster stops.
func podBoundKubeconfig(t *testing.T, cp *cluster.ControlPlane, cs kubernetes.Interface, namespace, sa, nodeName string) string {
	t.Helper()
	ctx := context.Background()
	pod, err := cs.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-" + nodeName},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: nodeName,
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("pod for %s on %s: %v", sa, nodeName, err)
	}
	exp := int64(2 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("pod-bound token for %s on %s: %v", sa, nodeName, err)
	}
	path := filepath.Join(cp.Dir, sa+"-"+nodeName+".kubeconfig")
	if err := cp.WriteKubeconfig(path, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path
}

// testNamespace creates a uniquely named namespace with a default
// ServiceAccount (there is no controller-manager to create one, and the
// ServiceAccount admission plugin requires it for Pods).
func testNamespace(t *testing.T, cs kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns.Name).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// dumpOnFailure logs the tail of each process log when the test failed.
func dumpOnFailure(t *testing.T, procs ...*cluster.Proc) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, p := range procs {
			if p != nil {
				t.Logf("---- %s (pid %d) log tail ----\n%s", p.Name, p.PID(), p.Tail(4000))
			}
		}
	})
}

// startControlPlane starts etcd + kube-apiserver from bins in a new
// directory named after prefix, kept (and logged) when t fails, and
// stops them when t ends; it dumps their logs on failure.
func startControlPlane(t *testing.T, bins, prefix string) *cluster.ControlPlane {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("e2e state kept in %s", dir)
		}
	})
	start := time.Now()
	cp, err := cluster.StartControlPlane(bins, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	dumpOnFailure(t, cp.Etcd, cp.APIServer)
	t.Logf("etcd + kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	return cp
}
