// Package image turns a template's image reference into a root filesystem on
// the node.
//
// A template names its guest by an image reference, like
// "ghcr.io/cocoonstack/sandbox/rt:24.04". [Store.Resolve] makes that a
// directory holding the flattened root filesystem ([Rootfs]):
//
//   - an OCI image is pulled from its registry (plain HTTP for loopback
//     registries), or taken from the cache when the registry is unreachable
//     and the reference was pulled or imported before;
//   - [Store.Import] takes an OCI image layout directory or a `docker save`
//     tarball, so nodes without a registry can be fed by hand;
//   - the built-in image ([BuiltinRef], also answering for [DefaultRef] unless
//     a real image of that name resolves) is Debian bookworm built by
//     mmdebstrap from Debian packages ([Store.BuildDefault]), laid out like
//     e2b's base template: user "user" (uid 1000, home /home/user,
//     passwordless sudo).
//
// [Store.Ext4] turns a Rootfs into an ext4 disk image for VM backends, with
// extra files (an in-guest agent, an init) written into it.
//
// # What it owns
//
// The cache directory [Store.Root] and nothing else (default [DefaultRoot]:
// $HEARTH_IMAGE_CACHE, else $XDG_CACHE_HOME/hearth/images, else
// ~/.cache/hearth/images):
//
//	rootfs/<algo>-<hex>/            one flattened root filesystem per image digest
//	                                 (sha256-…; builtin-<recipe hash> for the built-in)
//	refs/<escaped reference>        the digest a reference last resolved to
//	ext4/<algo>-<hex>-<key>.ext4    disk images (key: size and injected files)
//	tmp/                            unpacks and builds in progress
//	locks/                          flock files serialising built-in builds
//
// ':' in a digest becomes '-' in directory names: overlayfs separates lowerdir
// entries with ':'. Every entry appears complete or not at all: it is made
// under tmp/ and renamed into place.
//
// # What it must not touch
//
// Rootfs directories are shared read-only by every VM of a template: neither
// this package after the rename, nor a backend, may write into them. A
// backend overlays its own per-VM writable layer, in its own run directory;
// per-VM state never lives in the cache. The package starts no VMs, mounts
// nothing and keeps no daemon: it runs mmdebstrap, mke2fs and debugfs as
// child processes and returns.
package image
