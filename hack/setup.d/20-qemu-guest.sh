#!/usr/bin/env bash
# Installs QEMU (microvm, TCG/KVM) and builds the Hearth QEMU guest under
# hack/guest/out/ (gitignored): a Debian 6.1 cloud kernel (vmlinuz), its
# virtio modules, and an initramfs (initrd.cpio.gz) holding busybox and the
# static sandbox-agent. Idempotent: the kernel is fetched once; the initramfs
# is rebuilt only when its inputs changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=hack/guest/out
mkdir -p "$OUT"

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
# The guest needs a static busybox (the dynamic "busybox" package won't do).
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
    apt-get update >/dev/null
    apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

if [ ! -s "$OUT/vmlinuz" ] || [ ! -d "$OUT/modules" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-cloud-amd64$' | awk '{print $1}' | sort -V | tail -1)
  if [ -z "$pkg" ]; then
    apt-get update >/dev/null
    pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-cloud-amd64$' | awk '{print $1}' | sort -V | tail -1)
  fi
  [ -n "$pkg" ] || { echo "20-qemu-guest: no linux-image-6.1.0-*-cloud-amd64 package" >&2; exit 1; }
  (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1 && dpkg -x ./*.deb x)
  kdir=$(ls -d "$tmp"/x/lib/modules/*)
  rm -rf "$OUT/modules" && mkdir -p "$OUT/modules"
  for m in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_mmio \
    net/core/failover drivers/net/net_failover drivers/net/virtio_net \
    drivers/char/hw_random/virtio-rng; do
    cp "$kdir/kernel/$m.ko" "$OUT/modules/"
  done
  cp "$tmp"/x/boot/vmlinuz-* "$OUT/vmlinuz"
  echo "$pkg" > "$OUT/kernel-package"
fi

CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$OUT/sandbox-agent" ./cmd/sandbox-agent
go run ./hack/guest/mkinitramfs -o "$OUT/initrd.cpio.gz.new" -init hack/guest/init -bash hack/guest/bash \
  -busybox /bin/busybox -agent "$OUT/sandbox-agent" -modules "$OUT/modules"
if [ -f "$OUT/initrd.cpio.gz" ] && cmp -s "$OUT/initrd.cpio.gz.new" "$OUT/initrd.cpio.gz"; then
  rm -f "$OUT/initrd.cpio.gz.new"
else
  mv "$OUT/initrd.cpio.gz.new" "$OUT/initrd.cpio.gz"
fi
echo "20-qemu-guest: $(cat "$OUT/kernel-package"), $OUT/vmlinuz + $OUT/initrd.cpio.gz"
