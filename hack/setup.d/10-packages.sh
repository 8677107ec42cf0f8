#!/usr/bin/env bash
# Installs the Debian packages Hearth's backends and guest images need
# (idempotent: installs only what is missing, runs apt-get update at most once):
#   mmdebstrap        builds the built-in guest rootfs (hack/guest/build-rootfs.sh)
#   e2fsprogs         mke2fs -d turns a rootfs into an ext4 disk (image.Store.Ext4)
#   bubblewrap crun uidmap   namespace confinement for the sim backend
#   passt slirp4netns        user-mode networking for sandboxes
#   busybox-static qemu-system-x86   the QEMU backend and its guest
#   python3-matplotlib       the code interpreter's figure tests run the driver on the host
#   prometheus               deploy/monitoring_test.go runs the chart's dashboard and alert
#                            queries through it (its own instance; the package's service is not used)
set -euo pipefail
pkgs=(mmdebstrap e2fsprogs bubblewrap crun passt slirp4netns busybox-static qemu-system-x86 uidmap python3-matplotlib prometheus)
need=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && { echo "10-packages: all present"; exit 0; }
export DEBIAN_FRONTEND=noninteractive
echo "10-packages: installing ${need[*]}"
if ! apt-get install -y --no-install-recommends "${need[@]}" >/tmp/hearth-apt.log 2>&1; then
  apt-get update >/dev/null
  # Install one by one after the update, so a package this release lacks
  # does not keep the others out.
  for p in "${need[@]}"; do
    apt-get install -y --no-install-recommends "$p" >>/tmp/hearth-apt.log 2>&1 \
      || echo "10-packages: $p is not installable here (see /tmp/hearth-apt.log)" >&2
  done
fi
