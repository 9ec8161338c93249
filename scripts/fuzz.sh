#!/usr/bin/env bash
# A long fuzzing campaign on the stable toolchain (issue 27, item 14): the
# property tests of src/fuzz.rs (the JSON canonicaliser, every source kind's
# signature check, the filter language, both manifest parsers) and the crate's
# other property tests, with HOOKBOX_FUZZ_CASES cases each, run again and again
# (proptest draws new random inputs each run) until DURATION is over.
#
# Usage:
#   scripts/fuzz.sh                 # one hour, 100,000 cases per test per round
#   DURATION=600 CASES=20000 scripts/fuzz.sh
#
# A failure stops the campaign with proptest's minimal failing input; its seed
# is kept in proptest-regressions/ and runs first from then on. The last line
# says how many rounds and cases ran.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
DURATION="${DURATION:-3600}"
CASES="${CASES:-100000}"
FILTER=(fuzz:: json::props signing:: pattern:: kinds::http config:: filter::tests presets::tests manifest::)

cargo test --release --lib --no-run
end=$(( $(date +%s) + DURATION ))
rounds=0
while [ "$(date +%s)" -lt "$end" ]; do
    if ! HOOKBOX_FUZZ_CASES="$CASES" cargo test --release --lib -q -- "${FILTER[@]}" >"${TMPDIR:-/tmp}/hookbox-fuzz.log" 2>&1; then
        cat "${TMPDIR:-/tmp}/hookbox-fuzz.log"
        echo "fuzz.sh: a property failed in round $((rounds + 1))" >&2
        exit 1
    fi
    rounds=$((rounds + 1))
    echo "round $rounds passed ($(grep -o 'ok. [0-9]* passed' "${TMPDIR:-/tmp}/hookbox-fuzz.log" | head -1))"
done
echo "fuzz.sh: $rounds rounds of $CASES cases per property test, no failure in ${DURATION}s"
