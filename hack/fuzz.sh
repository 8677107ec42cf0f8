#!/usr/bin/env bash
# Runs every native Go fuzz target (func FuzzXxx(f *testing.F)) in the
# module, one after another, each for SECONDS (default 10).
#
#   hack/fuzz.sh [SECONDS]
#
# FUZZ_ONLY / FUZZ_SKIP are extended regexps on "pkg/dir FuzzName" lines
# to pick or leave out targets. FUZZ_MINIMIZE (default 5s) bounds the
# minimization of each new input: go's default (60s) lets a target whose
# inputs cost milliseconds (FuzzUnpackTar writes files) spend a whole short
# run minimizing its first new input, executing nothing new. A crash stops the run; go test writes the
# input to the package's testdata/fuzz/FuzzName/, where it stays as a seed
# once the bug is fixed. A bare "context deadline exceeded" with no input
# written is go1.26's coordinator race (go.dev/issue/75804), not a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
minimize="${FUZZ_MINIMIZE:-5s}"
only="${FUZZ_ONLY:-.}"
skip="${FUZZ_SKIP:-^$}"

targets=$(grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . |
  sed -E 's#^\./(.*)/[^/]*_test\.go:func (Fuzz.*)$#\1 \2#' | sort -u |
  grep -E -- "$only" | grep -Ev -- "$skip" || true)
if [ -z "$targets" ]; then
  echo "fuzz: no targets" >&2
  exit 1
fi
n=$(wc -l <<<"$targets")
echo "fuzz: $n targets, ${secs}s each"
start=$(date +%s)
races=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# inputs DIR: how many seed inputs DIR holds; 0 when it does not exist (a
# target with no committed corpus: git keeps no empty directories).
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }
while read -r dir name; do
  echo "== $dir $name"
  corpus="$dir/testdata/fuzz/$name"
  before=$(inputs "$corpus")
  rc=0
  go test -count=1 -run '^$' -fuzz "^${name}\$" -fuzztime "${secs}s" -fuzzminimizetime "$minimize" "./$dir" >"$out" 2>&1 || rc=$?
  grep -Ev '^fuzz: elapsed' "$out" || true
  [ "$rc" = 0 ] && continue
  # go1.26's fuzz coordinator can report its own -fuzztime deadline as a
  # failure (go.dev/issue/75804, fixed in go1.27): the run fails with a bare
  # "context deadline exceeded" and writes no input. That is not a finding;
  # anything else, or any new input in the corpus, is.
  after=$(inputs "$corpus")
  if [ "$after" = "$before" ] && grep -q '^    context deadline exceeded$' "$out" &&
    ! grep -q 'Failing input written' "$out"; then
    echo "fuzz: $dir $name: fuzztime deadline race (go.dev/issue/75804), no input written: not a finding"
    races=$((races + 1))
    continue
  fi
  echo "fuzz: $dir $name failed" >&2
  exit 1
done <<<"$targets"
echo "fuzz: $n targets passed in $(( $(date +%s) - start ))s ($races ended in go.dev/issue/75804's deadline race)"
