package sim

import "testing"

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:            "/a/b",
		`/a\040b`:         "/a b",
		`/a\011b\012c`:    "/a\tb\nc",
		`/a\134b`:         `/a\b`,
		`/a\9`:            `/a\9`,
		`/end\04`:         `/end\04`,
		`/x\0401\040y\04`: `/x 1 y\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
