#!/usr/bin/env bash
# Instructions per event, counted by callgrind (which this VM's speed drift does
# not touch): hookbox runs under valgrind, loadgen posts a small and a large
# number of events, and the difference of the two totals over the difference of
# the counts is what one more event costs (start-up and shutdown cancel out).
#
# Usage:
#   scripts/bench-instructions.sh [BIN_DIR ...]
#
# Each BIN_DIR holds a release `hookbox` (default: target/release, built first);
# loadgen is taken from the first. Modes, one table row each per BIN_DIR:
#   intake     WORKER_COUNT=0: POST /webhooks, commit, answer (no delivery)
#   e2e        one no-op `log` handler: intake and one delivery per event
#   e2e+otlp   as e2e, with OTEL_EXPORTER_OTLP_ENDPOINT at a local sink that
#              answers 200 (spans exported)
#   e2e+http   as e2e, the handler `kind = "http"` posting to a local receiver that
#              answers 200 on kept-alive connections (what a delivery costs)
#   drain      delivery alone: N events for two `kind = "http"` destinations
#              (max_in_flight 32 each) are filled by an instance without workers
#              (not counted), then an instance under valgrind drains the 2N
#              deliveries to `loadgen drain`; the row is per delivery, not per event
#   deliver    `loadgen deliver`: intake and HTTP delivery at once, fan-out 2.5
#              through three subscribers to loadgen's receiver (issue 28 item 2's
#              `scripts/bench.sh deliver`); the row is per delivery (2.5 per event)
#   floor      not hookbox: BIN_DIR/intake-floor (crates/intake-floor, issue 28
#              item 1's group-commit prototype) under `intake`'s load, per request;
#              with `intake` in MODES too, a line after the table gives hookbox's
#              instructions per request over the floor's, with and without SHA-256
# How far to trust a row: `intake` and `e2e+http` repeat within about 3-7 % for
# one binary; `e2e`, `drain` and `deliver` move by 10-15 % between runs, since how
# the writer's batches fall under valgrind follows timing (and with it the padding
# of each batch's statements): run those several rounds, interleaved, and compare
# medians, or compare functions in the KEEP_DIR profiles (docs/benchmarks.md, "One
# row count per batch", lists such runs).
# MODES (default "intake e2e e2e+otlp") picks modes (any of the above); SMALL and LARGE (default 1000 and 4000) set the two event counts; CONNECTIONS
# (default 8) the posting connections; KEEP_DIR, when set, keeps each run's
# callgrind output there as BIN_NAME-MODE-EVENTS.out (for callgrind_annotate),
# and CALLGRIND_ARGS adds options to callgrind's (e.g. --separate-threads=yes).
# The last column is the part of each count spent in SHA-256 (the payload's hash):
# valgrind hides the CPU's SHA extensions, so under it sha2 runs its portable code
# where natively, on a CPU that has them (the `sha_ni` flag in /proc/cpuinfo), it
# uses them (0.6 % of a native profile's samples end to end, 2026-12-03, against
# 30 % of the instructions counted here for intake); subtract it to compare with a
# profile outside valgrind. Needs valgrind and python3 (the sink).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v valgrind >/dev/null || { echo "bench-instructions.sh: valgrind is required" >&2; exit 1; }

for mode in ${MODES:-intake e2e e2e+otlp}; do
    case "$mode" in
        intake | e2e | e2e+otlp | e2e+http | drain | deliver | floor) ;;
        *) echo "bench-instructions.sh: MODES: unknown mode '$mode' (intake, e2e, e2e+otlp, e2e+http, drain, deliver, floor)" >&2; exit 2 ;;
    esac
done
SMALL="${SMALL:-1000}"
LARGE="${LARGE:-4000}"
CONNECTIONS="${CONNECTIONS:-8}"
if [ "$#" -eq 0 ]; then
    cargo build --release -p hookbox -p loadgen -p intake-floor --bin hookbox --bin loadgen --bin intake-floor
    set -- target/release
fi
loadgen="$1/loadgen"
if [[ " ${MODES:-} " == *" floor "* ]]; then
    for bin in "$@"; do
        [ -x "$bin/intake-floor" ] || { echo "bench-instructions.sh: MODES has floor, but $bin/intake-floor is missing (cargo build --release -p intake-floor)" >&2; exit 2; }
    done
fi

pick_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# A sink: answers 200 to every POST, keeps nothing; on HTTP/1.1 (connections kept
# alive, as a webhook receiver's are) when its second argument is 1.1. One for the
# OTLP exporter, one for http deliveries.
sink() {
    python3 - "$1" "$2" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    if sys.argv[2] == "1.1":
        protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
}
sink_port="$(pick_port)"
sink "$sink_port" 1.0
sink=$!
receiver_port="$(pick_port)"
sink "$receiver_port" 1.1
receiver=$!
trap 'kill $sink $receiver 2>/dev/null || true' EXIT

# wait_ready PORT: until hookbox on PORT answers /ready (at most two minutes: under
# valgrind start-up is slow).
wait_ready() {
    for _ in $(seq 600); do
        curl -fs "http://127.0.0.1:$1/ready" >/dev/null 2>&1 && return
        sleep 0.2
    done
}

# start_counted BIN WORK ENV...: hookbox (or, when `counted_program` is
# intake-floor, the floor) with ENV under callgrind, its counts in
# WORK/callgrind.out; its pid in `counted`.
counted_program=hookbox
start_counted() {
    local bin="$1" work="$2" program=(serve)
    shift 2
    [ "$counted_program" = hookbox ] || program=()
    env -i PATH="$PATH" "$@" valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" ${CALLGRIND_ARGS:-} \
        "$bin/$counted_program" "${program[@]}" >"$work/log" 2>&1 &
    counted=$!
}

# stop_counted WORK NAME: stops the hookbox `counted`, prints its instruction
# total, keeps its counts as KEEP_DIR/NAME.out when KEEP_DIR is set and removes
# WORK.
stop_counted() {
    kill -TERM "$counted"
    wait "$counted" || true
    # One file, or with --separate-threads=yes one per thread (callgrind.out-NN):
    # the total, and the part spent in SHA-256's compression function.
    local total sha
    total="$(for f in "$1"/callgrind.out*; do
        grep -m1 -E '^(summary|totals):' "$f"
    done | awk '{n += $2} END {print n}')"
    sha="$(for f in "$1"/callgrind.out*; do
        callgrind_annotate --inclusive=yes "$f" 2>/dev/null |
            grep -m1 -F 'sha2::sha256::compress256 ' || true
    done | awk '{gsub(",", "", $1); n += $1} END {print n + 0}')"
    echo "$total $sha"
    if [ -n "${KEEP_DIR:-}" ]; then
        mkdir -p "$KEEP_DIR"
        for f in "$1"/callgrind.out*; do
            cp "$f" "$KEEP_DIR/$2.out${f##*/callgrind.out}"
        done
    fi
    rm -rf "$1"
}

# drain_instructions BIN EVENTS: the instructions of an instance draining the 2 x
# EVENTS deliveries an instance without workers left (the fill is not counted).
drain_instructions() {
    local bin="$1" events="$2" port work pid receiver_port drain
    port="$(pick_port)"
    receiver_port="$(pick_port)"
    work="$(mktemp -d "${TMPDIR:-/tmp}/hookbox-cg.XXXXXX")"
    mkdir "$work/handlers"
    for name in a b; do
        printf 'event_types = ["bench.drain"]\nkind = "http"\nmax_in_flight = 32\n[http]\nurl = "http://127.0.0.1:%s/%s"\n' \
            "$receiver_port" "$name" >"$work/handlers/drain-$name.toml"
    done
    local env=(BIND_ADDR="127.0.0.1:$port" DB_PATH="$work/events.db" HANDLERS_DIR="$work/handlers"
        SOURCES_DIR="$work/none" LOG_LEVEL=warn ALLOWED_TARGETS=127.0.0.0/8)
    env -i PATH="$PATH" "${env[@]}" WORKER_COUNT=0 QUEUE_MAXSIZE=$((events * 4)) \
        "$bin/hookbox" serve >"$work/fill.log" 2>&1 &
    pid=$!
    wait_ready "$port"
    "$loadgen" fill --url "http://127.0.0.1:$port" --events "$events" \
        --event-type bench.drain >/dev/null
    kill -TERM "$pid"
    wait "$pid" || true
    "$loadgen" drain --listen "127.0.0.1:$receiver_port" --deliveries $((events * 2)) \
        --timeout 30m >/dev/null 2>&1 &
    drain=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$receiver_port") 2>/dev/null && break
        sleep 0.1
    done
    start_counted "$bin" "$work" "${env[@]}"
    wait "$drain"
    stop_counted "$work" "$(basename "$bin")-drain-$events"
}

# total_instructions BIN MODE EVENTS
total_instructions() {
    counted_program=hookbox
    if [ "$2" = floor ]; then counted_program=intake-floor; fi
    if [ "$2" = drain ]; then
        drain_instructions "$1" "$3"
        return
    fi
    local bin="$1" mode="$2" events="$3" port work
    port="$(pick_port)"
    work="$(mktemp -d "${TMPDIR:-/tmp}/hookbox-cg.XXXXXX")"
    mkdir "$work/handlers"
    if [ "$mode" = e2e+http ]; then
        printf 'event_types = ["bench.e2e"]\nkind = "http"\n[http]\nurl = "http://127.0.0.1:%s/hook"\n' \
            "$receiver_port" >"$work/handlers/receiver.toml"
    else
        printf 'event_types = ["bench.e2e"]\nkind = "log"\n' >"$work/handlers/noop.toml"
    fi
    local env=(BIND_ADDR="127.0.0.1:$port" DB_PATH="$work/events.db" HANDLERS_DIR="$work/handlers"
        SOURCES_DIR="$work/none" LOG_LEVEL=warn)
    case "$mode" in
        intake) env+=(WORKER_COUNT=0) ;;
        e2e+otlp) env+=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sink_port") ;;
        e2e+http | deliver) env+=(ALLOWED_TARGETS=127.0.0.0/8) ;;
    esac
    start_counted "$bin" "$work" "${env[@]}"
    wait_ready "$port"
    if [ "$mode" = intake ] || [ "$mode" = floor ]; then
        "$loadgen" fill --url "http://127.0.0.1:$port" --events "$events" \
            --connections "$CONNECTIONS" --event-type bench.intake >/dev/null
    elif [ "$mode" = deliver ]; then
        "$loadgen" deliver --url "http://127.0.0.1:$port" --events "$events" \
            --connections "$CONNECTIONS" --timeout 30m >/dev/null
    else
        "$loadgen" e2e --url "http://127.0.0.1:$port" --events "$events" \
            --connections "$CONNECTIONS" --timeout 30m >/dev/null
    fi
    stop_counted "$work" "$(basename "$bin")-$mode-$events"
}

printf '| binary | mode | instructions per event (drain, deliver: per delivery) | of which SHA-256 |\n|---|---|---|---|\n'
declare -A intake_per intake_sha floor_per
for bin in "$@"; do
    for mode in ${MODES:-intake e2e e2e+otlp}; do
        read -r small small_sha <<<"$(total_instructions "$bin" "$mode" "$SMALL")"
        read -r large large_sha <<<"$(total_instructions "$bin" "$mode" "$LARGE")"
        per=$(( (large - small) / (LARGE - SMALL) ))
        sha=$(( (large_sha - small_sha) / (LARGE - SMALL) ))
        if [ "$mode" = drain ]; then
            per=$(( per / 2 )) # two deliveries per event
            sha=$(( sha / 2 ))
        elif [ "$mode" = deliver ]; then
            per=$(( per * 2 / 5 )) # 2.5 deliveries per event
            sha=$(( sha * 2 / 5 ))
        fi
        printf '| %s | %s | %s | %s |\n' "$bin" "$mode" "$per" "$sha"
        case "$mode" in
            intake) intake_per[$bin]=$per intake_sha[$bin]=$sha ;;
            floor) floor_per[$bin]=$per ;;
        esac
    done
done
# hookbox's intake over the floor's, per request: as counted, and without SHA-256
# (valgrind runs sha2's portable code; natively the CPU's SHA extensions make it
# a few hundred instructions).
for bin in "$@"; do
    if [ -n "${intake_per[$bin]:-}" ] && [ "${floor_per[$bin]:-0}" -gt 0 ]; then
        awk -v b="$bin" -v i="${intake_per[$bin]}" -v s="${intake_sha[$bin]}" -v f="${floor_per[$bin]}" \
            'BEGIN { printf "%s: intake / floor, instructions per request: %.2fx (%.2fx without SHA-256)\n", b, i / f, (i - s) / f }'
    fi
done
