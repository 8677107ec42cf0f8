#!/usr/bin/env bash
# A short fuzzing pass (about 2 s per target, 2 min in all on 2 cores) over every native fuzz target
# (hack/fuzz.sh, which bounds each new input's minimization: FUZZ_MINIMIZE).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec hack/fuzz.sh "${FUZZ_SECONDS:-2}"
