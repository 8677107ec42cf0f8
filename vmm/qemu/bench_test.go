package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
)

// BenchmarkQEMU measures the real guest per accelerator: cold boot to agent
// answer, snapshot, clone from a checkpoint to agent answer (with per-clone
// RSS split into private and shared, and PSS), and resume. KVM runs only
// where a guest boots under it (not on PVM hosts with a stock kernel).
// HEARTH_QEMU_DISK picks the root disk (default: the busybox test disk),
// HEARTH_QEMU_NET the lane (default none):
//
//	go test -run XXX -bench QEMU -benchtime 3x ./vmm/qemu
//	HEARTH_QEMU_DISK=/path/debian.ext4 HEARTH_QEMU_NET=egress \
//	    go test -run XXX -bench QEMU/tcg -benchtime 3x ./vmm/qemu
func BenchmarkQEMU(b *testing.B) {
	for _, accel := range []string{AccelTCG, AccelKVM} {
		b.Run(accel, func(b *testing.B) {
			d := guestDriver(b, accel)
			d.o.BootTimeout = 3 * time.Minute
			ctx := context.Background()
			if accel == AccelKVM {
				d.o.BootTimeout = 15 * time.Second
				h, err := d.Boot(ctx, vmm.Spec{ID: "kvm-probe", Size: "small", Token: "t"})
				if err != nil {
					b.Skipf("kvm: guest does not boot under KVM here: %v", err)
				}
				_ = d.Destroy(ctx, h)
			}
			lane := os.Getenv("HEARTH_QEMU_NET")
			seq := 0
			next := func(p string) string { seq++; return fmt.Sprintf("%s-%d", p, seq) }

			b.Run("ColdBoot", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					h, err := d.Boot(ctx, vmm.Spec{ID: next("boot"), Net: lane, Size: "small", Token: "t"})
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					_ = d.Destroy(ctx, h)
					b.StartTimer()
				}
			})

			golden, err := d.Boot(ctx, vmm.Spec{ID: "golden", Net: lane, Size: "small", Token: "golden"})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Destroy(ctx, golden)
			snapRoot := b.TempDir()
			var snap string
			b.Run("Snapshot", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					snap = filepath.Join(snapRoot, next("ckpt"))
					if err := d.Snapshot(ctx, golden, snap); err != nil {
						b.Fatal(err)
					}
				}
			})

			b.Run("Clone", func(b *testing.B) {
				var clones []vmm.Handle
				defer func() {
					for _, c := range clones {
						_ = d.Destroy(ctx, c)
					}
				}()
				for i := 0; i < b.N; i++ {
					c, err := d.Clone(ctx, snap, vmm.Spec{ID: next("clone"), Net: lane, Token: next("tok")})
					if err != nil {
						b.Fatal(err)
					}
					clones = append(clones, c)
				}
				b.StopTimer()
				var rss, priv, shared, pss float64
				for _, c := range clones {
					st, err := d.Stats(ctx, c)
					if err != nil {
						b.Fatal(err)
					}
					rss += float64(st.RSSBytes)
					priv += float64(st.PrivateBytes)
					shared += float64(st.SharedBytes)
					pss += float64(st.MemUsedBytes)
				}
				n := float64(len(clones)) * (1 << 20)
				b.ReportMetric(rss/n, "rss-MiB/clone")
				b.ReportMetric(priv/n, "private-MiB/clone")
				b.ReportMetric(shared/n, "shared-MiB/clone")
				b.ReportMetric(pss/n, "pss-MiB/clone")
			})

			b.Run("Resume", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					h, err := d.Pause(ctx, golden)
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if golden, err = d.Resume(ctx, h); err != nil {
						b.Fatal(err)
					}
					if err := d.waitAgent(ctx, golden.Addr, golden.PID, filepath.Join(golden.Dir, "qmp.sock")); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
