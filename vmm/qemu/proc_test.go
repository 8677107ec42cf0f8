package qemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const smapsSample = `55d4c0a00000-7ffd1c1f2000 ---p 00000000 00:00 0                          [rollup]
Rss:              104448 kB
Pss:               80000 kB
Pss_Anon:          50000 kB
Shared_Clean:      40000 kB
Shared_Dirty:       6000 kB
Private_Clean:      1448 kB
Private_Dirty:     57000 kB
Referenced:       104448 kB
Anonymous:         58000 kB
`

func TestParseSmapsRollup(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Smaps
		wantErr bool
	}{
		{"sample", smapsSample, Smaps{RSS: 104448 << 10, PSS: 80000 << 10, Private: (1448 + 57000) << 10, Shared: (40000 + 6000) << 10}, false},
		{"no rss", "Pss: 1 kB\n", Smaps{}, true},
		{"empty", "", Smaps{}, true},
		{"junk values skipped", "Rss: 8 kB\nPss: x kB\nShared_Clean:\n", Smaps{RSS: 8 << 10}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSmapsRollup([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v (err %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseProcStat(t *testing.T) {
	tail := " 1 1 1 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 3 0 100 1000 10 18446744073709551615"
	tests := []struct {
		name    string
		in      string
		want    ProcStat
		wantErr bool
	}{
		{"plain", "42 (qemu-system-x86) S" + tail, ProcStat{State: 'S', UTime: 1234, STime: 567}, false},
		{"comm with spaces and parens", "42 (a) b (c)) R" + tail, ProcStat{State: 'R', UTime: 1234, STime: 567}, false},
		{"zombie", "42 (q) Z" + tail, ProcStat{State: 'Z', UTime: 1234, STime: 567}, false},
		{"no comm", "42 q S 1 2", ProcStat{}, true},
		{"short", "42 (q) S 1 2 3", ProcStat{}, true},
		{"bad times", "42 (q) S 1 1 1 0 -1 0 0 0 0 0 x y", ProcStat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcStat([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v (err %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseProcStat_Self(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip(err)
	}
	st, err := ParseProcStat(b)
	if err != nil || st.State == 0 || st.State == 'Z' {
		t.Fatalf("own stat: %+v %v", st, err)
	}
	if pidAlive(os.Getpid(), "no-such-marker-in-cmdline") {
		t.Fatal("pidAlive ignored the cmdline marker")
	}
	if !pidAlive(os.Getpid(), filepath.Base(os.Args[0])) {
		t.Fatal("pidAlive(self) = false")
	}
}

func FuzzParseSmapsRollup(f *testing.F) {
	addSeeds(f, "smaps")
	f.Add([]byte(smapsSample))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSmapsRollup(b)
		if err == nil && !strings.Contains(string(b), "Rss") {
			t.Fatalf("parsed %+v without an Rss line", s)
		}
	})
}

func FuzzParseProcStat(f *testing.F) {
	addSeeds(f, "stat")
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseProcStat(b)
		if err == nil && st.State == 0 {
			t.Fatalf("parsed %+v with no state", st)
		}
	})
}

func FuzzParseConfig(f *testing.F) {
	addSeeds(f, "config")
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		for k, g := range c.Templates {
			if g.Kernel == "" || g.Initrd == "" || g.Cmdline == "" {
				t.Fatalf("template %q accepted incomplete: %+v", k, g)
			}
		}
	})
}

// addSeeds adds testdata/<kind>/* to f's corpus.
func addSeeds(f *testing.F, kind string) {
	ents, _ := os.ReadDir(filepath.Join("testdata", kind))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("testdata", kind, e.Name()))
		if err == nil {
			f.Add(b)
		}
	}
}
