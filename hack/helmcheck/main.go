// Command helmcheck reads rendered Kubernetes manifests (a multi-document
// YAML stream, as `helm template` prints) on stdin and checks them: every
// document parses, carries apiVersion, kind and metadata.name, and the
// number of objects of each kind is exactly what -expect says. With -base
// DIR (a kustomize base such as deploy/base) it also checks that the
// rendering holds exactly the base's objects (by kind, namespace and name;
// the Namespace object aside) and that RBAC objects, Services,
// ServiceAccounts, the APIService and admission policies equal the base's
// apart from metadata.
// It prints one "Kind namespace/name" line per object.
// hack/test.d/40-helm.sh runs it.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

type object struct {
	whole      map[string]any
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

func main() {
	expect := flag.String("expect", "", "comma-separated Kind=count pairs; every kind rendered must be listed")
	base := flag.String("base", "", "kustomize directory (deploy/base, an overlay) whose objects the rendering must match")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *expect, *base); err != nil {
		fmt.Fprintln(os.Stderr, "helmcheck:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, expect, base string) error {
	want := map[string]int{}
	for _, p := range strings.Split(expect, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			return fmt.Errorf("bad -expect pair %q (want Kind=count)", p)
		}
		want[k] = n
	}
	objs, err := decode(in)
	if err != nil {
		return err
	}
	got := map[string]int{}
	for _, o := range objs {
		got[o.Kind]++
		fmt.Fprintln(out, o.id())
	}
	var bad []string
	for k, n := range got {
		if w, ok := want[k]; expect != "" && (!ok || w != n) {
			bad = append(bad, fmt.Sprintf("%s: rendered %d, expected %d", k, n, want[k]))
		}
	}
	for k, w := range want {
		if _, ok := got[k]; !ok && w != 0 && expect != "" {
			bad = append(bad, fmt.Sprintf("%s: rendered 0, expected %d", k, w))
		}
	}
	if base != "" {
		more, err := compareBase(objs, base)
		if err != nil {
			return err
		}
		bad = append(bad, more...)
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

func stripComments(doc []byte) string {
	var b strings.Builder
	for _, l := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (o object) id() string { return o.Kind + " " + o.Metadata.Namespace + "/" + o.Metadata.Name }

// decode reads every non-empty document of a YAML stream.
func decode(in io.Reader) ([]object, error) {
	var objs []object
	r := utilyaml.NewYAMLReader(bufio.NewReader(in))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		// Strict: a duplicate key is an error, as the YAML spec says.
		var o object
		if err := yaml.UnmarshalStrict(doc, &o.whole); err != nil {
			return nil, fmt.Errorf("document %d does not parse: %w", i, err)
		}
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			return nil, fmt.Errorf("document %d lacks apiVersion, kind or metadata.name:\n%s", i, doc)
		}
		objs = append(objs, o)
	}
}

// deepKinds are compared in full (metadata aside): they carry no value the
// chart makes configurable with its defaults.
var deepKinds = map[string]bool{
	"ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
	"ServiceAccount": true, "Service": true, "APIService": true,
	"MutatingWebhookConfiguration": true, "Issuer": true, "Certificate": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// readKustomization collects the objects of the kustomization in dir:
// its resources, files or directories (other kustomizations), read as
// they are. Patches are not applied; the Namespace object is left out.
func readKustomization(dir string, into map[string]object) error {
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		return fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	for _, res := range k.Resources {
		f := filepath.Join(dir, res)
		if st, err := os.Stat(f); err == nil && st.IsDir() {
			if err := readKustomization(f, into); err != nil {
				return err
			}
			continue
		}
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		objs, err := decode(fh)
		fh.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for _, o := range objs {
			if o.Kind != "Namespace" {
				into[o.id()] = o
			}
		}
	}
	return nil
}

// compareBase lists how the rendered objects differ from the base's.
func compareBase(objs []object, dir string) ([]string, error) {
	want := map[string]object{}
	if err := readKustomization(dir, want); err != nil {
		return nil, err
	}
	var bad []string
	seen := map[string]bool{}
	for _, o := range objs {
		seen[o.id()] = true
		w, ok := want[o.id()]
		if !ok {
			bad = append(bad, o.id()+": rendered, not in "+dir)
			continue
		}
		if deepKinds[o.Kind] && !reflect.DeepEqual(withoutMeta(o.whole), withoutMeta(w.whole)) {
			bad = append(bad, o.id()+": differs from "+dir+" (apart from metadata)")
		}
	}
	for id := range want {
		if !seen[id] {
			bad = append(bad, id+": in "+dir+", not rendered")
		}
	}
	return bad, nil
}

func withoutMeta(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != "metadata" {
			out[k] = v
		}
	}
	return out
}
