package node

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/hearthvm/hearth/vmm"
)

// --disk-size is a quantity, 10Gi by default, at least 16Mi.
func TestOptions_DiskSize(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int64
		bad  bool
	}{
		{args: nil, want: vmm.DefaultDiskBytes},
		{args: []string{"--disk-size", "64Mi"}, want: 64 << 20},
		{args: []string{"--disk-size=2G"}, want: 2_000_000_000},
		{args: []string{"--disk-size", "8Mi"}, bad: true},
		{args: []string{"--disk-size", "lots"}, bad: true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o := NewOptions()
			o.NodeName = "n"
			fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.AddFlags(fs)
			err := fs.Parse(tc.args)
			if err == nil {
				err = o.Validate()
			}
			if (err != nil) != tc.bad {
				t.Fatalf("err = %v, want failure %v", err, tc.bad)
			}
			if !tc.bad && o.DiskBytes() != tc.want {
				t.Fatalf("DiskBytes = %d, want %d", o.DiskBytes(), tc.want)
			}
			if tc.bad && err != nil && !strings.Contains(err.Error(), "disk-size") {
				t.Fatalf("the error does not name the flag: %v", err)
			}
		})
	}
}
