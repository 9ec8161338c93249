#!/usr/bin/env bash
# PostgreSQL beside SQLite in one interleaved run (issue 28, item 4: PostgreSQL at
# 0.8x SQLite or more, for intake and end to end, one instance each).
#
# Usage:
#   scripts/bench-stores.sh                  # e2e and ingest, 3 rounds each
#   scripts/bench-stores.sh e2e              # end to end only
#   ROUNDS=5 EVENTS=100000 DURATION=10s scripts/bench-stores.sh ingest
#   BENCH_BIN_DIR=/tmp/build scripts/bench-stores.sh   # no build: those binaries
#
# Each round runs the mode once on SQLite (`scripts/bench.sh`, a fresh database
# file) and once on PostgreSQL (`scripts/bench-pg.sh`, a fresh database on
# PG_SERVER, one instance), SQLite first in odd rounds and PostgreSQL first in
# even ones, so that the machine's drift falls on both alike. `e2e` is
# `loadgen e2e --events $EVENTS --connections 64` to one no-op `log` handler, read
# as events/s to done; `ingest` is `loadgen ingest --duration $DURATION
# --connections 64`, read as requests/s. It prints each round's pair and its
# ratio, then the medians and the ratio of the medians (the figure the issue
# names). The binaries are built once (release) unless BENCH_BIN_DIR names a
# folder holding hookbox and loadgen; both stores run the same ones.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $# -gt 1 ]]; then
    echo "bench-stores.sh: one mode at most, e2e or ingest (got $*)" >&2
    exit 2
fi
modes=("${1:-e2e}")
[[ $# -eq 0 ]] && modes=(e2e ingest)
rounds="${ROUNDS:-3}"
events="${EVENTS:-100000}"
duration="${DURATION:-10s}"
for m in "${modes[@]}"; do
    case "$m" in
        e2e | ingest) ;;
        *) echo "bench-stores.sh: the mode is e2e or ingest (got '$m')" >&2; exit 2 ;;
    esac
done
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
    echo "bench-stores.sh: ROUNDS must be a whole number of at least 1 (got '$rounds')" >&2
    exit 2
fi

bins="${BENCH_BIN_DIR:-}"
if [[ -z "$bins" ]]; then
    echo "bench-stores.sh: building (release)" >&2
    cargo build --release -p hookbox -p loadgen --bin hookbox --bin loadgen
    bins="${CARGO_TARGET_DIR:-target}/release"
fi
export BENCH_BIN_DIR="$bins"

# One run of mode $2 on store $1 (sqlite or postgres): prints its figure
# (events/s to done, or requests/s), or exits if the run failed.
run() {
    local out
    case "$1 $2" in
        "sqlite e2e") out="$(scripts/bench.sh e2e --events "$events" --connections 64 2>&1)" ;;
        "sqlite ingest") out="$(scripts/bench.sh ingest --duration "$duration" --connections 64 2>&1)" ;;
        "postgres e2e") out="$(EVENTS="$events" CONNECTIONS=64 scripts/bench-pg.sh e2e 2>&1)" ;;
        "postgres ingest") out="$(DURATION="$duration" CONNECTIONS=64 scripts/bench-pg.sh ingest 2>&1)" ;;
    esac || { echo "$out" | tail -n 20 >&2; echo "bench-stores.sh: the $1 $2 run failed" >&2; exit 1; }
    # The load generator's table: `e2e` rows end with events/s to done in column
    # 11, `ingest` rows carry requests/s in column 5.
    local figure
    figure="$(echo "$out" | awk -v mode="$2" '$1 == mode { print (mode == "e2e" ? $11 : $5) }' | tail -n 1)"
    if ! [[ "$figure" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
        echo "$out" | tail -n 20 >&2
        echo "bench-stores.sh: the $1 $2 run printed no figure" >&2
        exit 1
    fi
    echo "$figure"
}

for mode in "${modes[@]}"; do
    sqlite=() postgres=()
    for r in $(seq 1 "$rounds"); do
        order=(sqlite postgres)
        (( r % 2 == 0 )) && order=(postgres sqlite)
        for store in "${order[@]}"; do
            figure="$(run "$store" "$mode")"
            echo "bench-stores.sh: $mode round $r, $store: $figure" >&2
            if [[ "$store" == sqlite ]]; then sqlite+=("$figure"); else postgres+=("$figure"); fi
        done
    done
    unit="events/s to done"
    [[ "$mode" == ingest ]] && unit="requests/s"
    python3 - "$mode" "$unit" "${sqlite[*]}" "${postgres[*]}" <<'PY'
import statistics, sys
mode, unit = sys.argv[1], sys.argv[2]
sqlite = [float(x) for x in sys.argv[3].split()]
postgres = [float(x) for x in sys.argv[4].split()]
print(f"{mode} ({unit}, 64 connections):")
print(f"{'round':<8}{'SQLite':>12}{'PostgreSQL':>14}{'PG / SQLite':>14}")
for i, (s, p) in enumerate(zip(sqlite, postgres), 1):
    print(f"{i:<8}{s:>12,.0f}{p:>14,.0f}{p / s:>13.2f}x")
ms, mp = statistics.median(sqlite), statistics.median(postgres)
print(f"{'median':<8}{ms:>12,.0f}{mp:>14,.0f}{mp / ms:>13.2f}x")
PY
done
