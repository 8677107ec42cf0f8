package apiserver

import "testing"

func TestHugeExponent(t *testing.T) {
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"limits":{"memory":"1e55555555309"}}`, true},
		{`{"limits":{"memory":"5E+1000"}}`, true},
		{`{"cpu":"-1.5e-1234"}`, true},
		{"limits:\n  memory: 1e55555555309\n", true},
		{`{"memory":[1e4444]}`, true},
		{`{"limits":{"memory":"4Gi","cpu":"500m"}}`, false},
		{`{"memory":"1e9"}`, false},
		{`{"memory":"1e999"}`, false},
		{`{"uid":"1e123456-aaaa-bbbb-cccc-123456789012"}`, false},
		{`{"name":"abc1e12345"}`, false},
		{`{"v":"1e12345x"}`, false},
	} {
		if got := hugeExponent.MatchString(c.body); got != c.want {
			t.Errorf("%s: matched %v, want %v", c.body, got, c.want)
		}
	}
}
