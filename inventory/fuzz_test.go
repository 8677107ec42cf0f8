package inventory

import (
	"encoding/json"
	"testing"
)

// FuzzView decodes arbitrary JSON as two node inventories and checks that
// views build and resolve every entry by name and claim id without
// panicking.
func FuzzView(f *testing.F) {
	f.Add([]byte(`{"node":"n1","address":"a:1","entries":[{"name":"ns/a","id":"sb_1","phase":"Running"},{"name":"ns/a","id":"sb_2"}]}`),
		[]byte(`{"node":"n2","entries":[{"name":"b","id":"sb_1","phase":"Paused","deadline":"2026-01-01T00:00:00Z"}]}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var x, y NodeInventory
		if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
			return
		}
		v2 := NewView([]*NodeInventory{&x, &y})
		for i := 0; i < v2.Len(); i++ {
			it := v2.At(i)
			if _, ok := v2.ByName(it.Entry.Name); !ok {
				t.Fatalf("entry %q not resolvable by name", it.Entry.Name)
			}
			if it.Entry.ID != "" {
				if _, ok := v2.ByID(it.Entry.ID); !ok {
					t.Fatalf("entry id %q not resolvable", it.Entry.ID)
				}
			}
		}
	})
}
