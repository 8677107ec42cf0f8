package sim

import (
	"strings"
	"testing"
)

func TestParseSmapsRollup(t *testing.T) {
	in := `55d0c0a00000-7ffd5b1f5000 ---p 00000000 00:00 0                  [rollup]
Rss:                7296 kB
Pss:                3021 kB
Shared_Clean:       4508 kB
Shared_Dirty:          0 kB
Private_Clean:       120 kB
Private_Dirty:      2668 kB
Referenced:         7296 kB
`
	m, ok := parseSmapsRollup(strings.NewReader(in))
	if !ok || m.rss != 7296<<10 || m.shared != 4508<<10 || m.private != (120+2668)<<10 {
		t.Fatalf("got %+v %v", m, ok)
	}
	if _, ok := parseSmapsRollup(strings.NewReader("garbage\n")); ok {
		t.Fatal("garbage parsed")
	}
}

func TestValidID(t *testing.T) {
	for id, ok := range map[string]bool{"vm-1": true, "sb_0123abcd": true, "a.b": true, "": false, ".": false, "..": false, "a/b": false, "-x": false} {
		if got := validID(id) == nil; got != ok {
			t.Errorf("validID(%q) = %v, want %v", id, got, ok)
		}
	}
}
