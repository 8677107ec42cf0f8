package apiserver

import (
	"strings"

	extopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiopenapi "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/apiserver/registry"
	"github.com/hearthvm/hearth/sandbox"
)

// GetOpenAPIDefinitions returns the definitions of the sandboxes group: the
// apimachinery meta types, Sandbox, SandboxList and the lifecycle payloads.
// Our kinds are keyed by their Go type name; the namer of OpenAPIConfigs
// maps such names to REST-friendly ones. Sandbox spec and status are
// upstream's CRD schema (registry.SandboxSchema), its objects named
// (registry.NameObjects).
func GetOpenAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	out := map[string]common.OpenAPIDefinition{}
	for k, v := range extopenapi.GetOpenAPIDefinitions(ref) {
		if strings.HasPrefix(k, "io.k8s.apimachinery.") {
			out[k] = v
		}
	}
	objectMeta := metav1.ObjectMeta{}.OpenAPIModelName()
	listMeta := metav1.ListMeta{}.OpenAPIModelName()
	str := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}}}
	i32 := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"integer"}, Format: "int32"}}
	free := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}},
		VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{"x-kubernetes-preserve-unknown-fields": true}}}
	refTo := func(n string) spec.Schema { return spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(n)}} }
	object := func(props map[string]spec.Schema, deps ...string) common.OpenAPIDefinition {
		props["apiVersion"], props["kind"], props["metadata"] = str, str, refTo(objectMeta)
		return common.OpenAPIDefinition{
			Schema:       spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: props}},
			Dependencies: append([]string{objectMeta}, deps...),
		}
	}
	name := util.GetCanonicalTypeName
	sb := name(&sandboxv1beta1.Sandbox{})
	sbSpec, sbStatus := free, free
	if up, err := registry.SandboxSchema(); err == nil {
		// upstream's schema; a corrupt embedded copy (a unit test rules it
		// out) falls back to free-form objects.
		if p, ok := up.Properties["spec"]; ok {
			sbSpec = p
		}
		if p, ok := up.Properties["status"]; ok {
			sbStatus = p
		}
	}
	def := object(map[string]spec.Schema{"spec": sbSpec, "status": sbStatus})
	named, defs, deps := registry.NameObjects(sb, def.Schema, ref)
	out[sb] = common.OpenAPIDefinition{Schema: named, Dependencies: append(def.Dependencies, deps...)}
	for k, v := range defs {
		out[k] = v
	}
	out[name(&sandboxv1beta1.SandboxList{})] = common.OpenAPIDefinition{
		Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"}, Required: []string{"items"},
			Properties: map[string]spec.Schema{
				"apiVersion": str, "kind": str, "metadata": refTo(listMeta),
				"items": {SchemaProps: spec.SchemaProps{Type: []string{"array"},
					Items: &spec.SchemaOrArray{Schema: ptr(refTo(sb))}}},
			},
		}},
		Dependencies: []string{listMeta, sb},
	}
	out[name(&sandbox.SandboxPauseOptions{})] = object(map[string]spec.Schema{})
	out[name(&sandbox.SandboxResumeOptions{})] = object(map[string]spec.Schema{})
	out[name(&sandbox.SandboxForkOptions{})] = object(map[string]spec.Schema{"count": i32, "ttlSeconds": i32})
	child := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{
		"sandboxID": str, "name": str, "nodeName": str, "address": str,
		"deadline": {SchemaProps: spec.SchemaProps{Type: []string{"string"}, Format: "date-time"}},
	}}}
	out[name(&sandbox.SandboxForkResult{})] = object(map[string]spec.Schema{
		"children": {SchemaProps: spec.SchemaProps{Type: []string{"array"}, Items: &spec.SchemaOrArray{Schema: &child}}},
	})
	i64 := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"integer"}, Format: "int64"}}
	boolean := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"boolean"}}}
	out[name(&sandbox.SandboxLogOptions{})] = object(map[string]spec.Schema{
		"tailLines": i64, "limitBytes": i64, "sinceSeconds": i64,
		"sinceTime":  {SchemaProps: spec.SchemaProps{Type: []string{"string"}, Format: "date-time"}},
		"timestamps": boolean, "follow": boolean,
	})
	out[name(&sandbox.SandboxStats{})] = object(map[string]spec.Schema{
		"timestamp": {SchemaProps: spec.SchemaProps{Type: []string{"string"}, Format: "date-time"}},
		"paused":    boolean, "cpuCount": i32, "cpuUsageCoreNanoSeconds": i64, "cpuUsageNanoCores": i64,
		"window":           {SchemaProps: spec.SchemaProps{Type: []string{"string"}}},
		"memoryLimitBytes": i64, "memoryUsedBytes": i64, "diskLimitBytes": i64, "diskUsedBytes": i64,
	})
	out[name(&sandbox.SandboxSnapshotOptions{})] = object(map[string]spec.Schema{"name": str})
	out[name(&sandbox.SandboxSnapshotResult{})] = object(map[string]spec.Schema{
		"snapshotID": str, "name": str, "nodeName": str,
		"creationTimestamp": {SchemaProps: spec.SchemaProps{Type: []string{"string"}, Format: "date-time"}},
	})
	return out
}

func ptr[T any](v T) *T { return &v }

// composeDefinitions merges definition sources; later ones win on a clash.
func composeDefinitions(srcs ...common.GetOpenAPIDefinitions) common.GetOpenAPIDefinitions {
	return func(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
		out := map[string]common.OpenAPIDefinition{}
		for _, src := range srcs {
			if src == nil {
				continue
			}
			for k, v := range src(ref) {
				out[k] = v
			}
		}
		return out
	}
}

// definitionNamer names definitions REST-friendly. The stock namer keeps a
// Go path ("sigs.k8s.io/agent-sandbox/api/v1beta1.Sandbox") for types
// without OpenAPIModelName, which yields "~1" references kubectl cannot
// resolve, and it indexes GVKs under the friendly name, so such models lose
// x-kubernetes-group-version-kind (managedFields then fail). Mapping names
// containing "/" through util.ToRESTFriendlyName fixes both.
func definitionNamer(schemes ...*runtime.Scheme) func(string) (string, spec.Extensions) {
	dn := apiopenapi.NewDefinitionNamer(schemes...)
	return func(name string) (string, spec.Extensions) {
		if strings.Contains(name, "/") {
			name = util.ToRESTFriendlyName(name)
		}
		return dn.GetDefinitionName(name)
	}
}

// OpenAPIConfigs returns the OpenAPI v2 and v3 configs for defs, with the
// REST-friendly namer over scheme. title names the server.
func OpenAPIConfigs(title string, scheme *runtime.Scheme, defs ...common.GetOpenAPIDefinitions) (*common.Config, *common.OpenAPIV3Config) {
	get := composeDefinitions(append([]common.GetOpenAPIDefinitions{GetOpenAPIDefinitions}, defs...)...)
	namer := definitionNamer(scheme)
	v2 := genericapiserver.DefaultOpenAPIConfig(get, apiopenapi.NewDefinitionNamer(scheme))
	v2.GetDefinitionName = namer
	v2.Info.Title = title
	v3 := genericapiserver.DefaultOpenAPIV3Config(get, apiopenapi.NewDefinitionNamer(scheme))
	v3.GetDefinitionName = namer
	v3.Info.Title = title
	// DefaultOpenAPIV3Config precomputed $refs with the stock namer: redo them.
	v3.Definitions = get(func(name string) spec.Ref {
		n, _ := namer(name)
		return spec.MustCreateRef("#/components/schemas/" + common.EscapeJsonPointer(n))
	})
	return v2, v3
}
