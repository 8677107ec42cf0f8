package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hearthvm/hearth/sandbox"
)

func review(t testing.TB, op admissionv1.Operation, res metav1.GroupVersionResource, obj any) []byte {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("uid-1"), Operation: op, Resource: res,
			Object: runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func annotated(rt string) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
	}
	if rt != "" {
		p.Annotations = map[string]string{sandbox.AnnotationRuntime: rt}
	}
	return p
}

func post(t *testing.T, srv *httptest.Server, ctype string, body []byte) (*http.Response, *admissionv1.AdmissionReview) {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+Path, ctype, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp, &out
}

func TestHandler_MutatesAnnotatedPod(t *testing.T) {
	srv := httptest.NewTLSServer(Handler())
	defer srv.Close()
	in := annotated(sandbox.RuntimeSandboxd)
	_, out := post(t, srv, "application/json", review(t, admissionv1.Create, podResource, in))
	if out == nil || out.Response == nil {
		t.Fatal("no review response")
	}
	r := out.Response
	if r.UID != "uid-1" || !r.Allowed || r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response = %+v", r)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
		t.Fatalf("type meta = %+v", out.TypeMeta)
	}
	p, err := jsonpatch.DecodePatch(r.Patch)
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := json.Marshal(in)
	patched, err := p.Apply(orig)
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeSelector[sandbox.LabelProvider] != "sandboxd" || len(got.Spec.Tolerations) != 1 ||
		got.Annotations[sandbox.AnnotationBoot] != sandbox.BootWarm {
		t.Fatalf("patched pod = %+v", got)
	}
}

func TestHandler_Decisions(t *testing.T) {
	srv := httptest.NewTLSServer(Handler())
	defer srv.Close()
	conflict := annotated(sandbox.RuntimeVKCocoon)
	conflict.Spec.NodeSelector = map[string]string{sandbox.NodeSelectorType: "kubelet"}
	cases := []struct {
		name      string
		body      []byte
		allowed   bool
		patched   bool
		msgSubstr string
	}{
		{"plain pod allowed unchanged", review(t, admissionv1.Create, podResource, annotated("")), true, false, ""},
		{"conflicting pod denied", review(t, admissionv1.Create, podResource, conflict), false, false, "spec.nodeSelector[type]"},
		{"unknown runtime denied", review(t, admissionv1.Create, podResource, annotated("qemu")), false, false, "unknown runtime"},
		{"update is not mutated", review(t, admissionv1.Update, podResource, annotated(sandbox.RuntimeSandboxd)), true, false, ""},
		{"other resource ignored", review(t, admissionv1.Create, metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, map[string]any{"data": 1}), true, false, ""},
		{"undecodable pod denied", review(t, admissionv1.Create, podResource, map[string]any{"spec": "nope"}), false, false, "decoding pod"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, out := post(t, srv, "application/json", tc.body)
			if out == nil || out.Response == nil {
				t.Fatal("no review response")
			}
			r := out.Response
			if r.UID != "uid-1" || r.Allowed != tc.allowed || (r.Patch != nil) != tc.patched {
				t.Fatalf("response = %+v", r)
			}
			if !tc.allowed {
				if r.Result == nil || r.Result.Code != http.StatusBadRequest || !strings.Contains(r.Result.Message, tc.msgSubstr) {
					t.Fatalf("result = %+v, want 400 containing %q", r.Result, tc.msgSubstr)
				}
			}
		})
	}
}

func TestHandler_TransportErrors(t *testing.T) {
	srv := httptest.NewTLSServer(Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET = %d, want 405", resp.StatusCode)
	}
	for _, tc := range []struct {
		ctype string
		body  string
		want  int
	}{
		{"text/plain", "{}", http.StatusUnsupportedMediaType},
		{"application/json", "{", http.StatusBadRequest},
		{"application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
		{"application/json", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`, http.StatusBadRequest},
		{"application/json", strings.Repeat(" ", maxBody+1), http.StatusRequestEntityTooLarge},
	} {
		if resp, _ := post(t, srv, tc.ctype, []byte(tc.body)); resp.StatusCode != tc.want {
			t.Errorf("%s %.40q = %d, want %d", tc.ctype, tc.body, resp.StatusCode, tc.want)
		}
	}
}

func TestReview_BadInputWrapsErrBadReview(t *testing.T) {
	if _, err := Review([]byte("[]")); !errors.Is(err, ErrBadReview) {
		t.Fatalf("err = %v", err)
	}
}

// FuzzReview: any input either errors with ErrBadReview or yields a
// response for the request's UID; a patch, when present, is valid JSON Patch.
func FuzzReview(f *testing.F) {
	f.Add(review(f, admissionv1.Create, podResource, annotated(sandbox.RuntimeSandboxd)))
	f.Add(review(f, admissionv1.Create, podResource, annotated("x")))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","resource":{"version":"v1","resource":"pods"},"object":null}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := Review(body)
		if err != nil {
			if !errors.Is(err, ErrBadReview) {
				t.Fatalf("err %v does not wrap ErrBadReview", err)
			}
			return
		}
		if out.Response == nil {
			t.Fatal("nil response")
		}
		if out.Response.Patch != nil {
			if _, err := jsonpatch.DecodePatch(out.Response.Patch); err != nil {
				t.Fatalf("invalid patch %s: %v", out.Response.Patch, err)
			}
		}
	})
}

// BenchmarkReview: one AdmissionReview decode, ApplyRuntime and encode —
// the webhook's whole per-Pod cost.
func BenchmarkReview(b *testing.B) {
	body := review(b, admissionv1.Create, podResource, annotated(sandbox.RuntimeSandboxd))
	b.ReportAllocs()
	for b.Loop() {
		out, err := Review(body)
		if err != nil || out.Response.Patch == nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(out); err != nil {
			b.Fatal(err)
		}
	}
}
