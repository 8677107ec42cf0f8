package registry

import (
	"embed"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"sync"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/hearthvm/hearth/inventory"
)

// The upstream CRDs (copied from sigs.k8s.io/agent-sandbox v1.0.3
// k8s/crds/) carry the full openAPIV3Schema of the extension kinds; their
// schemas become the OpenAPI definitions, so server-side apply merges lists
// by their declared keys instead of treating spec as atomic.
//
//go:generate sh -c "cp $(go env GOMODCACHE)/sigs.k8s.io/agent-sandbox@v1.0.3/k8s/crds/{extensions.agents.x-k8s.io_sandbox{templates,warmpools,claims},agents.x-k8s.io_sandboxes}.yaml crds/ && chmod 644 crds/*.yaml"
//go:embed crds/*.yaml
var crdFS embed.FS

var (
	schemasOnce sync.Once
	schemasJSON map[string][]byte // canonical type name → schema JSON
	schemasErr  error
)

// name is the canonical OpenAPI name of a Go type (what definitions are keyed by).
func name(obj any) string { return util.GetCanonicalTypeName(obj) }

func crdSchema(raw []byte, version string) ([]byte, error) {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema json.RawMessage `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, err
	}
	for _, v := range doc.Spec.Versions {
		if v.Name == version && len(v.Schema.OpenAPIV3Schema) > 0 {
			return v.Schema.OpenAPIV3Schema, nil
		}
	}
	return nil, fmt.Errorf("no openAPIV3Schema for version %s", version)
}

func loadSchemas() (map[string][]byte, error) {
	schemasOnce.Do(func() {
		schemasJSON = map[string][]byte{}
		for file, obj := range map[string]any{
			"crds/extensions.agents.x-k8s.io_sandboxtemplates.yaml": &extv1beta1.SandboxTemplate{},
			"crds/extensions.agents.x-k8s.io_sandboxwarmpools.yaml": &extv1beta1.SandboxWarmPool{},
			"crds/extensions.agents.x-k8s.io_sandboxclaims.yaml":    &extv1beta1.SandboxClaim{},
		} {
			raw, err := crdFS.ReadFile(file)
			if err != nil {
				schemasErr = err
				return
			}
			if schemasJSON[name(obj)], err = crdSchema(raw, extv1beta1.GroupVersion.Version); err != nil {
				schemasErr = fmt.Errorf("%s: %w", file, err)
				return
			}
		}
		s, err := crdSchema(inventory.CRD, inventory.SchemeGroupVersion.Version)
		if err != nil {
			schemasErr = fmt.Errorf("inventory CRD: %w", err)
			return
		}
		schemasJSON[name(&inventory.NodeInventory{})] = s
	})
	return schemasJSON, schemasErr
}

// GetOpenAPIDefinitions returns the definitions of every kind this package
// serves (and of autoscaling/v1 Scale), keyed by canonical type name. Refs
// to ObjectMeta/ListMeta are left to the metav1 definitions the server
// already carries. It panics only if the embedded CRDs are corrupt, which
// a unit test rules out.
func GetOpenAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs, err := OpenAPIDefinitions(ref)
	if err != nil {
		panic(err)
	}
	return defs
}

// OpenAPIDefinitions is GetOpenAPIDefinitions returning its error.
func OpenAPIDefinitions(ref common.ReferenceCallback) (map[string]common.OpenAPIDefinition, error) {
	schemas, err := loadSchemas()
	if err != nil {
		return nil, err
	}
	objectMeta, listMeta := name(&metav1.ObjectMeta{}), name(&metav1.ListMeta{})
	out := map[string]common.OpenAPIDefinition{}
	addList := func(item, list any) {
		out[name(list)] = common.OpenAPIDefinition{
			Schema: spec.Schema{SchemaProps: spec.SchemaProps{
				Type:     []string{"object"},
				Required: []string{"items"},
				Properties: map[string]spec.Schema{
					"apiVersion": str(),
					"kind":       str(),
					"metadata":   refTo(ref, listMeta),
					"items": {SchemaProps: spec.SchemaProps{
						Type:  []string{"array"},
						Items: &spec.SchemaOrArray{Schema: ptr(refTo(ref, name(item)))},
					}},
				},
			}},
			Dependencies: []string{listMeta, name(item)},
		}
	}
	for _, pair := range [][2]any{
		{&extv1beta1.SandboxTemplate{}, &extv1beta1.SandboxTemplateList{}},
		{&extv1beta1.SandboxWarmPool{}, &extv1beta1.SandboxWarmPoolList{}},
		{&extv1beta1.SandboxClaim{}, &extv1beta1.SandboxClaimList{}},
		{&inventory.NodeInventory{}, &inventory.NodeInventoryList{}},
	} {
		var s spec.Schema
		if err := json.Unmarshal(schemas[name(pair[0])], &s); err != nil {
			return nil, fmt.Errorf("schema of %s: %w", name(pair[0]), err)
		}
		if s.Properties == nil {
			s.Properties = map[string]spec.Schema{}
		}
		s.Properties["metadata"] = refTo(ref, objectMeta)
		s.Properties["apiVersion"] = str()
		s.Properties["kind"] = str()
		stripForV2(&s)
		named, defs, deps := NameObjects(name(pair[0]), s, ref)
		out[name(pair[0])] = common.OpenAPIDefinition{Schema: named, Dependencies: append([]string{objectMeta}, deps...)}
		for k, v := range defs {
			out[k] = v
		}
		addList(pair[0], pair[1])
	}

	i32 := func() spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"integer"}, Format: "int32"}}
	}
	dateTime := func() spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Format: "date-time"}}
	}
	out[name(&coordinationv1.Lease{})] = common.OpenAPIDefinition{
		Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"},
			Properties: map[string]spec.Schema{
				"apiVersion": str(), "kind": str(), "metadata": refTo(ref, objectMeta),
				"spec": {SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{
					"holderIdentity":       str(),
					"leaseDurationSeconds": i32(),
					"acquireTime":          dateTime(),
					"renewTime":            dateTime(),
					"leaseTransitions":     i32(),
					"strategy":             str(),
					"preferredHolder":      str(),
				}}},
			},
		}},
		Dependencies: []string{objectMeta},
	}
	addList(&coordinationv1.Lease{}, &coordinationv1.LeaseList{})
	out[name(&autoscalingv1.Scale{})] = common.OpenAPIDefinition{
		Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"},
			Properties: map[string]spec.Schema{
				"apiVersion": str(), "kind": str(), "metadata": refTo(ref, objectMeta),
				"spec": {SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{
					"replicas": i32(),
				}}},
				"status": {SchemaProps: spec.SchemaProps{Type: []string{"object"}, Required: []string{"replicas"}, Properties: map[string]spec.Schema{
					"replicas": i32(),
					"selector": str(),
				}}},
			},
		}},
		Dependencies: []string{objectMeta},
	}
	// Events (events.go): their fields are kube-apiserver's; what a
	// client may write is checked by the types' decoding, so the schema
	// keeps every field (SSA treats them as atomic).
	for _, pair := range [][2]any{{&eventsv1.Event{}, &eventsv1.EventList{}}, {&corev1.Event{}, &corev1.EventList{}}} {
		out[name(pair[0])] = common.OpenAPIDefinition{
			Schema: spec.Schema{
				SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{
					"apiVersion": str(), "kind": str(), "metadata": refTo(ref, objectMeta),
				}},
				VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{"x-kubernetes-preserve-unknown-fields": true}},
			},
			Dependencies: []string{objectMeta},
		}
		addList(pair[0], pair[1])
	}
	return out, nil
}

func str() spec.Schema { return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}}} }

func refTo(ref common.ReferenceCallback, n string) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(n)}}
}

func ptr[T any](v T) *T { return &v }

// stripForV2 removes what OpenAPI v2 cannot carry (anyOf, oneOf, allOf,
// not — the CRDs use anyOf only beside x-kubernetes-int-or-string, which
// already says it) and CEL rules (the registry validates in Go), like a
// kube-apiserver does when it publishes a CRD. Without it /openapi/v2 in
// protobuf (what kubectl downloads) fails.
func stripForV2(s *spec.Schema) {
	if s == nil {
		return
	}
	s.AnyOf, s.OneOf, s.AllOf, s.Not = nil, nil, nil, nil
	delete(s.Extensions, "x-kubernetes-validations")
	for k, p := range s.Properties {
		stripForV2(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		stripForV2(s.Items.Schema)
		for i := range s.Items.Schemas {
			stripForV2(&s.Items.Schemas[i])
		}
	}
	if s.AdditionalProperties != nil {
		stripForV2(s.AdditionalProperties.Schema)
	}
}

// SandboxSchema is the openAPIV3Schema of agent-sandbox's own Sandbox CRD
// (crds/agents.x-k8s.io_sandboxes.yaml, v1.0.3, version v1beta1) as
// OpenAPI v2 can carry it: the aggregated API publishes its spec and
// status for Sandbox, so clients and server-side apply see upstream's
// schema (list keys, types), not a free-form object.
func SandboxSchema() (spec.Schema, error) {
	raw, err := crdFS.ReadFile("crds/agents.x-k8s.io_sandboxes.yaml")
	if err != nil {
		return spec.Schema{}, err
	}
	js, err := crdSchema(raw, "v1beta1")
	if err != nil {
		return spec.Schema{}, fmt.Errorf("Sandbox CRD: %w", err)
	}
	var s spec.Schema
	if err := json.Unmarshal(js, &s); err != nil {
		return spec.Schema{}, fmt.Errorf("Sandbox CRD schema: %w", err)
	}
	stripForV2(&s)
	return s, nil
}

// NameObjects moves every object schema nested in s that has properties (a
// property's, an array's items', a map's values') into a definition of its
// own and refers to it by $ref. A definition is named name plus the path to
// it (name+".spec.podTemplate"; an array's items and a map's values take
// the array's or the map's path). It returns s so rewritten, the new
// definitions (each listing those it refers to as its Dependencies) and the
// ones s refers to. What the schema accepts and how server-side apply
// merges it do not change: an object with a default or nullable stays
// inline (a $ref carries neither), so does one under a property name a
// definition name cannot hold, and nothing below
// x-kubernetes-preserve-unknown-fields moves (the extension reaches only
// the schemas inlined below it).
//
// Why: the field manager (managedFields, on every create, update and
// apply) compares, at every object of the written value, the object's
// schema with itself: an inlined schema whole and recursively, a named one
// by its name. Upstream's CRD schemas inline a full pod template, so a
// Sandbox create compared thousands of schema nodes — 12% of the CPU of a
// create through the API.
func NameObjects(name string, s spec.Schema, ref common.ReferenceCallback) (spec.Schema, map[string]common.OpenAPIDefinition, []string) {
	defs := map[string]common.OpenAPIDefinition{}
	deps := nameObjects(name, &s, ref, defs)
	return s, defs, deps
}

// nameObjects names the objects below s, at path p, in place and returns
// the definitions s refers to.
func nameObjects(p string, s *spec.Schema, ref common.ReferenceCallback, defs map[string]common.OpenAPIDefinition) []string {
	if preservesUnknownFields(s) {
		return nil
	}
	var deps []string
	// child returns c (at path cp) named, or c with its own objects named.
	child := func(cp string, c spec.Schema) spec.Schema {
		cdeps := nameObjects(cp, &c, ref, defs)
		if _, taken := defs[cp]; taken || !nameable(c) || !definitionPath.MatchString(cp[len(p):]) {
			deps = append(deps, cdeps...)
			return c
		}
		defs[cp] = common.OpenAPIDefinition{Schema: c, Dependencies: cdeps}
		deps = append(deps, cp)
		return spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(cp)}}
	}
	// s is a copy; what it shares with the caller (maps, pointers) is
	// copied before it changes.
	keys := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same names on every start
	if len(keys) > 0 {
		props := make(map[string]spec.Schema, len(keys))
		for _, k := range keys {
			props[k] = child(p+"."+k, s.Properties[k])
		}
		s.Properties = props
	}
	if s.Items != nil && s.Items.Schema != nil {
		c := child(p, *s.Items.Schema)
		items := *s.Items
		items.Schema = &c
		s.Items = &items
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		c := child(p, *s.AdditionalProperties.Schema)
		ap := *s.AdditionalProperties
		ap.Schema = &c
		s.AdditionalProperties = &ap
	}
	return deps
}

// definitionPath is what nameObjects may add to a definition name: nothing
// (an array's items, a map's values) or "." and a property name that an
// OpenAPI v3 component name can hold.
var definitionPath = regexp.MustCompile(`^(\.[A-Za-z0-9_-]+)?$`)

// nameable reports whether s is an object schema a bare $ref can stand for.
func nameable(s spec.Schema) bool {
	return len(s.Properties) > 0 && s.Ref.String() == "" && s.Default == nil && !s.Nullable
}

func preservesUnknownFields(s *spec.Schema) bool {
	v, ok := s.Extensions["x-kubernetes-preserve-unknown-fields"]
	return ok && v == true
}
