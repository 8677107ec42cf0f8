package registry

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/schemaconv"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// typesOf converts s (named root) and defs into server-side apply's types,
// as the field manager does (schemaconv.ToSchemaFromOpenAPI).
func typesOf(t testing.TB, root string, s spec.Schema, defs map[string]common.OpenAPIDefinition) typed.ParseableType {
	t.Helper()
	models := map[string]*spec.Schema{root: &s}
	for k, d := range defs {
		models[k] = &d.Schema
	}
	sch, err := schemaconv.ToSchemaFromOpenAPI(models, false)
	if err != nil {
		t.Fatal(err)
	}
	return typed.ParseableType{Schema: sch, TypeRef: schema.TypeRef{NamedType: &root}}
}

func definitionRef(name string) spec.Ref { return spec.MustCreateRef("#/definitions/" + name) }

// sandboxTypes returns the Sandbox schema's types inlined (upstream's CRD as
// is) and named (NameObjects).
func sandboxTypes(t testing.TB) (inlined, named typed.ParseableType, defs map[string]common.OpenAPIDefinition) {
	t.Helper()
	s, err := SandboxSchema()
	if err != nil {
		t.Fatal(err)
	}
	n, defs, _ := NameObjects("Sandbox", s, definitionRef)
	return typesOf(t, "Sandbox", s, nil), typesOf(t, "Sandbox", n, defs), defs
}

func fromJSON(t testing.TB, p typed.ParseableType, js string) *typed.TypedValue {
	t.Helper()
	var u map[string]any
	if err := json.Unmarshal([]byte(js), &u); err != nil {
		t.Fatal(err)
	}
	tv, err := p.FromUnstructured(u)
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return tv
}

var sandboxSpecs = []string{
	`{"spec":{"podTemplate":{"spec":{"containers":[{"name":"main","image":"ghcr.io/a/b:1","resources":{"requests":{"cpu":"500m","memory":"512Mi"}}}]}}}}`,
	`{"spec":{"podTemplate":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"main","image":"i","env":[{"name":"A","value":"1"},{"name":"B","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}],"ports":[{"containerPort":80},{"containerPort":53,"protocol":"UDP"}],"volumeMounts":[{"name":"v","mountPath":"/v"}]},{"name":"side","image":"j","command":["sh"],"args":["-c","x"]}],"volumes":[{"name":"v","emptyDir":{}}],"nodeSelector":{"k":"v"},"tolerations":[{"key":"t","operator":"Exists"}]}},"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}]}}`,
	`{"spec":{"podTemplate":{"spec":{"containers":[{"name":"main","image":"i2","ports":[{"containerPort":80},{"containerPort":8080}]}],"initContainers":[{"name":"init","image":"k"}]}}},"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z","reason":"r","message":"m"}]}}`,
}

// Naming the objects changes nothing server-side apply computes: the same
// managed field sets, the same comparison and the same merge (list-map keys
// included) as upstream's inlined schema.
func TestNameObjects_ManagedFieldsAndMergesAsInlined(t *testing.T) {
	inlined, named, defs := sandboxTypes(t)
	if _, ok := defs["Sandbox.spec.podTemplate.spec.containers"]; !ok {
		t.Fatalf("no definition of a container; have %d definitions", len(defs))
	}
	for i, a := range sandboxSpecs {
		ti, tn := fromJSON(t, inlined, a), fromJSON(t, named, a)
		fi, err := ti.ToFieldSet()
		if err != nil {
			t.Fatal(err)
		}
		fn, err := tn.ToFieldSet()
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Equals(fn) {
			t.Errorf("spec %d: field sets differ:\ninlined %s\nnamed   %s", i, fi, fn)
		}
		for j, b := range sandboxSpecs {
			ci, err := ti.Compare(fromJSON(t, inlined, b))
			if err != nil {
				t.Fatal(err)
			}
			cn, err := tn.Compare(fromJSON(t, named, b))
			if err != nil {
				t.Fatal(err)
			}
			if !ci.Added.Equals(cn.Added) || !ci.Removed.Equals(cn.Removed) || !ci.Modified.Equals(cn.Modified) {
				t.Errorf("compare %d→%d differs:\ninlined %s\nnamed   %s", i, j, ci, cn)
			}
			mi, err := ti.Merge(fromJSON(t, inlined, b))
			if err != nil {
				t.Fatal(err)
			}
			mn, err := tn.Merge(fromJSON(t, named, b))
			if err != nil {
				t.Fatal(err)
			}
			if !value.Equals(mi.AsValue(), mn.AsValue()) {
				t.Errorf("merge %d+%d differs:\ninlined %s\nnamed   %s", i, j, value.ToString(mi.AsValue()), value.ToString(mn.AsValue()))
			}
		}
	}
}

// What the inlined schema refuses, the named one refuses too.
func TestNameObjects_RefusesWhatInlinedRefuses(t *testing.T) {
	inlined, named, _ := sandboxTypes(t)
	for _, js := range []string{
		`{"spec":{"podTemplate":{"spec":{"containers":[{"name":"a","image":"i","notAField":1}]}}}}`,
		`{"spec":{"podTemplate":{"spec":{"containers":[{"name":"a","ports":[{"containerPort":"eighty"}]}]}}}}`,
		`{"spec":{"podTemplate":{"spec":{"containers":{"name":"a"}}}}}`,
	} {
		var u map[string]any
		if err := json.Unmarshal([]byte(js), &u); err != nil {
			t.Fatal(err)
		}
		_, ei := inlined.FromUnstructured(u)
		_, en := named.FromUnstructured(u)
		if (ei == nil) != (en == nil) {
			t.Errorf("%s: inlined err %v, named err %v", js, ei, en)
		}
	}
}

// An object below x-kubernetes-preserve-unknown-fields stays inline (a
// definition of its own would refuse unknown fields), as does an object
// with a default or nullable, or under a name a definition cannot hold.
func TestNameObjects_KeepsWhatARefCannotCarry(t *testing.T) {
	obj := func(props map[string]spec.Schema) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: props}}
	}
	str := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}}}
	leaf := func() spec.Schema { return obj(map[string]spec.Schema{"z": str}) }
	free := obj(map[string]spec.Schema{"y": leaf()})
	free.Extensions = spec.Extensions{"x-kubernetes-preserve-unknown-fields": true}
	defaulted, nullable := leaf(), leaf()
	defaulted.Default = map[string]any{"z": "a"}
	nullable.Nullable = true
	root := obj(map[string]spec.Schema{"free": free, "defaulted": defaulted, "nullable": nullable, "a/b": leaf(), "plain": leaf()})

	n, defs, deps := NameObjects("T", root, definitionRef)
	var names []string
	for k := range defs {
		names = append(names, k)
	}
	if len(defs) != 2 || defs["T.free"].Schema.Properties == nil || defs["T.plain"].Schema.Properties == nil {
		t.Fatalf("definitions %v, want T.free and T.plain", names)
	}
	if len(deps) != 2 {
		t.Errorf("deps %v", deps)
	}
	if r := defs["T.free"].Schema.Properties["y"]; r.Ref.String() != "" || len(r.Properties) == 0 {
		t.Errorf("the object below preserve-unknown-fields was named: %v", r.Ref.String())
	}
	for _, k := range []string{"defaulted", "nullable", "a/b"} {
		if p := n.Properties[k]; p.Ref.String() != "" {
			t.Errorf("%s was named", k)
		}
	}
	p := typesOf(t, "T", n, defs)
	if _, err := p.FromUnstructured(map[string]any{"free": map[string]any{"y": map[string]any{"z": "a", "unknown": int64(1)}}}); err != nil {
		t.Errorf("an unknown field below preserve-unknown-fields: %v", err)
	}
	if _, err := p.FromUnstructured(map[string]any{"plain": map[string]any{"unknown": int64(1)}}); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Errorf("an unknown field in a named object: %v", err)
	}
}

// BenchmarkNameObjects_CreateFieldSet is what the field manager does on a
// Sandbox create: type the object, compare it with an empty one.
func BenchmarkNameObjects_CreateFieldSet(b *testing.B) {
	inlined, named, _ := sandboxTypes(b)
	for _, c := range []struct {
		name string
		p    typed.ParseableType
	}{{"inlined", inlined}, {"named", named}} {
		b.Run(c.name, func(b *testing.B) {
			empty := fromJSON(b, c.p, `{}`)
			var u map[string]any
			_ = json.Unmarshal([]byte(sandboxSpecs[0]), &u)
			for b.Loop() {
				tv, err := c.p.FromUnstructured(u)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := empty.Compare(tv); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
