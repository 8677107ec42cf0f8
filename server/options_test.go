package server

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
)

func TestOptions_FlagsCompleteValidate(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(tok, []byte("  s3cret\n"), 0o600)
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	cases := []struct {
		name    string
		args    []string
		wantErr string
		check   func(*Options) string
	}{
		{name: "defaults", check: func(o *Options) string {
			if o.SecureServing.BindPort != 6443 {
				return "unexpected defaults"
			}
			return ""
		}},
		{name: "token file trimmed", args: []string{"--sandboxd-token-file", tok}, check: func(o *Options) string {
			if o.SandboxdToken != "s3cret" {
				return "token " + o.SandboxdToken
			}
			return ""
		}},
		// Deprecated and ignored (earlier Helm charts pass it): accepted.
		{name: "deprecated watch interval", args: []string{"--watch-interval", "0s"}, check: func(*Options) string { return "" }},
		{name: "empty token file", args: []string{"--sandboxd-token-file", empty}, wantErr: "is empty"},
		{name: "missing token file", args: []string{"--sandboxd-token-file", filepath.Join(dir, "nope")}, wantErr: "no such file"},
		{name: "e2b without keys", args: []string{"--enable-e2b-api"}, wantErr: "e2b"},
		{name: "e2b anonymous", args: []string{"--enable-e2b-api", "--e2b-allow-anonymous"}, check: func(o *Options) string {
			if !o.EnableE2B || !o.E2B.AllowAnonymous {
				return "e2b flags not applied"
			}
			return ""
		}},
		{name: "warm-pool driver on by default", check: func(o *Options) string {
			if !o.WarmPool.Enabled {
				return "driver disabled by default"
			}
			return ""
		}},
		{name: "warm-pool interval", args: []string{"--warm-pool-sync-interval", "0s"}, wantErr: "--warm-pool-sync-interval"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			err := o.Complete()
			if err == nil {
				err = o.Validate()
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := c.check(o); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}

// Anonymous, always-allow serving is for loopback only: any other bind
// address is refused unless an authenticator and authorizer are set.
func TestStandaloneOptions_AnonymousOnlyOnLoopback(t *testing.T) {
	o := NewStandaloneOptions()
	o.SecureServing.BindAddress = net.ParseIP("0.0.0.0")
	if err := o.validateAnonymous(); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("0.0.0.0 anonymous: %v", err)
	}
	if _, err := o.Config(); err == nil {
		t.Fatal("Config served anonymously on 0.0.0.0")
	}
	o.Authenticator = bearertoken.New(tokenfile.New(map[string]*user.DefaultInfo{"t": {Name: "u"}}))
	if err := o.validateAnonymous(); err == nil {
		t.Fatal("an authenticator without an authorizer is still always-allow")
	}
	o.Authorizer = authorizerfactory.NewAlwaysDenyAuthorizer()
	if err := o.validateAnonymous(); err != nil {
		t.Fatalf("with auth: %v", err)
	}
	o = NewStandaloneOptions()
	o.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	if err := o.validateAnonymous(); err != nil {
		t.Fatalf("loopback anonymous: %v", err)
	}
}
