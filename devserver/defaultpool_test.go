package devserver

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/hearthvm/hearth/e2b"
)

// The default pool is embedded here so production code does not import
// examples/; examples/l3 stays the copy users read and apply. They must
// never drift: `kubectl apply -f examples/l3/` over the applied default
// must change nothing.
func TestDefaultPool_IsExamplesL3Verbatim(t *testing.T) {
	var want []byte
	for i, name := range []string{"template.yaml", "warmpool.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", "l3", name))
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			want = append(want, "---\n"...)
		}
		want = append(want, b...)
	}
	if !bytes.Equal(defaultPool, want) {
		t.Fatalf("devserver/defaultpool.yaml differs from examples/l3/template.yaml + \"---\" + examples/l3/warmpool.yaml; copy them again:\n%s", want)
	}
}

func TestDefaultPool_TemplateThenWarmPool(t *testing.T) {
	docs := defaultPoolDocs()
	want := []string{"SandboxTemplate", "SandboxWarmPool"}
	if len(docs) != len(want) {
		t.Fatalf("%d documents, want %d", len(docs), len(want))
	}
	for i, doc := range docs {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind != want[i] || obj.Metadata.Name != "rt" {
			t.Fatalf("document %d is %s %q, want %s rt", i, obj.Kind, obj.Metadata.Name, want[i])
		}
	}
}

// The e2b gateway's default alias target (@e2b/code-interpreter's
// "code-interpreter-v1") is this pool's image.
func TestDefaultPool_ImageIsTheE2BDefaultTemplate(t *testing.T) {
	if !bytes.Contains(defaultPool, []byte("image: "+e2b.DefaultTemplate+"\n")) {
		t.Fatalf("the default pool's image is not e2b.DefaultTemplate %q", e2b.DefaultTemplate)
	}
}
