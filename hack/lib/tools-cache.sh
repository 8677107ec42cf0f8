# Sourced by hack/setup.d scripts that build a pinned tool from the Go
# module proxy. The tool is built once per machine into $CACHE
# ($HEARTH_TOOLS_CACHE, default ~/.cache/hearth/bin, shared by every clone)
# and linked into $BIN ($HEARTH_E2E_BIN, default e2e/.cache/bin), where the
# suites look. Run from the repository root.
BIN=${HEARTH_E2E_BIN:-$PWD/e2e/.cache/bin}
CACHE=${HEARTH_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth/bin}
mkdir -p "$BIN" "$CACHE"

# cached NAME VERSION: NAME is in the cache, stamped VERSION.
cached() {
  [ -x "$CACHE/$1" ] && [ -f "$CACHE/$1.version" ] && [ "$(cat "$CACHE/$1.version")" = "$2" ]
}

# link NAME: the cached binary and its stamp, where the suites look.
link() {
  [ "$BIN" = "$CACHE" ] && return 0
  ln -sfn "$CACHE/$1" "$BIN/$1"
  cp "$CACHE/$1.version" "$BIN/$1.version"
}
