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
#   CPU=1 scripts/bench-pg.sh e2e             # also: CPU per event (server, hookbox)
#   INSTANCE_CPU=0.4 INSTANCES=2 scripts/bench-pg.sh ingest   # each instance capped
#
# INSTANCE_CPU=C runs each instance in its own CPU cgroup capped at C cores (needs
# root and the cgroup v1 `cpu` controller at /sys/fs/cgroup/cpu, or cgroup v2 with
# `cpu` enabled at /sys/fs/cgroup): as if each instance had a machine of C cores of
# its own, which is what a second instance brings in production. Without it every
# instance, the server and the load generators share this machine's cores.
#
# WAITS=1 samples pg_stat_activity every 50 ms while the load runs and prints, per
# state and wait event, how many of the sampled hookbox connections were in it
# (pg_stat_statements needs a server restart to load; sampling does not).
# CPU=1 prints the CPU time the local PostgreSQL server (every process named
# postgres, with what the postmaster's exited backends used) and the hookbox
# instances spent while the load ran, per event or request, and how busy the
# machine was, and the WAL the server wrote meanwhile, per event: steadier than
# throughput on a machine whose speed drifts, for comparing builds.
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
# shellcheck source=scripts/common.sh
source scripts/common.sh

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
    for cg in "${cgroups[@]}"; do rmdir "$cg" 2>/dev/null || true; done
    psql "$server/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
    rm -rf "$workdir"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# With INSTANCE_CPU set: makes instance $1's cgroup, capped at that many cores, and
# sets `procs` to the file a process joins it by; without: sets it empty.
cgroups=()
procs=""
capped_cgroup() {
    procs=""
    [[ -n "${INSTANCE_CPU:-}" ]] || return 0
    local quota cg
    # Microseconds of CPU per 100 ms period; the kernel takes at least 1,000.
    quota="$(awk -v c="$INSTANCE_CPU" 'BEGIN { if (c ~ /^[0-9]*\.?[0-9]+$/) printf "%d", c * 100000 }')"
    if [[ -z "$quota" || "$quota" -lt 1000 ]]; then
        echo "bench-pg.sh: INSTANCE_CPU must be a number of cores, at least 0.01 (got '$INSTANCE_CPU')" >&2
        exit 2
    fi
    if [[ -w /sys/fs/cgroup/cpu ]]; then
        cg="/sys/fs/cgroup/cpu/hookbox-bench-$$-$1"
        made() { mkdir "$cg" && echo 100000 >"$cg/cpu.cfs_period_us" && echo "$quota" >"$cg/cpu.cfs_quota_us"; }
    elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        cg="/sys/fs/cgroup/hookbox-bench-$$-$1"
        made() { mkdir "$cg" && echo "$quota 100000" >"$cg/cpu.max"; }
    else
        echo "bench-pg.sh: INSTANCE_CPU needs a writable cgroup cpu controller" >&2
        exit 2
    fi
    if ! made; then
        echo "bench-pg.sh: INSTANCE_CPU: could not make the cgroup $cg" >&2
        rmdir "$cg" 2>/dev/null || true
        exit 2
    fi
    cgroups+=("$cg")
    procs="$cg/cgroup.procs"
}

urls=()
for i in $(seq 1 "$instances"); do
    port="$(free_port)"
    capped_cgroup "$i"
    DATABASE_URL="$server/$db" BIND_ADDR="127.0.0.1:$port" HANDLERS_DIR="$workdir/handlers" \
        LOG_LEVEL="${LOG_LEVEL:-warn}" CGROUP_PROCS="$procs" \
        sh -c '[ -z "$CGROUP_PROCS" ] || echo $$ >"$CGROUP_PROCS"; unset CGROUP_PROCS; exec "$0" serve' \
        "$workdir/hookbox" >"$workdir/hookbox-$i.log" 2>&1 &
    pids+=($!)
    urls+=("http://127.0.0.1:$port")
    wait_ready "$!" "http://127.0.0.1:$port" "instance $i"
done
echo "bench-pg.sh: $instances instance(s) on $server/$db: ${urls[*]}" >&2

# CPU seconds of the processes named $1 (for postgres, with what the postmaster's
# exited backends used: they are in its cutime/cstime).
proc_cpu() {
    python3 - "$1" <<'PY'
import os, sys
total = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    if stat[stat.index("(") + 1:stat.rindex(")")] != sys.argv[1]:
        continue
    f = stat[stat.rindex(")") + 2:].split()
    total += int(f[11]) + int(f[12])
    if sys.argv[1] == "postgres" and f[1] == "1":
        total += int(f[13]) + int(f[14])
print(total / os.sysconf("SC_CLK_TCK"))
PY
}
# CPU seconds the whole machine was busy (every core), from /proc/stat.
machine_cpu() {
    awk '$1 == "cpu" { print ($2 + $3 + $4 + $7 + $8) / 100 }' /proc/stat
}
if [[ "${CPU:-0}" == 1 ]]; then
    cpu_before="$(proc_cpu postgres) $(proc_cpu hookbox) $(machine_cpu) $(date +%s.%N)"
    lsn_before="$(psql "$server/$db" -qAt -c "SELECT pg_current_wal_lsn()")"
fi

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
    cpu_after="$(proc_cpu postgres) $(proc_cpu hookbox) $(machine_cpu) $(date +%s.%N)"
    wal="$(psql "$server/$db" -qAt -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn_before')::bigint")"
    done_n=0
    for i in $(seq 0 $((instances - 1))); do
        n="$(awk '$1 == "ingest" { print $4 } $1 == "e2e" { print $3 }' "$workdir/loadgen-$i.out")"
        done_n=$(( done_n + ${n:-0} ))
    done
    python3 - $cpu_before $cpu_after "$done_n" "$(nproc)" "$wal" <<'PY'
import sys
b, a = [float(x) for x in sys.argv[1:5]], [float(x) for x in sys.argv[5:9]]
n, cores, wal = max(int(sys.argv[9]), 1), int(sys.argv[10]), int(sys.argv[11])
pg, hb, busy, wall = (y - x for x, y in zip(b, a))
print(f"--- CPU while the load ran ({wall:.1f} s): PostgreSQL server {pg:.2f} s, "
      f"{1e6 * pg / n:.1f} us per event; hookbox {hb:.2f} s, {1e6 * hb / n:.1f} us; "
      f"everything else {busy - pg - hb:.2f} s; machine busy {100 * busy / (wall * cores):.0f} %")
print(f"--- WAL written while the load ran (the whole server's): {wal / 1e6:.1f} MB, "
      f"{wal / n / 1e3:.2f} KB per event")
PY
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
