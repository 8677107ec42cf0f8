package devserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateSecret_CreatesOnceThenReads(t *testing.T) {
	p := filepath.Join(t.TempDir(), "root-token")
	a, err := loadOrCreateSecret(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 48 {
		t.Fatalf("secret %q", a)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	b, err := loadOrCreateSecret(p)
	if err != nil || b != a {
		t.Fatalf("second read %q %v, want %q", b, err, a)
	}
	if err := os.WriteFile(p, []byte("# comment\n\n  mykey  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := loadOrCreateSecret(p); err != nil || c != "mykey" {
		t.Fatalf("user key: %q %v", c, err)
	}
	if err := os.WriteFile(p, []byte("# only a comment\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateSecret(p); err == nil {
		t.Fatal("a file without a secret was accepted")
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"defaults", func(*Options) {}, ""},
		{"no nodes", func(o *Options) { o.Nodes = 0 }, "--nodes"},
		{"bad port", func(o *Options) { o.SecurePort = 70000 }, "--secure-port"},
		{"bad address", func(o *Options) { o.BindAddress = "localhost" }, "--bind-address"},
		{"no data dir", func(o *Options) { o.DataDir = "" }, "--data-dir"},
		{"zero interval", func(o *Options) { o.WarmPoolSyncInterval = 0 }, "--warm-pool-sync-interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.mod(o)
			err := o.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want mention of %s", err, tc.want)
			}
		})
	}
}
