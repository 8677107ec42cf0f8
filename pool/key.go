package pool

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/hearthvm/hearth/sandbox"
)

// Key identifies a warm pool.
type Key struct {
	Template string `json:"template"`
	Net      string `json:"net"`
	Size     string `json:"size"`
}

// String renders the key the way error messages name it.
func (k Key) String() string {
	return fmt.Sprintf("template=%q net=%q size=%q", k.Template, k.Net, k.Size)
}

// ErrInvalidKey is wrapped by every key derivation error; callers map it to 400.
var ErrInvalidKey = errors.New("invalid pool key")

// Inputs are the raw axes a key is derived from.
type Inputs struct {
	// Image is the first container's image, byte for byte.
	Image string
	// Net is the requested lane; empty means none.
	Net string
	// CPU and Memory are the first container's effective requests (request,
	// else limit); nil or zero means unset.
	CPU, Memory *resource.Quantity
}

// KeyFor derives a pool key from raw inputs. It is the single derivation
// function; the helpers below only gather Inputs.
func KeyFor(in Inputs) (Key, error) {
	if in.Image == "" {
		return Key{}, fmt.Errorf("%w: the first container has no image", ErrInvalidKey)
	}
	return Key{Template: in.Image, Net: in.Net, Size: sizeOf(in.CPU, in.Memory)}.Normalize()
}

// Normalize is the one normalization of a key's axes, used by KeyFor, by
// the fleet's routing and by the node's request decoding: net "" → none,
// size "" → small; an unknown lane or size class wraps ErrInvalidKey. The
// template is kept byte for byte.
func (k Key) Normalize() (Key, error) {
	switch k.Net {
	case "":
		k.Net = sandbox.NetNone
	case sandbox.NetNone, sandbox.NetEgress:
	default:
		return Key{}, fmt.Errorf("%w: unknown %s %q (want %q or %q)", ErrInvalidKey, sandbox.AnnotationNet, k.Net, sandbox.NetNone, sandbox.NetEgress)
	}
	switch k.Size {
	case "":
		k.Size = sandbox.SizeSmall
	case sandbox.SizeSmall, sandbox.SizeMedium, sandbox.SizeLarge:
	default:
		return Key{}, fmt.Errorf("%w: unknown size %.32q (want %q, %q or %q)", ErrInvalidKey, k.Size, sandbox.SizeSmall, sandbox.SizeMedium, sandbox.SizeLarge)
	}
	return k, nil
}

// effective returns the request for name, else its limit; zero counts as absent.
func effective(r corev1.ResourceRequirements, name corev1.ResourceName) *resource.Quantity {
	if q, ok := r.Requests[name]; ok && !q.IsZero() {
		return &q
	}
	if q, ok := r.Limits[name]; ok && !q.IsZero() {
		return &q
	}
	return nil
}

// inputsFor gathers Inputs from object metadata annotations, a pod
// template's annotations and its containers.
func inputsFor(objAnnotations map[string]string, pt sandboxv1beta1.PodTemplate) Inputs {
	net := objAnnotations[sandbox.AnnotationNet]
	if net == "" {
		net = pt.ObjectMeta.Annotations[sandbox.AnnotationNet]
	}
	in := Inputs{Net: net}
	if cs := pt.Spec.Containers; len(cs) > 0 {
		in.Image = cs[0].Image
		in.CPU = effective(cs[0].Resources, corev1.ResourceCPU)
		in.Memory = effective(cs[0].Resources, corev1.ResourceMemory)
	}
	return in
}

// KeyForSandbox derives the key of a Create.
func KeyForSandbox(sb *sandboxv1beta1.Sandbox) (Key, error) {
	return KeyFor(inputsFor(sb.Annotations, sb.Spec.PodTemplate))
}

// KeyForTemplate derives the key a SandboxTemplate provisions.
func KeyForTemplate(t *extv1beta1.SandboxTemplate) (Key, error) {
	return KeyFor(inputsFor(t.Annotations, t.Spec.PodTemplate))
}

// KeyForE2B derives the key of an e2b create: templateID is the template,
// allow_internet_access selects egress, size is small.
func KeyForE2B(templateID string, allowInternet bool) (Key, error) {
	net := sandbox.NetNone
	if allowInternet {
		net = sandbox.NetEgress
	}
	return KeyFor(Inputs{Image: templateID, Net: net})
}
