// Command sandbox-image fills and inspects the node's guest image cache
// (package image):
//
//	sandbox-image [--cache DIR] build          build the built-in image (if its recipe changed)
//	sandbox-image [--cache DIR] resolve REF    pull or look up REF
//	sandbox-image [--cache DIR] import PATH    import an OCI layout dir or docker-save tarball
//
// Each prints the rootfs directory on stdout, progress on stderr.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/hearthvm/hearth/image"
)

func main() {
	cache := pflag.String("cache", image.DefaultRoot(), "image cache directory ($HEARTH_IMAGE_CACHE)")
	pflag.Parse()
	args := pflag.Args()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s := &image.Store{Root: *cache, Progress: os.Stderr}

	var r image.Rootfs
	var err error
	switch {
	case len(args) == 1 && args[0] == "build":
		r, err = s.BuildDefault(ctx, os.Stderr)
	case len(args) == 2 && args[0] == "resolve":
		r, err = s.Resolve(ctx, args[1])
	case len(args) == 2 && args[0] == "import":
		r, err = s.Import(ctx, args[1])
	default:
		fmt.Fprintln(os.Stderr, "usage: sandbox-image [--cache DIR] build | resolve REF | import PATH")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-image:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "sandbox-image: %s %s (%s)\n", r.Ref, r.Digest, r.OSRelease)
	fmt.Println(r.Dir)
}
