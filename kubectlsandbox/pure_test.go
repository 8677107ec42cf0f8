package kubectlsandbox

import (
	"os/exec"
	"strings"
	"testing"
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
