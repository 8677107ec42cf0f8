package image

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkUnpackTar unpacks a layer of 1000 small files in 50 directories.
func BenchmarkUnpackTar(b *testing.B) {
	t := &testing.T{}
	var ents []ent
	for d := 0; d < 50; d++ {
		for f := 0; f < 20; f++ {
			ents = append(ents, ent{name: fmt.Sprintf("usr/share/d%d/f%d", d, f), body: strings.Repeat("x", 512)})
		}
	}
	layer := tarBytes(t, ents...)
	b.SetBytes(int64(len(layer)))
	for b.Loop() {
		if err := unpackTar(context.Background(), b.TempDir(), bytes.NewReader(layer)); err != nil {
			b.Fatal(err)
		}
	}
}
