// Package registrytest starts a generic apiserver that serves only the
// registry's kinds over a real embedded etcd, for tests of the registry and
// of its clients (the warm-pool driver). It mirrors the embedded default's
// wiring without sandboxes.
package registrytest

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	extopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/component-base/compatibility"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/hearthvm/hearth/apiserver/registry"
	"github.com/hearthvm/hearth/internal/embedetcd"
)

// Server is a running test server.
type Server struct {
	// Config reaches the server (insecure TLS, no auth).
	Config *rest.Config
	// Etcd is the embedded etcd behind it.
	Etcd *embedetcd.Etcd
}

// Start starts a server; t.Cleanup stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	etcd, err := embedetcd.Start(embedetcd.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)

	scheme := runtime.NewScheme()
	if err := registry.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	codecs := serializer.NewCodecFactory(scheme)

	cfg := genericapiserver.NewRecommendedConfig(codecs)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, []string{genericapiserver.LoopbackClientServerNameOverride})
	if err != nil {
		t.Fatal(err)
	}
	content, err := dynamiccertificates.NewStaticCertKeyContent("serving", cert, key)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SecureServing = &genericapiserver.SecureServingInfo{Listener: l, Cert: content}
	if cfg.LoopbackClientConfig, err = cfg.SecureServing.NewLoopbackClientConfig("loopback", cert); err != nil {
		t.Fatal(err)
	}
	cfg.Authentication.Authenticator = anonymous.NewAuthenticator(nil)
	cfg.Authorization.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	cfg.EffectiveVersion = compatibility.NewEffectiveVersionFromString("1.36", "", "")

	getDefs := func(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
		out := map[string]common.OpenAPIDefinition{}
		for k, v := range extopenapi.GetOpenAPIDefinitions(ref) {
			if strings.HasPrefix(k, "io.k8s.apimachinery.") {
				out[k] = v
			}
		}
		for k, v := range registry.GetOpenAPIDefinitions(ref) {
			out[k] = v
		}
		return out
	}
	namer := openapinamer.NewDefinitionNamer(scheme)
	friendly := func(name string) (string, spec.Extensions) {
		if strings.Contains(name, "/") {
			name = util.ToRESTFriendlyName(name)
		}
		return namer.GetDefinitionName(name)
	}
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(getDefs, namer)
	cfg.OpenAPIConfig.GetDefinitionName = friendly
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(getDefs, namer)
	cfg.OpenAPIV3Config.GetDefinitionName = friendly
	cfg.OpenAPIV3Config.Definitions = getDefs(func(name string) spec.Ref {
		n, _ := friendly(name)
		return spec.MustCreateRef("#/components/schemas/" + common.EscapeJsonPointer(n))
	})

	srv, err := cfg.Complete().New("registry-test", genericapiserver.NewEmptyDelegate())
	if err != nil {
		t.Fatal(err)
	}
	getter := registry.NewRESTOptionsGetter(registry.StorageOptions{Endpoints: etcd.Endpoints,
		CAFile: etcd.ClientTLS.CAFile, CertFile: etcd.ClientTLS.CertFile, KeyFile: etcd.ClientTLS.KeyFile}, scheme, codecs)
	groups, _, err := registry.APIGroups(scheme, codecs, getter)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if err := srv.InstallAPIGroup(g); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.PrepareRun().RunWithContext(ctx); err != nil {
			t.Errorf("server: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	rc := &rest.Config{Host: "https://" + l.Addr().String(), TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(rc.Host + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronization
	}
	return &Server{Config: rc, Etcd: etcd}
}
