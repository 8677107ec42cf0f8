// Package webhook serves the Pod path (docs/API.md#pod-path) as a Kubernetes
// mutating admission webhook: an admission.k8s.io/v1 AdmissionReview for a
// Pod create comes in, the Pod goes through sandbox.ApplyRuntime, and the
// review goes back either allowed with a JSONPatch adding the missing
// scheduling fields, or denied (HTTP-style code 400 in the review's status)
// with the conflict spelled out.
//
// The package owns only the HTTP handler. It holds no state, makes no calls
// and never touches a microVM; serving, TLS and authentication belong to the
// process that mounts Handler (sandbox-apiserver with
// --enable-pod-runtime-webhook, or any https server).
package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	httpserve "github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/sandbox"
)

// Path is where a server mounts Handler by convention; the
// MutatingWebhookConfiguration in deploy/ points at it.
const Path = "/webhooks/pod-runtime"

// maxBody caps an AdmissionReview body (kube-apiserver's own request limit
// is 3 MiB; a Pod is far smaller).
const maxBody = 3 << 20

var podResource = metav1.GroupVersionResource{Version: "v1", Resource: "pods"}

// Handler returns the http.Handler for the pod-runtime webhook.
//
// Transport errors are plain HTTP errors: a non-POST is 405, a body that is
// not JSON is 415, an undecodable or request-less review is 400. Everything
// else is answered 200 with an AdmissionReview whose response carries the
// request's UID: a Pod that is not being created, or any other resource, is
// allowed unchanged; a Pod that cannot be decoded or conflicts with its
// runtime is denied with code 400.
//
// A review's body must arrive within Timeouts.Read and its answer leave
// within Timeouts.Write (where the serving ResponseWriter supports
// deadlines; the API server in front also bounds the request).
func Handler() http.Handler {
	return httpserve.Deadlines(http.HandlerFunc(serve), Timeouts, nil)
}

// Timeouts bound one admission review; the API server calling the webhook
// gives up after 10 s by default.
var Timeouts = httpserve.Timeouts{Read: 10 * time.Second, Write: 30 * time.Second}

func serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, "Content-Type must be application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxBody {
		http.Error(w, "admission review too large", http.StatusRequestEntityTooLarge)
		return
	}
	review, err := Review(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := json.Marshal(review)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// ErrBadReview is returned by Review for input that is not an
// admission.k8s.io/v1 AdmissionReview carrying a request.
var ErrBadReview = errors.New("not an admission.k8s.io/v1 AdmissionReview with a request")

// Review is the webhook's decision as a function: it decodes one
// AdmissionReview and returns the review to send back. It errors (wrapping
// ErrBadReview) only when body is not a v1 AdmissionReview with a request;
// every decision about the Pod itself is in the returned response.
func Review(body []byte) (*admissionv1.AdmissionReview, error) {
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadReview, err)
	}
	if in.Request == nil || in.APIVersion != admissionv1.SchemeGroupVersion.String() || in.Kind != "AdmissionReview" {
		return nil, ErrBadReview
	}
	return &admissionv1.AdmissionReview{
		TypeMeta: in.TypeMeta,
		Response: decide(in.Request),
	}, nil
}

func decide(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Resource != podResource || req.SubResource != "" || req.Operation != admissionv1.Create {
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(resp, "decoding pod: "+err.Error())
	}
	_, ops, err := sandbox.ApplyRuntime(&pod)
	if err != nil {
		return deny(resp, err.Error())
	}
	if len(ops) == 0 {
		return resp
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return deny(resp, "encoding patch: "+err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	return resp
}

func deny(resp *admissionv1.AdmissionResponse, msg string) *admissionv1.AdmissionResponse {
	resp.Allowed = false
	resp.Result = &metav1.Status{
		Status:  metav1.StatusFailure,
		Message: msg,
		Reason:  metav1.StatusReasonBadRequest,
		Code:    http.StatusBadRequest,
	}
	return resp
}
