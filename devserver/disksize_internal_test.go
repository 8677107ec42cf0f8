package devserver

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/hearthvm/hearth/vmm"
)

// sandbox-dev --disk-size is a quantity (handed to every node's backend as
// backends.Options.DiskBytes), 10Gi by default, at least 16Mi.
func TestOptions_DiskSize(t *testing.T) {
	o := NewOptions()
	if o.DiskSize.Value() != vmm.DefaultDiskBytes {
		t.Fatalf("default disk size %d", o.DiskSize.Value())
	}
	fs := pflag.NewFlagSet("sandbox-dev", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--disk-size", "64Mi"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil || o.DiskSize.Value() != 64<<20 {
		t.Fatalf("--disk-size 64Mi: %d %v", o.DiskSize.Value(), err)
	}
	if err := fs.Parse([]string{"--disk-size", "1Mi"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err == nil {
		t.Fatal("--disk-size 1Mi validated")
	}
}
