#!/usr/bin/env bash
# Installs QEMU (microvm, TCG/KVM), qemu-img and mke2fs, and builds the Hearth
# QEMU guest under hack/guest/out/ (gitignored): a Debian 6.1 cloud kernel
# (vmlinuz), the modules it needs (virtio, virtio_blk, qemu_fw_cfg), an
# initramfs (initrd.cpio.gz) holding busybox, the static sandbox-agent and
# the init scripts, and a small test root disk (busybox.ext4: busybox, a
# /bin/bash wrapper, accounts root and user). Idempotent: the kernel is
# fetched once; the initramfs and disk are rebuilt only when inputs changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=hack/guest/out
mkdir -p "$OUT"

need=()
command -v passt >/dev/null || need+=(passt)
command -v nft >/dev/null || need+=(nftables)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v qemu-img >/dev/null || need+=(qemu-utils)
command -v mke2fs >/dev/null || need+=(e2fsprogs)
# The guest needs a static busybox (the dynamic "busybox" package won't do).
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
    apt-get update >/dev/null
    apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

MODS="drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_mmio
  net/core/failover drivers/net/net_failover drivers/net/virtio_net
  drivers/char/hw_random/virtio-rng drivers/block/virtio_blk drivers/firmware/qemu_fw_cfg"
have_mods=1
for m in $MODS; do [ -f "$OUT/modules/$(basename "$m").ko" ] || have_mods=0; done
if [ ! -s "$OUT/vmlinuz" ] || [ "$have_mods" = 0 ]; then
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
  for m in $MODS; do
    cp "$kdir/kernel/$m.ko" "$OUT/modules/"
  done
  cp "$tmp"/x/boot/vmlinuz-* "$OUT/vmlinuz"
  echo "$pkg" > "$OUT/kernel-package"
fi

CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$OUT/sandbox-agent" ./cmd/sandbox-agent
go run ./hack/guest/mkinitramfs -o "$OUT/initrd.cpio.gz.new" -init hack/guest/init -stage2 hack/guest/stage2 -bash hack/guest/bash \
  -busybox /bin/busybox -agent "$OUT/sandbox-agent" -modules "$OUT/modules"
if [ -f "$OUT/initrd.cpio.gz" ] && cmp -s "$OUT/initrd.cpio.gz.new" "$OUT/initrd.cpio.gz"; then
  rm -f "$OUT/initrd.cpio.gz.new"
else
  mv "$OUT/initrd.cpio.gz.new" "$OUT/initrd.cpio.gz"
fi

# The test root disk: what a template's rootfs looks like to the guest, with
# nothing but busybox. hack/setup.d/15-guest-image.sh (package image) builds
# the real Debian one.
stamp=$(cat /bin/busybox hack/guest/bash "$0" | sha256sum | cut -c1-16)
if [ ! -s "$OUT/busybox.ext4" ] || [ "$(cat "$OUT/busybox.ext4.stamp" 2>/dev/null)" != "$stamp" ]; then
  rt=$(mktemp -d)
  mkdir -p "$rt"/{bin,sbin,usr/bin,usr/sbin,etc,root,home/user,tmp,proc,sys,dev,run}
  cp /bin/busybox "$rt/bin/busybox"
  for a in $(/bin/busybox --list); do
    [ -e "$rt/bin/$a" ] || ln -s busybox "$rt/bin/$a"
  done
  rm -f "$rt/bin/bash" && install -m 0755 hack/guest/bash "$rt/bin/bash"
  printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' > "$rt/etc/passwd"
  printf 'root:x:0:\nuser:x:1000:\n' > "$rt/etc/group"
  printf 'NAME="Hearth busybox test disk"\nID=busybox\n' > "$rt/etc/os-release"
  chmod 1777 "$rt/tmp"; chmod 0700 "$rt/root"
  chown -R 1000:1000 "$rt/home/user"
  rm -f "$OUT/busybox.ext4.new"
  mke2fs -q -F -t ext4 -L hearth -E root_owner=0:0 -d "$rt" "$OUT/busybox.ext4.new" 64M
  rm -rf "$rt"
  mv "$OUT/busybox.ext4.new" "$OUT/busybox.ext4"
  echo "$stamp" > "$OUT/busybox.ext4.stamp"
fi
echo "20-qemu-guest: $(cat "$OUT/kernel-package"), $OUT/vmlinuz + $OUT/initrd.cpio.gz + $OUT/busybox.ext4"
