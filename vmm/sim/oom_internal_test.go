package sim

import "testing"

func TestParseOOMKill_ReadsTheOOMKillLineOfV1AndV2(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     uint64
		ok       bool
	}{
		{"v1 oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3, true},
		{"v1 none yet", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", 0, true},
		{"v2 memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n", 2, true},
		{"v2 oom is not oom_kill", "low 0\nhigh 0\nmax 12\noom 5\noom_kill 1\n", 1, true},
		{"v2 oom_group_kill is not oom_kill", "oom_group_kill 7\noom_kill 4\n", 4, true},
		{"large", "oom_kill 18446744073709551615\n", 1<<64 - 1, true},
		{"no trailing newline", "under_oom 1\noom_kill 9", 9, true},
		{"old v1 kernel: no counter", "oom_kill_disable 0\nunder_oom 0\n", 0, false},
		{"empty", "", 0, false},
		{"not a count", "oom_kill -1\n", 0, false},
		{"overflow", "oom_kill 18446744073709551616\n", 0, false},
		{"garbage", "oom_kill x\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, ok := parseOOMKill([]byte(tc.in))
			if n != tc.want || ok != tc.ok {
				t.Fatalf("parseOOMKill(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.want, tc.ok)
			}
		})
	}
}
