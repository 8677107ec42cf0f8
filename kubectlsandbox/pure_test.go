package kubectlsandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

func TestRouterURL_TokenNeverInTheClearOffLoopback(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string // "" = refused
	}{
		{"https://router.example.com", "https://router.example.com"},
		{"https://router.example.com:8443/", "https://router.example.com:8443"},
		{"http://127.0.0.1:3000", "http://127.0.0.1:3000"},
		{"http://localhost:3000", "http://localhost:3000"},
		{"http://[::1]:3000", "http://[::1]:3000"},
		{"http://10.0.0.5:3000", ""},
		{"http://router.example.com", ""},
		{"http://127.0.0.1.example.com", ""},
		{"ftp://127.0.0.1", ""},
		{"https://router.example.com/prefix", ""},
		{"https://user:pw@router.example.com", ""},
		{"https://router.example.com?x=1", ""},
		{"router.example.com", ""},
		{"", ""},
	} {
		u, err := routerURL(tc.raw)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q: accepted as %s, want refused", tc.raw, u)
		case tc.want != "" && err != nil:
			t.Errorf("%q: %v", tc.raw, err)
		case tc.want != "" && u.String() != tc.want:
			t.Errorf("%q: %s, want %s", tc.raw, u, tc.want)
		}
	}
}

// The words reach the program as given, whatever they hold: sh -c of the
// quoted words prints each one back.
func TestQuote_WordsReachTheProgramUnchanged(t *testing.T) {
	words := []string{"a b", "it's", `"dq"`, "$HOME", "`id`", "$(id)", "x;y", "a\nb", "", `\`, "*", "'"}
	out, err := exec.Command("sh", "-c", quote(append([]string{"printf", `%s\0`}, words...))).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if strings.Join(got, "|") != strings.Join(words, "|") || len(got) != len(words) {
		t.Fatalf("got %q, want %q", got, words)
	}
}

func TestParseRemote_OnlyASandboxNameBeforeTheColon(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		ok   bool
		want remote
	}{
		{"demo:/tmp/x", true, remote{name: "demo", path: "/tmp/x"}},
		{"demo:notes.txt", true, remote{name: "demo", path: "notes.txt"}},
		{"demo:", true, remote{name: "demo"}},
		{"team-a/demo:a:b", true, remote{namespace: "team-a", name: "demo", path: "a:b"}},
		{"./demo:x", false, remote{}},
		{"/tmp/x", false, remote{}},
		{"notes.txt", false, remote{}},
		{"C:", false, remote{}},
		{":x", false, remote{}},
		{"Team/demo:x", false, remote{}},
		{"a/b/c:x", false, remote{}},
		{"-", false, remote{}},
	} {
		got, ok := parseRemote(tc.arg)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%q: %+v %v, want %+v %v", tc.arg, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParsePorts(t *testing.T) {
	for _, tc := range []struct {
		arg           string
		local, remote int
		ok            bool
	}{
		{"8000", 8000, 8000, true},
		{"9000:8000", 9000, 8000, true},
		{":8000", 0, 8000, true},
		{"0:8000", 0, 8000, true},
		{"8000:0", 0, 0, false},
		{"70000", 0, 0, false},
		{"x", 0, 0, false},
		{"9000:", 0, 0, false},
		{"-1:80", 0, 0, false},
	} {
		l, r, err := parsePorts(tc.arg)
		if (err == nil) != tc.ok || l != tc.local || r != tc.remote {
			t.Errorf("%q: %d %d %v, want %d %d ok=%v", tc.arg, l, r, err, tc.local, tc.remote, tc.ok)
		}
	}
}

// The krew manifest installs kubectl-sandbox on the four platforms the
// release builds.
func TestKrewManifest_FourPlatformsOfTheBinary(t *testing.T) {
	b, err := os.ReadFile("../deploy/krew/sandbox.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion, Kind string
		Metadata         struct{ Name string }
		Spec             struct {
			Version, ShortDescription string
			Platforms                 []struct {
				Selector         struct{ MatchLabels map[string]string } `json:"selector"`
				URI, SHA256, Bin string
			}
		}
	}
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "sandbox" || m.Spec.ShortDescription == "" {
		t.Fatalf("manifest: %+v", m)
	}
	seen := map[string]bool{}
	for _, p := range m.Spec.Platforms {
		goos, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		seen[goos+"/"+arch] = true
		if p.Bin != "kubectl-sandbox" || len(p.SHA256) != 64 || !strings.HasSuffix(p.URI, "kubectl-sandbox_"+goos+"_"+arch+".tar.gz") {
			t.Errorf("platform %s/%s: %+v", goos, arch, p)
		}
	}
	for _, want := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		if !seen[want] {
			t.Errorf("no platform %s", want)
		}
	}
}

// A router answer is a remote party's (the agent runs in the guest): a
// redirect is not followed — the credential would go with it to wherever
// it points — and an error's text cannot drive the terminal.
func TestRouter_NoRedirectCarriesTheTokenAndNoEscapeReachesTheTerminal(t *testing.T) {
	got := make(chan string, 1)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
	}))
	defer elsewhere.Close()
	router := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/download/") {
			http.Redirect(w, r, elsewhere.URL+"/steal", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"message":"file not found: \u001b]0;owned\u0007\u001b[2J"}`)
	}))
	defer router.Close()
	base, err := routerURL(router.URL)
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRouter(base, &rest.Config{BearerToken: "secret-token"}, "default", "demo")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = r.download(context.Background(), "x", &out)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusFound {
		t.Errorf("download answered by a redirect: %v, want the 302 as an error", err)
	}
	select {
	case a := <-got:
		t.Fatalf("the redirect was followed, with Authorization %q", a)
	default:
	}
	_, err = r.execute(context.Background(), "id")
	if !errors.As(err, &se) || se.Code != http.StatusNotFound || strings.ContainsAny(se.Error(), "\x1b\x07") {
		t.Errorf("error %q: want a 404 without control characters", err)
	}
}
