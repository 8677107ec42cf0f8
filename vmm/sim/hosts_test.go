package sim

import "testing"

func TestHostsNames(t *testing.T) {
	for _, c := range []struct {
		hosts string
		want  bool
	}{
		{"127.0.0.1 localhost\n127.0.1.1 sandbox\n", true},
		{"127.0.1.1\tSandbox.local sandbox\n", true},
		{"127.0.0.1 localhost\n127.0.1.1\thearth\n", false},
		{"# 127.0.1.1 sandbox\n", false},
		{"127.0.1.1 other # sandbox\n", false},
		{"sandbox\n", false}, // an address, not a name
		{"", false},
	} {
		if got := hostsNames([]byte(c.hosts), "sandbox"); got != c.want {
			t.Errorf("hostsNames(%q) = %v", c.hosts, got)
		}
	}
}

func TestHostsWith(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n",
		" \n":                      "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n",
		"127.0.0.1 localhost":      "127.0.0.1 localhost\n127.0.1.1\tsandbox\n",
		"127.0.0.1 localhost\n":    "127.0.0.1 localhost\n127.0.1.1\tsandbox\n",
		"10.0.0.1 db\n# comment\n": "10.0.0.1 db\n# comment\n127.0.1.1\tsandbox\n",
	} {
		got := string(hostsWith([]byte(in), "sandbox"))
		if got != want {
			t.Errorf("hostsWith(%q) = %q, want %q", in, got, want)
		}
		if !hostsNames([]byte(got), "sandbox") {
			t.Errorf("hostsWith(%q) does not name the host", in)
		}
	}
}
