#!/bin/sh
# build-rootfs.sh SUITE PACKAGE... — writes a Debian SUITE root filesystem as
# a tar stream on stdout, progress on stderr. It is the recipe of Hearth's
# built-in guest image (image.BuildDefault embeds and runs it; its text and the
# package list are hashed into the cache directory name, so editing either
# makes the next BuildDefault rebuild).
#
# The result follows e2b's base template: a `user` account (uid/gid 1000,
# home /home/user, bash, passwordless sudo through /etc/sudoers.d/user), so
# e2b SDK defaults (user "user", cwd /home/user) work. pip may install into
# the system Python (/etc/pip.conf break-system-packages), as sandboxes
# expect. Documentation, man pages and locales are left out, and so are
# Recommends: the packages named and their dependencies, nothing more
# (python3-matplotlib's Recommends alone would add about 1 GB: tk, scipy, a
# compiler, boost headers).
set -eu
[ $# -ge 2 ] || { echo "usage: $0 SUITE PACKAGE..." >&2; exit 2; }
suite=$1
shift
pkgs=$(printf '%s,' "$@")
pkgs=${pkgs%,}

exec mmdebstrap --variant=minbase --format=tar --include="$pkgs" \
	--aptopt='APT::Install-Recommends "false"' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-include=/usr/share/locale/locale.alias' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--customize-hook='chroot "$1" groupadd --gid 1000 user' \
	--customize-hook='chroot "$1" useradd --uid 1000 --gid 1000 --create-home --home-dir /home/user --shell /bin/bash user' \
	--customize-hook='printf "user ALL=(ALL:ALL) NOPASSWD: ALL\n" > "$1/etc/sudoers.d/user" && chmod 0440 "$1/etc/sudoers.d/user"' \
	--customize-hook='echo sandbox > "$1/etc/hostname"' \
	--customize-hook='printf "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n" > "$1/etc/hosts"' \
	--customize-hook='printf "[global]\nbreak-system-packages = true\n" > "$1/etc/pip.conf"' \
	--customize-hook='rm -f "$1/etc/resolv.conf" && : > "$1/etc/resolv.conf"' \
	--customize-hook='rm -f "$1/etc/machine-id" && : > "$1/etc/machine-id"' \
	"$suite" -
