package sim_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/hearthvm/hearth/vmm"
)

// TestBoot_EnvValuesKeepCommasEqualsNewlinesAndQuotes: a VM's environment
// reaches every guest process exactly — values holding commas, '=',
// newlines, quotes and nothing at all are neither split, refused nor
// changed — at boot and again after a stop and restore, and no value shows
// on a host command line.
func TestBoot_EnvValuesKeepCommasEqualsNewlinesAndQuotes(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, t.TempDir())
	env := map[string]string{
		"COMMA":   "a,b,,c,",
		"EQUALS":  "x=y==z",
		"PAIRS":   "A=1,B=2",
		"LINES":   "line 1\nline 2\r\n",
		"QUOTES":  `he said "hi" and 'bye' \ $HOME`,
		"EMPTY":   "",
		"UNICODE": "héllo wörld ✓",
	}
	h, err := d.Boot(ctx, vmm.Spec{ID: "vm-env", Token: "tok-env", Env: env})
	if err != nil {
		t.Fatalf("boot with env %q: %v", env, err)
	}
	defer d.Destroy(ctx, h)
	check := func(when string) {
		t.Helper()
		for k, want := range env {
			// The value, framed so that trailing newlines count.
			r := run(t, h, `printf '[%s]' "${`+k+`-unset}"`)
			if r.exit != 0 || r.stdout != "["+want+"]" {
				t.Errorf("%s: $%s = %s, want %q", when, k, r, want)
			}
		}
		for _, p := range cgroupProcs(t, h) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
			if strings.Contains(string(b), "he said") || strings.Contains(string(b), "a,b,,c,") {
				t.Errorf("%s: process %d shows an env value on its command line: %q", when, p, b)
			}
		}
	}
	check("at boot")
	if h, err = d.Stop(ctx, h); err != nil {
		t.Fatal(err)
	}
	if h, err = d.Restore(ctx, h); err != nil {
		t.Fatal(err)
	}
	if h.Paused {
		if h, err = d.Resume(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	check("after stop and restore")
}
