package pool

import (
	"errors"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// FuzzKeyFor: key derivation from outside input (a Sandbox's image, net
// annotation and resource quantities) never panics, fails only with
// ErrInvalidKey, and yields a normalized key that keeps the image byte for
// byte.
var hugeExponent = regexp.MustCompile(`[eE][+-]?0*[0-9]{4,}`)

func FuzzKeyFor(f *testing.F) {
	f.Add("python:3.12", "", "", "")
	f.Add("img", "egress", "2", "4Gi")
	f.Add("img", "none", "500m", "16Gi")
	f.Add("", "bogus", "x", "1e309")
	f.Fuzz(func(t *testing.T, image, net, cpu, mem string) {
		// apimachinery's ParseQuantity itself does not return on a huge
		// exponent ("1e55555555309"); that is upstream's, not KeyFor's.
		if hugeExponent.MatchString(cpu) || hugeExponent.MatchString(mem) {
			t.Skip("quantity with a huge exponent")
		}
		in := Inputs{Image: image, Net: net}
		if q, err := resource.ParseQuantity(cpu); err == nil {
			in.CPU = &q
		}
		if q, err := resource.ParseQuantity(mem); err == nil {
			in.Memory = &q
		}
		k, err := KeyFor(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("error %v does not wrap ErrInvalidKey", err)
			}
			return
		}
		if k.Template != image {
			t.Fatalf("template %q, image %q", k.Template, image)
		}
		again, err := k.Normalize()
		if err != nil || again != k {
			t.Fatalf("KeyFor's key %+v is not normalized: %+v %v", k, again, err)
		}
	})
}

// FuzzNormalize: any key either normalizes to a fixed point or wraps
// ErrInvalidKey.
func FuzzNormalize(f *testing.F) {
	f.Add("img", "", "")
	f.Add("img", "egress", "large")
	f.Add("img", "EGRESS", "huge")
	f.Fuzz(func(t *testing.T, template, net, size string) {
		k, err := Key{Template: template, Net: net, Size: size}.Normalize()
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("error %v does not wrap ErrInvalidKey", err)
			}
			return
		}
		if again, err := k.Normalize(); err != nil || again != k {
			t.Fatalf("not a fixed point: %+v → %+v %v", k, again, err)
		}
	})
}
