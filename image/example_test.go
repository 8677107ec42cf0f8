package image_test

import (
	"context"
	"fmt"
	"os"

	"github.com/hearthvm/hearth/image"
)

// A VM backend resolves its template's image and makes a disk of it with the
// in-guest agent and an init in it; the disk is shared, so it boots it with
// a copy-on-write layer of its own (e.g. a qcow2 overlay or -snapshot).
func ExampleStore_Ext4() {
	ctx := context.Background()
	s := &image.Store{Root: image.DefaultRoot(), Progress: os.Stderr}
	r, err := s.Resolve(ctx, image.DefaultRef)
	if err != nil {
		fmt.Println(err)
		return
	}
	disk, err := s.Ext4(ctx, r, 0,
		image.File{Path: "/usr/local/bin/sandbox-agent", Mode: 0o755, Source: "hack/guest/out/sandbox-agent"},
		image.File{Path: "/sbin/hearth-init", Mode: 0o755, Source: "hack/guest/init"},
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("boot", disk, "with root=/dev/vda init=/sbin/hearth-init")
}
