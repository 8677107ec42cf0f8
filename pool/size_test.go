package pool

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestShapes_OneTableForEveryClass: every size class Normalize accepts
// has a shape, "" is small's, an unknown class none, and Shapes hands out
// a copy the caller cannot change the table through.
func TestShapes_OneTableForEveryClass(t *testing.T) {
	for _, size := range sizes {
		if _, err := (Key{Template: "t", Size: size}).Normalize(); err != nil {
			t.Fatalf("class %q is not a key's: %v", size, err)
		}
		if s, ok := ShapeOf(size); !ok || s.VCPUs < 1 || s.MemoryMiB < 64 {
			t.Fatalf("ShapeOf(%q) = %+v, %v", size, s, ok)
		}
	}
	if s, _ := ShapeOf(""); s != shapes[sizes[0]] {
		t.Fatalf(`ShapeOf("") = %+v, want small's`, s)
	}
	if _, ok := ShapeOf("huge"); ok {
		t.Fatal("an unknown class has a shape")
	}
	m := Shapes()
	m[sizes[0]] = Shape{}
	if s, _ := ShapeOf(sizes[0]); s == (Shape{}) {
		t.Fatal("Shapes' map is the table itself")
	}
}

// TestSizeOf_TheSmallestClassWhoseShapeHoldsTheResources: a Sandbox's
// resources choose by the table — a class's own shape is that class, a
// milli-CPU or a MiB more the next.
func TestSizeOf_TheSmallestClassWhoseShapeHoldsTheResources(t *testing.T) {
	q := func(v int64, f resource.Format) *resource.Quantity { return resource.NewQuantity(v, f) }
	for i, size := range sizes {
		s := shapes[size]
		cpu, mem := q(int64(s.VCPUs), resource.DecimalSI), q(int64(s.MemoryMiB)<<20, resource.BinarySI)
		if got := sizeOf(cpu, mem); got != size {
			t.Errorf("%s's own shape is %s", size, got)
		}
		next := sizes[min(i+1, len(sizes)-1)]
		if got := sizeOf(resource.NewMilliQuantity(int64(s.VCPUs)*1000+1, resource.DecimalSI), nil); got != next {
			t.Errorf("a milli-CPU past %s is %s, want %s", size, got, next)
		}
		if got := sizeOf(nil, q(int64(s.MemoryMiB+1)<<20, resource.BinarySI)); got != next {
			t.Errorf("a MiB past %s is %s, want %s", size, got, next)
		}
	}
	if got := sizeOf(nil, nil); got != sizes[0] {
		t.Errorf("no resources is %s", got)
	}
}
