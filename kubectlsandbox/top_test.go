package kubectlsandbox

import (
	"bytes"
	"testing"

	"github.com/hearthvm/hearth/sandbox"
)

// TestTop_TableShowsPausedAndUnmeasuredAsSuch: top's table is one row per
// sandbox, memory and disk as used/limit in Mi; a paused sandbox says so
// and what its node did not measure is "-", never a 0.
func TestTop_TableShowsPausedAndUnmeasuredAsSuch(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	running := sandbox.SandboxStats{CPUCount: 2, CPUUsageCoreNanoSeconds: i64(1_523_000_000), CPUUsageNanoCores: i64(250_000_000),
		MemoryLimitBytes: 512 << 20, MemoryUsedBytes: i64(120<<20 + 5), DiskLimitBytes: i64(1 << 30), DiskUsedBytes: i64(30 << 20)}
	running.Name = "demo"
	paused := sandbox.SandboxStats{Paused: true, MemoryLimitBytes: 512 << 20}
	paused.Name = "sleepy"
	var b bytes.Buffer
	if err := writeTop(&b, []sandbox.SandboxStats{running, paused}); err != nil {
		t.Fatal(err)
	}
	want := "NAME     STATUS    CPUS   CPU    MEMORY        DISK\n" +
		"demo     Running   2      250m   120Mi/512Mi   30Mi/1024Mi\n" +
		"sleepy   Paused    0      -      -/512Mi       -\n"
	if b.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestMillicores_AsKubectlTopPrintsCores: a rate in nanocores is
// kubectl top's millicores, rounded up; none is "-".
func TestMillicores_AsKubectlTopPrintsCores(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		in   *int64
		want string
	}{
		{nil, "-"},
		{i64(0), "0m"},
		{i64(1), "1m"},
		{i64(250_000_000), "250m"},
		{i64(250_000_001), "251m"},
		{i64(2_000_000_000), "2000m"},
	} {
		if got := millicores(tc.in); got != tc.want {
			t.Errorf("millicores(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
