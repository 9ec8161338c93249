#!/usr/bin/env bash
# Benchmark hookbox on PostgreSQL: INSTANCES instances share one fresh database;
# one load generator per instance, the load split evenly between them.
#
# Usage:
#   scripts/bench-pg.sh ingest                 # 10s, 64 connections in all
#   scripts/bench-pg.sh e2e                    # 100,000 events in all
#   INSTANCES=2 CONNECTIONS=64 DURATION=10s scripts/bench-pg.sh ingest
#   INSTANCES=2 EVENTS=100000 scripts/bench-pg.sh e2e
#   WAITS=1 scripts/bench-pg.sh ingest        # also: where the time goes
#   STATEMENTS=1 scripts/bench-pg.sh e2e      # also: the statements' time
#   CPU=1 scripts/bench-pg.sh e2e             # also: the server's CPU per event
#
# WAITS=1 samples pg_stat_activity every 50 ms while the load runs and prints, per
# state and wait event, how many of the sampled hookbox connections were in it
# (pg_stat_statements needs a server restart to load; sampling does not).
# CPU=1 prints the CPU time the local PostgreSQL server (every process named
# postgres, with what the postmaster's exited backends used) spent while the load
# ran, and per event or request: steadier than throughput on a machine whose
# speed drifts, for comparing builds.
# STATEMENTS=1 prints the top statements by total time from pg_stat_statements
# (the server must preload it: shared_preload_libraries = 'pg_stat_statements';
# with pg_stat_statements.track_planning = on the planning time shows too).
#
# PG_SERVER (default postgres://postgres@127.0.0.1:5432) must accept CREATE
# DATABASE; the database hookbox_bench_<random> is dropped afterwards. Binaries
# come from ${CARGO_TARGET_DIR:-target}/release (built here), or from
# BENCH_BIN_DIR without building (to compare two builds), copied first so that
# another build sharing the target directory cannot swap them mid-run. Every other
# hookbox setting passes through from the environment (WORKER_COUNT, …).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode="${1:-ingest}"
instances="${INSTANCES:-1}"
connections="${CONNECTIONS:-64}"
events="${EVENTS:-100000}"
duration="${DURATION:-10s}"
server="${PG_SERVER:-postgres://postgres@127.0.0.1:5432}"
target="${CARGO_TARGET_DIR:-target}"

bins="${BENCH_BIN_DIR:-}"
if [[ -z "$bins" ]]; then
    echo "bench-pg.sh: building (release)" >&2
    cargo build --release -p hookbox -p loadgen --features hookbox/postgres --bin hookbox --bin loadgen
    bins="$target/release"
fi
workdir="$(mktemp -d "${TMPDIR:-/tmp}/hookbox-bench-pg.XXXXXX")"
cp "$bins/hookbox" "$bins/loadgen" "$workdir/"
mkdir "$workdir/handlers"
cat >"$workdir/handlers/noop.toml" <<'TOML'
event_types = ["bench.e2e"]
kind = "log"
TOML
db="hookbox_bench_$(date +%s)_$$"
psql "$server/postgres" -qc "CREATE DATABASE $db"
pids=()

cleanup() {
    local status=$?
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [[ $status -ne 0 ]]; then tail -n 20 "$workdir"/hookbox-*.log >&2 || true; fi
    psql "$server/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
    rm -rf "$workdir"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

urls=()
for i in $(seq 1 "$instances"); do
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    DATABASE_URL="$server/$db" BIND_ADDR="127.0.0.1:$port" HANDLERS_DIR="$workdir/handlers" \
        LOG_LEVEL="${LOG_LEVEL:-warn}" "$workdir/hookbox" serve >"$workdir/hookbox-$i.log" 2>&1 &
    pids+=($!)
    urls+=("http://127.0.0.1:$port")
    for _ in $(seq 1 300); do
        curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$port/ready" 2>/dev/null && break
        sleep 0.1
    done
done
echo "bench-pg.sh: $instances instance(s) on $server/$db: ${urls[*]}" >&2

# CPU seconds of the local server's processes (exited backends are in their
# parent's cutime/cstime).
server_cpu() {
    python3 - <<'PY'
import os
total = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    if stat[stat.index("(") + 1:stat.rindex(")")] != "postgres":
        continue
    f = stat[stat.rindex(")") + 2:].split()
    total += int(f[11]) + int(f[12])
    if f[1] == "1":
        total += int(f[13]) + int(f[14])
print(total / os.sysconf("SC_CLK_TCK"))
PY
}
[[ "${CPU:-0}" == 1 ]] && cpu_before="$(server_cpu)"

per_conn=$(( (connections + instances - 1) / instances ))
per_events=$(( events / instances ))
gens=()
for i in $(seq 0 $((instances - 1))); do
    case "$mode" in
        ingest) args=(ingest --url "${urls[$i]}" --duration "$duration" --connections "$per_conn") ;;
        e2e) args=(e2e --url "${urls[$i]}" --events "$per_events" --connections "$per_conn" --timeout 10m) ;;
        *) echo "bench-pg.sh: mode is ingest or e2e" >&2; exit 2 ;;
    esac
    "$workdir/loadgen" "${args[@]}" >"$workdir/loadgen-$i.out" 2>/dev/null &
    gens+=($!)
done
if [[ "${STATEMENTS:-0}" == 1 ]]; then
    psql "$server/$db" -qAt -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" \
        -c "SELECT pg_stat_statements_reset()" >/dev/null
fi
sampler=""
if [[ "${WAITS:-0}" == 1 ]]; then
    psql "$server/$db" -qAt -c "CREATE UNLOGGED TABLE hookbox_bench_waits (state text, wait text)" >/dev/null
    (
        while true; do
            psql "$server/$db" -qAt -c "INSERT INTO hookbox_bench_waits
                SELECT state, coalesce(wait_event_type || ':' || wait_event, 'CPU')
                FROM pg_stat_activity WHERE datname = current_database()
                  AND application_name = 'hookbox' AND pid <> pg_backend_pid()" >/dev/null 2>&1 || true
            sleep 0.05
        done
    ) &
    sampler=$!
fi
for g in "${gens[@]}"; do wait "$g"; done
if [[ "${CPU:-0}" == 1 ]]; then
    cpu_after="$(server_cpu)"
    done_n=0
    for i in $(seq 0 $((instances - 1))); do
        n="$(awk '$1 == "ingest" { print $4 } $1 == "e2e" { print $3 }' "$workdir/loadgen-$i.out")"
        done_n=$(( done_n + ${n:-0} ))
    done
    python3 -c "import sys; b, a, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]); \
print(f'--- PostgreSQL server CPU while the load ran: {a - b:.2f} s, {1e6 * (a - b) / max(n, 1):.1f} us per event')" \
        "$cpu_before" "$cpu_after" "$done_n"
fi
if [[ -n "$sampler" ]]; then
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    echo "--- hookbox's connections, sampled every 50 ms: state, wait event, samples, share"
    psql "$server/$db" -qAt -F $'\t' -c "SELECT state, wait, count(*),
        round(100.0 * count(*) / sum(count(*)) OVER (), 1) || '%'
        FROM hookbox_bench_waits GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 15"
fi
if [[ "${STATEMENTS:-0}" == 1 ]]; then
    echo "--- statements by total time: calls, total ms, mean ms, rows, plans, plan ms, statement"
    psql "$server/$db" -qAt -F $'\t' -c "SELECT calls, round(total_exec_time::numeric, 1),
        round(mean_exec_time::numeric, 3), rows, plans, round(total_plan_time::numeric, 1),
        left(regexp_replace(query, '\s+', ' ', 'g'), 110)
        FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database
            WHERE datname = current_database())
        ORDER BY total_exec_time + total_plan_time DESC LIMIT 12"
fi
for i in $(seq 0 $((instances - 1))); do
    echo "--- load generator $((i + 1)) -> ${urls[$i]}"
    cat "$workdir/loadgen-$i.out"
done
