#!/usr/bin/env bash
# Benchmark hookbox on this machine: build, start a throwaway instance, run the
# load generator against it, stop it.
#
# Usage:
#   scripts/bench.sh                                   # ingest --duration 10s --connections 64
#   scripts/bench.sh ingest --duration 30s --connections 16
#   scripts/bench.sh e2e --events 50000
#   scripts/bench.sh deliver --events 20000             # HTTP delivery, fan-out 2.5
#   SQLITE_SYNCHRONOUS=normal WORKER_COUNT=32 scripts/bench.sh
#   scripts/bench.sh ingest --source github             # a signed GitHub source
#   scripts/bench.sh sources --duration 10s             # /webhooks and 3 source kinds,
#                                                     # interleaved, 3 rounds
#   scripts/bench.sh transforms --events 20000          # a filter's and a transform's
#                                                     # cost, and deliver with and
#                                                     # without them, 3 rounds
#   BENCH_BIN_DIR=/tmp/before scripts/bench.sh e2e --events 50000   # no build: A/B runs
#   scripts/bench.sh storm --duration 10s --connections 64   # retry storm: 1,000 known
#                                                     # keys vs new keys, one run
#   scripts/bench.sh recovery --pending 1000000         # memory and time to ready
#   scripts/bench.sh isolation                          # a fast destination's latency,
#                                                     # alone and beside 10 slow + 1 silent
#   scripts/bench.sh rate                               # 100 subscribers limited to 20/s
#   scripts/bench.sh drain --events 40000               # delivery from a backlog vs a bare
#                                                       # reqwest client (issue 28, item 2)
#   scripts/bench.sh floor                              # hookbox's intake vs intake-floor,
#   ROUNDS=5 scripts/bench.sh floor --duration 20s      # the group-commit prototype,
#                                                     # interleaved (and with wrk)
#
# Arguments go to target/release/loadgen (the workspace crate crates/loadgen; see
# `loadgen --help`); the
# script adds --url itself. hookbox runs on 127.0.0.1:$BENCH_PORT (default: a
# free port) with a fresh SQLite database and an empty handlers directory in a
# temporary directory that is removed afterwards (with one no-op `log` handler
# for `bench.e2e` events) and three sources: `github` (kind github, its secret
# bench-github-secret, which loadgen signs with by default), `discord` (ed25519)
# and `sendgrid` (ECDSA P-256), whose keys are loadgen's (`loadgen source-keys`).
# `sources` runs `ingest` (to /webhooks) and `ingest --source` for each of the
# three kinds in turn, three rounds, on the one instance (so every figure comes
# from one run; the machine may be noisy), passing the other arguments to each,
# and ends with a table of each mode's req/s per round and its median.
# `transforms` first runs `loadgen pipeline` (a filter's evaluation and a
# transform's run per event, in-process), then `deliver` and `deliver
# --bench-shape` (every subscriber with a filter and a transform) in turn, three
# rounds, passing the other arguments to `deliver`, and prints each round's
# deliveries/s and the medians' ratio. `storm` seeds 1,000 keys (`--keys`), posts
# new keys for `--duration`, then re-posts the known keys for `--duration` and
# prints both rates and their ratio. `recovery --pending N` starts hookbox with
# WORKER_COUNT=0 (and QUEUE_MAXSIZE=2N unless set), fills N pending events with
# `loadgen fill` (routed to a no-op handler, so each leaves a delivery), reads the
# RSS (VmRSS, and the peak VmHWM) from /proc, kills hookbox with SIGKILL, starts
# it again on the same database and reports the time until GET /ready answers
# 200 and the RSS then and 5 s later; the other arguments go to `loadgen fill`.
# `floor [ingest args]` is issue 28's reference: hookbox's intake against
# `intake-floor` (crates/intake-floor: one axum handler, one writer, a multi-row
# INSERT per batch, synchronous=FULL, 202 after COMMIT; no routing, no deliveries),
# built with them (BENCH_BIN_DIR must hold it too). Each round runs `loadgen
# ingest` (default --duration 10s --connections 64) against each of the two,
# alternating which goes first, each run on a fresh database and with only the
# server it measures running (hookbox with its default SQLITE_SYNCHRONOUS=full,
# as the floor always has: another value is warned about);
# ROUNDS (default 3) rounds, then a table of each run's req/s, p99, non-2xx and
# the server's CPU time per request answered (from /proc: less sensitive to a
# busy machine than req/s), the medians and their ratio, with the load average
# before and after. If `wrk` is
# installed (and WRK is not 0) the same rounds follow with wrk (-t2, loadgen's
# --duration and --connections, scripts/wrk-intake.lua: a 1 KB event, a unique key
# per request) and a second table.
# In `deliver`, `isolation` and `rate` modes hookbox also gets
# ALLOWED_TARGETS=127.0.0.0/8 (unless set), so that the subscribers loadgen registers
# may reach its built-in receiver on 127.0.0.1. Every other hookbox setting
# passes through from the environment (note that DATABASE_URL, if set, wins over
# the temporary DB_PATH). LOG_LEVEL defaults to warn; hookbox's log goes to
# stderr only if something fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh

for tool in cargo curl; do
    command -v "$tool" >/dev/null || { echo "bench.sh: $tool is required" >&2; exit 1; }
done

# A free port on the loopback interface, unless BENCH_PORT says which.
pick_port() {
    if [[ -n "${BENCH_PORT:-}" ]]; then
        echo "$BENCH_PORT"
    elif command -v python3 >/dev/null; then
        free_port
    else
        echo 18000
    fi
}

# BENCH_BIN_DIR: run the hookbox and loadgen binaries of that folder instead of
# building this checkout (to interleave runs of two builds back to back).
# Otherwise the build goes to $CARGO_TARGET_DIR (default target)/release.
if [[ -n "${BENCH_BIN_DIR:-}" ]]; then
    bin_dir="$BENCH_BIN_DIR"
else
    echo "bench.sh: building (release)" >&2
    floor_build=()
    [[ "${1:-}" == floor ]] && floor_build=(-p intake-floor --bin intake-floor)
    cargo build --release -p hookbox -p loadgen --bin hookbox --bin loadgen "${floor_build[@]}"
    bin_dir="${CARGO_TARGET_DIR:-target}/release"
fi

port="$(pick_port)"
url="http://127.0.0.1:${port}"
workdir="$(mktemp -d "${TMPDIR:-/tmp}/hookbox-bench.XXXXXX")"
mkdir "$workdir/handlers"
# A no-op handler for the end-to-end mode (loadgen e2e posts `bench.e2e` events);
# `ingest` posts `bench.ingest`, which no handler routes.
cat >"$workdir/handlers/noop.toml" <<'TOML'
event_types = ["bench.e2e", "bench.recovery"]
kind = "log"
TOML
# A GitHub source for `ingest --source github` (loadgen signs with this secret).
mkdir "$workdir/sources"
cat >"$workdir/sources/github.toml" <<'TOML'
kind = "github"
secret_env = "BENCH_GITHUB_SECRET"
TOML
# The public-key kinds, verified with loadgen's fixed keys.
cat >"$workdir/sources/discord.toml" <<'TOML'
kind = "discord"
secret_env = "BENCH_DISCORD_KEY"
TOML
cat >"$workdir/sources/sendgrid.toml" <<'TOML'
kind = "sendgrid"
secret_env = "BENCH_SENDGRID_KEY"
TOML
while IFS='=' read -r name value; do
    export "$name=$value"
done < <("$bin_dir/loadgen" source-keys)
log="$workdir/hookbox.log"
hookbox_pid=""
floor_pid=""
drain_pid=""

# `stop_server PID NAME`: SIGTERM, then SIGKILL after 20s.
stop_server() {
    local pid="$1" name="$2"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 200); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "bench.sh: $name ignored SIGTERM for 20s; killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    fi
}

# Always stop hookbox (and intake-floor) and remove the temp dir.
cleanup() {
    local status=$?
    stop_server "$hookbox_pid" hookbox
    stop_server "$floor_pid" intake-floor
    stop_server "$drain_pid" "loadgen drain"
    if [[ $status -ne 0 && -s "$log" ]]; then
        echo "bench.sh: last lines of the hookbox log:" >&2
        tail -n 30 "$log" >&2
    fi
    if [[ $status -ne 0 && -s "$workdir/floor.log" ]]; then
        echo "bench.sh: last lines of the intake-floor log:" >&2
        tail -n 30 "$workdir/floor.log" >&2
    fi
    rm -rf "$workdir"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ $# -eq 0 ]]; then
    set -- ingest --duration 10s --connections 64
fi
# `deliver` delivers over HTTP to loadgen's receiver on 127.0.0.1, which the SSRF
# guard refuses unless ALLOWED_TARGETS opens loopback.
if [[ "$1" == deliver || "$1" == isolation || "$1" == rate || "$1" == transforms || "$1" == drain ]]; then
    export ALLOWED_TARGETS="${ALLOWED_TARGETS:-127.0.0.0/8}"
fi
# `recovery`: --pending N becomes loadgen fill's --events N; nothing drains them.
pending=""
if [[ "$1" == recovery ]]; then
    shift
    rest=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --pending) pending="$2"; shift 2 ;;
            --pending=*) pending="${1#--pending=}"; shift ;;
            *) rest+=("$1"); shift ;;
        esac
    done
    pending="${pending:-100000}"
    set -- fill --events "$pending" "${rest[@]}"
    export WORKER_COUNT=0
    export QUEUE_MAXSIZE="${QUEUE_MAXSIZE:-$((pending * 2))}"
fi

start_hookbox() {
    DB_PATH="$workdir/events.db" \
        BIND_ADDR="127.0.0.1:${port}" \
        HANDLERS_DIR="$workdir/handlers" \
        SOURCES_DIR="$workdir/sources" \
        BENCH_GITHUB_SECRET=bench-github-secret \
        LOG_LEVEL="${LOG_LEVEL:-warn}" \
        "$bin_dir/hookbox" serve >>"$log" 2>&1 &
    hookbox_pid=$!
}

# `rss FIELD`: hookbox's VmRSS or VmHWM in MB.
rss() {
    awk -v f="$1:" '$1 == f { printf "%.0f", $2 / 1024 }' "/proc/$hookbox_pid/status"
}

# `floor`: hookbox's intake against intake-floor (crates/intake-floor, the
# group-commit prototype's shape), interleaved; see the header.
if [[ "$1" == floor ]]; then
    shift
    [[ $# -eq 0 ]] && set -- --duration 10s --connections 64
    rounds="${ROUNDS:-3}"
    if [[ ! "${SQLITE_SYNCHRONOUS:-full}" =~ ^[Ff][Uu][Ll][Ll]$ ]]; then
        echo "bench.sh: warning: SQLITE_SYNCHRONOUS=$SQLITE_SYNCHRONOUS for hookbox; the floor always uses FULL" >&2
    fi
    if [[ -n "${BENCH_PORT:-}" ]]; then
        floor_port=$((BENCH_PORT + 1))
    else
        floor_port="$(pick_port)"
    fi
    floor_url="http://127.0.0.1:${floor_port}"
    floor_log="$workdir/floor.log"
    # wrk gets loadgen's --duration and --connections (10s and 64 by default).
    duration=10s
    connections=64
    args=("$@")
    for i in "${!args[@]}"; do
        case "${args[$i]}" in
            --duration) duration="${args[$((i + 1))]}" ;;
            --duration=*) duration="${args[$i]#--duration=}" ;;
            --connections) connections="${args[$((i + 1))]}" ;;
            --connections=*) connections="${args[$i]#--connections=}" ;;
        esac
    done

    # `start_target NAME`: hookbox or floor, on a fresh database, ready.
    start_target() {
        if [[ "$1" == hookbox ]]; then
            rm -f "$workdir/events.db" "$workdir"/events.db-*
            start_hookbox
            wait_ready
        else
            rm -rf "$workdir/floor"
            mkdir "$workdir/floor"
            BIND_ADDR="127.0.0.1:${floor_port}" DB_PATH="$workdir/floor/floor.db" \
                "$bin_dir/intake-floor" >>"$floor_log" 2>&1 &
            floor_pid=$!
            wait_ready "$floor_pid" "$floor_url" intake-floor
        fi
    }
    stop_target() {
        if [[ "$1" == hookbox ]]; then
            stop_server "$hookbox_pid" hookbox
            hookbox_pid=""
        else
            stop_server "$floor_pid" intake-floor
            floor_pid=""
        fi
    }
    # `to_ms LATENCY`: 850us, 1.85ms or 1.20s as milliseconds.
    to_ms() {
        awk -v v="$1" 'BEGIN {
            if (v ~ /us$/) printf "%.2f", v / 1000
            else if (v ~ /ms$/) printf "%.2f", v + 0
            else if (v ~ /s$/) printf "%.2f", v * 1000
            else print "?" }'
    }
    # `cpu_ticks PID`: the process's user + system CPU time so far, in clock ticks.
    cpu_ticks() {
        awk '{ print $14 + $15 }' "/proc/$1/stat"
    }
    # `measure TOOL URL PID`: one run; its output to stderr, "req/s p99-ms non-2xx
    # cpu-us-per-request" (the server's CPU time over the requests answered) to stdout.
    measure() {
        local out rate p99 non2xx requests before after
        before="$(cpu_ticks "$3")"
        if [[ "$1" == loadgen ]]; then
            out="$("$bin_dir/loadgen" ingest --url "$2" "${args[@]}")"
            read -r rate p99 non2xx requests < <(awk 'NR == 1 { r = index($0, "req/s"); p = index($0, "p99");
                    n = index($0, "non-2xx"); q = index($0, "requests") }
                NR == 2 { split(substr($0, r), a, " "); split(substr($0, p), b, " ");
                          split(substr($0, n), c, " "); split(substr($0, q), d, " ");
                          print a[1], b[1], (c[1] == "none" ? 0 : c[1]), d[1] }' <<<"$out")
        else
            out="$(wrk -t2 -c"$connections" -d"$duration" --latency -s scripts/wrk-intake.lua "$2")"
            rate="$(awk '$1 == "Requests/sec:" { print $2 }' <<<"$out")"
            p99="$(awk '$1 == "99%" { print $2 }' <<<"$out")"
            non2xx="$(awk '/Non-2xx/ { print $NF }' <<<"$out")"
            requests="$(awk '$2 == "requests" && $3 == "in" { print $1 }' <<<"$out")"
        fi
        after="$(cpu_ticks "$3")"
        echo "$out" >&2
        echo "${rate:-0} $(to_ms "${p99:-?}") ${non2xx:-0}" \
            "$(awk -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" -v n="${requests:-0}" \
                'BEGIN { if (n > 0) printf "%.0f", t * 1e6 / hz / n; else print "?" }')"
    }
    # `median N…`: the middle value (the mean of the two middle ones for an even count).
    median() {
        printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
            if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
    }

    tools=(loadgen)
    if command -v wrk >/dev/null && [[ "${WRK:-1}" != 0 ]]; then
        tools+=(wrk)
    else
        echo "bench.sh: wrk is not installed (or WRK=0): loadgen only" >&2
    fi
    declare -A result
    for tool in "${tools[@]}"; do
        load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
        for round in $(seq 1 "$rounds"); do
            order=(hookbox floor)
            (( round % 2 == 0 )) && order=(floor hookbox)
            for target in "${order[@]}"; do
                start_target "$target"
                target_url="$url"
                target_pid="$hookbox_pid"
                if [[ "$target" == floor ]]; then
                    target_url="$floor_url"
                    target_pid="$floor_pid"
                fi
                echo "bench.sh: $tool, round $round: $target at $target_url" >&2
                result["$tool,$target,$round"]="$(measure "$tool" "$target_url" "$target_pid")"
                stop_target "$target"
            done
        done
        load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
        if [[ "$tool" == loadgen ]]; then
            echo "loadgen ingest ${args[*]}: rounds: $rounds, a fresh database each run"
        else
            echo "wrk -t2 -c$connections -d$duration --latency -s scripts/wrk-intake.lua: rounds: $rounds, a fresh database each run"
        fi
        echo "load average (1, 5, 15 min): $load_before before, $load_after after"
        printf '%-7s %14s %9s %8s %10s %14s %9s %8s %10s\n' round "hookbox req/s" "p99 (ms)" non-2xx "CPU us/req" \
            "floor req/s" "p99 (ms)" non-2xx "CPU us/req"
        hookbox_rates=()
        floor_rates=()
        for round in $(seq 1 "$rounds"); do
            read -r h_rate h_p99 h_non h_cpu <<<"${result[$tool,hookbox,$round]}"
            read -r f_rate f_p99 f_non f_cpu <<<"${result[$tool,floor,$round]}"
            hookbox_rates+=("$h_rate")
            floor_rates+=("$f_rate")
            printf '%-7s %14s %9s %8s %10s %14s %9s %8s %10s\n' "$round" "$h_rate" "$h_p99" "$h_non" "$h_cpu" \
                "$f_rate" "$f_p99" "$f_non" "$f_cpu"
        done
        h_median="$(median "${hookbox_rates[@]}")"
        f_median="$(median "${floor_rates[@]}")"
        printf '%-7s %14s %9s %8s %10s %14s\n' median "$h_median" "" "" "" "$f_median"
        awk -v h="$h_median" -v f="$f_median" \
            'BEGIN { printf "hookbox / floor (medians of req/s): %.2fx\n\n", (f > 0 ? h / f : 0) }'
    done
    exit 0
fi

# `drain [--events N] [--in-flight M]`: issue 28 item 2's delivery from a backlog.
# Two `kind = "http"` handlers (max_in_flight 32 each, so 64 attempts at once,
# as many as the reference's requests in flight) take `bench.drain`; an instance
# without workers holds N events (default 40,000: 80,000 deliveries); then
# `loadgen drain` receives on a fixed port while an instance with workers drains
# the backlog, and posts as many requests from a bare reqwest client to the same
# receiver: both rates and their ratio, from one run.
if [[ "$1" == drain ]]; then
    shift
    events=40000
    in_flight=64
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --events) events="${2:-}"; shift $(( $# > 1 ? 2 : 1 )) ;;
            --in-flight) in_flight="${2:-}"; shift $(( $# > 1 ? 2 : 1 )) ;;
            *) echo "bench.sh: drain takes --events N and --in-flight M, not $1" >&2; exit 2 ;;
        esac
    done
    for value in "events=$events" "in-flight=$in_flight"; do
        if ! [[ "${value#*=}" =~ ^[1-9][0-9]{0,6}$ ]]; then
            echo "bench.sh: drain --${value%%=*} must be a whole number from 1 to 9999999, not '${value#*=}'" >&2
            exit 2
        fi
    done
    sink_port="$(pick_port)"
    rm -f "$workdir/handlers/"*.toml
    for name in a b; do
        cat >"$workdir/handlers/drain-$name.toml" <<TOML
event_types = ["bench.drain"]
kind = "http"
max_in_flight = $((in_flight / 2 > 0 ? in_flight / 2 : 1))
[http]
url = "http://127.0.0.1:${sink_port}/$name"
TOML
    done
    echo "bench.sh: filling $events events (no workers) on $url" >&2
    WORKER_COUNT=0 QUEUE_MAXSIZE=$((events * 4)) start_hookbox
    wait_ready
    "$bin_dir/loadgen" fill --url "$url" --events "$events" --event-type bench.drain >&2
    stop_server "$hookbox_pid" hookbox
    "$bin_dir/loadgen" drain --listen "127.0.0.1:${sink_port}" --deliveries $((events * 2)) \
        --in-flight "$in_flight" &
    drain_pid=$!
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/${sink_port}") 2>/dev/null && break
        sleep 0.1
    done
    echo "bench.sh: draining with an instance with workers" >&2
    start_hookbox
    wait_ready
    status=0
    wait "$drain_pid" || status=$?
    exit "$status"
fi

echo "bench.sh: starting hookbox on $url (data in $workdir)" >&2
start_hookbox
wait_ready

# Put --url right after the subcommand unless the caller gave one.
has_url=""
for arg in "$@"; do
    [[ "$arg" == --url || "$arg" == --url=* ]] && has_url=1
done
if [[ -z "$has_url" && "$1" != -* ]]; then
    set -- "$1" --url "$url" "${@:2}"
fi

if [[ "$1" == sources ]]; then
    shift
    modes=("/webhooks" github discord sendgrid)
    declare -A rates
    for round in 1 2 3; do
        for mode in "${modes[@]}"; do
            args=()
            [[ "$mode" != /webhooks ]] && args=(--source "$mode" --kind "$mode")
            echo "bench.sh: round $round: ingest ${args[*]}" >&2
            out="$("$bin_dir/loadgen" ingest "${args[@]}" "$@")"
            echo "$out"
            # The table is a header line and a value line: req/s is the value under it.
            rates["$mode,$round"]="$(awk 'NR == 1 { at = index($0, "req/s") }
                NR == 2 { split(substr($0, at), v, " "); print v[1] }' <<<"$out")"
        done
    done
    printf '%-10s %10s %10s %10s %10s %10s\n' mode "round 1" "round 2" "round 3" median "vs /webhooks"
    base=""
    for mode in "${modes[@]}"; do
        median="$(printf '%s\n' "${rates[$mode,1]}" "${rates[$mode,2]}" "${rates[$mode,3]}" | sort -g | sed -n 2p)"
        [[ -z "$base" ]] && base="$median"
        printf '%-10s %10s %10s %10s %10s %9.0f%%\n' "$mode" "${rates[$mode,1]}" "${rates[$mode,2]}" \
            "${rates[$mode,3]}" "$median" "$(awk -v m="$median" -v b="$base" 'BEGIN { print 100 * m / b }')"
    done
    exit 0
fi

if [[ "$1" == transforms ]]; then
    shift
    "$bin_dir/loadgen" pipeline
    declare -A rates medians
    for round in 1 2 3; do
        for mode in plain shaped; do
            args=()
            [[ "$mode" == shaped ]] && args=(--bench-shape)
            echo "bench.sh: round $round: deliver ${args[*]}" >&2
            out="$("$bin_dir/loadgen" deliver "${args[@]}" "$@")"
            echo "$out"
            rates["$mode,$round"]="$(awk 'NR == 1 { at = index($0, "deliveries/s") }
                NR == 2 { split(substr($0, at), v, " "); print v[1] }' <<<"$out")"
        done
    done
    printf '%-24s %10s %10s %10s %10s\n' mode "round 1" "round 2" "round 3" median
    for mode in plain shaped; do
        medians["$mode"]="$(printf '%s\n' "${rates[$mode,1]}" "${rates[$mode,2]}" "${rates[$mode,3]}" | sort -g | sed -n 2p)"
        printf '%-24s %10s %10s %10s %10s\n' "$mode" "${rates[$mode,1]}" "${rates[$mode,2]}" "${rates[$mode,3]}" "${medians[$mode]}"
    done
    awk -v s="${medians[shaped]}" -v p="${medians[plain]}" 'BEGIN { printf "filter+transform / plain: %.0f%%\n", 100 * s / p }'
    exit 0
fi

if [[ -n "$pending" ]]; then
    "$bin_dir/loadgen" "$@"
    filled_rss="$(rss VmRSS)"
    filled_peak="$(rss VmHWM)"
    echo "bench.sh: $pending pending; RSS ${filled_rss} MB (peak ${filled_peak} MB); kill -9 and restart" >&2
    kill -KILL "$hookbox_pid"
    wait "$hookbox_pid" 2>/dev/null || true
    started_ns="$(date +%s%N)"
    start_hookbox
    wait_ready
    ready_ms="$(( ($(date +%s%N) - started_ns) / 1000000 ))"
    ready_rss="$(rss VmRSS)"
    sleep 5
    later_rss="$(rss VmRSS)"
    later_peak="$(rss VmHWM)"
    depth="$(curl -fsS "$url/metrics" | awk '$1 == "hookbox_queue_depth" { print $2 }')"
    printf '%-10s %-14s %-14s %-14s %-16s %-16s %-12s\n' \
        pending "filled RSS" "filled peak" "ready after" "RSS at ready" "RSS 5s later" "queue depth"
    printf '%-10s %-14s %-14s %-14s %-16s %-16s %-12s\n' \
        "$pending" "${filled_rss} MB" "${filled_peak} MB" "${ready_ms} ms" "${ready_rss} MB" \
        "${later_rss} MB (peak ${later_peak})" "${depth:-?}"
    exit 0
fi

# `deliver` also runs the bare reqwest reference on the same receiver (issue 28,
# item 2), unless REFERENCE=0: three runs (`--reference-runs`), the ratio over
# their median.
if [[ "$1" == deliver && "${REFERENCE:-1}" != 0 ]]; then
    set -- "$@" --reference
fi
"$bin_dir/loadgen" "$@"
